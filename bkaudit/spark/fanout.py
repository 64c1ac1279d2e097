"""Bookie fan-out of the metadata checker: ask every bookie which entries it holds, in batches, on executors.

Shape of the work (ecosystem-notes.md "RPC fan-out"): the ledger pass emits one request row per (ledger,
bookie) that must hold entries; the job repartitions them by bookie and runs `fanout_partition` through
`mapInArrow`. Each task opens its own native connection per bookie inside the function (connections neither
pickle nor survive a fork) and sends ONE GetListOfEntries per (ledger, bookie), `batch_size` ledgers per
call: one batch message to bookies that advertised the batch operation, standard per-ledger requests
pipelined to any other, with at most `max_in_flight` calls outstanding per bookie.

Healthy answers cost almost nothing: the ledger pass attached to each request the digest of the canonical
encoding (`availability.encode_runs`, byte-identical to BookKeeper's encoder) of exactly the entries the
bookie must hold. An answer with that digest holds those entries and no others, so it needs no decoding. Any
other answer keeps its raw bytes in the row; the per-ledger combine step decodes it and computes missing and
extra ranges with group arithmetic. ENOLEDGER and failures travel as statuses.

The calls are read-only, so a task Spark re-runs only repeats harmless reads; the job writes this stage's
output to staging files immediately, so downstream stages never trigger the calls again.

A bookie that fails at the transport level `failure_threshold` times in a row is not called again by this
task (its remaining ledgers are marked CIRCUIT_OPEN at once): a frozen bookie would otherwise cost one full
deadline per batch. The job's delayed retry (BP-34's re-check) gives it a fresh chance.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bkaudit.audit.availability import STATUS_CIRCUIT_OPEN, STATUS_INVALID_RESPONSE, is_transport_failure
from bkaudit.audit.batching import answer_bytes, call_budget, plan_calls
from bkaudit.audit.durability import (
    STATUS_NO_LEDGER,
    STATUS_OK,
    BookieEvidence,
    LedgerShape,
    checked_segments,
    compare_bookie,
    failed_evidence,
    merge_sorted_ranges,
)
from bkaudit.audit.reads import (
    STATUS_CORRUPT,
    ReadSummary,
    read_evidence,
    summarise_reads,
    verify_entry,
)
from bkaudit.errors import BookieError, FormatError
from bkaudit.model.ledger import Segment
from bkaudit.model.quorum import Striping, entries_of_bookie

log = logging.getLogger(__name__)

SEGMENT_STRUCT = pa.struct(
    [
        pa.field("segment_index", pa.int32()),
        pa.field("first_entry_id", pa.int64()),
        pa.field("ensemble", pa.list_(pa.string())),
    ]
)

SHAPE_FIELDS = [
    pa.field("ledger_id", pa.int64()),
    pa.field("ensemble_size", pa.int32()),
    pa.field("write_quorum", pa.int32()),
    pa.field("ack_quorum", pa.int32()),
    pa.field("state", pa.string()),
    pa.field("last_entry_id", pa.int64()),
    pa.field("znode_version", pa.int32()),
    pa.field("znode_mzxid", pa.int64()),
    pa.field("managed_ledger", pa.string()),
    pa.field("segments", pa.list_(SEGMENT_STRUCT)),
]
"""A ledger as the checker's Spark stages carry it (from the `ledgers` and `ledger_segments` tables)."""

SHAPE_SCHEMA = pa.schema(SHAPE_FIELDS)

REQUEST_SCHEMA = pa.schema(
    [
        pa.field("bookie_id", pa.string()),
        pa.field("ledger_id", pa.int64()),
        pa.field("expected_digest", pa.binary()),
        pa.field("ledger_entries", pa.int64()),
        pa.field("read_entries", pa.list_(pa.int64())),
        pa.field("digest_type", pa.string()),
        pa.field("answer_bytes", pa.int64()),
    ]
)
"""One row per (ledger, bookie) to ask. `expected_digest`: digest of the canonical encoding of what the
bookie must hold (null = always compare in detail); `ledger_entries` (entries checked) is set on one row per
ledger, 0 on the others. `read_entries` set (a bookie without listing): verify by reading these entries
(`bkaudit.audit.reads`) and checking each one's `digest_type` digest instead of asking for the list.
`answer_bytes`: the size of a healthy answer (`audit.batching`), by which listing calls are cut (null: 0)."""

