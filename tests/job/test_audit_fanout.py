"""The executor side of the bookie fan-out, in process: batching, in-flight bound, circuit breaker, statuses.

A scripted client stands in for BookieClient here because these are properties of *our* loop (how many ids per
message, how many messages outstanding, what happens after transport failures) that a real bookie cannot be
made to expose; the real client and bookies are exercised by tests/spark/test_checker_cluster.py.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa
from hypothesis import given, settings

from bkaudit.audit.expected import expected_by_bookie
from bkaudit.errors import BookieError
from bkaudit.formats.availability import encode
from bkaudit.job.expected import ExpectedDigests, digest
from bkaudit.job.fanout import (
    REQUEST_SCHEMA,
    RESPONSE_SCHEMA,
    FanoutConfig,
    evidence_of_row,
    query_bookie,
)
from bkaudit.job.fanout_task import fanout_partition
from bkaudit.model.ledger import Segment
from bkaudit.model.shape import LedgerShape
from tests.audit.test_audit_durability import ledgers, naive_expected, naive_spans

A, B, C = "a:1", "b:1", "c:1"


def shape(ledger_id: int, last: int = 9) -> LedgerShape:
    return LedgerShape(ledger_id, 3, 2, 2, True, last, (Segment(0, (A, B, C)),), version=1)


class ScriptedClient:
    """Answers batch calls from a script after a short delay, recording sizes and concurrency."""

    def __init__(
        self, bookie: str, answers: dict[int, Any] | None = None, fail: str | None = None, delay: float = 0.01
    ) -> None:
        self.bookie = bookie
        self.answers = answers or {}
        self.fail = fail
        self.delay = delay
        self.calls: list[list[int]] = []
        self.outstanding = 0
        self.max_outstanding = 0
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(8)
        self.closed = False

    def get_list_of_entries_batch(self, ids):
        fut: Future[Any] = Future()
        with self.lock:
            self.calls.append(list(ids))
            self.outstanding += 1
            self.max_outstanding = max(self.max_outstanding, self.outstanding)

        def finish() -> None:
            time.sleep(self.delay)
            with self.lock:
                self.outstanding -= 1
            if self.fail:
                fut.set_exception(BookieError(self.fail, "scripted", bookie_id=self.bookie))
                return
            fut.set_result({i: self.answers[i] for i in ids if i in self.answers})

        self.pool.submit(finish)
        return fut

    def close(self) -> None:
        self.closed = True


def healthy_bytes(s: LedgerShape, bookie: str) -> bytes:
    ids: set[int] = set()
    for w in expected_by_bookie(s)[bookie]:
        ids |= set(w.striping)
    return encode(sorted(ids))


def test_one_id_per_ledger_batched_and_bounded_in_flight():
    shapes = [shape(i) for i in range(1, 101)]
    client = ScriptedClient(A, {s.ledger_id: healthy_bytes(s, A) for s in shapes})
    out = list(query_bookie(client, A, shapes, batch_size=7, max_in_flight=3, failure_threshold=2))
    assert len(out) == 100 and {s.ledger_id for s, _e, _c in out} == set(range(1, 101))
    asked = [i for call in client.calls for i in call]
    assert sorted(asked) == list(range(1, 101))  # one GetListOfEntries per (ledger, bookie)
    assert max(len(c) for c in client.calls) == 7 and len(client.calls) == 15
    assert client.max_outstanding <= 3
    assert all(ev.status == "OK" and not ev.missing and not ev.extra for _s, ev, _c in out)
    assert len({c.call_id for _s, _e, c in out}) == 15


def test_per_ledger_statuses():
    s_ok, s_none, s_eio, s_bad, s_absent = (shape(i) for i in (1, 2, 3, 4, 5))
    answers = {
        1: encode(set(range(10)) - {0}),  # index 0 must hold e with e mod 3 in {0, 2}: 0 is missing
        2: BookieError("ENOLEDGER", bookie_id=A, ledger_id=2),
        3: BookieError("EIO", bookie_id=A, ledger_id=3),
        4: b"\x00\x00\x00\x09junk",
    }
    client = ScriptedClient(A, answers)
    out = {
        s.ledger_id: ev
        for s, ev, _c in query_bookie(
            client,
            A,
            [s_ok, s_none, s_eio, s_bad, s_absent],
            batch_size=10,
            max_in_flight=1,
            failure_threshold=2,
        )
    }
    assert out[1].status == "OK" and [m.ranges for m in out[1].missing] == [((0, 0),)]
    assert out[1].extra_count == 3  # 1, 4, 7 are not striped onto index 0
    assert out[2].status == "ENOLEDGER" and out[2].missing_count == 7
    assert out[3].status == "EIO"
    assert out[4].status == "INVALID_RESPONSE" and "bytes" in (out[4].error or "")
    assert out[5].status == "EBADREQ"


def test_circuit_breaker_stops_calling_a_dead_bookie():
    shapes = [shape(i) for i in range(1, 51)]
    client = ScriptedClient(B, fail="UNAVAILABLE")
    out = list(query_bookie(client, B, shapes, batch_size=5, max_in_flight=1, failure_threshold=2))
    assert len(out) == 50
    assert len(client.calls) == 2  # then the breaker opened
    statuses = [ev.status for _s, ev, _c in out]
    assert statuses.count("UNAVAILABLE") == 10 and statuses.count("CIRCUIT_OPEN") == 40
    assert all(c is None for _s, ev, c in out if ev.status == "CIRCUIT_OPEN")


def test_bookie_errors_do_not_open_the_breaker():
    shapes = [shape(i) for i in range(1, 21)]
    client = ScriptedClient(B, fail="ETOOMANYREQUESTS")
    out = list(query_bookie(client, B, shapes, batch_size=5, max_in_flight=2, failure_threshold=1))
    assert len(client.calls) == 4 and {ev.status for _s, ev, _c in out} == {"ETOOMANYREQUESTS"}


def test_expected_digest_is_the_canonical_encoding():
    s = shape(1)
    digests = ExpectedDigests().expected(s)[0]
    assert set(digests) == {A, B, C}
    assert all(digests[b] == digest(healthy_bytes(s, b)) for b in (A, B, C))
    # a bookie at two indexes of one segment: the union of both stripings
    dup = LedgerShape(2, 3, 2, 2, True, 9, (Segment(0, (A, A, C)),))
    expected = ExpectedDigests().expected(dup)[0]
    assert expected[A] == digest(encode(range(10)))  # indexes 0 and 1 together cover every entry


def test_partition_function_round_trips_rows():
    shapes = {i: shape(i) for i in range(1, 31)}
    digests = ExpectedDigests()
    rows = []
    for s in shapes.values():
        for k, (bookie, expected) in enumerate(digests.expected(s)[0].items()):
            rows.append(
                {
                    "bookie_id": bookie,
                    "ledger_id": s.ledger_id,
                    "expected_digest": expected,
                    "ledger_entries": 10 if k == 0 else 0,
                }
            )
    batch = pa.RecordBatch.from_pylist(rows, schema=REQUEST_SCHEMA)
    clients: dict[str, ScriptedClient] = {}
    damaged = encode(set(range(10)) - {0, 2})

    def factory(bookie: str, config: FanoutConfig) -> ScriptedClient:
        answers = {s.ledger_id: healthy_bytes(s, bookie) for s in shapes.values()}
        if bookie == C:
            answers[5] = BookieError("ENOLEDGER", bookie_id=C, ledger_id=5)
        if bookie == A:
            answers[7] = damaged
        clients[bookie] = ScriptedClient(bookie, answers)
        return clients[bookie]

    config = FanoutConfig(targets={}, batch_size=8, max_in_flight=2, attempt=1)
    out = pa.Table.from_batches(
        list(fanout_partition(config, factory)(iter([batch]))), schema=RESPONSE_SCHEMA
    )
    assert out.num_rows == 90
    got = out.to_pylist()
    assert {(r["ledger_id"], r["bookie_id"]) for r in got} == {(i, b) for i in shapes for b in (A, B, C)}
    assert all(r["attempt"] == 1 for r in got)
    assert sum(r["ledger_entries"] for r in got) == 300
    special = sorted(
        (r["ledger_id"], r["bookie_id"], r["status"], r["answer"])
        for r in got
        if r["status"] != "OK" or r["answer"] is not None
    )
    assert special == [(5, C, "ENOLEDGER", None), (7, A, "OK", damaged)]
    ev = evidence_of_row(shapes[7], next(r for r in got if r["ledger_id"] == 7 and r["bookie_id"] == A))
    assert [m.ranges for m in ev.missing] == [((0, 0), (2, 2))] and ev.extra == ((1, 1), (4, 4), (7, 7))
    assert (
        evidence_of_row(
            shapes[5], next(r for r in got if r["ledger_id"] == 5 and r["bookie_id"] == C)
        ).missing_count
        == 6
    )  # index 2 holds e mod 3 in {1, 2}
    healthy = next(r for r in got if r["ledger_id"] == 9 and r["bookie_id"] == B)
    assert (
        evidence_of_row(shapes[9], healthy).status == "OK" and not evidence_of_row(shapes[9], healthy).missing
    )
    assert all(c.closed for c in clients.values())  # one client per bookie per task, closed at the end
    assert all(max(len(x) for x in c.calls) <= 8 and c.max_outstanding <= 2 for c in clients.values())


@settings(max_examples=300, deadline=None)
@given(ledgers(allow_duplicates=True))
def test_expected_digests_match_naive_expected_sets(s):
    memo = ExpectedDigests()
    for _ in range(2):  # second round from the memo
        got, entries = memo.expected(s)
        naive = naive_expected(s)
        assert list(got) == list(expected_by_bookie(s))
        assert set(got) == set(naive)
        for bookie, value in got.items():
            assert value == digest(encode(sorted(naive[bookie])))  # a bookie lists its index in order
        assert entries == sum(max(0, last - first + 1) for _i, first, last, _e in naive_spans(s))


def test_join_segments_matches_per_row_grouping():
    import pyarrow.compute as pc

    from bkaudit.job.fanout import SHAPE_SCHEMA, shape_of
    from bkaudit.job.ledger_pass import LEDGER_INPUT_SCHEMA, iter_shapes, join_segments

    scalars = [f.name for f in SHAPE_SCHEMA if f.name != "segments"]
    ledgers = pa.Table.from_pylist(
        [
            {
                "ledger_id": i,
                "ensemble_size": 2,
                "write_quorum": 2,
                "ack_quorum": 1,
                "state": "CLOSED",
                "last_entry_id": 9,
                "znode_version": 1,
                "znode_mzxid": 5,
                "managed_ledger": None,
                "parse_error": "bad" if i == 4 else None,
                "raw_size": 3 if i == 4 else None,
            }
            for i in (3, 1, 4, 2)
        ],
        schema=pa.schema([LEDGER_INPUT_SCHEMA.field(c) for c in [*scalars, "parse_error", "raw_size"]]),
    )
    segments = pa.Table.from_pylist(
        [
            {"ledger_id": 1, "segment_index": 1, "first_entry_id": 5, "ensemble": ["c", "d"]},
            {"ledger_id": 3, "segment_index": 0, "first_entry_id": 0, "ensemble": ["a", "b"]},
            {"ledger_id": 1, "segment_index": 0, "first_entry_id": 0, "ensemble": ["a", "b"]},
        ],
    )
    joined = join_segments(ledgers, segments)
    assert joined.schema == LEDGER_INPUT_SCHEMA
    assert joined.column("ledger_id").to_pylist() == [3, 1, 4, 2]
    rows = {r["ledger_id"]: r for r in joined.to_pylist()}
    assert [s["segment_index"] for s in rows[1]["segments"]] == [0, 1]
    assert rows[2]["segments"] is None and rows[4]["segments"] is None
    shapes = {row["ledger_id"]: shape for row, shape in iter_shapes(joined.to_batches()[0])}
    assert shapes[4] is None
    assert shapes[1] == shape_of(rows[1]) and shapes[3] == shape_of(rows[3])
    assert shapes[2].segments == ()
    assert pc.sum(pc.list_value_length(joined.column("segments"))).as_py() == 3
    empty = join_segments(ledgers, segments.slice(0, 0))
    assert empty.column("segments").null_count == 4


def test_balance_spreads_bookies_by_load():
    from bkaudit.spark.checker_stages import _murmur3_int, balance, partition_keys

    assert _murmur3_int(0) == 933211791 and _murmur3_int(1) == -559580957  # Spark's hash(cast(0 as int))
    for p in (1, 2, 3, 8):
        assert sorted(_murmur3_int(k) % p for k in partition_keys(p)) == list(range(p))
    slots = balance({"a": 9, "b": 5, "c": 4, "d": 1}, 2)
    load = [0, 0]
    for bookie, k in slots.items():
        load[k] += {"a": 9, "b": 5, "c": 4, "d": 1}[bookie]
    assert sorted(load) == [9, 10]


def test_listing_calls_are_cut_by_expected_answer_bytes_not_only_by_count():
    """Ledgers of 50,000 entries (E3/WQ2) next to 10-entry ones: with the default batch size every call
    stays within the byte budget, and the small ledgers still share calls (sizes from the ledger pass)."""
    seg = (Segment(0, (A, B, C)),)
    big = {i: LedgerShape(i, 3, 2, 2, True, 49_999, seg, version=1) for i in range(1, 21)}
    small = {i: shape(i) for i in range(100, 160)}
    digests = ExpectedDigests()
    rows, sizes = [], {}
    for s in [*big.values(), *small.values()]:
        wanted, _ = digests.expected_requests(s)
        digest_a, size_a, _ = wanted[A]
        sizes[s.ledger_id] = size_a
        rows.append({"bookie_id": A, "ledger_id": s.ledger_id, "expected_digest": digest_a,
                     "ledger_entries": 0, "answer_bytes": size_a})
    assert all(sizes[i] > 390_000 for i in big) and all(sizes[i] < 200 for i in small)
    client = ScriptedClient(A, {i: b"x" for i in sizes}, delay=0)
    config = FanoutConfig(targets={}, batch_size=500, attempt=0)
    requests = pa.RecordBatch.from_pylist(rows, schema=REQUEST_SCHEMA)
    answers = list(fanout_partition(config, lambda b, c: client)(iter([requests])))
    out = pa.Table.from_batches(answers, schema=RESPONSE_SCHEMA).to_pylist()
    assert sorted(r["ledger_id"] for r in out) == sorted(sizes)
    assert {r["answer_bytes"] for r in out if r["ledger_id"] in big} == {sizes[1]}
    assert all(len(c) == 1 or sum(sizes[i] for i in c) <= config.max_call_bytes for c in client.calls)
    assert sum(sizes[i] for i in big) > 2 * 1024 * 1024 * 2  # one count-sized call would exceed a 5 MiB frame
    assert len(client.calls) >= 4 and max(len(c) for c in client.calls) >= len(small)  # small ones share


class QueueingClient:
    """A bookie that serves one listing at a time, `service_s` each, in arrival order, behind a client whose
    per-request timer fails a listing not answered within `timeout_s` of being sent (BookieClient's gathered
    listing: each ledger its own request; the call fails UNAVAILABLE only when every ledger of it did).
    Stands in for an overloaded Java bookie (p95 30 s at 100,000 ledgers on this machine), which no test can
    afford to build; what is under test is our loop's answer to queueing."""

    def __init__(self, service_s: float, timeout_s: float) -> None:
        self.service_s, self.timeout_s = service_s, timeout_s
        self.queue: list[tuple[int, float, dict[int, Any], list[int], Future[Any]]] = []
        self.cond = threading.Condition()
        self.asked: list[int] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def get_list_of_entries_batch(self, ids):
        fut: Future[Any] = Future()
        out: dict[int, Any] = {}
        left = list(ids)
        with self.cond:
            self.asked.extend(ids)
            sent = time.monotonic()
            for i in ids:
                self.queue.append((i, sent, out, left, fut))
            self.cond.notify()
        return fut

    def _serve(self) -> None:
        while True:
            with self.cond:
                while not self.queue:
                    self.cond.wait()
                i, sent, out, left, fut = self.queue.pop(0)
            time.sleep(self.service_s)
            late = time.monotonic() - sent > self.timeout_s
            out[i] = BookieError("UNAVAILABLE", "no response in time", bookie_id=A) if late else encode(
                sorted(set(range(10)) - {1, 4, 7}))
            left.remove(i)
            if not left:
                if all(isinstance(v, BookieError) for v in out.values()):
                    fut.set_exception(next(iter(out.values())))
                else:
                    fut.set_result(out)

    def close(self) -> None:
        pass


