"""`bkaudit admin serve` as the installed command (issue 32 item 8, its admin part): a port already taken is
one line and exit 1 (an error), not uvicorn's own exit code 3, which is bkaudit's "findings" code."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from bkaudit.zk import ledgers

REPO = Path(__file__).resolve().parents[2]
BKAUDIT = [sys.executable, "-m", "bkaudit.cli"]  # the console script's entry point, from this checkout


def test_a_busy_port_exits_1_with_one_line(zk, zk_server, zk_root) -> None:  # type: ignore[no-untyped-def]
    ledgers.init_cluster(zk, root=zk_root)  # a real cluster: only the port is wrong
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*BKAUDIT, "admin", "serve", "--zk", zk_server.connect_string, "--root", zk_root,
             "--port", str(port)], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
            cwd=REPO)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert lines == [f"error: cannot listen on 127.0.0.1:{port}: Address already in use"], done.stderr