RESPONSE_SCHEMA = pa.schema(
    [
        pa.field("bookie_id", pa.string()),
        pa.field("ledger_id", pa.int64()),
        pa.field("expected_digest", pa.binary()),
        pa.field("ledger_entries", pa.int64()),
        pa.field("status", pa.string()),
        pa.field("error", pa.string()),
        pa.field("answer", pa.binary()),
        pa.field("call_id", pa.string()),
        pa.field("call_ms", pa.float64()),
        pa.field("attempt", pa.int32()),
        pa.field("read_entries", pa.list_(pa.int64())),
        pa.field("digest_type", pa.string()),
        pa.field("entries_missing", pa.list_(pa.int64())),
        pa.field("entries_corrupt", pa.list_(pa.int64())),
        pa.field("answer_bytes", pa.int64()),
    ]
)
"""One row per (ledger, bookie) asked. status OK with a null `answer`: exactly the expected entries. status OK
with `answer`: something differs, the bytes are compared in detail downstream. ENOLEDGER: holds nothing.
Anything else: not verified (UNAVAILABLE, CIRCUIT_OPEN, EIO, ...), `error` says why. Rows verified by reads
(`read_entries` set) carry, with status OK, the entries proven missing (ENOENTRY) and corrupt."""

ANSWERED = ("OK", "ENOLEDGER")
DIGEST_MAX_RUNS = 4096
"""Above this many expected runs the digest is not computed: the answer is compared in detail instead."""
OUTPUT_BATCH_ROWS = 8192
CALL_BYTES = call_budget(5 * 1024 * 1024)
"""Expected answer bytes per listing call: half of BookKeeper's default frame (nettyMaxFrameSizeBytes), which
the task's clients apply to every response."""


def digest(data: bytes) -> bytes:
    """16-byte BLAKE2b: equal digests mean equal bytes (no accidental collisions, unlike a CRC)."""
    return hashlib.blake2b(data, digest_size=16).digest()


@dataclass(frozen=True)
class FanoutConfig:
    """Everything a fan-out task needs; picklable (shipped to executors in the mapInArrow closure)."""

    targets: Mapping[str, str]
    batch_listing: frozenset[str] = frozenset()
    """Bookies that advertised the batch listing (op 1000); the others get per-ledger requests."""
    batch_size: int = 500
    max_call_bytes: int = CALL_BYTES
    """Expected answer bytes per listing call; at most half of `max_frame_bytes` is used."""
    max_frame_bytes: int = 5 * 1024 * 1024
    """Largest response frame the task's clients accept ([rpc] max_frame_bytes, nettyMaxFrameSizeBytes)."""
    max_in_flight: int = 4
    call_timeout_s: float = 15.0
    connect_timeout_s: float = 5.0
    failure_threshold: int = 2
    attempt: int = 0
    read_max_in_flight: int = 64
    tls: Any = None
    extra: Mapping[str, Any] = field(default_factory=dict)


# -- rows <-> value objects ----------------------------------------------------------------------------------


def shape_of(row: Mapping[str, Any]) -> LedgerShape:
    """A LedgerShape from a row of SHAPE_SCHEMA (segments ordered by segment_index)."""
    segments = sorted(row.get("segments") or (), key=lambda s: s["segment_index"])
    return LedgerShape(
        ledger_id=int(row["ledger_id"]),
        ensemble_size=int(row["ensemble_size"] or 0),
        write_quorum=int(row["write_quorum"] or 0),
        ack_quorum=int(row["ack_quorum"] or 0),
        closed=row.get("state") == "CLOSED",
        last_entry_id=int(row["last_entry_id"] if row["last_entry_id"] is not None else -1),
        segments=tuple(Segment(int(s["first_entry_id"]), tuple(s["ensemble"] or ())) for s in segments),
        version=row.get("znode_version"),
    )


