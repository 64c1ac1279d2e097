"""The Auditor's drain pass on the embedded ZooKeeper (no bookies: markers, progress and decisions only)."""

from __future__ import annotations

from bkaudit.lifecycle import service
from bkaudit.lifecycle.drain import Drainer, LifecycleCache
from bkaudit.lifecycle.settings import LifecycleSettings
from bkaudit.model import lifecycle as lc
from bkaudit.zk import dataloss, paths
from bkaudit.zk import lifecycle as store
from bkaudit.zk import underreplication as ur
from tests.admin.support import add_cookie, add_ledger

S = lc.LifecycleState
A, B, C, D = (f"10.0.0.{i}:3181" for i in range(1, 5))


def drain(zk, root: str, bookie: str) -> None:
    service.transition(zk, bookie, S.DRAINING, actor=lc.Actor.OPERATOR, by="t", root=root)


def test_markers_name_every_draining_bookie_and_progress_is_recorded(zk, zk_root) -> None:
    for b in (A, B, C, D):
        add_cookie(zk, zk_root, b)
    add_ledger(zk, zk_root, 1, (A, B, C), length=300)
    add_ledger(zk, zk_root, 2, (A, C, D), length=500)
    add_ledger(zk, zk_root, 3, (C, D), length=700)
    drain(zk, zk_root, A)
    drain(zk, zk_root, B)
    drainer = Drainer(zk, root=zk_root, settings=LifecycleSettings(drain_check_interval_s=1))
    progress = drainer.step()
    assert sorted(ur.list_underreplicated(zk, root=zk_root)) == [1, 2]
    assert set(ur.get_marker(zk, 1, root=zk_root)[0].replicas) == {A, B}  # planned against both
    assert ur.get_marker(zk, 2, root=zk_root)[0].replicas == (A,)
    assert (progress[A]["ledgers_left"], progress[A]["bytes_left"]) == (2, 800)
    assert (progress[B]["ledgers_left"], progress[B]["bytes_left"]) == (1, 300)
    cache = LifecycleCache(zk, root=zk_root, ttl_s=0)
    assert cache.draining() == {A, B} and cache.not_active() == {A, B}

    # the workers moved ledger 1 off both bookies: B is drained, A still holds ledger 2
    zk.delete(paths.ledger_path(1, root=zk_root))
    add_ledger(zk, zk_root, 1, (D, C, "10.0.0.5:3181"), length=300)
    drainer.step()
    assert service.current(zk, B, root=zk_root)[0] is S.DRAINED
    assert service.current(zk, A, root=zk_root)[0] is S.DRAINING
    assert cache.draining() == {A} and cache.not_active() == {A, B}

    # ledger 2 cannot be replicated (data loss recorded): everything left is bad -> DrainingFailed
    dataloss.write(zk, dataloss.DataLossRecord(2, ((0, 9),), dataloss.now_iso(), (A,), 3, "w"), root=zk_root)
    drainer.step()
    record, _ = store.read_state(zk, A, root=zk_root)
    assert record is not None and record.state is S.DRAINING_FAILED and record.by == "auditor"
    assert store.read_progress(zk, A, root=zk_root)["data_loss_ledgers"] == [2]


def test_repeated_failures_count_only_when_nothing_else_is_left(zk, zk_root) -> None:
    for b in (A, B, C):
        add_cookie(zk, zk_root, b)
    add_ledger(zk, zk_root, 5, (A, B))
    add_ledger(zk, zk_root, 6, (A, C))
    drain(zk, zk_root, A)
    drainer = Drainer(zk, root=zk_root, settings=LifecycleSettings(drain_max_failures=2))
    for _ in range(2):
        store.record_failure(zk, A, 5, "NotEnoughBookies", "t", root=zk_root)
    drainer.step()
    assert service.current(zk, A, root=zk_root)[0] is S.DRAINING  # ledger 6 can still move
    assert store.read_progress(zk, A, root=zk_root)["failed_ledgers"] == [5]
    zk.delete(paths.ledger_path(6, root=zk_root))
    drainer.step()
    assert service.current(zk, A, root=zk_root)[0] is S.DRAINING_FAILED


def test_nothing_is_published_while_replication_is_disabled(zk, zk_root) -> None:
    add_cookie(zk, zk_root, A)
    add_ledger(zk, zk_root, 9, (A, B))
    drain(zk, zk_root, A)
    ur.disable_replication(zk, root=zk_root)
    Drainer(zk, root=zk_root, settings=LifecycleSettings()).step()
    assert list(ur.list_underreplicated(zk, root=zk_root)) == []
    assert store.read_progress(zk, A, root=zk_root)["ledgers_left"] == 1
