"""Draining a bookie that OPEN ledgers with live writers still name (the demo's ledger 4).

A writer whose bookie goes read-only (Draining) changes ensembles on its next add (EREADONLY): the draining
bookie then stays only in an earlier, closed segment of a still-open ledger - possibly at an index that stores
no entry of that segment. The drain counts every ensemble naming the bookie, so the worker must swap it out of
that segment while the writer keeps writing (no fencing), and an idle writer's open last segment naming it is
fenced after the grace and moved as closed. The drain must reach Drained, not mark and skip forever.
"""

from __future__ import annotations

import threading

import pytest

from bkaudit.client import BookKeeper
from bkaudit.errors import FencedError
from bkaudit.lifecycle import service
from bkaudit.model import lifecycle as lc
from bkaudit.model.ledger import LedgerState
from bkaudit.store import ZkStore
from bkaudit.zk import lifecycle as store
from bkaudit.zk import registry
from tests.autorecovery.support import (
    assert_readable,
    durability_violations,
    events,
    payload,
    start_run,
    stop,
    wait_for,
)

pytestmark = [pytest.mark.slow]

S = lc.LifecycleState
DRAIN_FAST = {"BKAUDIT_LIFECYCLE__DRAIN_CHECK_INTERVAL_S": "1", "BKAUDIT_LIFECYCLE__DRAIN_MAX_FAILURES": "3"}


def test_open_ledgers_with_live_writers_do_not_keep_a_bookie_draining(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(bookies=5, racks=5)
    zk = cluster.zk_client()
    bk = BookKeeper.connect(cluster.zk_settings())
    live = bk.create_ledger(3, 2, 2)
    idle = None
    others = []
    stop_writing = threading.Event()
    acked: list[bytes] = []
    errors: list[BaseException] = []
    ar = None
    try:
        acked.append(payload(0, 0))
        assert live.add_entry(acked[0], timeout=30) == 0
        # E=3, WQ=2: entry 0 is on indexes 0 and 1; index 2 stores nothing of the first segment
        victim = live.metadata.segments[0].ensemble[2]
        # an idle writer whose (only, open) segment names the victim and stores entries on it
        for _ in range(40):
            handle = bk.create_ledger(3, 2, 2)
            if victim in handle.metadata.segments[0].ensemble:
                idle = handle
                break
            others.append(handle)
        assert idle is not None
        idle_acked = [payload(1, e) for e in range(12)]
        for e, p in enumerate(idle_acked):  # one at a time: the bookies learn the LAC from the next entry
            assert idle.add_entry(p, timeout=30) == e

        cs = ZkStore(zk, root=cluster.root)
        service.transition(cs, victim, S.DRAINING, actor=lc.Actor.OPERATOR, by="test", reason="scale down")
        wait_for(lambda: registry.bookie_state(zk, victim, cluster.root) == "readonly", 30, "read-only")
        # entry 1's write set is {1, 2}: the victim refuses it (EREADONLY) and the writer changes ensembles
        acked.append(payload(0, 1))
        assert live.add_entry(acked[1], timeout=60) == 1
        md = bk.ledger_metadata(live.ledger_id)
        assert md.state is LedgerState.OPEN and len(md.segments) == 2
        assert victim in md.segments[0].ensemble and victim not in md.segments[-1].ensemble

        def keep_writing() -> None:
            try:
                while not stop_writing.wait(0.2):
                    p = payload(0, len(acked))
                    assert live.add_entry(p, timeout=60) == len(acked)
                    acked.append(p)
            except BaseException as exc:  # reported by the test
                errors.append(exc)

        writer = threading.Thread(target=keep_writing, name="live-writer", daemon=True)
        writer.start()
        ar = start_run(cluster, tmp_path, "ar", "--workers", "2", **DRAIN_FAST)
        wait_for(lambda: service.current(cs, victim)[0] is S.DRAINED, 120, "Drained",
                 interval_s=0.5)
        stop_writing.set()
        writer.join(90)
        assert not errors, errors
    finally:
        stop_writing.set()
        if ar is not None:
            stop(ar)

    try:
        assert cs.index.ledgers_of([victim]) == {victim: {}}
        progress = store.read_progress(zk, victim, root=cluster.root)
        assert progress["ledgers_left"] == 0 and progress["waiting_open_ledgers"] == []
        seen = [e for e in events(tmp_path, "ar") if e.get("ledger") == live.ledger_id]
        # the live writer's earlier segment was swapped while the ledger stayed open: no fencing
        assert any(e["event"] == "swapped" and e["segment"] == 0 for e in seen)
        assert not any(e["event"] == "fencing" for e in seen)
        assert bk.ledger_metadata(live.ledger_id).state is LedgerState.OPEN
        assert len(acked) > 2
        live.close()
        # the idle writer was given its grace, then fenced, recovered and moved as a closed ledger
        idle_events = {e["event"] for e in events(tmp_path, "ar") if e.get("ledger") == idle.ledger_id}
        assert {"deferred_open", "fencing", "recovered", "swapped"} <= idle_events
        with pytest.raises(FencedError):
            idle.add_entry(b"late", timeout=30)
        truth = {live.ledger_id: acked, idle.ledger_id: idle_acked}
        assert durability_violations(cluster, bk, sorted(truth), lost={victim}) == []
        assert_readable(bk, truth)
    finally:
        live.abandon()
        if idle is not None:
            idle.abandon()
        for handle in others:
            handle.abandon()
        bk.close()
