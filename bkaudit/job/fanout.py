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

Here: the rows' schemas, the task's configuration and the judging of answers. What each bookie must hold is
bkaudit.job.expected's; the calls to one bookie, their pacing and breaker, bkaudit.job.bookie_calls's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from bkaudit.audit.batching import call_budget
from bkaudit.audit.evidence import BookieEvidence, compare_bookie, failed_evidence
from bkaudit.audit.reads import (
    ReadSummary,
    read_evidence,
)
from bkaudit.audit.statuses import (
    STATUS_BAD_REQUEST,
    STATUS_INVALID_RESPONSE,
    STATUS_NO_LEDGER,
    STATUS_OK,
    STATUS_UNAVAILABLE,
)
from bkaudit.errors import BookieError, FormatError
from bkaudit.formats.availability import decode
from bkaudit.job.bookie_calls import CALL_BYTES, CallInfo, ask
from bkaudit.job.expected import ExpectedDigests, digest
from bkaudit.model.shape import LedgerShape
from bkaudit.rpc.client import BookieClient
from bkaudit.rpc.listing import confirm_tail

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
