"""Metadata changed concurrently during the ensemble swap: the worker re-reads and still converges.

The worker runs in-process (real bookies, real ZooKeeper) so the test can change the metadata at the exact
moment the copy is under way: once harmlessly (another field: the CAS conflicts, the worker re-reads and
re-applies), once by replacing the lost bookie itself (the segment changed: the worker re-evaluates and
refills the new bookie instead of forcing its own choice).
"""

from __future__ import annotations

import pytest

from bkaudit import config
from bkaudit.autorecovery.service import AutoRecoveryService
from bkaudit.client import BookKeeper
from bkaudit.model.ledger import Segment
from bkaudit.zk import ledgers
from bkaudit.zk import underreplication as ur
from tests.autorecovery.support import (
    assert_readable,
    durability_violations,
    events,
    queue,
    wait_absent,
    wait_for,
    write_ledgers,
)

pytestmark = [pytest.mark.slow]


def service(cluster, tmp_path):
    settings = config.load(
        environ={},
        overrides={
            "zk.connect": cluster.zk,
            "zk.root": cluster.root,
            "zk.session_timeout_s": 6,
            "autorecovery.replication_rate_by_bytes": 20000,
            "autorecovery.idle_poll_s": 0.2,
            "autorecovery.lock_release_of_failed_ledger_grace_s": 1.6,
        },
    )
    return AutoRecoveryService(settings, node_id="w", auditor=False, events_path=str(tmp_path / "w.events"))


def copying(tmp_path, ledger_id):
    return [e for e in events(tmp_path, "w") if e["event"] == "copy" and e["ledger"] == ledger_id]


def setup(cluster, bookies_needed: int = 4):
    zk = cluster.zk_client()
    bk = BookKeeper.connect(cluster.zk_settings())
    truth = write_ledgers(bk, 1, 900)
    (ledger_id,) = truth
    ensemble = bk.ledger_metadata(ledger_id).segments[0].ensemble
    victim = ensemble[1]
    cluster.kill_bookie(victim)
    wait_absent(cluster, victim)
    ur.mark_underreplicated(zk, ledger_id, [victim], root=cluster.root)
    return zk, bk, truth, ledger_id, ensemble, victim


def test_cas_conflict_during_the_swap_is_retried(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(bookies=4, racks=4)
    zk, bk, truth, ledger_id, _, victim = setup(cluster)
    svc = service(cluster, tmp_path).start()
    try:
        wait_for(lambda: copying(tmp_path, ledger_id), 30, "the copy to start")
        metadata, stat = ledgers.read_ledger_metadata(zk, ledger_id, root=cluster.root)
        ledgers.write_ledger_metadata(
            zk,
            ledger_id,
            metadata.evolve(custom_metadata={"touched": b"yes"}),
            expected_version=stat.version,
            root=cluster.root,
        )
        summary = svc.drain(timeout_s=60)
    finally:
        svc.stop()
    assert summary.exit_code == 0, summary.data
    kinds = [e["event"] for e in events(tmp_path, "w")]
    assert "swap_conflict" in kinds and kinds.count("swapped") == 1
    final = bk.ledger_metadata(ledger_id)
    assert final.custom_metadata == {"touched": b"yes"}  # the concurrent change survived
    assert victim not in final.bookies()
    assert queue(cluster) == []
    assert durability_violations(cluster, bk, [ledger_id], lost={victim}) == []
    assert_readable(bk, truth)
    bk.close()


def test_segment_changed_under_the_worker_is_re_evaluated(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(bookies=5, racks=5)
    zk, bk, truth, ledger_id, ensemble, victim = setup(cluster)
    svc = service(cluster, tmp_path).start()
    try:
        copy = wait_for(lambda: copying(tmp_path, ledger_id), 30, "the copy to start")[0]
        spare = next(b for b in cluster.ids() if b not in ensemble and b != copy["target"])
        # an operator (or another tool) swaps the lost bookie for `spare` without copying anything
        metadata, stat = ledgers.read_ledger_metadata(zk, ledger_id, root=cluster.root)
        replaced = tuple(spare if b == victim else b for b in metadata.segments[0].ensemble)
        ledgers.write_ledger_metadata(
            zk,
            ledger_id,
            metadata.evolve(segments=(Segment(0, replaced),)),
            expected_version=stat.version,
            root=cluster.root,
        )
        summary = svc.drain(timeout_s=90)
    finally:
        svc.stop()
    assert summary.exit_code == 0, summary.data
    evs = [e for e in events(tmp_path, "w") if e.get("ledger") == ledger_id]
    kinds = [e["event"] for e in evs]
    assert "segment_changed" in kinds and "swapped" not in kinds
    refill = [e for e in evs if e["event"] == "copy" and e["reason"] == "missing_entries"]
    assert refill and refill[-1]["target"] == spare  # the bookie now in the ensemble gets its entries
    final = bk.ledger_metadata(ledger_id)
    assert final.segments[0].ensemble == replaced  # the worker did not force its own target
    assert durability_violations(cluster, bk, [ledger_id], lost={victim}) == []
    assert_readable(bk, truth)
    bk.close()
