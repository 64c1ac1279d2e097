"""Every long-running command stops within a bounded time on SIGTERM whatever ZooKeeper's state (issue 32
item 10): `autorecovery run`, `bookie run`, `admin serve`, each a real process against a real ZooKeeper that
the test stops before the signal (the issue's repro: `cluster up`, `autorecovery run &`, `cluster down`,
`kill -TERM`). With ZooKeeper down nothing can be released in it: the process says so and exits non-zero,
in time (bkaudit.shutdown.STOP_GRACE_S; a bookie adds its drain timeout). With ZooKeeper up the same stop
releases everything and exits 0. A second signal ends a stop at once; a stop blocked anyway ends at the
watchdog's deadline (tests/cli/test_stop_watchdog.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkaudit.shutdown import STOP_GRACE_S
from bkaudit.zk.server import ZooKeeperServer
from tests.helpers import wait_for

pytestmark = [pytest.mark.slow]

SLACK_S = 5.0  # process start-up of the interpreter's own teardown, on a loaded 2-core machine


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of this test's own, which the test stops (the session's server must stay up)."""
    server = ZooKeeperServer(data_dir=tmp_path / "zk").start(timeout_s=60)
    try:
        init = subprocess.run([sys.executable, "-m", "bkaudit.cli", "cluster", "init", "--zk",
                               server.connect_string], capture_output=True, text=True, timeout=120)
        assert init.returncode == 0, init.stderr
        yield server
    finally:
        server.stop()


def start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BKAUDIT_")}
    env["BKAUDIT_ZK__SESSION_TIMEOUT_S"] = "60"  # longer than the test: nothing may lean on expiry
    err = tmp_path / "stderr.log"
    out = tmp_path / "stdout.log"
    proc = subprocess.Popen([sys.executable, "-m", "bkaudit.cli", *args], stdout=out.open("wb"),
                            stderr=err.open("wb"), env=env)
    return proc, err


def started(proc: subprocess.Popen[bytes], log: Path, marker: str) -> None:
    wait_for(lambda: proc.poll() is not None or marker in log.read_text(errors="replace"), timeout_s=60,
             what=f"{marker!r} in the log")
    assert proc.poll() is None, log.read_text(errors="replace")[-3000:]


def stop(proc: subprocess.Popen[bytes], bound_s: float) -> tuple[int, float]:
    proc.send_signal(signal.SIGTERM)
    began = time.monotonic()
    try:
        code = proc.wait(timeout=bound_s + 60)  # measured, then judged: a hang still ends the test
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"still running {bound_s + 60:.0f}s after SIGTERM")
    return code, time.monotonic() - began


SERVICES = {
    "autorecovery run": (("autorecovery", "run", "--id", "127.0.0.1:9"), "elected", STOP_GRACE_S),
    "bookie run": (("bookie", "run", "--port", "0", "--bookie-id", "127.0.0.1:4181"),
                   "serving on", 10.0 + STOP_GRACE_S),  # [bookie] drain_timeout_s + the grace
    "admin serve": (("admin", "serve", "--port", "0"), "admin API on", STOP_GRACE_S),
}


def service_args(name: str, zk: ZooKeeperServer, tmp_path: Path) -> tuple[str, ...]:
    args, _, _ = SERVICES[name]
    extra = ("--data-dir", str(tmp_path / "bookie")) if name == "bookie run" else ()
    return (*args, *extra, "--zk", zk.connect_string)


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_sigterm_with_zookeeper_down_stops_in_time_and_non_zero(zookeeper: ZooKeeperServer, tmp_path: Path,
                                                                name: str) -> None:
    _, marker, bound = SERVICES[name]
    proc, log = start(tmp_path, *service_args(name, zookeeper, tmp_path))
    try:
        started(proc, log, marker)
        zookeeper.stop()
        time.sleep(3)  # the client notices: connection refused, reconnect attempts
        code, took = stop(proc, bound)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text(errors="replace")
    assert took <= bound + SLACK_S, f"{name} took {took:.1f}s to stop (bound {bound:g}s)\n{text[-3000:]}"
    assert code == 1, text[-3000:]
    assert "ZooKeeper" in text and "unreachable" in text, text[-3000:]


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_sigterm_with_zookeeper_up_releases_and_exits_0(zookeeper: ZooKeeperServer, tmp_path: Path,
                                                        name: str) -> None:
    _, marker, bound = SERVICES[name]
    proc, log = start(tmp_path, *service_args(name, zookeeper, tmp_path))
    try:
        started(proc, log, marker)
        code, took = stop(proc, bound)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0 and took <= bound, log.read_text(errors="replace")[-3000:]
