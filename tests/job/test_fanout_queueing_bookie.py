"""The fan-out against a bookie that queues: BookieClient and `ask` over a real socket.

At 100,000 ledgers a Java bookie on this machine answered listings up to 15 s late (docs/performance.md), and
the check gave up on it: its late answers to timed-out requests were dropped unseen, so nothing proved it
alive, and retries queued behind the stale requests timed out too. A real Java bookie cannot be made that slow
on purpose in a unit test, so the other end is a stand-in built from BookKeeper's definitions only
(tests/bookkeeper_wire.py: its proto, its v3 framing), never from bkaudit's code. It behaves as a bookie's
read thread does: one listing at a time in arrival order, every request answered however late (nothing in
BookKeeper drops a request because its client stopped waiting).
"""

from __future__ import annotations

import queue
import socket
import struct
import threading
import time
from typing import Any

import pyarrow as pa
import pytest

from bkaudit.errors import BookieError
from bkaudit.job.bookie_calls import ask
from bkaudit.job.fanout import REQUEST_SCHEMA, FanoutConfig
from bkaudit.job.fanout_task import fanout_partition
from bkaudit.rpc.client import BookieClient
from tests import shared_vectors
from tests.bookkeeper_wire import Messages, frame

B = "127.0.0.1:3181"

pytestmark = pytest.mark.timing  # the stand-in's pace against the client's timer: `make test` runs it alone


@pytest.fixture(scope="module")
def bk(tmp_path_factory: pytest.TempPathFactory) -> Messages:
    return Messages(tmp_path_factory.mktemp("proto"))


def listing_of(ledger_id: int) -> bytes:
    """What the stand-in answers for a ledger: opaque to `ask`, distinct per ledger."""
    return b"listing of %d" % ledger_id