def shape_row(shape: LedgerShape, **extra: Any) -> dict[str, Any]:
    """The SHAPE_SCHEMA row of a LedgerShape."""
    row: dict[str, Any] = {
        "ledger_id": shape.ledger_id,
        "ensemble_size": shape.ensemble_size,
        "write_quorum": shape.write_quorum,
        "ack_quorum": shape.ack_quorum,
        "state": "CLOSED" if shape.closed else "OPEN",
        "last_entry_id": shape.last_entry_id,
        "znode_version": shape.version,
        "znode_mzxid": None,
        "managed_ledger": None,
        "segments": [
            {"segment_index": i, "first_entry_id": s.first_entry_id, "ensemble": list(s.ensemble)}
            for i, s in enumerate(shape.segments)
        ],
    }
    row.update(extra)
    return row


class ExpectedDigests:
    """Digests of the canonical encoding of each bookie's expected entries, memoised twice.

    By layout (E, WQ and the checked segments' spans): which bookie index must hold which striping; and by
    striping set: the digest. Ledgers of one workload repeat a handful of layouts, so a ledger costs a few
    dictionary lookups, and the encoding and hashing run once per distinct layout, not per (ledger, bookie).
    """

    MEMO_LIMIT = 100_000

    def __init__(self) -> None:
        self._plans: dict[tuple[Any, ...], list[list[tuple[int, tuple[int, int, int, int, int]]]]] = {}
        self._digests: dict[tuple[tuple[int, int, int, int, int], ...], bytes | None] = {}
        self._sizes: dict[tuple[tuple[int, int, int, int, int], ...], int] = {}

    def expected(self, shape: LedgerShape) -> tuple[dict[str, bytes | None], int]:
        """({bookie: digest or None}, entries checked) — bookies in `expected_by_bookie` order."""
        wanted, n = self.expected_requests(shape)
        return {bookie: d for bookie, (d, _) in wanted.items()}, n

    def expected_requests(self, shape: LedgerShape) -> tuple[dict[str, tuple[bytes | None, int]], int]:
        """({bookie: (digest or None, healthy answer bytes)}, entries checked)."""
        spans = checked_segments(shape)
        e, wq = shape.ensemble_size, shape.write_quorum
        key = (e, wq, tuple((sp.first, sp.last) for sp in spans))
        plan = self._plans.get(key)
        if plan is None:
            plan = []
            for sp in spans:
                per: list[tuple[int, tuple[int, int, int, int, int]]] = []
                for idx in range(e):
                    st = entries_of_bookie(idx, sp.first, sp.last, e, wq)
                    if st.count() > 0:
                        per.append((idx, (st.first, st.last, st.start, st.period, st.size)))
                plan.append(per)
            if len(self._plans) < self.MEMO_LIMIT:
                self._plans[key] = plan
        by_bookie: dict[str, list[tuple[int, int, int, int, int]]] = {}
        for sp, per in zip(spans, plan, strict=True):
            ens = sp.ensemble
            for idx, striping in per:
                by_bookie.setdefault(ens[idx], []).append(striping)
        out: dict[str, tuple[bytes | None, int]] = {}
        for bookie, stripings in by_bookie.items():
            skey = tuple(stripings)
            if skey in self._digests:
                out[bookie] = (self._digests[skey], self._sizes[skey])
                continue
            value = self._digest_of(stripings)
            size = answer_bytes(Striping(*t) for t in stripings)
            if len(self._digests) < self.MEMO_LIMIT:
                self._digests[skey] = value
                self._sizes[skey] = size
            out[bookie] = (value, size)
        return out, sum(sp.last - sp.first + 1 for sp in spans)

    def for_shape(self, shape: LedgerShape) -> dict[str, bytes | None]:
        return self.expected(shape)[0]

    @staticmethod
    def _digest_of(stripings: Sequence[tuple[int, int, int, int, int]]) -> bytes | None:
        from bkaudit.formats.availability import encode_runs

        runs: list[tuple[int, int]] = []
        for first, last, start, period, size in stripings:
            if len(runs) > DIGEST_MAX_RUNS:
                return None
            runs.extend(Striping(first, last, start, period, size).runs())
        if len(runs) > DIGEST_MAX_RUNS:
            return None
        return digest(encode_runs(merge_sorted_ranges(sorted(runs))))


