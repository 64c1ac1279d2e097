"""Bookie fan-out of the metadata checker: ask every bookie which entries it holds, in batches, on executors.

Shape of the work (ecosystem-notes.md "RPC fan-out"): the ledger pass emits one request row per (ledger,
bookie) that must hold entries; the job repartitions them by bookie and runs
`bkaudit.job.fanout_task.fanout_partition` through `mapInArrow`. Each task opens its own native connection
per bookie inside the function (connections neither pickle nor survive a fork) and sends ONE GetListOfEntries
per (ledger, bookie), at most `batch_size` ledgers and half a frame of expected answer bytes per call
(`audit.batching`: a 50,000-entry ledger's listing is about 400 KB): one batch message to bookies that
advertised the batch operation, standard per-ledger requests pipelined to any other, with at most
`max_in_flight` calls outstanding per bookie.

Healthy answers cost almost nothing: the ledger pass attached to each request the digest of the canonical
encoding (`availability.encode_runs`, byte-identical to BookKeeper's encoder) of exactly the entries the
bookie must hold. An answer with that digest holds those entries and no others, so it needs no decoding. Any
other answer keeps its raw bytes in the row; the per-ledger combine step decodes it and computes missing and
extra ranges with group arithmetic. ENOLEDGER and failures travel as statuses.

The calls are read-only, so a task Spark re-runs only repeats harmless reads; the job writes this stage's
output to staging files immediately, so downstream stages never trigger the calls again.

A bookie that fails at the transport level `failure_threshold` times in a row is not called again by this
task (its remaining ledgers are marked CIRCUIT_OPEN at once): a frozen bookie would otherwise cost one full
deadline per batch. The job's delayed retry (BP-34's re-check) gives it a fresh chance. A bookie that keeps
answering while some listings time out, if only late, is overloaded, not frozen: `ask` halves the listings
in flight, waits for the stale ones to drain, and asks the timed-out ledgers again (as BookKeeper's
replicasCheck waits on its 100 ledgers in flight) instead of giving up on it.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa
from xxhash import xxh3_128_digest

from bkaudit.audit.batching import answer_bytes, call_budget, plan_calls
from bkaudit.audit.evidence import BookieEvidence, compare_bookie, failed_evidence
from bkaudit.audit.expected import checked_segments
from bkaudit.audit.reads import (
    ReadSummary,
    read_evidence,
)
from bkaudit.audit.statuses import (
    STATUS_BAD_REQUEST,
    STATUS_CIRCUIT_OPEN,
    STATUS_INVALID_RESPONSE,
    STATUS_NO_LEDGER,
    STATUS_OK,
    STATUS_UNAVAILABLE,
    is_transport_failure,
)
from bkaudit.errors import BookieError, FormatError
from bkaudit.formats.availability import decode, encode_segment_stripings
from bkaudit.job.breaker import Breaker
from bkaudit.model.quorum import Striping, entries_of_bookie
from bkaudit.model.shape import LedgerShape
from bkaudit.rpc.client import BookieClient
from bkaudit.rpc.listing import confirm_tail

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
        pa.field("last_entry", pa.int64()),
    ]
)
"""One row per (ledger, bookie) to ask. `expected_digest`: digest of the canonical encoding of what the
bookie must hold (null = always compare in detail); `ledger_entries` (entries checked) is set on one row per
ledger, 0 on the others. `read_entries` set (a bookie without listing): verify by reading these entries
(`bkaudit.audit.reads`) and checking each one's `digest_type` digest instead of asking for the list.
`answer_bytes`: the size of a healthy answer (`audit.batching`), by which listing calls are cut (null: 0).
`last_entry`: the highest entry the bookie must hold, read when a listing lacks it and stops short of it
(`formats.availability.listing_may_hide`: Java's interleaved index can hide it; null: none)."""

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
        pa.field("last_entry", pa.int64()),
    ]
)
"""One row per (ledger, bookie) asked. status OK with a null `answer`: exactly the expected entries. status OK
with `answer`: something differs, the bytes are compared in detail downstream. ENOLEDGER: holds nothing.
Anything else: not verified (UNAVAILABLE, CIRCUIT_OPEN, EIO, ...), `error` says why. Rows verified by reads
(`read_entries` set) carry, with status OK, the entries proven missing (ENOENTRY) and corrupt. `answer_bytes`
is the request's, so the delayed retry can re-select the request columns from failed responses."""

