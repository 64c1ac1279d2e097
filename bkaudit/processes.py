"""Is a process still there? The one answer for every process bkaudit starts (ZooKeeper, bookies).

A zombie is dead: it has exited and only waits for its parent to read its status. When it is our own child
it is reaped here, so a process we killed does not look alive until we happen to call wait().
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def pid_alive(pid: int | None) -> bool:
    """True while `pid` runs (also as another user's, which signal 0 cannot probe); a zombie is dead."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(ChildProcessError):  # our own exited child: reap it
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return not is_zombie(pid)


def is_zombie(pid: int) -> bool:
    """True if `pid` has exited but was not reaped (Linux /proc; elsewhere False)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"
