"""Fencing and recovery against in-memory bookies: where the ledger ends, coverage, convergence, LAC."""

from __future__ import annotations

import threading

import pytest

from bkaudit.errors import FencedError, LedgerStateError, MetadataError, RecoveryError
from bkaudit.formats.entry import DigestManager, master_key
from bkaudit.model.ledger import DigestType, LedgerState, Segment
from tests.client.test_client_fakes import FakeCluster


@pytest.fixture
def cluster():
    c = FakeCluster(n=5, add_timeout_s=1.0, read_timeout_s=1.0)
    yield c
    c.close()


def _writer(cluster: FakeCluster, e: int = 3, wq: int = 2, aq: int = 2, entries: int = 5):
    w = cluster.client().create_ledger(e, wq, aq)
    for i in range(entries):
        w.add_entry(b"payload-%d" % i)
    return w


def _plant(
    cluster: FakeCluster,
    ledger_id: int,
    entry_id: int,
    lac: int,
    length: int,
    bookie_indexes,
    payload: bytes = b"partial",
) -> None:
    """A partially written entry: present on some bookies of its write set only (a crashed writer)."""
    md = cluster.store.read(ledger_id)[0]
    body = DigestManager(ledger_id, md.password, md.digest_type).package(
        entry_id, lac, length + len(payload), payload
    )
    for i in bookie_indexes:
        cluster.pool[md.segments[-1].ensemble[i]].entries.setdefault(ledger_id, {})[entry_id] = body


def test_recovery_closes_at_the_last_acknowledged_entry(cluster: FakeCluster) -> None:
    w = _writer(cluster)
    r = cluster.client().open_ledger(w.ledger_id)
    md = cluster.store.read(w.ledger_id)[0]
    assert md.state is LedgerState.CLOSED and md.last_entry_id == 4
    assert md.length == sum(len(b"payload-%d" % i) for i in range(5))
    assert r.last_add_confirmed == 4
    assert [e.payload for e in r.read_entries(0, 4)] == [b"payload-%d" % i for i in range(5)]


def test_recovery_fences_the_writer(cluster: FakeCluster) -> None:
    w = _writer(cluster)
    cluster.client().open_ledger(w.ledger_id)
    with pytest.raises(FencedError):
        w.add_entry(b"too late")
    assert w.last_add_confirmed == 4


def test_writer_close_after_recovery_at_same_entry_succeeds(cluster: FakeCluster) -> None:
    w = _writer(cluster)
    cluster.client().open_ledger(w.ledger_id)
    assert w.close().last_entry_id == 4


def test_partially_written_entry_is_recovered_and_replicated(cluster: FakeCluster) -> None:
    w = _writer(cluster, entries=3)  # entries 0..2 acked
    length = w.length
    w.abandon()  # the writer crashes
    _plant(cluster, w.ledger_id, 3, 2, length, [0])  # entry 3 (write set 0, 1) reached bookie 0 only
    r = cluster.client().open_ledger(w.ledger_id)
    md = cluster.store.read(w.ledger_id)[0]
    assert md.last_entry_id == 3 and md.length == length + len(b"partial")
    assert r.read_entry(3).payload == b"partial"
    assert 3 in cluster.pool[md.segments[0].ensemble[1]].entries[w.ledger_id]  # written back
    adds = [a for a in cluster.pool[md.segments[0].ensemble[1]].adds if a[1] == 3]
    assert adds and all(recovery for _, _, recovery in adds)


def test_entry_absent_on_threshold_bookies_ends_the_ledger(cluster: FakeCluster) -> None:
    # E3 WQ3 AQ2: absent threshold 2. Entry 3 on one bookie only = never acknowledged -> may be dropped.
    w = _writer(cluster, 3, 3, 2, entries=3)
    w.abandon()
    _plant(cluster, w.ledger_id, 3, 2, w.length, [2])
    cluster.pool[cluster.store.read(w.ledger_id)[0].segments[0].ensemble[2]].down = False
    md, _ = cluster.client().open_ledger(w.ledger_id).metadata, None
    assert md.last_entry_id in (2, 3)  # both are safe: entry 3 was never acknowledged
    assert md.is_closed


