"""The fan-out task leaves no thread behind: when Spark closes its iterator early, and when a worker fails.

Spark reuses Python workers, so a worker thread blocked forever on the task's full queue would keep its
connections open for the life of the executor. The healthy bookies here are scripted clients (the test needs
more answers than the queue holds, at once); the frozen bookie is a real BookieClient connected to a real
socket that accepts and never answers.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from bkaudit.formats.availability import encode
from bkaudit.job import fanout_task
from bkaudit.job.fanout import REQUEST_SCHEMA, FanoutConfig, make_client
from bkaudit.job.fanout_task import fanout_partition
from tests.job.test_audit_fanout import ScriptedClient

BOOKIES = ("a:1", "b:1", "c:1")
LEDGERS = 200


def requests(bookies: tuple[str, ...] = BOOKIES) -> pa.RecordBatch:
    rows = [
        {"bookie_id": b, "ledger_id": i, "expected_digest": None, "ledger_entries": 0}
        for b in bookies
        for i in range(1, LEDGERS + 1)
    ]
    return pa.RecordBatch.from_pylist(rows, schema=REQUEST_SCHEMA)


def fanout_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("fanout-") and t.is_alive()]


@pytest.fixture
def tiny_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """One row per output batch and a two-batch queue: the workers fill it long before the consumer reads."""
    monkeypatch.setattr(fanout_task, "OUTPUT_BATCH_ROWS", 1)
    monkeypatch.setattr(fanout_task, "QUEUE_BATCHES", 2)


def test_closing_the_iterator_early_stops_and_joins_every_worker(tiny_batches: None) -> None:
    clients: dict[str, ScriptedClient] = {}

    def factory(bookie: str, _config: FanoutConfig) -> ScriptedClient:
        clients[bookie] = ScriptedClient(bookie, {i: b"" for i in range(1, LEDGERS + 1)}, delay=0.0)
        return clients[bookie]

    config = FanoutConfig(targets={}, batch_size=10, max_in_flight=2, call_timeout_s=5.0)
    out: Iterator[pa.RecordBatch] = fanout_partition(config, factory)(iter([requests()]))
    first = next(out)
    assert first.num_rows == 1
    deadline = time.monotonic() + 30
    while len(clients) < len(BOOKIES):  # every worker started and is blocked on the full queue
        assert time.monotonic() < deadline, "workers never started"
        time.sleep(0.01)
    assert len(fanout_threads()) == len(BOOKIES)
    out.close()  # what Spark does with a task it no longer needs
    assert fanout_threads() == []
    assert all(c.closed for c in clients.values())


def test_a_failing_worker_fails_the_task_and_stops_the_others(tiny_batches: None) -> None:
    clients: dict[str, ScriptedClient] = {}

    def factory(bookie: str, _config: FanoutConfig) -> ScriptedClient:
        if bookie == "c:1":
            raise RuntimeError("cannot build a client for c:1")
        clients[bookie] = ScriptedClient(bookie, {i: b"" for i in range(1, LEDGERS + 1)}, delay=0.0)
        return clients[bookie]

    config = FanoutConfig(targets={}, batch_size=10, max_in_flight=2, call_timeout_s=5.0)
    with pytest.raises(RuntimeError, match="cannot build a client"):
        for _batch in fanout_partition(config, factory)(iter([requests()])):
            pass
    assert fanout_threads() == []
    assert all(c.closed for c in clients.values())


@pytest.fixture
def frozen_bookie() -> Iterator[str]:
    """A listening socket that accepts connections and never answers (a bookie stuck in a GC pause)."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                accepted.append(conn)
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        t.join(timeout=5)
        for c in accepted:
            c.close()
        server.close()