DIGEST_MAX_RUNS = 1 << 21
"""Above this many expected runs (a 48 MiB answer, beyond any response frame) the digest is not computed: the
answer is compared in detail instead."""
CALL_BYTES = call_budget(5 * 1024 * 1024)
"""Expected answer bytes per listing call: half of BookKeeper's default frame (nettyMaxFrameSizeBytes), which
the task's clients apply to every response."""


def digest(data: bytes) -> bytes:
    """XXH3-128 of the bytes: equal digests mean equal bytes (no accidental collisions, unlike a CRC).

    Every healthy answer is hashed once by the fan-out and every expected one once by the ledger pass (17 GB
    of each at a million realistic ledgers). The digest only has to catch accidental differences: a bookie
    that wanted to deceive the check would not need a collision, it would send the expected listing. So a
    fast non-cryptographic 128-bit hash does the job: 1.1 µs for a 130 KB answer, against 70 µs for the
    SHA-256 used before (with the CPU's SHA instructions; docs/performance.md, "Metadata checker").
    """
    return xxh3_128_digest(data)


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

    @property
    def call_bytes(self) -> int:
        """Expected answer bytes planned into one listing call: within the budget and half the frame."""
        return min(self.max_call_bytes, call_budget(self.max_frame_bytes))


# -- rows <-> value objects ----------------------------------------------------------------------------------


def shape_of(row: Mapping[str, Any]) -> LedgerShape:
    """A LedgerShape from a row of SHAPE_SCHEMA."""
    return LedgerShape.of(
        ledger_id=row["ledger_id"],
        ensemble_size=row["ensemble_size"],
        write_quorum=row["write_quorum"],
        ack_quorum=row["ack_quorum"],
        state=row.get("state"),
        last_entry_id=row["last_entry_id"],
        segments=(
            (s["segment_index"], s["first_entry_id"], s["ensemble"] or ()) for s in row.get("segments") or ()
        ),
        version=row.get("znode_version"),
    )


class Expectation(NamedTuple):
    """What one bookie must hold of one ledger, as a listing request carries it."""

    digest: bytes | None  # of the canonical encoding (None: too many runs, always compare in detail)
    size: int  # the healthy answer's bytes, by which listing calls are cut
    last_entry: int | None  # the highest entry it must hold: a listing may hide it (rpc.listing.confirm_tail)