def judge_answer(shape: LedgerShape, bookie_id: str, value: bytes | BaseException | None) -> BookieEvidence:
    """Evidence from one ledger's answer: availability bytes, a BookieError, or nothing at all."""
    from bkaudit.formats.availability import decode

    if value is None:
        return failed_evidence(bookie_id, "EBADREQ", "the batch response has no answer for this ledger")
    if isinstance(value, BookieError):
        if value.status == STATUS_NO_LEDGER:
            return compare_bookie(shape, bookie_id, None)
        return failed_evidence(bookie_id, value.status, str(value))
    if isinstance(value, BaseException):
        return failed_evidence(bookie_id, "UNAVAILABLE", f"{type(value).__name__}: {value}")
    try:
        holding = decode(value)
    except FormatError as exc:
        return failed_evidence(bookie_id, STATUS_INVALID_RESPONSE, f"{exc} ({len(value)} bytes)")
    try:
        return compare_bookie(shape, bookie_id, holding)
    except (FormatError, ValueError) as exc:  # ids the expected stripings cannot be compared with
        return failed_evidence(bookie_id, STATUS_INVALID_RESPONSE, str(exc))


def undecodable(value: bytes) -> str | None:
    """Why `value` is not AvailabilityOfEntriesOfLedger bytes, or None when it decodes.

    Checked on the executor so a garbled answer counts as a failure there and gets BP-34's delayed re-check.
    """
    from bkaudit.formats.availability import decode

    try:
        decode(value)
    except FormatError as exc:
        return f"{exc} ({len(value)} bytes)"
    return None


def evidence_of_row(shape: LedgerShape, row: Mapping[str, Any]) -> BookieEvidence:
    """Evidence from a RESPONSE_SCHEMA row (the combine step; only differing answers carry bytes)."""
    bookie, status = str(row["bookie_id"]), str(row["status"])
    reads = row.get("read_entries")
    if reads is not None:
        summary = ReadSummary(
            status,
            len(reads),
            tuple(row.get("entries_missing") or ()),
            tuple(row.get("entries_corrupt") or ()),
            row.get("error"),
        )
        return read_evidence(shape, bookie, summary)
    if status == STATUS_OK:
        answer = row.get("answer")
        return BookieEvidence(bookie, STATUS_OK) if answer is None else judge_answer(shape, bookie, answer)
    if status == STATUS_NO_LEDGER:
        return compare_bookie(shape, bookie, None)
    return failed_evidence(bookie, status, row.get("error"))


# -- talking to one bookie -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallInfo:
    """The batch call an answer travelled in (for bookie_checks: calls, latency percentiles)."""

    call_id: str
    ms: float


def ask(
    client: Any,
    bookie_id: str,
    ledger_ids: Sequence[int],
    *,
    batch_size: int,
    max_in_flight: int,
    failure_threshold: int,
    call_prefix: str = "",
    sizes: Sequence[int | None] | None = None,
    max_call_bytes: int = CALL_BYTES,
) -> Iterator[tuple[int, bytes | BookieError | None, CallInfo | None]]:
    """Raw answers for `ledger_ids` (by position): one call per at most `batch_size` ids and `max_call_bytes`
    expected answer bytes (`sizes`, by position; `audit.batching.plan_calls`), bounded in flight.

    Every position is yielded exactly once: bytes, a BookieError (per ledger, or the whole call's failure,
    CIRCUIT_OPEN for ids not asked after the breaker opened), or None when the answer lacks that ledger.
    """
    expected = [s or 0 for s in sizes] if sizes is not None else [0] * len(ledger_ids)
    chunks = iter(plan_calls(expected, max_bytes=max_call_bytes, max_count=batch_size))
    pending: dict[Future[Any], tuple[list[int], float, str]] = {}
    consecutive = 0
    breaker: str | None = None
    number = 0
    while True:
        while breaker is None and len(pending) < max_in_flight:
            chunk = next(chunks, None)
            if chunk is None:
                break
            number += 1
            call_id = f"{call_prefix}{bookie_id}#{number}"
            try:
                fut: Future[Any] = client.get_list_of_entries_batch([ledger_ids[p] for p in chunk])
            except Exception as exc:  # a client that cannot even queue the call
                fut = Future()
                fut.set_exception(BookieError("UNAVAILABLE", str(exc), bookie_id=bookie_id))
            pending[fut] = (chunk, time.monotonic(), call_id)
        if not pending:
            break
        done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
        for fut in done:
            chunk, started, call_id = pending.pop(fut)
            call = CallInfo(call_id, (time.monotonic() - started) * 1000.0)
            try:
                answers = fut.result()
            except BaseException as exc:
                status = exc.status if isinstance(exc, BookieError) else "UNAVAILABLE"
                error = (
                    exc
                    if isinstance(exc, BookieError)
                    else BookieError(status, str(exc), bookie_id=bookie_id)
                )
                if is_transport_failure(status):
                    consecutive += 1
                    if consecutive >= failure_threshold and breaker is None:
                        breaker = f"{status}: {exc}"
                        log.warning(
                            "bookie %s: %d transport failures in a row (%s); skipping it for now",
                            bookie_id,
                            consecutive,
                            exc,
                        )
                for p in chunk:
                    yield p, error, call
                continue
            consecutive = 0
            if not isinstance(answers, Mapping):
                bad = BookieError(STATUS_INVALID_RESPONSE, "not a batch answer", bookie_id=bookie_id)
                for p in chunk:
                    yield p, bad, call
                continue
            get = answers.get
            for p in chunk:
                yield p, get(ledger_ids[p]), call
    if breaker is not None:
        skipped = BookieError(
            STATUS_CIRCUIT_OPEN,
            f"not asked after {failure_threshold} consecutive transport failures ({breaker})",
            bookie_id=bookie_id,
        )
        for chunk in chunks:
            for p in chunk:
                yield p, skipped, None