def test_an_overloaded_bookie_is_asked_with_fewer_calls_in_flight_not_given_up() -> None:
    """Four calls of 20 ledgers queue 80 listings at 10 ms each: the last wait 0.8 s against a 0.3 s timer.
    Nothing is dead, so every ledger must end answered and the breaker stay closed."""
    shapes = [shape(i) for i in range(1, 201)]
    client = QueueingClient(service_s=0.01, timeout_s=0.3)
    out = list(query_bookie(client, A, shapes, batch_size=20, max_in_flight=4, failure_threshold=2))
    assert sorted(s.ledger_id for s, _e, _c in out) == list(range(1, 201))  # each yielded exactly once
    assert {ev.status for _s, ev, _c in out} == {"OK"}
    assert not [ev for _s, ev, _c in out if ev.missing]
    assert len(client.asked) > 200  # some were asked again


def test_a_bookie_that_stops_answering_still_opens_the_breaker() -> None:
    """Frozen after its first answers: the calls sent after the last answer fail as before, and the breaker
    opens after `failure_threshold` of them; every ledger is still yielded once."""
    shapes = [shape(i) for i in range(1, 101)]
    answered = {i: healthy_bytes(shape(i), A) for i in range(1, 11)}

    class Freezing(ScriptedClient):
        def get_list_of_entries_batch(self, ids):
            if all(i in answered for i in ids):
                return super().get_list_of_entries_batch(ids)
            fut: Future[Any] = Future()
            self.calls.append(list(ids))
            threading.Timer(0.05, lambda: fut.set_exception(
                BookieError("UNAVAILABLE", "no response", bookie_id=A))).start()
            return fut

    client = Freezing(A, answered, delay=0.0)
    out = list(query_bookie(client, A, shapes, batch_size=10, max_in_flight=1, failure_threshold=2))
    statuses = [ev.status for _s, ev, _c in out]
    assert sorted(s.ledger_id for s, _e, _c in out) == list(range(1, 101))
    assert statuses.count("OK") == 10 and statuses.count("UNAVAILABLE") == 20
    assert statuses.count("CIRCUIT_OPEN") == 70
    assert len(client.calls) == 3  # the answered call, then two failures: no retries of a silent bookie