def test_recovery_starts_from_max_lac_of_fence_answers(cluster: FakeCluster) -> None:
    w = _writer(cluster, entries=6)
    w.abandon()
    r = cluster.client().open_ledger(w.ledger_id)
    ensemble = r.metadata.segments[0].ensemble
    fence_reads = [x for b in ensemble for x in cluster.pool[b].reads if x[1] == -1]
    assert len(fence_reads) == 3 and all(f for _, _, f in fence_reads)
    forward = sorted({x[1] for b in ensemble for x in cluster.pool[b].reads if x[1] >= 0 and x[2]})
    assert forward[0] >= 4  # the last entries carry LAC 4: nothing below was re-read
    assert r.last_add_confirmed == 5


def test_recovery_of_an_empty_ledger(cluster: FakeCluster) -> None:
    w = cluster.client().create_ledger(3, 2, 2)
    w.abandon()
    r = cluster.client().open_ledger(w.ledger_id)
    assert (r.metadata.state, r.metadata.last_entry_id, r.metadata.length) == (LedgerState.CLOSED, -1, 0)
    assert r.last_add_confirmed == -1


def test_recovery_with_one_bookie_down_e3_wq2_aq2(cluster: FakeCluster) -> None:
    w = _writer(cluster, entries=4)
    w.abandon()
    cluster.pool[w.metadata.segments[0].ensemble[0]].down = True
    r = cluster.client().open_ledger(w.ledger_id)
    assert r.metadata.last_entry_id == 3
    assert [e.entry_id for e in r.read_entries()] == [0, 1, 2, 3]


def test_recovery_write_back_with_a_dead_bookie_changes_the_ensemble(cluster: FakeCluster) -> None:
    w = _writer(cluster, entries=2)
    length = w.length
    w.abandon()
    ensemble = w.metadata.segments[0].ensemble
    _plant(cluster, w.ledger_id, 2, 1, length, [2])  # entry 2: write set (2, 0); bookie 0 is dead
    cluster.pool[ensemble[0]].down = True
    md = cluster.client().open_ledger(w.ledger_id).metadata
    assert md.last_entry_id == 2
    assert len(md.segments) == 2 and md.segments[1].first_entry_id == 2
    assert ensemble[0] not in md.segments[1].ensemble


@pytest.mark.parametrize(
    ("e", "wq", "aq", "down", "ok"),
    [
        (3, 2, 2, 1, True),
        (3, 2, 2, 2, False),
        (3, 3, 2, 1, True),
        (3, 3, 2, 2, False),
        (3, 3, 3, 2, True),
    ],
)
def test_recovery_coverage_with_bookies_down(cluster: FakeCluster, e, wq, aq, down, ok) -> None:
    w = _writer(cluster, e, wq, aq, entries=3)
    w.abandon()
    for b in w.metadata.segments[0].ensemble[:down]:
        cluster.pool[b].down = True
    bk = cluster.client()
    if ok:
        assert bk.open_ledger(w.ledger_id).metadata.last_entry_id == 2
        return
    with pytest.raises(RecoveryError) as err:
        bk.open_ledger(w.ledger_id)
    text = str(err.value)
    assert f"ledger {w.ledger_id}" in text and "write sets lacking" in text
    assert cluster.store.read(w.ledger_id)[0].state is LedgerState.IN_RECOVERY


def test_unreadable_entry_fails_recovery(cluster: FakeCluster) -> None:
    w = _writer(cluster, 3, 2, 2, entries=2)
    w.abandon()
    ens = w.metadata.segments[0].ensemble
    _plant(cluster, w.ledger_id, 2, 1, w.length, [2])  # entry 2 (write set 2, 0) exists but cannot be read
    for i in (2, 0):
        cluster.pool[ens[i]].read_errors[2] = "EIO"
    with pytest.raises(RecoveryError, match="entry 2"):
        cluster.client().open_ledger(w.ledger_id)