def query_bookie(
    client: Any,
    bookie_id: str,
    shapes: Sequence[LedgerShape],
    *,
    batch_size: int,
    max_in_flight: int,
    failure_threshold: int,
    call_prefix: str = "",
) -> Iterator[tuple[LedgerShape, BookieEvidence, CallInfo | None]]:
    """Ask one bookie about `shapes` and judge every answer in detail (driver-side re-evaluation)."""
    ids = [s.ledger_id for s in shapes]
    memo = ExpectedDigests()
    sizes = [memo.expected_requests(s)[0].get(bookie_id, (None, 0))[1] for s in shapes]
    for p, value, call in ask(
        client,
        bookie_id,
        ids,
        batch_size=batch_size,
        max_in_flight=max_in_flight,
        failure_threshold=failure_threshold,
        call_prefix=call_prefix,
        sizes=sizes,
    ):
        yield shapes[p], judge_answer(shapes[p], bookie_id, value), call


def read_and_verify(
    client: Any,
    bookie_id: str,
    ledger_ids: Sequence[int],
    plans: Sequence[Sequence[int]],
    digest_types: Sequence[str | None],
    *,
    max_in_flight: int,
    failure_threshold: int,
    call_prefix: str = "",
    passwords: Sequence[bytes | None] | None = None,
) -> Iterator[tuple[int, ReadSummary, CallInfo | None]]:
    """Verify (ledger, bookie) pairs by reading entries: one ReadSummary per position, in completion order.

    At most `max_in_flight` entry reads are outstanding (BookKeeper's inFlightReadEntryNumInLedgerChecker);
    each entry read back is verified with its ledger's digest. After `failure_threshold` consecutive
    transport failures the bookie is not read again in this attempt: what is left is CIRCUIT_OPEN, so a bookie
    that never answers costs a few deadlines, not one per entry.
    """
    work = ((p, e) for p in range(len(ledger_ids)) for e in plans[p])
    remaining = [len(plan) for plan in plans]
    outcomes: list[dict[int, str]] = [{} for _ in plans]
    errors: list[dict[int, str]] = [{} for _ in plans]
    started: list[float | None] = [None] * len(plans)
    for p, n in enumerate(remaining):
        if n == 0:
            yield p, ReadSummary(STATUS_OK, 0), None
    pending: dict[Future[Any], tuple[int, int]] = {}
    consecutive = 0
    breaker: str | None = None

    def finish(p: int) -> tuple[int, ReadSummary, CallInfo | None]:
        t0 = started[p]
        ms = None if t0 is None else (time.monotonic() - t0) * 1e3
        call = None if ms is None else CallInfo(f"{call_prefix}{bookie_id}#r{p}", ms)
        return p, summarise_reads(outcomes[p], errors[p]), call

    while True:
        while breaker is None and len(pending) < max_in_flight:
            item = next(work, None)
            if item is None:
                break
            p, entry = item
            if started[p] is None:
                started[p] = time.monotonic()
            try:
                fut: Future[Any] = client.read_entry(ledger_ids[p], entry)
            except Exception as exc:  # a client that cannot even queue the call
                fut = Future()
                fut.set_exception(BookieError("UNAVAILABLE", str(exc), bookie_id=bookie_id))
            pending[fut] = item
        if not pending:
            break
        done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
        for fut in done:
            p, entry = pending.pop(fut)
            try:
                data = fut.result()
            except BaseException as exc:
                status = exc.status if isinstance(exc, BookieError) else "UNAVAILABLE"
                outcomes[p][entry] = status
                errors[p][entry] = str(exc) or status
                if is_transport_failure(status):
                    consecutive += 1
                    if consecutive >= failure_threshold and breaker is None:
                        breaker = f"{status}: {exc}"
                        log.warning("bookie %s: %d transport failures in a row reading entries (%s); "
                                    "skipping it for now", bookie_id, consecutive, exc)
                else:
                    consecutive = 0
            else:
                consecutive = 0
                if not isinstance(data, bytes | bytearray | memoryview):
                    outcomes[p][entry] = STATUS_INVALID_RESPONSE
                    errors[p][entry] = f"not entry bytes: {type(data).__name__}"
                else:
                    pw = passwords[p] if passwords is not None else None
                    problem = verify_entry(ledger_ids[p], entry, bytes(data), digest_types[p], pw)
                    outcomes[p][entry] = STATUS_OK if problem is None else STATUS_CORRUPT
                    if problem is not None:
                        errors[p][entry] = problem
            remaining[p] -= 1
            if remaining[p] == 0:
                yield finish(p)
    if breaker is not None:
        skipped = f"not read after {failure_threshold} consecutive transport failures ({breaker})"
        for item in work:
            p, entry = item
            outcomes[p][entry] = STATUS_CIRCUIT_OPEN
            errors[p][entry] = skipped
            remaining[p] -= 1
            if remaining[p] == 0:
                yield finish(p)


