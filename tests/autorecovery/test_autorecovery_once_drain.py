"""`bkaudit autorecovery run --once` finishes the drain it started (issue 30, item 8).

Real processes: bookies and one `autorecovery run --once` process, which is elected Auditor, so its drain
pass marks the Draining bookie's ledgers and its worker moves them. The drain interval is far longer than the
run, so only a drain pass that `--once` itself runs after the queue empties can decide Drained. Ground truth
is what the test did: the ledgers it wrote and their payloads, the bookie it put in Draining; the ensembles
are read back through the ledger client's metadata, not through bkaudit's drain index.
"""

from __future__ import annotations

import pytest

from bkaudit.client import BookKeeper
from bkaudit.lifecycle import service
from bkaudit.model import lifecycle as lc
from bkaudit.store import ZkStore
from bkaudit.zk import lifecycle as store
from bkaudit.zk import registry
from tests.autorecovery.support import assert_readable, run_once, wait_for, write_ledgers

pytestmark = [pytest.mark.slow]

S = lc.LifecycleState
ONE_PASS_ONLY = {"BKAUDIT_LIFECYCLE__DRAIN_CHECK_INTERVAL_S": "3600"}


def test_once_ends_the_drain_it_started_drained(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(bookies=4, racks=4)
    zk = cluster.zk_client()
    with BookKeeper.connect(cluster.zk_settings()) as bk:
        truth = write_ledgers(bk, 8, 20)
        holders: dict[str, int] = {}
        for lid in truth:
            for b in bk.ledger_metadata(lid).bookies():
                holders[b] = holders.get(b, 0) + 1
        leaving = max(holders, key=lambda b: holders[b])
        on_leaving = sorted(lid for lid in truth if leaving in bk.ledger_metadata(lid).bookies())
        assert len(on_leaving) >= 3

        cs = ZkStore(zk, root=cluster.root)
        service.transition(cs, leaving, S.DRAINING, actor=lc.Actor.OPERATOR, by="test")
        wait_for(lambda: registry.bookie_state(zk, leaving, cluster.root) == "readonly", 30, "reads only")

        code, summary = run_once(cluster, tmp_path, "once", "--timeout", "150", timeout=200, **ONE_PASS_ONLY)
        assert code == 0, summary
        assert summary["replicated"] == len(on_leaving), summary

        # the same run decided: Drained by the Auditor, progress says nothing is left
        assert service.current(cs, leaving)[0] is S.DRAINED
        history = store.history(zk, leaving, root=cluster.root)
        assert [(h.state, h.by) for h in history] == [(S.DRAINING, "test"), (S.DRAINED, "auditor")]
        progress = store.read_progress(zk, leaving, root=cluster.root)
        assert progress["ledgers_left"] == 0 and progress["state"] == S.DRAINED.value, progress
        # what the test wrote: no ensemble names the bookie any more, and every entry reads back
        assert [lid for lid in truth if leaving in bk.ledger_metadata(lid).bookies()] == []
        assert_readable(bk, truth)
