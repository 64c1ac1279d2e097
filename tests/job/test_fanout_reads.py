"""The read-evidence loop of the fan-out and the listing probe, in process.

A scripted reader stands in for BookieClient: these are properties of *our* loop (entries in flight, digest
verification of what comes back, the breaker after transport failures, a bookie that answers garbage or never
answers) that a real bookie cannot be made to show on demand. Real bookies in no-listing mode are exercised by
tests/spark/test_checker_reads.py.
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
        self.listings: dict[int, Any] = {}
        """Per-ledger listing answers (else `listing`)."""

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
        listing = self.listings.get(ledger_id, self.listing)
        if isinstance(listing, BaseException):
            fut.set_exception(listing)
        elif listing != "hang":
            fut.set_result(listing)
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
    """Probed with ledgers it stores (closed, with entries): DbLedgerStorage never answers the listing of one
    of those (UnsupportedOperationException escapes GetListOfEntriesOfLedgerProcessorV3) while it answers the
    read; a listing bookie answers it; a dead one answers nothing."""
    probes = [(5, 0), (6, 3)]
    alive = Reader({(5, 0): b"entry", (6, 3): BookieError("ENOENTRY", "hole")})
    alive.listing = "hang"
    mode, why = probe_listing(alive, timeout_s=0.2, probes=probes)
    assert mode == "reads" and "no answer" in why and "ledger 5" in why
    alive.listing = BookieError("EBADREQ", "unknown operation")
    assert probe_listing(alive, timeout_s=0.2, probes=probes)[0] == "reads"
    alive.listing = b"\x00\x00"  # answered, even if the bytes will not decode
    assert probe_listing(alive, timeout_s=0.2, probes=probes)[0] == "listing"
    # a bookie holding the probed ledger in limbo answers the listing: it lists, the ledger is unknown
    alive.listing = BookieError("EUNKNOWNLEDGERSTATE", "ledger is in limbo")
    assert probe_listing(alive, timeout_s=0.2, probes=probes)[0] == "listing"
    dead = Reader({(5, 0): "hang", (6, 3): "hang"})  # answers nothing at all
    t0 = time.monotonic()
    mode, why = probe_listing(dead, timeout_s=0.3, probes=probes)
    assert mode == "listing" and why.startswith("unreachable")
    assert time.monotonic() - t0 < 5, "one deadline for every probe"


def test_probe_is_not_fooled_by_enoledger_for_a_ledger_the_bookie_lacks():
    """A Java bookie answers ENOLEDGER for a ledger it does not hold on every storage (the handle lookup fails
    before the storage is asked): that says nothing about listing. Ground truth: DbLedgerStorage semantics,
    ledger 5 never reached the bookie, ledger 6 did."""
    db = Reader({(5, 0): BookieError("ENOLEDGER", ""), (6, 3): b"entry"})
    db.listings = {5: BookieError("ENOLEDGER", "")}  # 6: no answer
    mode, why = probe_listing(db, timeout_s=0.2, probes=[(5, 0), (6, 3)])
    assert mode == "reads" and "ledger 6" in why
    # it lacks every probed ledger: not told, listing stays (the run switches if listings go unanswered)
    mode, why = probe_listing(db, timeout_s=0.2, probes=[(5, 0)])
    assert mode == "listing" and "ENOLEDGER" in why
    # ENOLEDGER from the listing while it returns the entry: the listing is not to be trusted
    liar = Reader({(5, 0): b"entry"})
    liar.listings = {5: BookieError("ENOLEDGER", "")}
    assert probe_listing(liar, timeout_s=0.2, probes=[(5, 0)])[0] == "reads"
    assert probe_listing(db, timeout_s=0.2, probes=[])[0] == "listing"


def test_probe_targets_are_ledgers_the_bookie_must_hold():
    from bkaudit.job.ledger_pass import LEDGER_INPUT_SCHEMA
    from bkaudit.job.read_evidence import probe_targets

    def row(lid: int, state: str, last: int, ensemble: list[str]) -> dict[str, Any]:
        return {"ledger_id": lid, "ensemble_size": 3, "write_quorum": 2, "ack_quorum": 2, "state": state,
                "last_entry_id": last, "znode_version": 0, "znode_mzxid": 0, "managed_ledger": None,
                "segments": [{"segment_index": 0, "first_entry_id": 0, "ensemble": ensemble}],
                "parse_error": None, "raw_size": 10, "digest_type": "CRC32C"}

    X, Y, Z, W = "x:1", "y:1", "z:1", "w:1"
    rows = [
        row(1, "OPEN", 10, [X, Y, Z]),  # open: not a probe
        row(2, "CLOSED", -1, [X, Y, Z]),  # no entries
        row(3, "CLOSED", 0, [X, Y, Z]),  # entry 0 on X and Y only
        row(4, "CLOSED", 9, [X, Y, Z]),
        row(5, "CLOSED", 9, [W, Y, Z]),
    ]
    batch = pa.RecordBatch.from_pylist(rows, schema=LEDGER_INPUT_SCHEMA)
    got = probe_targets([batch], [X, Y, Z, W], per_bookie=2)
    assert got[X] == [(3, 0), (4, 0)]
    assert got[Y] == [(3, 0), (4, 0)]
    assert got[Z] == [(4, 1), (5, 1)]  # entry 1's write set is indexes 1, 2
    assert got[W] == [(5, 0)]
