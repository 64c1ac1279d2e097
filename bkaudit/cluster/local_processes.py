"""Checks on a local cluster's processes: is this pid still that bookie, are its threads stopped, what did it
log last, has it finished starting."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from bkaudit.cluster import java as java_bk
from bkaudit.cluster.bookies import LOG_FILE, BookieInfo
from bkaudit.errors import ClusterError
from bkaudit.processes import pid_alive


def all_threads_stopped(pid: int) -> bool:
    """Every thread of `pid` in the stopped state (T/t in /proc); True when the process is gone."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return True
    for task in tasks:
        try:
            state = (task / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except FileNotFoundError:
            continue  # that thread ended meanwhile
        if state not in ("T", "t"):
            return False
    return True


def is_bookie(pid: int, data_dir: str) -> bool:
    """True if `pid` is alive and is `bookie run` on `data_dir`, or a Java bookie with its conf there (never
    signal a recycled pid)."""
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if java_bk.BOOKIE_MAIN.encode() in cmdline:
        return str(Path(data_dir) / java_bk.CONF_FILE).encode() in cmdline
    return b"run" in cmdline and data_dir.encode() in cmdline


def log_tail(b: BookieInfo, lines: int = 30) -> str:
    path = Path(b.data_dir) / LOG_FILE
    try:
        text = path.read_bytes()[-16384:].decode("utf-8", "replace")
    except OSError:
        return ""
    return f"\n--- last lines of {path} ---\n" + "\n".join(text.splitlines()[-lines:])


def wait_ready(b: BookieInfo, log_start: int, *, alive: Callable[[BookieInfo], bool], deadline: float,
               timeout_s: float) -> None:
    """Until a bkaudit bookie says its start-up finished ("ready on port", printed after
    `BookieServer.start`, in its log after `log_start`): it registers midway, and a test that pauses or kills
    it as soon as the node shows (a CI run did) would interrupt its start, not the bookie it means to
    fault."""
    ready = f"bookie {b.id} ready on port".encode()
    while True:
        with (Path(b.data_dir) / LOG_FILE).open("rb") as log:
            log.seek(log_start)
            if ready in log.read():
                return
        if not alive(b):
            raise ClusterError(f"bookie {b.id} exited during start-up{log_tail(b)}")
        if time.monotonic() > deadline:
            raise ClusterError(f"bookie {b.id} registered but did not finish starting within "
                               f"{timeout_s:g}s{log_tail(b)}")
        time.sleep(0.05)


def wait_serving(b: BookieInfo, *, alive: Callable[[BookieInfo], bool], deadline: float,
                 timeout_s: float) -> None:
    """Until a Java bookie answers a request. BookieServer.start registers the bookie (BookieImpl.start)
    before BookieNettyServer.start lets requests in: a connection in between gets RejectRequestHandler,
    which closes it unanswered. A Java client retries; a test's first raw frame must not meet that."""
    from bkaudit.rpc.client import BookieClient

    while True:
        client = BookieClient(b.id, b.id, connect_timeout_s=2.0, request_timeout_s=5.0)
        try:
            client.get_bookie_info().result(timeout=10)
            return
        except Exception:  # closed unanswered, refused or timed out: not serving yet
            if not alive(b):
                raise ClusterError(f"bookie {b.id} exited during start-up{log_tail(b)}") from None
            if time.monotonic() > deadline:
                raise ClusterError(f"bookie {b.id} registered but answered no request within "
                                   f"{timeout_s:g}s{log_tail(b)}") from None
            time.sleep(0.05)
        finally:
            client.close()
