"""The terminal "data lost" record: which entries of a ledger no surviving replica can serve.

BookKeeper has no such state: a ledger whose entries are gone stays under-replicated and is retried forever,
loading bookies and hiding the loss in a growing queue (#3316, pulsar#15992, #4872). bkaudit's worker gives
up after a bounded number of attempts and writes this record (where: bkaudit.zk.dataloss). The record is JSON
so operators and the data engineers' tables can read it without a protobuf schema.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bkaudit.errors import FormatError

RECORD_VERSION = 1


@dataclass(frozen=True)
class DataLossRecord:
    ledger_id: int
    lost_entry_ranges: tuple[tuple[int, int], ...]  # inclusive
    detected_at: str  # ISO 8601, UTC
    bookies: tuple[str, ...]  # the replicas that should have held the lost entries
    attempts: int = 0
    detector: str | None = None  # the worker that gave up

    @property
    def lost_entries(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.lost_entry_ranges)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": RECORD_VERSION,
            "ledger_id": self.ledger_id,
            "lost_entry_ranges": [list(r) for r in self.lost_entry_ranges],
            "lost_entries": self.lost_entries,
            "detected_at": self.detected_at,
            "bookies": list(self.bookies),
            "attempts": self.attempts,
            "detector": self.detector,
        }


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def merge_ranges(entry_ids: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """Sorted ids -> inclusive runs."""
    runs: list[list[int]] = []
    for e in sorted(set(entry_ids)):
        if runs and runs[-1][1] + 1 == e:
            runs[-1][1] = e
        else:
            runs.append([e, e])
    return tuple((a, b) for a, b in runs)


def encode(record: DataLossRecord) -> bytes:
    return json.dumps(record.to_json(), sort_keys=True).encode("utf-8")


def parse(data: bytes) -> DataLossRecord:
    try:
        doc = json.loads(data.decode("utf-8"))
        return DataLossRecord(
            ledger_id=int(doc["ledger_id"]),
            lost_entry_ranges=tuple((int(a), int(b)) for a, b in doc["lost_entry_ranges"]),
            detected_at=str(doc["detected_at"]),
            bookies=tuple(str(b) for b in doc.get("bookies", ())),
            attempts=int(doc.get("attempts", 0)),
            detector=doc.get("detector"),
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise FormatError(f"not a bkaudit data-loss record: {exc}", field="dataloss") from exc
