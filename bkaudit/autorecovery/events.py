"""An audit trail of what AutoRecovery did: one JSON object per line (`--events FILE`), plus the log.

Operators get a greppable history (who held which ledger when, what was copied where, what was given up);
tests use it as evidence, e.g. that two workers never held the same ledger at once. Timestamps are wall clock
(`time.time()`), comparable across processes on one host. A lock's `locked` event is written after the lock
was taken and its `unlocking` event before it is released, so recorded intervals lie inside the real ones.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("bkaudit.autorecovery")


class EventLog:
    """Thread-safe JSON-lines writer; with no path it only logs."""

    def __init__(self, path: str | None = None, *, node: str = "") -> None:
        self.path = Path(path) if path else None
        self.node = node
        self._lock = threading.Lock()
        self._fh = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("a", encoding="utf-8", buffering=1)

    def emit(self, event: str, **fields: Any) -> None:
        record = {"t": time.time(), "node": self.node, "event": event, **fields}
        log.info("%s %s", event, " ".join(f"{k}={v}" for k, v in fields.items()))
        if self._fh is None:
            return
        line = json.dumps(record, default=str)
        with self._lock:
            if self._fh is not None:
                self._fh.write(line + "\n")

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """Parse an event file (tests, tooling); a torn last line of a killed process is skipped."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
