"""What the bookie's disk checker verifies of the storage's files (see Storage.check, docs/storage.md).

The in-memory index is only a faithful copy of `ledgers.db` while that file is intact, so the check looks
for the ways it stops being so without the process noticing: the directory or file deleted, replaced,
unreadable, unwritable or overwritten.
"""

from __future__ import annotations

import os
from pathlib import Path

SQLITE_HEADER = b"SQLite format 3\x00"


def identity(path: Path) -> tuple[int, int]:
    """The file's (device, inode): another file at the same path has another identity."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def storage_problem(path: Path, opened: tuple[int, int]) -> str | None:
    """What BookKeeper's DiskChecker.checkDir verifies of a ledger directory (exists, is a directory,
    readable, writable), without re-creating a missing one (that would hide the loss), plus: `ledgers.db` is
    still the file the storage opened (`opened`, its identity then) and starts with SQLite's header."""
    directory = path.parent
    if not directory.is_dir():
        return f"ledger directory {directory} is gone"
    if not os.access(directory, os.R_OK | os.W_OK | os.X_OK):
        return f"ledger directory {directory} is not readable and writable"
    try:
        if identity(path) != opened:
            return f"{path} was replaced by another file"
        with open(path, "rb") as f:
            header = f.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return f"{path} was deleted"
    except OSError as exc:
        return f"{path} cannot be read: {exc}"
    if header != SQLITE_HEADER:
        return f"{path} does not start with SQLite's header (overwritten or corrupt)"
    probe = directory / f".disk-check-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return f"cannot write in ledger directory {directory}: {exc}"
    return None
