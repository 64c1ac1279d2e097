"""`bkaudit zk start|stop`: the embedded ZooKeeper server (pyspark's jars) for demos and local clusters."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import click

from bkaudit.cli_common import SECONDS, emit, exit_code_for, fail
from bkaudit.errors import BkAuditError

DEFAULT_DATA_DIR = ".bkaudit/zk"


@click.group(name="zk")
def zk() -> None:
    """Embedded ZooKeeper server (a real ZooKeeper from pyspark's jars; needs Java 17+)."""


@zk.command("start")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="client port (default: a free one)")
@click.option("--data-dir", type=click.Path(file_okay=False), default=DEFAULT_DATA_DIR, show_default=True,
              help="config, logs, snapshots and the zookeeper.json state file")
@click.option("--background", is_flag=True, help="return once serving; stop later with `bkaudit zk stop`")
@click.option("--json", "as_json", is_flag=True, help="print {pid, port, connect, ...} as JSON")
def start(port: int | None, data_dir: str, background: bool, as_json: bool) -> None:
    """Start ZooKeeper; in the foreground it runs until Ctrl-C / SIGTERM, then shuts down cleanly.

    With --background the connect string (HOST:PORT) is the only output, so
    `export BKAUDIT_ZK=$(bkaudit zk start --background)` works.
    """
    from bkaudit.zk.server import ZooKeeperServer

    server = ZooKeeperServer(port=port, data_dir=data_dir, detach=background)
    try:
        server.start()
    except BkAuditError as exc:
        fail(str(exc), exit_code_for(exc))
    info = _info(server)
    if background:
        emit(info, as_json, human=lambda d: d["connect"])
        return
    emit(info, as_json, human=lambda d: f"ZooKeeper serving at {d['connect']} (pid {d['pid']}, data dir "
                                        f"{d['data_dir']}); Ctrl-C to stop")
    _serve_until_signalled(server)


def _info(server: Any) -> dict[str, Any]:
    return {"pid": server.pid, "port": server.port, "connect": server.connect_string,
            "data_dir": str(server.data_dir), "log": str(server.log_path)}


def _serve_until_signalled(server: Any) -> None:
    """Block until SIGINT/SIGTERM or the server dies; always stop the server on the way out."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.wait(0.5):
            if not server.is_running():
                fail(f"ZooKeeper exited unexpectedly; see {server.log_path}")
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    click.echo("ZooKeeper stopped", err=True)


@zk.command("stop")
@click.option("--data-dir", type=click.Path(file_okay=False), default=DEFAULT_DATA_DIR, show_default=True)
@click.option("--timeout", "timeout_s", type=SECONDS, default=10.0, show_default=True,
              help="seconds to wait after SIGTERM before SIGKILL")
@click.option("--json", "as_json", is_flag=True)
def stop(data_dir: str, timeout_s: float, as_json: bool) -> None:
    """Stop the ZooKeeper started from --data-dir (exit 0 also when none was running)."""
    from bkaudit.zk.server import stop_background

    try:
        state = stop_background(Path(data_dir), timeout_s=timeout_s)
    except BkAuditError as exc:
        fail(str(exc), exit_code_for(exc))
        return
    result = {"stopped": state is not None, "data_dir": str(Path(data_dir).resolve()),
              **({"pid": state["pid"], "connect": state.get("connect")} if state else {})}
    emit(result, as_json, human=lambda d: f"stopped ZooKeeper pid {d['pid']} ({d['connect']})" if d["stopped"]
         else f"no ZooKeeper running from {d['data_dir']}")
