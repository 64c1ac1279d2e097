"""Bookie fan-out of the metadata checker: ask every bookie which entries it holds, in batches, on executors.

Shape of the work (ecosystem-notes.md "RPC fan-out"): the driver builds one request row per (ledger, bookie)
that must hold entries, repartitions them by bookie and runs `fanout_partition` through `mapInArrow`. Each
task opens its own gRPC channel per bookie inside the function (channels neither pickle nor survive a fork)
and sends ONE GetListOfEntries per (ledger, bookie), packed `batch_size` ledgers per message through the
bookie's batch operation, with at most `max_in_flight` messages outstanding per bookie. Answers are decoded
and compared with the expected stripings right there (`bkaudit.audit.durability.compare_bookie`), so only
small evidence rows travel back: missing ranges, extra ranges, status.

The calls are read-only, so a task Spark re-runs only repeats harmless reads; the job writes this stage's
output to staging files immediately, so downstream stages never trigger the calls again.

A bookie that fails at the transport level `failure_threshold` times in a row is not called again by this
task (its remaining ledgers are marked CIRCUIT_OPEN at once): a frozen bookie would otherwise cost one full
deadline per batch. The job's delayed retry (BP-34's re-check) gives it a fresh chance.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from bkaudit.audit.availability import (
    STATUS_CIRCUIT_OPEN,
    STATUS_INVALID_RESPONSE,
    is_transport_failure,
)
from bkaudit.audit.durability import (
    STATUS_NO_LEDGER,
    BookieEvidence,
    LedgerShape,
    MissingRun,
    compare_bookie,
    failed_evidence,
)
from bkaudit.errors import BookieError, FormatError
from bkaudit.model.ledger import Segment
from bkaudit.tables.checker_schemas import RANGE_STRUCT

log = logging.getLogger(__name__)

SEGMENT_STRUCT = pa.struct(
    [
        pa.field("segment_index", pa.int32()),
        pa.field("first_entry_id", pa.int64()),
        pa.field("ensemble", pa.list_(pa.string())),
    ]
)

SHAPE_FIELDS = [
    pa.field("ledger_id", pa.int64(), nullable=False),
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
        pa.field("bookie_id", pa.string(), nullable=False),
        *SHAPE_FIELDS,
        pa.field("ledger_entries", pa.int64()),
    ]
)
"""One row per (ledger, bookie) to ask; `ledger_entries` (entries checked) is set on one row per ledger."""

MISSING_STRUCT = pa.struct(
    [
        pa.field("segment_index", pa.int32()),
        pa.field("bookie_index", pa.int32()),
        pa.field("count", pa.int64()),
        pa.field("ranges", pa.list_(RANGE_STRUCT)),
    ]
)

RESPONSE_SCHEMA = pa.schema(
    [
        *REQUEST_SCHEMA,
        pa.field("status", pa.string()),
        pa.field("error", pa.string()),
        pa.field("missing", pa.list_(MISSING_STRUCT)),
        pa.field("missing_count", pa.int64()),
        pa.field("extra", pa.list_(RANGE_STRUCT)),
        pa.field("extra_count", pa.int64()),
        pa.field("call_id", pa.string()),
        pa.field("call_ms", pa.float64()),
        pa.field("attempt", pa.int32()),
    ]
)
"""One row per (ledger, bookie) answered (or failed), with the call it travelled in."""

OUTPUT_BATCH_ROWS = 4096


@dataclass(frozen=True)
class FanoutConfig:
    """Everything a fan-out task needs; picklable (shipped to executors in the mapInArrow closure)."""

    targets: Mapping[str, str]
    batch_size: int = 500
    max_in_flight: int = 4
    call_timeout_s: float = 15.0
    connect_timeout_s: float = 5.0
    failure_threshold: int = 2
    attempt: int = 0
    tls: Any = None
    extra: Mapping[str, Any] = field(default_factory=dict)


# -- row <-> value objects -----------------------------------------------------------------------------------


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
    """The SHAPE_SCHEMA row of a LedgerShape (driver-side re-evaluation builds rows this way)."""
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


def evidence_columns(ev: BookieEvidence) -> dict[str, Any]:
    """The RESPONSE_SCHEMA columns describing one piece of evidence."""
    return {
        "status": ev.status,
        "error": ev.error,
        "missing": [
            {
                "segment_index": m.segment_index,
                "bookie_index": m.bookie_index,
                "count": m.count,
                "ranges": [{"first": lo, "last": hi} for lo, hi in m.ranges],
            }
            for m in ev.missing
        ],
        "missing_count": ev.missing_count,
        "extra": [{"first": lo, "last": hi} for lo, hi in ev.extra],
        "extra_count": ev.extra_count,
    }


def evidence_of(row: Mapping[str, Any]) -> BookieEvidence:
    """Back from a RESPONSE_SCHEMA row to the value object the audit checks consume."""
    missing = tuple(
        MissingRun(
            int(m["segment_index"]),
            int(m["bookie_index"]),
            tuple((int(r["first"]), int(r["last"])) for r in m["ranges"] or ()),
            int(m["count"]),
        )
        for m in row.get("missing") or ()
    )
    extra = tuple((int(r["first"]), int(r["last"])) for r in row.get("extra") or ())
    return BookieEvidence(
        bookie_id=str(row["bookie_id"]),
        status=str(row["status"]),
        missing=missing,
        extra=extra,
        extra_count=int(row.get("extra_count") or 0),
        error=row.get("error"),
    )


# -- talking to one bookie -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallInfo:
    """The batch call an answer travelled in (for bookie_checks: calls, latency percentiles)."""

    call_id: str
    ms: float


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
    """Ask one bookie about `shapes`, one batch message per `batch_size` ledgers, bounded in flight.

    Yields every shape exactly once with its evidence: nothing is dropped, failures are evidence too.
    """
    chunks = iter([shapes[i : i + batch_size] for i in range(0, len(shapes), batch_size)])
    pending: dict[Future[Any], tuple[Sequence[LedgerShape], float, str]] = {}
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
                fut: Future[Any] = client.get_list_of_entries_batch([s.ledger_id for s in chunk])
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
                for shape in chunk:
                    yield shape, failed_evidence(bookie_id, status, str(exc)), call
                continue
            consecutive = 0
            if not isinstance(answers, Mapping):
                for shape in chunk:
                    yield (
                        shape,
                        failed_evidence(bookie_id, STATUS_INVALID_RESPONSE, "not a batch answer"),
                        call,
                    )
                continue
            for shape in chunk:
                yield shape, judge_answer(shape, bookie_id, answers.get(shape.ledger_id)), call
    if breaker is not None:
        reason = f"not asked after {failure_threshold} consecutive transport failures ({breaker})"
        for chunk in chunks:
            for shape in chunk:
                yield shape, failed_evidence(bookie_id, STATUS_CIRCUIT_OPEN, reason), None


def make_client(bookie_id: str, config: FanoutConfig) -> Any:
    """A BookieClient for one bookie, created inside the task (gRPC channels do not pickle)."""
    from bkaudit.rpc.client import BookieClient

    target = config.targets.get(bookie_id, bookie_id)
    return BookieClient(
        bookie_id,
        target,
        tls=config.tls,
        connect_timeout_s=config.connect_timeout_s,
        request_timeout_s=config.call_timeout_s,
    )


# -- the Spark task ------------------------------------------------------------------------------------------


def fanout_partition(
    config: FanoutConfig, client_factory: Callable[[str, FanoutConfig], Any] | None = None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function: REQUEST_SCHEMA batches in, RESPONSE_SCHEMA batches out.

    The partition's requests are grouped by bookie; each bookie is queried from its own thread so that a
    slow bookie sharing the partition does not hold the others back. Output rows are streamed in batches.
    """
    factory = client_factory or make_client

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        by_bookie: dict[str, list[dict[str, Any]]] = {}
        for batch in batches:
            for row in batch.to_pylist():
                by_bookie.setdefault(row["bookie_id"], []).append(row)
        if not by_bookie:
            return
        out: queue.Queue[dict[str, Any] | BaseException | None] = queue.Queue(maxsize=OUTPUT_BATCH_ROWS * 4)
        prefix = f"{config.attempt}:{uuid.uuid4().hex[:8]}:"

        def worker(bookie_id: str, rows: list[dict[str, Any]]) -> None:
            client = None
            try:
                client = factory(bookie_id, config)
                shapes = [shape_of(r) for r in rows]
                by_id = {r["ledger_id"]: r for r in rows}
                for shape, ev, call in query_bookie(
                    client,
                    bookie_id,
                    shapes,
                    batch_size=config.batch_size,
                    max_in_flight=config.max_in_flight,
                    failure_threshold=config.failure_threshold,
                    call_prefix=prefix,
                ):
                    row = dict(by_id[shape.ledger_id])
                    row.update(evidence_columns(ev))
                    row["call_id"] = call.call_id if call else None
                    row["call_ms"] = call.ms if call else None
                    row["attempt"] = config.attempt
                    out.put(row)
            except BaseException as exc:  # surface in the task, never lose rows silently
                out.put(exc)
            finally:
                if client is not None:
                    try:
                        client.close()
                    except Exception:
                        pass
                out.put(None)

        threads = [threading.Thread(target=worker, args=item, daemon=True) for item in by_bookie.items()]
        for t in threads:
            t.start()
        running = len(threads)
        buffer: list[dict[str, Any]] = []
        while running:
            item = out.get()
            if item is None:
                running -= 1
                continue
            if isinstance(item, BaseException):
                raise item
            buffer.append(item)
            if len(buffer) >= OUTPUT_BATCH_ROWS:
                yield pa.RecordBatch.from_pylist(buffer, schema=RESPONSE_SCHEMA)
                buffer = []
        if buffer:
            yield pa.RecordBatch.from_pylist(buffer, schema=RESPONSE_SCHEMA)

    return run


def chunked(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Lists of at most `size` items."""
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
