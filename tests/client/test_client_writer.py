"""The write path against in-memory bookies: pipelining, ordering, ensemble changes, fencing, close rules."""

from __future__ import annotations

import time

import pytest

from bkaudit.errors import BookieError, FencedError, LedgerStateError, NotEnoughBookies, QuorumError
from bkaudit.formats.entry import DigestManager
from bkaudit.model.ledger import DigestType, LedgerState, Segment
from tests.client.test_client_fakes import FakeCluster
from tests.helpers import wait_for


@pytest.fixture
def cluster():
    c = FakeCluster(n=5, add_timeout_s=1.0)
    yield c
    c.close()


def test_create_ledger_metadata_is_open_with_one_segment(cluster: FakeCluster) -> None:
    bk = cluster.client()
    w = bk.create_ledger(3, 2, 2, password=b"pw", custom_metadata={"app": "x"})
    md, _version = cluster.store.read(w.ledger_id)
    assert md.state is LedgerState.OPEN and md.last_entry_id == -1 and md.length == 0
    assert md.segments == (Segment(0, tuple(b.id for b in cluster.bookies[:3])),)
    assert (md.ensemble_size, md.write_quorum, md.ack_quorum) == (3, 2, 2)
    assert md.password == b"pw" and md.custom_metadata == {"app": b"x"}
    assert md.digest_type is DigestType.CRC32C


def test_create_ledger_validates_quorums(cluster: FakeCluster) -> None:
    with pytest.raises(QuorumError):
        cluster.client().create_ledger(2, 3, 2)
    with pytest.raises(QuorumError):
        cluster.client().create_ledger(3, 2, 0)


def test_pipelined_adds_are_striped_packaged_and_acked_in_order(cluster: FakeCluster) -> None:
    w = cluster.client().create_ledger(3, 2, 2)
    futures = [w.add_entry_async(b"e%d" % i) for i in range(10)]
    assert [f.result(5) for f in futures] == list(range(10))
    assert w.last_add_confirmed == 9
    dm = DigestManager(w.ledger_id, b"", DigestType.CRC32C)
    total = 0
    for e in range(10):
        holders = [b for b in cluster.bookies if e in b.entries.get(w.ledger_id, {})]
        assert [b.id for b in holders] == sorted(
            w.metadata.segments[0].ensemble[i] for i in (e % 3, (e + 1) % 3)
        )
        entry = dm.verify(holders[0].entries[w.ledger_id][e], entry_id=e)
        total += len(b"e%d" % e)
        assert entry.payload == b"e%d" % e and entry.length == total
        assert entry.last_add_confirmed < e  # piggy-backed LAC: what was acknowledged when it was sent


def test_futures_complete_only_after_earlier_entries(cluster: FakeCluster) -> None:
    w = cluster.client().create_ledger(3, 2, 2)
    b0 = cluster.bookies[0]  # write set of entry 0 is (0, 1); entry 1 is (1, 2)
    b0.hold = True
    f0 = w.add_entry_async(b"a")
    f1 = w.add_entry_async(b"b")
    # the moment f1 could wrongly complete: the client has handled both acknowledgements of entry 1 (its AQ)
    def entry_1_acked() -> bool:
        return all((w.ledger_id, 1) in b.acks_handled for b in cluster.bookies[1:3])

    wait_for(entry_1_acked, 10, "the client to handle entry 1's acknowledgements")
    assert not f0.done() and not f1.done()  # entry 1 has its AQ acks but must wait for entry 0
    b0.release()
    assert (f0.result(5), f1.result(5)) == (0, 1)


def test_ensemble_change_on_failed_bookie(cluster: FakeCluster) -> None:
    w = cluster.client().create_ledger(3, 2, 2)
    for i in range(4):
        w.add_entry(b"x%d" % i)
    failed = cluster.bookies[1]
    failed.down = True
    ids = [w.add_entry(b"y%d" % i) for i in range(6)]
    assert ids == list(range(4, 10))
    md, _ = cluster.store.read(w.ledger_id)
    assert len(md.segments) == 2
    assert md.segments[1].first_entry_id == 4  # the first unacknowledged entry
    assert failed.id not in md.segments[1].ensemble
    new = md.segments[1].ensemble[1]
    assert new == cluster.bookies[3].id
    for e in range(4, 10):  # every entry of the new segment whose write set has index 1 is on the new bookie
        if 1 in ((e % 3), (e + 1) % 3):
            assert e in cluster.pool[new].entries[w.ledger_id]
    w.close()
    assert cluster.store.read(w.ledger_id)[0].last_entry_id == 9


def test_ensemble_change_resends_in_flight_entries(cluster: FakeCluster) -> None:
    w = cluster.client().create_ledger(3, 3, 2)
    b2 = cluster.bookies[2]
    b2.fail_status = "EIO"  # every add to bookie 2 fails: replaced, entries resent to bookie 4
    futures = [w.add_entry_async(b"p%d" % i) for i in range(20)]
    assert [f.result(5) for f in futures] == list(range(20))
    md, _ = cluster.store.read(w.ledger_id)
    assert md.segments[-1].ensemble[2] == cluster.bookies[3].id
    assert set(cluster.bookies[3].entries[w.ledger_id]) >= set(range(md.segments[-1].first_entry_id, 20))


def test_ensemble_change_with_no_spare_bookie_fails_adds(cluster: FakeCluster) -> None:
    cluster.directory.bookie_ids = cluster.directory.bookie_ids[:3]
    w = cluster.client().create_ledger(3, 2, 2)
    cluster.bookies[0].down = True
    with pytest.raises(NotEnoughBookies):
        w.add_entry(b"x")
    with pytest.raises(NotEnoughBookies):
        w.add_entry(b"y")


