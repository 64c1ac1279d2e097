"""Fencing and recovery with real bookie processes: the persistence property of 003-fencing.

Ground truth is what the test itself saw: the entries acknowledged to the writer (and their payloads), the
bookies it stopped. Entry i always carries payload b"p-<i>" (a single writer numbers entries in order).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future

import pytest

from bkaudit.client import BookKeeper, ClientSettings
from bkaudit.errors import FencedError, LedgerStateError, RecoveryError
from bkaudit.model.ledger import LedgerState


def payload(i: int) -> bytes:
    return b"p-%d" % i


class Writer(threading.Thread):
    """Adds entries with up to `window` in flight until an add fails; records every acknowledged entry."""

    def __init__(self, handle, window: int = 32) -> None:
        super().__init__(daemon=True)
        self.handle = handle
        self.window = window
        self.acked: dict[int, bytes] = {}
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        in_flight: deque[tuple[int, Future[int]]] = deque()
        i = 0
        try:
            while not self.stop.is_set():
                in_flight.append((i, self.handle.add_entry_async(payload(i))))
                i += 1
                if len(in_flight) >= self.window:
                    self._settle(*in_flight.popleft())
            while in_flight:
                self._settle(*in_flight.popleft())
        except BaseException as exc:
            self.error = exc
            for n, fut in in_flight:  # later futures fail too; keep any that did succeed
                if fut.done() and fut.exception() is None:
                    self.acked[fut.result()] = payload(n)

    def _settle(self, n: int, fut: Future[int]) -> None:
        entry_id = fut.result(60)
        assert entry_id == n
        self.acked[entry_id] = payload(n)

    def wait_for(self, count: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < count:
            assert self.error is None, self.error
            assert time.monotonic() < deadline, f"only {len(self.acked)} entries acknowledged"
            time.sleep(0.01)


def connect(cluster) -> BookKeeper:
    return BookKeeper.connect(cluster.zk_settings())


def check_persistence(reader_md, reader, acked: dict[int, bytes]) -> None:
    """Every acknowledged entry is <= the closed last entry and reads back with its payload."""
    assert reader_md.state is LedgerState.CLOSED
    assert acked, "the writer had acknowledged entries"
    assert max(acked) <= reader_md.last_entry_id
    entries = reader.read_entries(0, reader_md.last_entry_id)
    assert [e.entry_id for e in entries] == list(range(reader_md.last_entry_id + 1))
    for e in entries:  # acknowledged or not, each entry is the one the writer sent
        assert e.payload == payload(e.entry_id)
    assert entries[-1].length == sum(len(payload(i)) for i in range(reader_md.last_entry_id + 1))


def test_recovery_fences_a_live_writer(cluster3) -> None:
    with connect(cluster3) as writer_bk, connect(cluster3) as reader_bk:
        handle = writer_bk.create_ledger(3, 2, 2)
        writer = Writer(handle)
        writer.start()
        writer.wait_for(200)
        reader = reader_bk.open_ledger(handle.ledger_id, recover=True)
        writer.join(60)
        assert not writer.is_alive()
        assert isinstance(writer.error, FencedError), writer.error
        assert writer.error.ledger_id == handle.ledger_id
        md = reader.metadata
        check_persistence(md, reader, writer.acked)
        assert reader_bk.ledger_metadata(handle.ledger_id) == md
        # the writer's own close follows the protocol rules against the recovered metadata
        if handle.last_add_confirmed == md.last_entry_id:
            assert handle.close().last_entry_id == md.last_entry_id
        else:
            with pytest.raises(LedgerStateError):
                handle.close()
        with pytest.raises(FencedError):
            handle.add_entry(b"after fencing")


def test_concurrent_recoverers_converge(cluster3) -> None:
    with connect(cluster3) as writer_bk:
        handle = writer_bk.create_ledger(3, 2, 2)
        writer = Writer(handle, window=64)
        writer.start()
        writer.wait_for(300)
        results: list[object] = []
        gate = threading.Barrier(3)

        def recover() -> None:
            with connect(cluster3) as bk:
                gate.wait()
                try:
                    r = bk.open_ledger(handle.ledger_id, recover=True)
                    results.append((r.metadata.last_entry_id, r.metadata.length, r.last_add_confirmed))
                except BaseException as exc:  # reported by the assertion below
                    results.append(exc)

        threads = [threading.Thread(target=recover) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        writer.join(60)
        final = writer_bk.ledger_metadata(handle.ledger_id)
        assert results == [(final.last_entry_id, final.length, final.last_entry_id)] * 3
        assert isinstance(writer.error, FencedError)
        with connect(cluster3) as bk:
            check_persistence(final, bk.open_ledger(handle.ledger_id), writer.acked)


def _abandoned_ledger(cluster, e: int, wq: int, aq: int, entries: int = 50) -> int:
    with connect(cluster) as bk:
        handle = bk.create_ledger(e, wq, aq)
        for i in range(entries):
            handle.add_entry_async(payload(i))
        assert handle.add_entry(payload(entries)) == entries
        handle.abandon()  # a crashed writer: the ledger stays OPEN
        return handle.ledger_id


def _ensemble(cluster, lid: int) -> tuple[str, ...]:
    with connect(cluster) as bk:
        return bk.ledger_metadata(lid).segments[-1].ensemble


def test_recovery_with_one_bookie_down_e3_wq2_aq2(cluster4) -> None:
    """Fencing is covered with one bookie down; write-back of the tail replaces it (a spare exists)."""
    lid = _abandoned_ledger(cluster4, 3, 2, 2)
    victim = _ensemble(cluster4, lid)[2]  # in the write set (2, 0) of the last entry, 50
    cluster4.stop_bookie(victim)
    try:
        with connect(cluster4) as bk:
            r = bk.open_ledger(lid, recover=True)
            assert r.metadata.last_entry_id == 50
            assert [e.payload for e in r.read_entries()] == [payload(i) for i in range(51)]
            last = r.metadata.segments[-1]
            if len(r.metadata.segments) > 1:  # write-back hit the stopped bookie: new segment, recorded
                assert victim not in last.ensemble and last.first_entry_id <= 50
    finally:
        cluster4.start_bookie(victim)


def test_recovery_impossible_with_two_down_e3_wq3_aq2_then_succeeds(cluster4) -> None:
    lid = _abandoned_ledger(cluster4, 3, 3, 2)
    victims = list(_ensemble(cluster4, lid)[:2])
    for v in victims:
        cluster4.stop_bookie(v)
    try:
        with connect(cluster4) as bk:
            with pytest.raises(RecoveryError) as err:
                bk.open_ledger(lid, recover=True)
            text = str(err.value)
            assert f"ledger {lid}" in text and "write sets lacking 2 responder(s)" in text
            assert all(v in text for v in victims)
            assert bk.ledger_metadata(lid).state is LedgerState.IN_RECOVERY
    finally:
        for v in victims:
            cluster4.start_bookie(v)
    with connect(cluster4) as bk:  # bookies back: the same recovery now completes
        r = bk.open_ledger(lid, recover=True)
        assert r.metadata.state is LedgerState.CLOSED and r.metadata.last_entry_id == 50
        assert r.read_entry(50).payload == payload(50)


def test_fencing_completes_without_waiting_for_a_silent_bookie(cluster4) -> None:
    """Coverage is reached by the two live bookies: recovery does not wait for the paused one's timeout."""
    lid = _abandoned_ledger(cluster4, 3, 2, 2)
    victim = _ensemble(cluster4, lid)[1]
    settings = ClientSettings(add_timeout_s=2.0, read_timeout_s=20.0)
    cluster4.pause_bookie(victim)
    try:
        with BookKeeper.connect(cluster4.zk_settings(), settings=settings) as bk:
            started = time.monotonic()
            r = bk.open_ledger(lid, recover=True)
            took = time.monotonic() - started
    finally:
        cluster4.resume_bookie(victim)
    assert r.metadata.last_entry_id == 50
    assert took < 15, f"recovery waited {took:.1f}s for the silent bookie"