EVIDENCE_LISTING = "listing"
EVIDENCE_READS = "reads"


def probe_listing(client: Any, *, timeout_s: float, ledger_id: int = 0) -> tuple[str, str]:
    """(evidence mode, why) for one bookie: does GET_LIST_OF_ENTRIES_OF_LEDGER work on it this run?

    A listing request and an entry read go out together. Any answer to the listing (entries, ENOLEDGER, even
    bytes that later fail to decode) means listing works. No answer in `timeout_s` (a Java bookie on
    DbLedgerStorage sends none) or an error status means it does not, provided the bookie answers the read
    (with anything: ENOLEDGER, ENOENTRY, an entry); a bookie that answers neither is simply unreachable and
    keeps the listing path, which reports it as such.
    """
    from concurrent.futures import TimeoutError as FutureTimeout

    def outcome(fut: Future[Any] | None) -> tuple[str | None, str]:
        """(the status of a BookKeeper answer — OK included — or None without one, what happened)."""
        if fut is None:
            return None, "could not be sent"
        try:
            fut.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            return None, f"no answer within {timeout_s:g}s"
        except BookieError as exc:
            if is_transport_failure(exc.status):
                return None, f"{exc.status}: {exc}"
            return exc.status, f"{exc.status}: {exc}"
        except Exception as exc:
            return None, f"{type(exc).__name__}: {exc}"
        return STATUS_OK, "answered"

    deadline = time.monotonic() + timeout_s
    futures: list[Future[Any] | None] = []
    for send in (lambda: client.get_list_of_entries(ledger_id), lambda: client.read_entry(ledger_id, 0)):
        try:
            futures.append(send())
        except Exception:
            futures.append(None)
    listed, why = outcome(futures[0])
    if listed in (STATUS_OK, STATUS_NO_LEDGER):
        return EVIDENCE_LISTING, "listing answered"
    alive, read_why = outcome(futures[1])
    if alive is not None:
        return EVIDENCE_READS, f"listing probe failed ({why}); reads answered"
    return EVIDENCE_LISTING, f"unreachable (listing: {why}; read: {read_why})"


