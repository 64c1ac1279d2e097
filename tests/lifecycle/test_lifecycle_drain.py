"""Draining bookies end to end on real processes: bookies, the Auditor and workers (`autorecovery run`), a
writer.

Ground truth is what the test did: the payloads its writer had acknowledged, the bookies it put in Draining,
the copy it wiped and the bookie it killed.
"""

from __future__ import annotations

import threading
import time

import pytest

from bkaudit.bookie.storage import Storage
from bkaudit.client import BookKeeper
from bkaudit.lifecycle import service
from bkaudit.model import lifecycle as lc
from bkaudit.store import ZkStore
from bkaudit.zk import dataloss, registry
from bkaudit.zk import lifecycle as store
from tests.autorecovery.support import (
    assert_readable,
    durability_violations,
    payload,
    start_run,
    stop,
    wait_absent,
    wait_for,
    write_ledgers,
)
from tests.autorecovery.test_autorecovery_drain import DURABILITY, checker

pytestmark = [pytest.mark.slow, pytest.mark.spark]

S = lc.LifecycleState
DRAIN_FAST = {"BKAUDIT_LIFECYCLE__DRAIN_CHECK_INTERVAL_S": "1", "BKAUDIT_LIFECYCLE__DRAIN_MAX_FAILURES": "3"}


class Writer(threading.Thread):
    """Keeps creating, filling and closing ledgers; records each ledger's first ensemble and payloads."""

    def __init__(self, bk: BookKeeper) -> None:
        super().__init__(name="writer", daemon=True)
        self.bk = bk
        self.stop = threading.Event()
        self.created: list[tuple[float, int, tuple[str, ...]]] = []  # (created at, ledger, first ensemble)
        self.truth: dict[int, list[bytes]] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        n = 1000
        try:
            while not self.stop.is_set():
                started = time.monotonic()
                with self.bk.create_ledger(3, 2, 2) as handle:
                    first = tuple(handle.metadata.segments[0].ensemble)
                    futures = [handle.add_entry_async(payload(n, e)) for e in range(20)]
                    assert [f.result(60) for f in futures] == list(range(20))
                self.created.append((started, handle.ledger_id, first))
                self.truth[handle.ledger_id] = [payload(n, e) for e in range(20)]
                n += 1
                self.stop.wait(0.05)
        except BaseException as exc:  # reported by the test
            self.error = exc