def test_a_pace_carries_the_window_a_slow_bookie_came_down_to_into_the_next_ask() -> None:
    """`ask` starts at the pace's window (listings), not at max_in_flight x batch_size, and leaves its own."""
    from bkaudit.job.bookie_calls import Pace, ask

    shapes = [shape(i) for i in range(1, 201)]
    client = ScriptedClient(A, {s.ledger_id: healthy_bytes(s, A) for s in shapes}, delay=0.0)
    pace = Pace(window=15)
    ids = [s.ledger_id for s in shapes]
    out = list(ask(client, A, ids, batch_size=40, max_in_flight=4, failure_threshold=2, pace=pace))
    assert sorted(p for p, _v, _c in out) == list(range(200))
    assert max(len(c) for c in client.calls[:1]) == 15  # the first call fits the carried window
    assert pace.window is not None and 15 < pace.window <= 160  # clean answers widened it, within the cap


def test_calls_in_flight_through_one_silence_count_once_towards_the_breaker() -> None:
    """The bookie is silent for its first 0.3 s (a long pause), then answers. Four calls were in flight
    through that silence and fail together: one failure, not four. The one counted reports its ledgers
    unavailable (the job's delayed re-check takes them); the other three are asked again and answered, and
    with a threshold of 2 the breaker stays closed (before, it opened: the rest went CIRCUIT_OPEN)."""
    shapes = [shape(i) for i in range(1, 81)]
    answers = {s.ledger_id: healthy_bytes(s, A) for s in shapes}
    woke = time.monotonic() + 0.3

    class Pausing(ScriptedClient):
        def get_list_of_entries_batch(self, ids):
            if time.monotonic() >= woke:
                return super().get_list_of_entries_batch(ids)
            self.calls.append(list(ids))
            fut: Future[Any] = Future()
            threading.Timer(woke - time.monotonic(), lambda: fut.set_exception(
                BookieError("UNAVAILABLE", "no response", bookie_id=A))).start()
            return fut

    client = Pausing(A, answers, delay=0.0)
    out = list(query_bookie(client, A, shapes, batch_size=10, max_in_flight=4, failure_threshold=2))
    assert sorted(s.ledger_id for s, _e, _c in out) == list(range(1, 81))
    statuses = [ev.status for _s, ev, _c in out]
    assert statuses.count("UNAVAILABLE") == 10 and statuses.count("OK") == 70
    assert len(client.calls) > 8  # three of the four silent calls were asked again