def test_closing_early_does_not_wait_for_a_frozen_bookie(tiny_batches: None, frozen_bookie: str) -> None:
    frozen = "frozen:3181"
    opened: list[Any] = []

    def factory(bookie: str, config: FanoutConfig) -> Any:
        if bookie == frozen:
            client = make_client(bookie, config)  # the real client, to a socket that never answers
        else:
            client = ScriptedClient(bookie, {i: b"" for i in range(1, LEDGERS + 1)}, delay=0.0)
        opened.append(client)
        return client

    config = FanoutConfig(targets={frozen: frozen_bookie}, batch_size=10, max_in_flight=2,
                          call_timeout_s=120.0, connect_timeout_s=5.0)
    out = fanout_partition(config, factory)(iter([requests(("a:1", frozen))]))
    next(out)
    deadline = time.monotonic() + 30
    while len(opened) < 2:
        assert time.monotonic() < deadline, "workers never started"
        time.sleep(0.01)
    started = time.monotonic()
    out.close()
    assert fanout_threads() == []
    assert time.monotonic() - started < 60  # far below the frozen bookie's 120 s call timeout


# -- a task's memory does not grow with its partition: chunks, one breaker per bookie across them -----------
def sliced(batch: pa.RecordBatch, rows: int) -> list[pa.RecordBatch]:
    return [batch.slice(k, rows) for k in range(0, batch.num_rows, rows)]


def test_a_big_partition_is_served_in_bounded_chunks_and_every_request_answered_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held: list[int] = []
    real = fanout_task.group_by_bookie

    def spy(table: pa.Table) -> list[fanout_task.BookieWork]:
        held.append(table.num_rows)
        return real(table)

    monkeypatch.setattr(fanout_task, "group_by_bookie", spy)

    def factory(bookie: str, _config: FanoutConfig) -> ScriptedClient:
        answers = {i: encode([i, i + len(bookie)]) for i in range(1, LEDGERS + 1)}
        return ScriptedClient(bookie, answers, delay=0.0)

    config = FanoutConfig(targets={}, batch_size=10, max_in_flight=2)
    inputs = sliced(requests(), 50)  # 600 requests in 12 input batches, as Spark hands them over
    out = pa.Table.from_batches(list(fanout_partition(config, factory, chunk_requests=120)(iter(inputs))))
    assert held == [150, 150, 150, 150]  # whole input batches until at least 120 rows
    got = sorted((r["bookie_id"], r["ledger_id"], r["answer"]) for r in out.to_pylist())
    assert got == sorted((b, i, encode([i, i + len(b)])) for b in BOOKIES for i in range(1, LEDGERS + 1))
    assert fanout_threads() == []


def test_a_dead_bookie_trips_its_breaker_once_per_task_not_once_per_chunk() -> None:
    clients: list[ScriptedClient] = []

    def factory(bookie: str, _config: FanoutConfig) -> ScriptedClient:
        fail = "UNAVAILABLE" if bookie == "c:1" else None
        empty = {i: encode([]) for i in range(1, LEDGERS + 1)}
        clients.append(ScriptedClient(bookie, empty, fail=fail, delay=0.0))
        return clients[-1]

    config = FanoutConfig(targets={}, batch_size=10, max_in_flight=1, failure_threshold=2)
    inputs = sliced(requests(), 30)
    out = pa.Table.from_batches(list(fanout_partition(config, factory, chunk_requests=60)(iter(inputs))))
    dead = [r for r in out.to_pylist() if r["bookie_id"] == "c:1"]
    assert len(dead) == LEDGERS
    assert [c.bookie for c in clients].count("c:1") == 1  # one client per bookie across the task's chunks
    assert sum(len(c.calls) for c in clients if c.bookie == "c:1") == 2  # the threshold, once
    assert all(c.closed for c in clients)  # closed when the task ends
    assert sum(r["status"] == "UNAVAILABLE" for r in dead) == 2 * config.batch_size
    assert {r["status"] for r in dead} == {"UNAVAILABLE", "CIRCUIT_OPEN"}
    assert {r["status"] for r in out.to_pylist() if r["bookie_id"] != "c:1"} == {"OK"}
