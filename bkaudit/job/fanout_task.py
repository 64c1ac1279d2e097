"""The fan-out task (`mapInArrow` on the executors): REQUEST_SCHEMA batches in, RESPONSE_SCHEMA batches out.

A partition's requests are served in chunks of about TASK_CHUNK_REQUESTS, so a task's memory does not grow
with the cluster (one task per core gets millions of requests at 1M ledgers). A chunk's requests are grouped
by bookie; each bookie is served from its own thread so that a slow bookie sharing the task does not hold the
others back, and keeps across the chunks what the task learnt about it (`_Bookie`): its circuit breaker
(`bkaudit.job.breaker`), its pace (`job.bookie_calls.Pace`) and its client. A bookie found slow in one chunk
is not flooded at the next, and the requests it still works on stay counted (the client's backlog, late
answers as signs of life); a fresh connection per chunk lost both, and at 100,000 ledgers every Java
bookie's breaker opened at the first chunk boundary. The threads hand
finished batches to the task's iterator through a bounded queue. Spark may close that iterator early (a
failed or cancelled task; Python workers are reused), and any worker may fail: either way every worker is
told to stop, the clients are closed (which fails their pending calls at once) and the threads are joined
before the iterator returns. Nothing is left blocked on a full queue with its connections open.
"""

from __future__ import annotations

import logging
import queue
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bkaudit.audit.statuses import STATUS_BAD_REQUEST, STATUS_INVALID_RESPONSE, STATUS_NO_LEDGER, STATUS_OK
from bkaudit.errors import BookieError
from bkaudit.job.bookie_calls import Pace, ask
from bkaudit.job.breaker import Breaker
from bkaudit.job.expected import digest
from bkaudit.job.fanout import RESPONSE_SCHEMA, FanoutConfig, make_client, undecodable
from bkaudit.job.read_evidence import read_and_verify
from bkaudit.rpc.listing import confirm_tail

log = logging.getLogger(__name__)

OUTPUT_BATCH_ROWS = 8192
TASK_CHUNK_REQUESTS = 50_000
"""Requests served at once by a task: a chunk's requests are held as Python lists (~200 bytes each)."""
QUEUE_BATCHES = 64
"""Finished batches waiting for the task's iterator (bounds the memory of a slow consumer)."""
POLL_S = 0.1
"""How often a worker blocked on a full queue looks whether it was told to stop."""
JOIN_GRACE_S = 5.0
"""Beyond the call timeout, how long closing the task waits for a worker before logging it as stuck."""


class Cancelled(Exception):
    """The task's iterator was closed or another worker failed: stop serving this bookie."""


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
        "last_entry",
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
        self.last_entry: list[int | None] = []

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
                pa.array(self.last_entry, pa.int64()),
            ],
            schema=RESPONSE_SCHEMA,
        )


@dataclass(frozen=True)
class BookieWork:
    """One bookie's requests in this task (columns of REQUEST_SCHEMA, in request order)."""

    bookie_id: str
    ledger_ids: list[int]
    digests: list[bytes | None]
    entries: list[int]
    reads: list[list[int] | None]
    digest_types: list[str | None]
    sizes: list[int | None]
    """Healthy answer bytes per request (`answer_bytes`), by which listing calls are cut."""
    last_entries: list[int | None]
    """The highest entry the bookie must hold, per request (`last_entry`)."""


def group_by_bookie(requests: pa.Table) -> list[BookieWork]:
    """Column-wise split of a task's requests by bookie (no per-row objects)."""
    out = []
    for bookie in pc.unique(requests.column("bookie_id")).to_pylist():
        part = requests.filter(pc.equal(requests.column("bookie_id"), bookie))
        out.append(
            BookieWork(
                bookie,
                part.column("ledger_id").to_pylist(),
                part.column("expected_digest").to_pylist(),
                part.column("ledger_entries").to_pylist(),
                part.column("read_entries").to_pylist(),
                part.column("digest_type").to_pylist(),
                part.column("answer_bytes").to_pylist(),
                part.column("last_entry").to_pylist(),
            )
        )
    return out