def test_ensemble_change_retries_after_a_concurrent_open_change(cluster: FakeCluster) -> None:
    w = cluster.client().create_ledger(3, 2, 2, custom_metadata={"k": "1"})
    w.add_entry(b"a")
    cluster.bookies[2].down = True

    def concurrent(ledger_id, proposed):  # e.g. an admin edited custom metadata meanwhile
        current, _ = cluster.store.read(ledger_id)
        cluster.store.force(ledger_id, current.evolve(custom_metadata={"k": b"2"}))

    cluster.store.on_write = concurrent
    assert w.add_entry(b"b") == 1
    md, _ = cluster.store.read(w.ledger_id)
    assert md.custom_metadata == {"k": b"2"}  # the retry kept the concurrent change
    assert len(md.segments) == 2 and cluster.bookies[2].id not in md.segments[1].ensemble


def test_ensemble_change_conflict_with_recovery_fences_the_writer(cluster: FakeCluster) -> None:
    w = cluster.client().create_ledger(3, 2, 2)
    w.add_entry(b"a")
    cluster.bookies[1].down = True  # in the write set of entry 1

    def recovery_started(ledger_id, proposed):
        current, _ = cluster.store.read(ledger_id)
        cluster.store.force(ledger_id, current.evolve(state=LedgerState.IN_RECOVERY))

    cluster.store.on_write = recovery_started
    with pytest.raises(FencedError) as err:
        w.add_entry(b"b")
    assert err.value.ledger_id == w.ledger_id and err.value.entry_id == 1
    with pytest.raises(FencedError):
        w.add_entry(b"c")


def test_efenced_fails_outstanding_and_future_adds(cluster: FakeCluster) -> None:
    w = cluster.client().create_ledger(3, 2, 2)
    w.add_entry(b"a")
    for b in cluster.bookies[:3]:
        b.fenced.add(w.ledger_id)
    futures = [w.add_entry_async(b"x") for _ in range(3)]
    for f in futures:
        with pytest.raises(FencedError):
            f.result(5)
    with pytest.raises(FencedError):
        w.add_entry(b"late")
    assert w.last_add_confirmed == 0


def test_silent_bookie_is_replaced_after_the_add_timeout(cluster: FakeCluster) -> None:
    w = cluster.client().create_ledger(3, 2, 2)
    cluster.bookies[1].hold = True  # stores, never answers
    start = time.monotonic()
    assert w.add_entry(b"a", timeout=10) == 0
    assert 0.9 < time.monotonic() - start < 5
    md, _ = cluster.store.read(w.ledger_id)
    assert cluster.bookies[1].id not in md.segments[-1].ensemble
    assert md.segments[-1].first_entry_id == 0 and len(md.segments) == 1  # nothing acked: replaced in place


def test_close_records_last_acknowledged_entry_and_length(cluster: FakeCluster) -> None:
    w = cluster.client().create_ledger(3, 2, 2)
    for _i in range(5):
        w.add_entry_async(b"12345")
    md = w.close()
    assert md.state is LedgerState.CLOSED and md.last_entry_id == 4 and md.length == 25
    assert cluster.store.read(w.ledger_id)[0] == md
    with pytest.raises(LedgerStateError):
        w.add_entry(b"after close")


def test_close_of_an_empty_ledger(cluster: FakeCluster) -> None:
    with cluster.client().create_ledger(3, 2, 2) as w:
        pass
    md = cluster.store.read(w.ledger_id)[0]
    assert (md.state, md.last_entry_id, md.length) == (LedgerState.CLOSED, -1, 0)


def test_close_conflict_open_retries(cluster: FakeCluster) -> None:
    w = cluster.client().create_ledger(3, 2, 2)
    w.add_entry(b"a")
    cluster.store.on_write = lambda lid, _: cluster.store.force(lid, cluster.store.read(lid)[0])
    assert w.close().last_entry_id == 0


def test_close_conflict_in_recovery_is_an_error(cluster: FakeCluster) -> None:
    w = cluster.client().create_ledger(3, 2, 2)
    w.add_entry(b"a")
    cluster.store.force(w.ledger_id, cluster.store.read(w.ledger_id)[0].evolve(state=LedgerState.IN_RECOVERY))
    with pytest.raises(LedgerStateError, match="IN_RECOVERY"):
        w.close()


def test_close_conflict_closed_at_same_entry_succeeds(cluster: FakeCluster) -> None:
    w = cluster.client().create_ledger(3, 2, 2)
    w.add_entry(b"a")
    w.add_entry(b"b")
    current = cluster.store.read(w.ledger_id)[0]
    cluster.store.force(w.ledger_id, current.evolve(state=LedgerState.CLOSED, last_entry_id=1, length=2))
    assert w.close().last_entry_id == 1


def test_close_conflict_closed_at_other_entry_is_an_error(cluster: FakeCluster) -> None:
    w = cluster.client().create_ledger(3, 2, 2)
    w.add_entry(b"a")
    w.add_entry(b"b")
    current = cluster.store.read(w.ledger_id)[0]
    cluster.store.force(w.ledger_id, current.evolve(state=LedgerState.CLOSED, last_entry_id=0, length=1))
    with pytest.raises(LedgerStateError, match="last entry 0"):
        w.close()


def test_adds_fail_instead_of_hanging_when_the_client_is_closed(cluster: FakeCluster) -> None:
    bk = cluster.client()
    w = bk.create_ledger(3, 2, 2)
    w.add_entry(b"a")
    bk.close()
    cluster.bookies[1].down = True
    with pytest.raises(BookieError, match="client closed"):
        w.add_entry(b"b", timeout=5)
