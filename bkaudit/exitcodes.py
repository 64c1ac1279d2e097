"""The exit status of every `bkaudit` command (docs/cli.md): one table, so a scheduler can tell them apart.

| code | meaning |
|---|---|
| 0 | the command did what was asked and found nothing at or above its threshold |
| 1 | error: it could not do it (ZooKeeper or a bookie unreachable, warehouse unreadable, job failed) |
| 2 | usage or configuration: bad flags or arguments, invalid settings file, key or value |
| 3 | findings: the answer is "not OK" (violations at/above `fail_on`, bookies unsafe to remove, data lost) |

Signals keep the shell's convention (130 after Ctrl-C). Pure (no I/O) so the audit core can use it.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    FINDINGS = 3
    INTERRUPTED = 130


__all__ = ["ExitCode"]