def make_client(bookie_id: str, config: FanoutConfig) -> Any:
    """A BookieClient for one bookie, created inside the task (connections do not pickle)."""
    from bkaudit.rpc.client import BookieClient

    target = config.targets.get(bookie_id, bookie_id)
    return BookieClient(
        bookie_id,
        target,
        tls=config.tls,
        connect_timeout_s=config.connect_timeout_s,
        request_timeout_s=config.call_timeout_s,
        batch_listing=bookie_id in config.batch_listing,
        max_frame_bytes=config.max_frame_bytes,
    )


# -- the Spark task ------------------------------------------------------------------------------------------


class _Columns:
    """Output columns of one bookie's answers, appended to in arrival order."""

    __slots__ = (
        "answer",
        "answer_bytes",
        "call_id",
        "call_ms",
        "corrupt",
        "digest",
        "digest_type",
        "entries",
        "error",
        "ledger",
        "missing",
        "reads",
        "status",
    )

    def __init__(self) -> None:
        self.ledger: list[int] = []
        self.digest: list[bytes | None] = []
        self.entries: list[int] = []
        self.status: list[str] = []
        self.error: list[str | None] = []
        self.answer: list[bytes | None] = []
        self.call_id: list[str | None] = []
        self.call_ms: list[float | None] = []
        self.reads: list[list[int] | None] = []
        self.digest_type: list[str | None] = []
        self.missing: list[list[int] | None] = []
        self.corrupt: list[list[int] | None] = []
        self.answer_bytes: list[int | None] = []

    def __len__(self) -> int:
        return len(self.ledger)

    def batch(self, bookie_id: str, attempt: int) -> pa.RecordBatch:
        n = len(self.ledger)
        return pa.RecordBatch.from_arrays(
            [
                pa.array([bookie_id] * n, pa.string()),
                pa.array(self.ledger, pa.int64()),
                pa.array(self.digest, pa.binary()),
                pa.array(self.entries, pa.int64()),
                pa.array(self.status, pa.string()),
                pa.array(self.error, pa.string()),
                pa.array(self.answer, pa.binary()),
                pa.array(self.call_id, pa.string()),
                pa.array(self.call_ms, pa.float64()),
                pa.array([attempt] * n, pa.int32()),
                pa.array(self.reads, pa.list_(pa.int64())),
                pa.array(self.digest_type, pa.string()),
                pa.array(self.missing, pa.list_(pa.int64())),
                pa.array(self.corrupt, pa.list_(pa.int64())),
                pa.array(self.answer_bytes, pa.int64()),
            ],
            schema=RESPONSE_SCHEMA,
        )


