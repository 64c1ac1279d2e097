"""The read-evidence loop of the fan-out and the listing probe, in process.

A scripted reader stands in for BookieClient: these are properties of *our* loop (entries in flight, digest
verification of what comes back, the breaker after transport failures, a bookie that answers garbage or never
answers) that a real bookie cannot be made to show on demand. Real bookies in no-listing mode are exercised by
tests/integration/test_checker_reads.py.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any

import pyarrow as pa

from bkaudit.errors import BookieError
from bkaudit.formats.entry import DigestManager
from bkaudit.job.fanout import (
    REQUEST_SCHEMA,
    RESPONSE_SCHEMA,
    FanoutConfig,
    evidence_of_row,
)
from bkaudit.job.fanout_task import fanout_partition
from bkaudit.job.read_evidence import probe_listing, read_and_verify
from bkaudit.model.ledger import DigestType, Segment
from bkaudit.model.shape import LedgerShape

B = "b:1"


class Reader:
    """Answers read_entry from stored bodies (or a per-entry script) on background timers."""

    def __init__(self, entries: dict[tuple[int, int], Any], *, delay: float = 0.005) -> None:
        self.entries = entries
        self.delay = delay
        self.outstanding = 0
        self.max_outstanding = 0
        self.reads: list[tuple[int, int]] = []
        self.lock = threading.Lock()
        self.listing: Any = "hang"

    def read_entry(self, ledger_id: int, entry_id: int) -> Future[Any]:
        fut: Future[Any] = Future()
        with self.lock:
            self.reads.append((ledger_id, entry_id))
            self.outstanding += 1
            self.max_outstanding = max(self.max_outstanding, self.outstanding)
        value = self.entries.get((ledger_id, entry_id), BookieError("ENOENTRY", "scripted"))
        if value == "hang":
            with self.lock:
                self.outstanding -= 1
            return fut  # never completes, as a bookie that never answers (the caller's deadline decides)

        def finish() -> None:
            with self.lock:
                self.outstanding -= 1
            if isinstance(value, BaseException):
                fut.set_exception(value)
            else:
                fut.set_result(value)

        threading.Timer(self.delay, finish).start()
        return fut

    def get_list_of_entries(self, ledger_id: int) -> Future[Any]:
        fut: Future[Any] = Future()
        if isinstance(self.listing, BaseException):
            fut.set_exception(self.listing)
        elif self.listing != "hang":
            fut.set_result(self.listing)
        return fut

    def close(self) -> None:
        pass


def bodies(ledger_id: int, entries: range) -> dict[tuple[int, int], bytes]:
    dm = DigestManager(ledger_id, b"", DigestType.CRC32C)
    return {(ledger_id, e): dm.package(e, e - 1, e + 1, b"x%d" % e) for e in entries}


def test_reads_are_bounded_and_verified():
    stored = bodies(1, range(40))
    del stored[(1, 7)]  # missing
    bad = bytearray(stored[(1, 9)])
    bad[-1] ^= 1
    stored[(1, 9)] = bytes(bad)  # corrupt
    reader = Reader(stored)
    plan = list(range(40))
    out = list(
        read_and_verify(reader, B, [1], [plan], ["CRC32C"], max_in_flight=4, failure_threshold=2)
    )
    ((p, summary, call),) = out
    assert p == 0 and summary.status == "OK" and summary.entries_read == 40
    assert summary.missing == (7,) and summary.corrupt == (9,)
    assert sorted(e for _l, e in reader.reads) == plan, "every planned entry read exactly once"
    assert 1 <= reader.max_outstanding <= 4
    assert call is not None and call.ms >= 0


def test_garbage_answers_are_corrupt_and_errors_leave_the_bookie_unverified():
    stored: dict[tuple[int, int], Any] = {(1, 0): b"\x00garbage", (1, 1): b""}
    stored.update(bodies(2, range(2)))
    stored[(2, 1)] = BookieError("EIO", "disk error")
    reader = Reader(stored)
    got = {
        p: s
        for p, s, _c in read_and_verify(
            reader, B, [1, 2], [[0, 1], [0, 1]], ["CRC32C", "CRC32C"], max_in_flight=8, failure_threshold=2
        )
    }
    assert got[0].status == "OK" and got[0].corrupt == (0, 1), "bytes that are not the entry: corrupt"
    assert got[1].status == "EIO" and "entry 1" in (got[1].error or "")


def test_a_bookie_that_never_answers_trips_the_breaker():
    timed_out: list[Future[Any]] = []

    class Deadline(Reader):
        def read_entry(self, ledger_id: int, entry_id: int) -> Future[Any]:
            fut: Future[Any] = Future()
            with self.lock:
                self.reads.append((ledger_id, entry_id))
            timed_out.append(fut)
            # the client's deadline: UNAVAILABLE after a short while, as BookieClient reports no response
            threading.Timer(
                0.01, lambda: fut.set_exception(BookieError("UNAVAILABLE", "no response within 0.01s"))
            ).start()
            return fut

    reader = Deadline({})
    plans = [list(range(50)) for _ in range(5)]
    got = list(
        read_and_verify(
            reader, B, list(range(5)), plans, ["CRC32C"] * 5, max_in_flight=2, failure_threshold=3
        )
    )
    assert sorted(p for p, _s, _c in got) == list(range(5)), "every ledger gets exactly one summary"
    assert all(s.status in ("UNAVAILABLE", "CIRCUIT_OPEN") for _p, s, _c in got)
    assert len(reader.reads) < 10, "the breaker stops reading a dead bookie"


def test_partition_function_reads_for_rows_with_read_entries():
    s = LedgerShape(5, 3, 2, 2, True, 9, (Segment(0, (B, "c:1", "d:1")),), version=1)
    stored = bodies(5, range(10))
    del stored[(5, 3)]
    reader = Reader(stored)
    rows = [
        {"bookie_id": B, "ledger_id": 5, "expected_digest": None, "ledger_entries": 10,
         "read_entries": [0, 1, 3, 4, 6, 7, 9], "digest_type": "CRC32C"},
    ]
    batch = pa.RecordBatch.from_pylist(rows, schema=REQUEST_SCHEMA)
    config = FanoutConfig(targets={}, read_max_in_flight=3)
    out = pa.Table.from_batches(list(fanout_partition(config, lambda b, c: reader)(iter([batch]))),
                                schema=RESPONSE_SCHEMA).to_pylist()
    (row,) = out
    assert row["status"] == "OK" and row["entries_missing"] == [3] and row["entries_corrupt"] == []
    ev = evidence_of_row(s, {**row, "error": None})
    assert ev.evidence == "reads" and ev.missing_count == 1 and ev.entries_read == 7


def test_probe_tells_no_listing_from_listing_from_dead():
    alive = Reader({})
    alive.listing = "hang"  # DbLedgerStorage: no response to the listing request
    mode, why = probe_listing(alive, timeout_s=0.2)
    assert mode == "reads" and "no answer" in why
    alive.listing = BookieError("EBADREQ", "unknown operation")
    assert probe_listing(alive, timeout_s=0.2)[0] == "reads"
    alive.listing = BookieError("ENOLEDGER", "")
    assert probe_listing(alive, timeout_s=0.2) == ("listing", "listing answered")
    alive.listing = b"\x00\x00"
    assert probe_listing(alive, timeout_s=0.2)[0] == "listing"
    # a bookie holding the probed ledger in limbo answers the listing: it lists, the ledger is unknown
    alive.listing = BookieError("EUNKNOWNLEDGERSTATE", "ledger is in limbo")
    assert probe_listing(alive, timeout_s=0.2) == ("listing", "listing answered")
    dead = Reader({(0, 0): "hang"})  # answers nothing at all
    t0 = time.monotonic()
    mode, why = probe_listing(dead, timeout_s=0.3)
    assert mode == "listing" and why.startswith("unreachable")
    assert time.monotonic() - t0 < 5, "one deadline for both probes"
