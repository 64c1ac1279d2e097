"""bkaudit.processes.pid_alive: a process that exited is dead, also while it is an unreaped zombie."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from bkaudit.processes import is_zombie, pid_alive


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:  # ground truth straight from the kernel
        return f.read().rsplit(")", 1)[-1].split()[0]


def test_a_running_child_is_alive_and_a_killed_one_is_dead_before_anyone_waits() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_alive(proc.pid) and not is_zombie(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _state(proc.pid) != "Z":  # the kernel says it exited; nobody has reaped it yet
            assert time.monotonic() < deadline, "the killed child never became a zombie"
            time.sleep(0.01)
        assert is_zombie(proc.pid)
        assert not pid_alive(proc.pid)  # and it reaps our own child
        assert not os.path.exists(f"/proc/{proc.pid}")
    finally:
        proc.kill()
        proc.returncode = -9  # reaped above: keep Popen from waiting on a recycled pid


def test_no_pid_and_a_pid_that_never_existed_are_dead() -> None:
    assert not pid_alive(None) and not pid_alive(0)
    assert not pid_alive(2**22 + 12345)  # above Linux's pid_max default ceiling