def test_two_bookies_drain_at_once_while_a_writer_keeps_writing(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(bookies=6, racks=6)
    zk = cluster.zk_client()
    bk = BookKeeper.connect(cluster.zk_settings())
    writer = Writer(bk)
    ar = None
    try:
        truth = write_ledgers(bk, 30, 30)
        holders: dict[str, int] = {}
        for lid in truth:
            for b in bk.ledger_metadata(lid).bookies():
                holders[b] = holders.get(b, 0) + 1
        leaving = sorted(holders, key=lambda b: -holders[b])[:2]
        assert all(holders[b] >= 5 for b in leaving)
        ar = start_run(cluster, tmp_path, "ar", "--workers", "2", **DRAIN_FAST)
        writer.start()
        wait_for(lambda: len(writer.created) >= 3, 60, "the writer to get going")

        cs = ZkStore(zk, root=cluster.root)
        for b in leaving:  # the same code path as `bkaudit lifecycle drain` and the HTTP API
            service.transition(cs, b, S.DRAINING, actor=lc.Actor.OPERATOR, by="test", reason="scale down")
        wait_for(lambda: all(registry.bookie_state(zk, b, cluster.root) == "readonly" for b in leaving), 30,
                 "both to serve reads only")
        read_only_at = time.monotonic()
        wait_for(lambda: all(service.current(cs, b)[0] is S.DRAINED for b in leaving), 240,
                 "both bookies to be Drained", interval_s=0.5)
        wait_for(lambda: any(t > read_only_at for t, _, _ in writer.created), 60, "a ledger after the drain")
        writer.stop.set()
        writer.join(120)
        assert writer.error is None, writer.error
    finally:
        writer.stop.set()
        if ar is not None:
            stop(ar)

    try:
        # no ledger references them; every acknowledged entry is fully replicated and reads back
        everything = {**truth, **writer.truth}
        assert cs.index.ledgers_of(leaving) == {b: {} for b in leaving}
        assert durability_violations(cluster, bk, sorted(everything), lost=set(leaving)) == []
        assert_readable(bk, everything)
        # the writer never placed a new ledger on them once they served reads only
        late = [(lid, ens) for t, lid, ens in writer.created if t > read_only_at]
        assert late and all(not set(ens) & set(leaving) for _, ens in late)
        # who moved them and why
        for b in leaving:
            history = store.history(zk, b, root=cluster.root)
            assert [(h.state, h.by) for h in history] == [(S.DRAINING, "test"), (S.DRAINED, "auditor")]
            progress = store.read_progress(zk, b, root=cluster.root)
            assert progress["ledgers_left"] == 0 and progress["bytes_left"] == 0
        code, summary = checker(cluster, tmp_path / "warehouse")
        assert code in (0, 2), summary
        assert {c: summary["counts"].get(c, 0) for c in DURABILITY} == dict.fromkeys(DURABILITY, 0), summary
        # drained: removal deletes cookie and state together
        for b in leaving:
            cluster.stop_bookie(b)
            service.transition(cs, b, S.REMOVED, actor=lc.Actor.OPERATOR, by="test")
            assert registry.read_cookie(zk, b, cluster.root) is None
    finally:
        bk.close()


def test_a_ledger_without_a_surviving_copy_ends_in_draining_failed(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(bookies=3, racks=3)
    zk = cluster.zk_client()
    with BookKeeper.connect(cluster.zk_settings()) as bk:
        truth = write_ledgers(bk, 6, 20, ensemble=2, wq=2, aq=2)
        victim = bk.ledger_metadata(min(truth)).segments[0].ensemble[0]
        on_victim = sorted(lid for lid in truth if victim in bk.ledger_metadata(lid).bookies())
        doomed = on_victim[0]
        other = next(b for b in bk.ledger_metadata(doomed).bookies() if b != victim)
        # the only other copy of `doomed` is wiped, and the draining bookie's host is down
        cluster.stop_bookie(other)
        with Storage(cluster.bookie(other).data_dir) as storage:
            assert storage.delete_entries(doomed, range(20)) == 20
        cluster.start_bookie(other)
        cluster.kill_bookie(victim)
        wait_absent(cluster, victim, 60)  # its host is down: no replica to read from there
        cs = ZkStore(zk, root=cluster.root)
        service.transition(cs, victim, S.DRAINING, actor=lc.Actor.OPERATOR, by="test")

        ar = start_run(
            cluster, tmp_path, "ar", "--workers", "1", BKAUDIT_AUTORECOVERY__DATA_LOSS_MAX_ATTEMPTS="2",
            **DRAIN_FAST,
        )
        try:
            wait_for(lambda: service.current(cs, victim)[0] is S.DRAINING_FAILED, 180,
                     "DrainingFailed", interval_s=0.5)
        finally:
            stop(ar)
        record, _ = store.read_state(zk, victim, root=cluster.root)
        assert record is not None and record.by == "auditor"
        assert f"data loss recorded [{doomed}]" in record.reason
        assert dataloss.exists(zk, doomed, root=cluster.root)
        # everything that could move has moved: only the doomed ledger still references the bookie
        assert sorted(cs.index.ledgers_of([victim])[victim]) == [doomed]
        progress = store.read_progress(zk, victim, root=cluster.root)
        assert progress["data_loss_ledgers"] == [doomed] and progress["ledgers_left"] == 1
        # the operator cannot accept it while the bad ledger is there; the refusal names it
        with pytest.raises(lc.TransitionRefused) as refused:
            service.transition(cs, victim, S.DRAINED, actor=lc.Actor.OPERATOR, by="op")
        assert refused.value.blockers == (f"ledger {doomed} (data loss recorded)",)
        bk.delete_ledger(doomed)  # dealt with: the data is gone anyway
        service.transition(cs, victim, S.DRAINED, actor=lc.Actor.OPERATOR, by="op")
        survivors = {lid: p for lid, p in truth.items() if lid != doomed}
        assert durability_violations(cluster, bk, sorted(survivors), lost={victim}) == []
