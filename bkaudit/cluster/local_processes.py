"""Checks on a local cluster's processes before it signals them: is this pid still that bookie, are its
threads stopped, what did it log last."""

from __future__ import annotations

from pathlib import Path

from bkaudit.cluster import java as java_bk
from bkaudit.cluster.bookies import LOG_FILE, BookieInfo
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
