"""The run's history: one JSON object per line, the evidence the invariants are checked against.

Each record has `t` (seconds since the run started, monotonic clock) and `type`:

| type | fields | written by |
|---|---|---|
| run | seed, schedule (the faults), settings | runner, first line |
| create | ledger, e, wq, aq, ensemble | writer |
| ack | ledger, entry, digest (sha256 of the payload, 16 hex) | writer, per acknowledged add |
| close | ledger, last_entry, by ("writer" / "recovery") | writer close, recovery open |
| crash | ledger, reason | writer that stopped without closing |
| fault | index, kind, target, phase ("start" / "heal" / "skip"), detail | fault injectors |
| damage | ledger, bookie, index, first, last, e, wq, aq, closed, cause; or ledger, kind="metadata" | faults |
| read | ledger, entry, status ("mismatch") | readers, only when a payload differs |
| check | n, started, ended, exit_code, counts | checker adapter |
| finding | n, category, ledger, bookie, under_repair | checker adapter |
| repair | ledger, locked_t, done_t, node | AutoRecovery's event files, imported at the end |
| data_loss | ledger, ranges | AutoRecovery's data-loss records, read at the end |
| final_read | ledger, entry, status ("ok" / "mismatch" / "unreadable"), detail | runner, after healing |
| final_metadata | ledger, state, last_entry | runner, after healing |
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

Event = dict[str, Any]


class History:
    """Thread-safe recorder; keeps the events in memory and appends each to `path` as it happens."""

    def __init__(self, path: str | Path | None = None, *, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._t0 = clock()
        self._lock = threading.Lock()
        self.events: list[Event] = []
        self.path = Path(path) if path is not None else None
        self._fh: IO[str] | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("w", encoding="utf-8", buffering=1)

    def now(self) -> float:
        """Seconds since the run started."""
        return round(float(self._clock() - self._t0), 4)

    def record(self, type_: str, **fields: Any) -> Event:
        with self._lock:
            event: Event = {"t": self.now(), "type": type_, **fields}
            self.events.append(event)
            if self._fh is not None:
                self._fh.write(json.dumps(event, default=str, sort_keys=False) + "\n")
        return event

    def of_type(self, type_: str) -> list[Event]:
        with self._lock:
            return [e for e in self.events if e["type"] == type_]

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


def load(path: str | Path) -> list[Event]:
    """The events of a history file; a torn last line (the run was killed) is skipped."""
    out: list[Event] = []
    with Path(path).open(encoding="utf-8") as fh:
        for line in fh:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and "type" in event:
                out.append(event)
    return out


def excerpt(events: Iterable[Event], *, ledgers: Iterable[int] = (), limit: int = 40) -> list[Event]:
    """The minimal part of a history that explains a violation: the run header, every fault, and the
    records about the given ledgers (acks summarised to their first and last), at most `limit` lines."""
    wanted = set(ledgers)
    events = list(events)
    out: list[Event] = [e for e in events if e["type"] == "run"][:1]
    out[0:1] = [{k: v for k, v in e.items() if k != "schedule"} for e in out[0:1]]
    acks: dict[int, list[Event]] = {}
    for e in events:
        if e["type"] == "ack" and e.get("ledger") in wanted:
            acks.setdefault(e["ledger"], []).append(e)
        elif e["type"] == "fault" or (e.get("ledger") in wanted and e["type"] != "final_read"):
            out.append(e)
    for ledger, ledger_acks in acks.items():
        out.append(
            {
                "type": "acks",
                "ledger": ledger,
                "count": len(ledger_acks),
                "first": ledger_acks[0],
                "last": ledger_acks[-1],
            }
        )
    return _cap(out, limit)


def _cap(events: list[Event], limit: int) -> list[Event]:
    if len(events) <= limit:
        return events
    return [*events[: limit - 1], {"type": "omitted", "count": len(events) - limit + 1}]


def jsonl(events: Iterable[Event]) -> Iterator[str]:
    for e in events:
        yield json.dumps(e, default=str)