def test_concurrent_recoverers_converge(cluster: FakeCluster) -> None:
    w = _writer(cluster, entries=3)
    w.abandon()
    _plant(cluster, w.ledger_id, 3, 2, w.length, [0])
    results: list[object] = []

    def recover() -> None:
        try:
            results.append(cluster.client().open_ledger(w.ledger_id).metadata.last_entry_id)
        except Exception as exc:  # pragma: no cover - reported below
            results.append(exc)

    threads = [threading.Thread(target=recover) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    final = cluster.store.read(w.ledger_id)[0].last_entry_id
    assert results == [final] * 4 and final == 3


def test_recovery_of_a_closed_ledger_does_nothing(cluster: FakeCluster) -> None:
    w = _writer(cluster, entries=2)
    w.close()
    writes = len(cluster.store.writes)
    r = cluster.client().open_ledger(w.ledger_id)
    assert r.last_add_confirmed == 1 and len(cluster.store.writes) == writes
    assert not any(x[2] for b in cluster.bookies for x in b.reads)  # no fencing reads


def test_open_without_recovery_reads_up_to_lac_and_leaves_the_writer_alone(cluster: FakeCluster) -> None:
    w = _writer(cluster, entries=5)
    r = cluster.client().open_ledger(w.ledger_id, recover=False)
    assert r.metadata.state is LedgerState.OPEN
    assert r.last_add_confirmed == 3  # entry 4 carries LAC 3; entry 4 itself is not known acked
    assert [e.entry_id for e in r.read_entries()] == [0, 1, 2, 3]
    with pytest.raises(LedgerStateError):
        r.read_entry(4)
    assert w.add_entry(b"more") == 5  # not fenced


def test_open_without_recovery_uses_explicit_lac(cluster: FakeCluster) -> None:
    w = _writer(cluster, entries=5)
    dm = DigestManager(w.ledger_id, b"", DigestType.CRC32C)
    cluster.pool[w.metadata.segments[0].ensemble[0]].lacs[w.ledger_id] = dm.package_lac(4)
    assert cluster.client().open_ledger(w.ledger_id, recover=False).last_add_confirmed == 4


def test_open_with_wrong_password_does_not_fence(cluster: FakeCluster) -> None:
    w = cluster.client().create_ledger(3, 2, 2, password=b"right")
    w.add_entry(b"a")
    with pytest.raises(MetadataError, match="password"):
        cluster.client().open_ledger(w.ledger_id, password=b"wrong")
    assert w.add_entry(b"b") == 1
    assert cluster.client().open_ledger(w.ledger_id, password="right").last_add_confirmed == 1


def test_read_falls_back_to_the_next_replica(cluster: FakeCluster) -> None:
    w = _writer(cluster, entries=3)
    w.close()
    first = w.metadata.segments[0].ensemble[0]  # first replica of entry 0
    cluster.pool[first].down = True
    r = cluster.client().open_ledger(w.ledger_id)
    assert r.read_entry(0).payload == b"payload-0"


def test_master_key_is_sent_with_fence_reads(cluster: FakeCluster) -> None:
    seen = []
    w = cluster.client().create_ledger(3, 2, 2, password=b"pw")
    w.add_entry(b"a")
    w.abandon()
    b0 = cluster.bookies[0]
    original = b0.read_entry

    def spy(ledger_id, entry_id, *, fence=False, master_key=None, high_priority=False):
        seen.append((fence, master_key, high_priority))
        return original(ledger_id, entry_id, fence=fence, master_key=master_key, high_priority=high_priority)

    b0.read_entry = spy
    cluster.client().open_ledger(w.ledger_id)
    assert seen and all(s == (True, master_key(b"pw"), True) for s in seen)


def test_segments_of_recovered_metadata(cluster: FakeCluster) -> None:
    w = _writer(cluster, entries=1)
    w.abandon()
    md = cluster.client().open_ledger(w.ledger_id).metadata
    assert md.segments == (Segment(0, w.metadata.segments[0].ensemble),)


def _wipe_into_limbo(cluster: FakeCluster, ledger_id: int, bookie: str) -> None:
    """The bookie lost its data and came back with the ledger in limbo (the data-integrity check)."""
    b = cluster.pool[bookie]
    b.entries.pop(ledger_id, None)
    b.fenced.add(ledger_id)
    b.limbo.add(ledger_id)


def test_limbo_answers_are_unknown_not_absent_in_fencing_and_recovery_reads(cluster: FakeCluster) -> None:
    # E2 WQ2 AQ2: one ENOLEDGER would fence and declare entry 0 absent (WQ-AQ+1 = 1); EUNKNOWN must not
    w = _writer(cluster, 2, 2, 2, entries=6)
    w.abandon()
    wiped, healthy = w.metadata.segments[0].ensemble
    _wipe_into_limbo(cluster, w.ledger_id, wiped)
    cluster.pool[healthy].down = True
    with pytest.raises(RecoveryError):
        cluster.client().open_ledger(w.ledger_id)
    assert not cluster.store.read(w.ledger_id)[0].is_closed  # nothing decided on the limbo bookie's word
    cluster.pool[healthy].down = False
    r = cluster.client().open_ledger(w.ledger_id)
    assert r.metadata.last_entry_id == 5
    assert [e.payload for e in r.read_entries(0, 5)] == [b"payload-%d" % i for i in range(6)]


def test_limbo_bookie_does_not_count_towards_the_absent_threshold(cluster: FakeCluster) -> None:
    # E3 WQ3 AQ2 (threshold 2): entry 3 reached one bookie; a limbo bookie + a bookie without it are not
    # two "absent" answers, and the third bookie's copy is found and written back
    w = _writer(cluster, 3, 3, 2, entries=3)
    w.abandon()
    ensemble = w.metadata.segments[0].ensemble
    _plant(cluster, w.ledger_id, 3, 2, w.length, [2])
    _wipe_into_limbo(cluster, w.ledger_id, ensemble[0])
    r = cluster.client().open_ledger(w.ledger_id)
    assert r.metadata.last_entry_id == 3  # entry 3 survives: only one bookie said it lacks it


def test_lac_read_ignores_a_limbo_bookie(cluster: FakeCluster) -> None:
    w = _writer(cluster, 2, 2, 2, entries=4)
    wiped, healthy = w.metadata.segments[0].ensemble
    _wipe_into_limbo(cluster, w.ledger_id, wiped)
    r = cluster.client().open_ledger(w.ledger_id, recover=False)
    assert r.last_add_confirmed >= 2  # the healthy bookie's last entry carries LAC 2 (piggy-backed)
    cluster.pool[healthy].down = True
    from bkaudit.errors import BookieError

    with pytest.raises(BookieError):  # not "LAC -1": a limbo bookie does not say the ledger is empty
        cluster.client().open_ledger(w.ledger_id, recover=False)


@pytest.mark.parametrize("declared", [False, True])
def test_a_bookie_known_to_have_lost_its_copies_cannot_end_the_ledger(cluster: FakeCluster, declared) -> None:
    # E2 WQ2 AQ2 (threshold 1): both bookies acknowledged entries 0..3, then one was wiped and came back under
    # the same id (no limbo). Its ENOLEDGER alone ends the ledger at -1 when nobody says it lost its copies
    # (BookKeeper's rule); declared as lost, it counts as no answer, so recovery waits for the other bookie
    w = _writer(cluster, 2, 2, 2, entries=4)
    w.abandon()
    wiped, healthy = w.metadata.segments[0].ensemble
    cluster.pool[wiped].entries.pop(w.ledger_id)
    cluster.pool[healthy].down = True
    lost = frozenset({wiped}) if declared else frozenset()
    if not declared:
        assert cluster.client().open_ledger(w.ledger_id, lost_copies=lost).metadata.last_entry_id == -1
        return
    with pytest.raises(RecoveryError, match="lost its copies"):
        cluster.client().open_ledger(w.ledger_id, lost_copies=lost)
    assert not cluster.store.read(w.ledger_id)[0].is_closed
    cluster.pool[healthy].down = False
    r = cluster.client().open_ledger(w.ledger_id, lost_copies=lost)
    assert r.metadata.last_entry_id == 3
    assert [e.payload for e in r.read_entries(0, 3)] == [b"payload-%d" % i for i in range(4)]
    # recovery reads on from the healthy bookie's LAC (2) and writes entry 3 back; 0..2 are the worker's copy
    assert set(cluster.pool[wiped].entries[w.ledger_id]) == {3}