class SerialBookie:
    """Serves GET_LIST_OF_ENTRIES_OF_LEDGER one request at a time, `service_s` each, in arrival order.

    `answers_before_freezing`: after that many answers it keeps reading and answers nothing (a frozen JVM).
    Requests of a connection the client closed are still served, answered into the void (as a Java bookie's
    read threads do: the request was queued).
    """

    def __init__(self, bk: Messages, *, service_s: float, answers_before_freezing: int | None = None,
                 listing: Any = listing_of) -> None:
        self.bk, self.service_s, self.listing = bk, service_s, listing
        self.freeze_at = answers_before_freezing
        self.listen = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listen.getsockname()[1]}"
        self.work: queue.Queue[tuple[socket.socket, int, int]] = queue.Queue()
        self.asked = 0
        self.answered = 0
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()
        threading.Thread(target=self._serve, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.listen.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        buf = b""
        while True:
            try:
                chunk = conn.recv(1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
                size = struct.unpack(">I", buf[:4])[0]
                req = self.bk.Request.FromString(buf[4 : 4 + size])
                buf = buf[4 + size :]
                assert req.header.operation == self.bk.ops["GET_LIST_OF_ENTRIES_OF_LEDGER"]
                self.asked += 1
                self.work.put((conn, req.header.txnId, req.getListOfEntriesOfLedgerRequest.ledgerId))

    def _serve(self) -> None:
        while not self.stopped:
            conn, txn, ledger_id = self.work.get()
            time.sleep(self.service_s)
            if self.freeze_at is not None and self.answered >= self.freeze_at:
                continue
            resp = self.bk.Response()
            resp.header.version = 3
            resp.header.operation = self.bk.ops["GET_LIST_OF_ENTRIES_OF_LEDGER"]
            resp.header.txnId = txn
            resp.status = self.bk.status["EOK"]
            sub = resp.getListOfEntriesOfLedgerResponse
            sub.status = self.bk.status["EOK"]
            sub.ledgerId = ledger_id
            sub.availabilityOfEntriesOfLedger = self.listing(ledger_id)
            try:
                conn.sendall(frame(resp.SerializeToString()))
            except OSError:
                continue
            self.answered += 1

    def close(self) -> None:
        self.stopped = True
        self.listen.close()


def run_ask(bookie: SerialBookie, ids: list[int], *, timeout_s: float, **kw: Any) -> list[Any]:
    client = BookieClient(B, bookie.address, request_timeout_s=timeout_s)
    try:
        out = [None] * len(ids)
        seen = 0
        for p, value, _call in ask(client, B, ids, **kw):
            assert out[p] is None, f"position {p} yielded twice"
            out[p] = value
            seen += 1
        assert seen == len(ids)
        return out
    finally:
        client.close()
        bookie.close()


def test_a_queueing_bookie_is_waited_for_until_every_ledger_is_answered(bk: Messages) -> None:
    """4 calls of 50 listings at 6 ms each (1.2 s of work in flight against a 0.3 s timer): most of them time
    out, and the bookie then spends the rest of its time on requests nobody waits for. A retry sent behind
    them times out whole too, with no other call answered meanwhile: that is what opened the breaker at
    100,000 ledgers (the old code leaves most ledgers unavailable here). Nothing is dead, so every ledger must
    end with its own answer, from the bookie's own bytes, and none may be reported unavailable.
    The last of the SLOW_RETRIES has 25 listings in flight, half the timer's worth of work: on a loaded
    machine the stand-in serves slower than its nominal 6 ms (at 12 ms the last retry was exactly the timer's
    worth, and one CI run lost a ledger to it)."""
    bookie = SerialBookie(bk, service_s=0.006)
    ids = list(range(1, 301))
    out = run_ask(bookie, ids, timeout_s=0.3, batch_size=50, max_in_flight=4, failure_threshold=2)
    errors = [(ids[p], v) for p, v in enumerate(out) if not isinstance(v, bytes)]
    assert errors == []
    assert out == [listing_of(i) for i in ids]
    assert bookie.asked > len(ids)  # the queue did build up: some listings were asked again


def test_a_bookie_that_freezes_still_opens_the_breaker_in_bounded_time(bk: Messages) -> None:
    """Answers 40 listings, then nothing (a SIGSTOPped JVM keeps its socket open). The 40 come back; the
    rest end unavailable or CIRCUIT_OPEN once the breaker opens, in a few timeouts, not after every call."""
    bookie = SerialBookie(bk, service_s=0.001, answers_before_freezing=40)
    ids = list(range(1, 401))
    started = time.monotonic()
    out = run_ask(bookie, ids, timeout_s=0.3, batch_size=20, max_in_flight=2, failure_threshold=2)
    took = time.monotonic() - started
    answered = [ids[p] for p, v in enumerate(out) if isinstance(v, bytes)]
    assert answered == ids[:40]
    failed = {v.status for v in out if not isinstance(v, bytes)}
    assert all(isinstance(v, BookieError) for v in out[40:])
    assert failed == {"UNAVAILABLE", "CIRCUIT_OPEN"}
    assert took < 10, f"{took:.1f} s: the backlog wait must end once the bookie is silent for a timeout"


def test_the_client_counts_a_late_answer_as_life_and_as_one_less_stale_request(bk: Messages) -> None:
    """A listing that takes 0.4 s against a 0.1 s timer: it fails UNAVAILABLE, stays in the client's backlog
    until the bookie's answer arrives, and that answer moves `last_heard`."""
    bookie = SerialBookie(bk, service_s=0.4)
    client = BookieClient(B, bookie.address, request_timeout_s=0.1)
    try:
        with pytest.raises(BookieError) as info:
            client.get_list_of_entries(7).result(timeout=5)
        assert info.value.status == "UNAVAILABLE"
        timed_out = time.monotonic()
        assert client.backlog == 1 and client.last_heard < timed_out
        deadline = time.monotonic() + 5
        while client.backlog and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client.backlog == 0 and client.last_heard > timed_out
        assert bookie.answered == 1
    finally:
        client.close()
        bookie.close()


def test_a_slow_bookie_keeps_its_pace_and_backlog_across_a_tasks_chunks(bk: Messages) -> None:
    """The fan-out task serves its requests in chunks, and the bookie is as slow as above in every one: each
    chunk must end with every ledger answered. (At 100,000 ledgers every Java bookie's breaker opened at the
    first chunk boundary, when each chunk had a fresh connection that knew nothing of the requests the bookie
    still worked on; this FIFO stand-in leaves none at a chunk's end, so it cannot show that, only that the
    task's one client and pace per bookie carry over. That they do: test_fanout_task.py.)
    The answer is an AvailabilityOfEntriesOfLedger from BookKeeper's own encoder (shared vectors).
    4 calls of 50 listings at 5 ms are 1 s of work against a 0.6 s timer: the first calls still time out. The
    last retry's 25 listings are a fifth of the timer (at 0.3 s, a loaded CI machine once served the stand-in
    slow enough to lose 7 ledgers to it)."""
    vector = next(v for v in shared_vectors.load("availability.json")["encode"] if len(v["entries"]) > 2)
    answer = bytes.fromhex(vector["hex"])
    bookie = SerialBookie(bk, service_s=0.005, listing=lambda _ledger: answer)
    config = FanoutConfig(targets={B: bookie.address}, batch_size=50, max_in_flight=4, call_timeout_s=0.6,
                          failure_threshold=2)
    rows = [{"bookie_id": B, "ledger_id": i, "expected_digest": None, "ledger_entries": 0}
            for i in range(1, 801)]
    inputs = [pa.RecordBatch.from_pylist(rows[k : k + 100], schema=REQUEST_SCHEMA) for k in range(0, 800, 100)
              ]
    task = fanout_partition(config, chunk_requests=200)
    try:
        out = pa.Table.from_batches(list(task(iter(inputs)))).to_pylist()
    finally:
        bookie.close()
    assert sorted(r["ledger_id"] for r in out) == list(range(1, 801))
    assert [(r["ledger_id"], r["status"], r["error"]) for r in out if r["status"] != "OK"] == []
    assert all(r["answer"] == answer for r in out)