class _Channel:
    """The bounded queue between the workers and the task's iterator, with cancellation."""

    def __init__(self) -> None:
        self.queue: queue.Queue[pa.RecordBatch | BaseException | None] = queue.Queue(maxsize=QUEUE_BATCHES)
        self.cancelled = threading.Event()
        self._clients: list[Any] = []
        self._lock = threading.Lock()

    def put(self, item: pa.RecordBatch | BaseException | None) -> None:
        """Block while the queue is full, but never past cancellation (raises Cancelled then)."""
        while True:
            if self.cancelled.is_set():
                raise Cancelled
            try:
                self.queue.put(item, timeout=POLL_S)
                return
            except queue.Full:
                continue

    def opened(self, client: Any) -> None:
        with self._lock:
            if self.cancelled.is_set():
                _close(client)
                raise Cancelled
            self._clients.append(client)

    def cancel(self) -> None:
        """Stop every worker: closing the clients fails their pending calls at once."""
        self.cancelled.set()
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            _close(client)


def _close(client: Any) -> None:
    try:
        client.close()
    except Exception:
        pass


@dataclass
class _Bookie:
    """What a task keeps about one bookie across its chunks."""

    breaker: Breaker
    pace: Pace
    client: Any = None
    """Opened by the bookie's first chunk, closed when the task ends (or is cancelled)."""


def _serve(
    work: BookieWork,
    config: FanoutConfig,
    factory: Callable[[str, FanoutConfig], Any],
    channel: _Channel,
    prefix: str,
    bookie: _Bookie,
) -> None:
    """One bookie's worker: its answers as RESPONSE_SCHEMA batches into the channel, then None."""
    try:
        if bookie.client is None:
            bookie.client = factory(work.bookie_id, config)
        channel.opened(bookie.client)
        link = _Link(work, config, bookie.client, prefix, channel, bookie.breaker, bookie.pace)
        cols = _by_listing(link, _by_reads(link, _Columns()))
        if len(cols):
            channel.put(cols.batch(work.bookie_id, config.attempt))
        channel.put(None)
    except Cancelled:
        pass
    except BaseException as exc:  # surface in the task, never lose rows silently
        try:
            channel.put(exc)
        except Cancelled:
            pass


@dataclass(frozen=True)
class _Link:
    """One bookie's worker: its requests, the task's settings and what it talks and reports through."""

    work: BookieWork
    config: FanoutConfig
    client: Any
    prefix: str
    channel: _Channel
    breaker: Breaker
    pace: Pace

    def flush(self, cols: _Columns) -> _Columns:
        """Hand a full output batch to the task's iterator (and stop here if the task was cancelled)."""
        if self.channel.cancelled.is_set():
            raise Cancelled
        if len(cols) >= OUTPUT_BATCH_ROWS:
            self.channel.put(cols.batch(self.work.bookie_id, self.config.attempt))
            return _Columns()
        return cols


def _by_reads(link: _Link, cols: _Columns) -> _Columns:
    """Requests with `read_entries` (no listing on this bookie): LedgerChecker-style reads."""
    work, config = link.work, link.config
    picked = [i for i, r in enumerate(work.reads) if r is not None]
    if not picked:
        return cols
    for i, summary, call in read_and_verify(
        link.client,
        work.bookie_id,
        [work.ledger_ids[k] for k in picked],
        [work.reads[k] or [] for k in picked],
        [work.digest_types[k] for k in picked],
        max_in_flight=config.read_max_in_flight,
        failure_threshold=config.failure_threshold,
        call_prefix=link.prefix,
        breaker=link.breaker,
    ):
        k = picked[i]
        cols.ledger.append(work.ledger_ids[k])
        cols.digest.append(work.digests[k])
        cols.entries.append(work.entries[k])
        cols.call_id.append(call.call_id if call else None)
        cols.call_ms.append(call.ms if call else None)
        cols.status.append(summary.status)
        cols.error.append(summary.error)
        cols.answer.append(None)
        cols.reads.append(work.reads[k])
        cols.digest_type.append(work.digest_types[k])
        cols.missing.append(list(summary.missing))
        cols.corrupt.append(list(summary.corrupt))
        cols.answer_bytes.append(work.sizes[k])
        cols.last_entry.append(work.last_entries[k])
        cols = link.flush(cols)
    return cols