class ExpectedDigests:
    """Digests of the canonical encoding of each bookie's expected entries, memoised twice.

    By layout (E, WQ and the checked segments' spans): which bookie index must hold which striping; and by
    striping set: the digest and the healthy answer's size. Ledgers of one workload repeat a handful of
    layouts (uniform ledger lengths), so a ledger costs a few dictionary lookups there; where every ledger
    has its own length, each (ledger, bookie) is encoded and hashed once, and the per-ledger bookkeeping
    around it is kept to building each Striping once.
    """

    MEMO_LIMIT = 100_000

    def __init__(self) -> None:
        self._plans: dict[tuple[Any, ...], list[list[tuple[int, _Key, Striping]]]] = {}
        self._known: dict[tuple[_Key, ...], Expectation] = {}

    def expected(self, shape: LedgerShape) -> tuple[dict[str, bytes | None], int]:
        """({bookie: digest or None}, entries checked) — bookies in `expected_by_bookie` order."""
        wanted, n = self.expected_requests(shape)
        return {bookie: x.digest for bookie, x in wanted.items()}, n

    def expected_requests(self, shape: LedgerShape) -> tuple[dict[str, Expectation], int]:
        """({bookie: its Expectation}, entries checked) — `expected`'s order."""
        spans = checked_segments(shape)
        e, wq = shape.ensemble_size, shape.write_quorum
        key = (e, wq, tuple((sp.first, sp.last) for sp in spans))
        plan = self._plans.get(key)
        if plan is None:
            plan = [self._bookie_stripings(sp.first, sp.last, e, wq) for sp in spans]
            if len(self._plans) < self.MEMO_LIMIT:
                self._plans[key] = plan
        out: dict[str, Expectation] = {}
        if len(spans) == 1 and len(set(spans[0].ensemble)) == e:
            # one checked segment of distinct bookies (most ledgers): one striping each, nothing to group
            ensemble = spans[0].ensemble
            for idx, skey, striping in plan[0]:
                out[ensemble[idx]] = self._expect((skey,), (striping,))
            return out, spans[0].last - spans[0].first + 1
        by_bookie: dict[str, list[tuple[_Key, Striping]]] = {}
        for sp, per in zip(spans, plan, strict=True):
            ensemble = sp.ensemble
            for idx, skey, striping in per:
                by_bookie.setdefault(ensemble[idx], []).append((skey, striping))
        for bookie, held in by_bookie.items():
            out[bookie] = self._expect(tuple(k for k, _ in held), [s for _, s in held])
        return out, sum(sp.last - sp.first + 1 for sp in spans)

    @staticmethod
    def _bookie_stripings(first: int, last: int, e: int, wq: int) -> list[tuple[int, _Key, Striping]]:
        """(bookie index, memo key, striping) of every index that must hold entries of [first, last]."""
        per = []
        whole_period = last - first + 1 >= e  # then every index holds WQ ids of each period: no count needed
        for idx in range(e):
            st = entries_of_bookie(idx, first, last, e, wq)
            if whole_period or st.count() > 0:
                per.append((idx, (st.first, st.last, st.start, st.period, st.size), st))
        return per

    def _expect(self, key: tuple[_Key, ...], stripings: Sequence[Striping]) -> Expectation:
        """The Expectation of a bookie holding exactly `stripings`, memoised."""
        hit = self._known.get(key)
        if hit is None:
            last = max((held for s in stripings if (held := s.last_held()) is not None), default=None)
            hit = Expectation(self._digest_of(stripings), answer_bytes(stripings), last)
            if len(self._known) < self.MEMO_LIMIT:
                self._known[key] = hit
        return hit

    @staticmethod
    def _digest_of(stripings: Sequence[Striping]) -> bytes | None:
        if sum(s.run_count() for s in stripings) > DIGEST_MAX_RUNS:
            return None
        return digest(encode_segment_stripings(stripings))


_Key = tuple[int, int, int, int, int]
"""A striping as a memo key: (first, last, start, period, size)."""


def judge_answer(shape: LedgerShape, bookie_id: str, value: bytes | BaseException | None) -> BookieEvidence:
    """Evidence from one ledger's answer: availability bytes, a BookieError, or nothing at all."""
    if value is None:
        return failed_evidence(
            bookie_id, STATUS_BAD_REQUEST, "the batch response has no answer for this ledger"
        )
    if isinstance(value, BookieError):
        if value.status == STATUS_NO_LEDGER:
            return compare_bookie(shape, bookie_id, None)
        return failed_evidence(bookie_id, value.status, str(value))
    if isinstance(value, BaseException):
        return failed_evidence(bookie_id, STATUS_UNAVAILABLE, f"{type(value).__name__}: {value}")
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


@dataclass
class Pace:
    """How many listings `ask` keeps in flight to one bookie, carried over the calls of a fan-out task's
    chunks: a bookie found slow in one chunk starts the next at the window it had come down to."""

    window: int | None = None