def fanout_partition(
    config: FanoutConfig, client_factory: Callable[[str, FanoutConfig], Any] | None = None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function: REQUEST_SCHEMA batches in, RESPONSE_SCHEMA batches out.

    The partition's requests are grouped by bookie (column-wise, no per-row objects); each bookie is queried
    from its own thread so that a slow bookie sharing the partition does not hold the others back.
    """
    factory = client_factory or make_client

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        if not tables:
            return
        requests = pa.concat_tables(tables)
        groups: dict[str, tuple[list[Any], ...]] = {}
        for bookie in pc.unique(requests.column("bookie_id")).to_pylist():
            part = requests.filter(pc.equal(requests.column("bookie_id"), bookie))
            groups[bookie] = (
                part.column("ledger_id").to_pylist(),
                part.column("expected_digest").to_pylist(),
                part.column("ledger_entries").to_pylist(),
                part.column("read_entries").to_pylist(),
                part.column("digest_type").to_pylist(),
                part.column("answer_bytes").to_pylist(),
            )
        out: queue.Queue[pa.RecordBatch | BaseException | None] = queue.Queue(maxsize=64)
        prefix = f"{config.attempt}:{uuid.uuid4().hex[:8]}:"

        def worker(
            bookie_id: str,
            all_ids: list[int],
            all_digests: list[bytes | None],
            all_entries: list[int],
            all_reads: list[list[int] | None],
            all_types: list[str | None],
            all_sizes: list[int | None],
        ) -> None:
            client = None
            try:
                client = factory(bookie_id, config)
                cols = _Columns()
                by_reads = [i for i, r in enumerate(all_reads) if r is not None]
                if by_reads:  # no listing on this bookie: LedgerChecker-style reads
                    for i, summary, call in read_and_verify(
                        client,
                        bookie_id,
                        [all_ids[i] for i in by_reads],
                        [all_reads[i] or [] for i in by_reads],
                        [all_types[i] for i in by_reads],
                        max_in_flight=config.read_max_in_flight,
                        failure_threshold=config.failure_threshold,
                        call_prefix=prefix,
                    ):
                        k = by_reads[i]
                        cols.ledger.append(all_ids[k])
                        cols.digest.append(all_digests[k])
                        cols.entries.append(all_entries[k])
                        cols.call_id.append(call.call_id if call else None)
                        cols.call_ms.append(call.ms if call else None)
                        cols.status.append(summary.status)
                        cols.error.append(summary.error)
                        cols.answer.append(None)
                        cols.reads.append(all_reads[k])
                        cols.digest_type.append(all_types[k])
                        cols.missing.append(list(summary.missing))
                        cols.corrupt.append(list(summary.corrupt))
                        cols.answer_bytes.append(all_sizes[k])
                        if len(cols) >= OUTPUT_BATCH_ROWS:
                            out.put(cols.batch(bookie_id, config.attempt))
                            cols = _Columns()
                listed = [i for i, r in enumerate(all_reads) if r is None]
                ids = [all_ids[i] for i in listed]
                digests = [all_digests[i] for i in listed]
                entries = [all_entries[i] for i in listed]
                for p, value, call in ask(
                    client,
                    bookie_id,
                    ids,
                    batch_size=config.batch_size,
                    max_in_flight=config.max_in_flight,
                    failure_threshold=config.failure_threshold,
                    call_prefix=prefix,
                    sizes=[all_sizes[i] for i in listed],
                    max_call_bytes=min(config.max_call_bytes, call_budget(config.max_frame_bytes)),
                ):
                    cols.answer_bytes.append(all_sizes[listed[p]])
                    cols.reads.append(None)
                    cols.digest_type.append(all_types[listed[p]])
                    cols.missing.append(None)
                    cols.corrupt.append(None)
                    cols.ledger.append(ids[p])
                    cols.digest.append(digests[p])
                    cols.entries.append(entries[p])
                    cols.call_id.append(call.call_id if call else None)
                    cols.call_ms.append(call.ms if call else None)
                    if type(value) is bytes:
                        expected = digests[p]
                        if expected is not None and digest(value) == expected:
                            cols.status.append(STATUS_OK)
                            cols.error.append(None)
                            cols.answer.append(None)
                        else:  # differs: keep the bytes for the detailed comparison, if they decode at all
                            problem = undecodable(value)
                            cols.status.append(STATUS_OK if problem is None else STATUS_INVALID_RESPONSE)
                            cols.error.append(problem)
                            cols.answer.append(value if problem is None else None)
                    elif isinstance(value, BookieError):
                        cols.status.append(value.status)
                        cols.error.append(None if value.status == STATUS_NO_LEDGER else str(value))
                        cols.answer.append(None)
                    else:
                        cols.status.append("EBADREQ")
                        cols.error.append("the batch response has no answer for this ledger")
                        cols.answer.append(None)
                    if len(cols) >= OUTPUT_BATCH_ROWS:
                        out.put(cols.batch(bookie_id, config.attempt))
                        cols = _Columns()
                if len(cols):
                    out.put(cols.batch(bookie_id, config.attempt))
            except BaseException as exc:  # surface in the task, never lose rows silently
                out.put(exc)
            finally:
                if client is not None:
                    try:
                        client.close()
                    except Exception:
                        pass
                out.put(None)

        threads = [
            threading.Thread(target=worker, args=(b, *cols), daemon=True) for b, cols in groups.items()
        ]
        for t in threads:
            t.start()
        running = len(threads)
        while running:
            item = out.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item

    return run