def _by_listing(link: _Link, cols: _Columns) -> _Columns:
    """Requests without `read_entries`: one GetListOfEntries per ledger, in calls cut by count and by the
    healthy answer bytes (within half of the clients' frame limit)."""
    work, config = link.work, link.config
    listed = [i for i, r in enumerate(work.reads) if r is None]
    ids = [work.ledger_ids[i] for i in listed]
    for p, value, call in ask(
        link.client,
        work.bookie_id,
        ids,
        batch_size=config.batch_size,
        max_in_flight=config.max_in_flight,
        failure_threshold=config.failure_threshold,
        call_prefix=link.prefix,
        sizes=[work.sizes[i] for i in listed],
        max_call_bytes=config.call_bytes,
        breaker=link.breaker,
        pace=link.pace,
    ):
        k = listed[p]
        expected = work.digests[k]
        cols.answer_bytes.append(work.sizes[k])
        cols.last_entry.append(work.last_entries[k])
        cols.reads.append(None)
        cols.digest_type.append(work.digest_types[k])
        cols.missing.append(None)
        cols.corrupt.append(None)
        cols.ledger.append(work.ledger_ids[k])
        cols.digest.append(expected)
        cols.entries.append(work.entries[k])
        cols.call_id.append(call.call_id if call else None)
        cols.call_ms.append(call.ms if call else None)
        if type(value) is bytes and (expected is None or digest(value) != expected):
            value = confirm_tail(link.client, work.ledger_ids[k], value, work.last_entries[k],
                                 timeout_s=config.call_timeout_s)
        if type(value) is bytes:
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
            cols.status.append(STATUS_BAD_REQUEST)
            cols.error.append("the batch response has no answer for this ledger")
            cols.answer.append(None)
        cols = link.flush(cols)
    return cols


def chunks(batches: Iterator[pa.RecordBatch], max_rows: int) -> Iterator[pa.Table]:
    """The task's input as tables of about `max_rows` rows (whole input batches; Spark sends 10,000 rows)."""
    held: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        held.append(batch)
        rows += batch.num_rows
        if rows >= max_rows:
            yield pa.Table.from_batches(held)
            held, rows = [], 0
    if held:
        yield pa.Table.from_batches(held)


def fanout_partition(
    config: FanoutConfig,
    client_factory: Callable[[str, FanoutConfig], Any] | None = None,
    *,
    chunk_requests: int = TASK_CHUNK_REQUESTS,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function: REQUEST_SCHEMA batches in, RESPONSE_SCHEMA batches out."""
    factory = client_factory or make_client

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        prefix = f"{config.attempt}:{uuid.uuid4().hex[:8]}:"
        bookies: dict[str, _Bookie] = {}
        try:
            for table in chunks(batches, chunk_requests):
                works = group_by_bookie(table)
                del table
                for w in works:
                    if w.bookie_id not in bookies:
                        bookies[w.bookie_id] = _Bookie(Breaker(w.bookie_id, config.failure_threshold), Pace())
                yield from _serve_chunk(works, config, factory, prefix, bookies)
        finally:
            for b in bookies.values():
                if b.client is not None:
                    _close(b.client)

    return run


def _serve_chunk(
    works: list[BookieWork],
    config: FanoutConfig,
    factory: Callable[[str, FanoutConfig], Any],
    prefix: str,
    bookies: dict[str, _Bookie],
) -> Iterator[pa.RecordBatch]:
    """One chunk: a thread per bookie, their batches as they come; every thread is stopped and joined before
    this returns, however it returns (Spark closing the iterator, a worker failing)."""
    channel = _Channel()
    threads = [
        threading.Thread(
            target=_serve,
            args=(w, config, factory, channel, prefix, bookies[w.bookie_id]),
            name=f"fanout-{w.bookie_id}",
            daemon=True,
        )
        for w in works
    ]
    finished = False
    try:
        for t in threads:
            t.start()
        running = len(threads)
        while running:
            item = channel.queue.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
        finished = True
    finally:
        if not finished:  # stopped early: closing the clients fails their pending calls at once
            channel.cancel()
        for t in threads:
            if t.ident is not None:
                t.join(timeout=config.call_timeout_s + JOIN_GRACE_S)
                if t.is_alive():
                    log.warning("fan-out worker %s did not stop within %gs", t.name,
                                config.call_timeout_s + JOIN_GRACE_S)