SLOW_RETRIES = 3
"""Times a ledger whose listing timed out on a bookie that kept answering is asked again, with fewer listings
in flight, before its timeout is reported."""
POLL_S = 0.05
"""How often `ask` looks at the client's backlog while it waits for stale requests to drain."""


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
    breaker: Breaker | None = None,
    pace: Pace | None = None,
) -> Iterator[tuple[int, bytes | BookieError | None, CallInfo | None]]:
    """Raw answers for `ledger_ids` (by position): one call per at most `batch_size` ids and `max_call_bytes`
    expected answer bytes (`sizes`, by position; `audit.batching.plan_calls`), with at most
    `max_in_flight` x `batch_size` listings outstanding (`batch_size` to a bookie without the batch operation,
    which serves each listing as its own request: BookKeeper's replicasCheck keeps 100 ledgers in flight in
    all).

    Every position is yielded exactly once: bytes, a BookieError (per ledger, or the whole call's failure,
    CIRCUIT_OPEN for ids not asked after the breaker opened), or None when the answer lacks that ledger.
    `breaker` and `pace`: the bookie's, when they span more than this call (a fan-out task's chunks).

    A slow bookie is not a dead one. A listing that timed out while the bookie sent anything after the call
    went out (another call's answer, or a late answer to an expired request: the client's `last_heard`) is
    queueing, not gone. Its ledgers are asked again, up to SLOW_RETRIES times, with half the listings in
    flight (a quarter of a call more after each clean answer), and the breaker is not told. The window
    counts listings, not calls, because a Java bookie serves a gathered call as that many requests; and it
    counts the client's `backlog` too, the timed-out requests the bookie still has to work through, since a
    retry sent behind them would only time out again. A bookie that sends nothing after a call went out
    (frozen, unreachable) fails that call as before, and `failure_threshold` of those open the breaker; calls
    that were in flight together through one silence count once (the others are asked again), so the
    breaker needs that many timeouts of silence one after another, not one timeout and a crowd of calls.
    """
    expected = [s or 0 for s in sizes] if sizes is not None else [0] * len(ledger_ids)
    chunks = iter(plan_calls(expected, max_bytes=max_call_bytes, max_count=batch_size))
    pending: dict[Future[Any], tuple[list[int], float, str, int]] = {}
    state = breaker if breaker is not None else Breaker(bookie_id, failure_threshold)
    per_listing = not getattr(client, "batch_listing", True)  # a Java bookie: one request per ledger
    most = max(1, batch_size if per_listing else max_in_flight * batch_size)
    pace = pace if pace is not None else Pace()
    window = min(most, pace.window or most)  # listings
    in_flight = 0
    again: deque[tuple[list[int], int]] = deque()  # (positions, times asked) of timed-out ledgers
    last_answer = float("-inf")
    counted_at = float("-inf")  # when the last transport failure was counted towards the breaker
    number = 0
    while True:
        while not state.open:
            if again:
                chunk, asked = again.popleft()
            else:
                planned = next(chunks, None)
                if planned is None:
                    break
                chunk, asked = planned, 0
            room = window - in_flight - _backlog(client)
            if room <= 0:
                if pending:
                    again.appendleft((chunk, asked))
                    break
                _await_backlog(client, window)
                room = window - _backlog(client)
            room = max(room, 1)
            if len(chunk) > room:  # the window is narrower than the planned call: ask the rest next
                again.appendleft((chunk[room:], asked))
                chunk = chunk[:room]
            number += 1
            call_id = f"{call_prefix}{bookie_id}#{number}"
            try:
                fut: Future[Any] = client.get_list_of_entries_batch([ledger_ids[p] for p in chunk])
            except Exception as exc:  # a client that cannot even queue the call
                fut = Future()
                fut.set_exception(BookieError(STATUS_UNAVAILABLE, str(exc), bookie_id=bookie_id))
            pending[fut] = (chunk, time.monotonic(), call_id, asked)
            in_flight += len(chunk)
        if not pending:
            break
        poll = POLL_S if _backlog(client) else None  # the backlog drains without any future of ours finishing
        done, _ = wait(list(pending), timeout=poll, return_when=FIRST_COMPLETED)
        for fut in done:
            chunk, started, call_id, asked = pending.pop(fut)
            in_flight -= len(chunk)
            call = CallInfo(call_id, (time.monotonic() - started) * 1000.0)
            try:
                answers = fut.result()
            except BaseException as exc:
                status = exc.status if isinstance(exc, BookieError) else STATUS_UNAVAILABLE
                heard = max(last_answer, _last_heard(client))
                transport = is_transport_failure(status)
                # queueing (the bookie sent something since), or in flight through a silence already counted
                if transport and asked < SLOW_RETRIES and (heard > started or started <= counted_at):
                    window = _slower(bookie_id, window, status)
                    again.append((chunk, asked + 1))
                    continue
                if transport:
                    counted_at = time.monotonic()
                error = (
                    exc
                    if isinstance(exc, BookieError)
                    else BookieError(status, str(exc), bookie_id=bookie_id)
                )
                state.failed(status, exc, doing="listing entries")
                for p in chunk:
                    yield p, error, call
                continue
            state.answered()
            last_answer = time.monotonic()
            if not isinstance(answers, Mapping):
                bad = BookieError(STATUS_INVALID_RESPONSE, "not a batch answer", bookie_id=bookie_id)
                for p in chunk:
                    yield p, bad, call
                continue
            get = answers.get
            timed_out = []
            for p in chunk:
                value = get(ledger_ids[p])
                if (asked < SLOW_RETRIES and isinstance(value, BookieError)
                        and is_transport_failure(value.status)):
                    timed_out.append(p)  # the rest of its call was answered: queueing, not gone
                    continue
                yield p, value, call
            if timed_out:
                window = _slower(bookie_id, window, "UNAVAILABLE")
                again.append((timed_out, asked + 1))
            else:
                window = min(most, window + max(1, len(chunk) // 4))
        pace.window = window
    if state.open:
        skipped = BookieError(STATUS_CIRCUIT_OPEN, state.skipped("asked"), bookie_id=bookie_id)
        for chunk in itertools.chain((c for c, _ in again), chunks):
            for p in chunk:
                yield p, skipped, None


def _backlog(client: Any) -> int:
    """The client's count of timed-out requests the bookie has not answered yet (0 for clients without)."""
    return int(getattr(client, "backlog", 0))


def _last_heard(client: Any) -> float:
    """When the bookie last sent any frame (-inf for clients that do not say)."""
    return float(getattr(client, "last_heard", float("-inf")))


def _await_backlog(client: Any, window: int) -> None:
    """With nothing of ours in flight, wait until the bookie's stale backlog leaves room in the window, or
    until it has been silent for a whole request timeout (it may have dropped those requests: the next call
    then succeeds or fails on its own, and a frozen bookie still meets the breaker)."""
    silent_after = float(getattr(client, "request_timeout_s", 0.0))
    while _backlog(client) >= window:
        if time.monotonic() - _last_heard(client) > silent_after:
            return
        time.sleep(POLL_S)


def _slower(bookie_id: str, window: int, status: str) -> int:
    """Half the listings in flight (at least one) after a timeout on a bookie that still answers."""
    if window > 1:
        log.info("bookie %s answers but some listings timed out (%s): %d listings in flight, was %d",
                 bookie_id, status, max(1, window // 2), window)
    return max(1, window // 2)


def query_bookie(
    client: Any,
    bookie_id: str,
    shapes: Sequence[LedgerShape],
    *,
    batch_size: int,
    max_in_flight: int,
    failure_threshold: int,
    call_prefix: str = "",
    max_call_bytes: int = CALL_BYTES,
    read_timeout_s: float = 15.0,
) -> Iterator[tuple[LedgerShape, BookieEvidence, CallInfo | None]]:
    """Ask one bookie about `shapes` and judge every answer in detail (driver-side re-evaluation); calls
    are cut by the healthy answer bytes, as in the fan-out."""
    ids = [s.ledger_id for s in shapes]
    memo = ExpectedDigests()
    wanted = [memo.expected_requests(s)[0].get(bookie_id) for s in shapes]
    sizes = [x.size if x else 0 for x in wanted]
    for p, value, call in ask(
        client,
        bookie_id,
        ids,
        batch_size=batch_size,
        max_in_flight=max_in_flight,
        failure_threshold=failure_threshold,
        call_prefix=call_prefix,
        sizes=sizes,
        max_call_bytes=max_call_bytes,
    ):
        x = wanted[p]
        if type(value) is bytes and x is not None and (x.digest is None or digest(value) != x.digest):
            value = confirm_tail(client, ids[p], value, x.last_entry, timeout_s=read_timeout_s)
        yield shapes[p], judge_answer(shapes[p], bookie_id, value), call


def make_client(bookie_id: str, config: FanoutConfig) -> Any:
    """A BookieClient for one bookie, created inside the task (connections do not pickle)."""
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
