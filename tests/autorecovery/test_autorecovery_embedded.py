"""`bkaudit bookie run --autorecovery`: every bookie runs the election and a worker on its own session; when
one bookie dies (possibly the auditor), the others audit and re-replicate its ledgers by themselves."""

from __future__ import annotations

from collections import Counter

import pytest

from bkaudit.client import BookKeeper
from bkaudit.store import ZkStore
from tests.autorecovery.support import (
    FAST,
    assert_readable,
    durability_violations,
    queue,
    wait_absent,
    wait_for,
    write_ledgers,
)

pytestmark = [pytest.mark.slow]


def test_bookies_with_autorecovery_heal_a_lost_bookie(cluster_factory, monkeypatch) -> None:
    for key, value in FAST.items():
        if key != "BKAUDIT_ZK__SESSION_TIMEOUT_S":  # bookies keep the local cluster's session timeout
            monkeypatch.setenv(key, value)
    cluster = cluster_factory(bookies=4, racks=4, bookie_args=["--autorecovery"])
    zk = cluster.zk_client()
    wait_for(lambda: ZkStore(zk, root=cluster.root).queue.auditor() in cluster.ids(), 30, "an auditor bookie")
    with BookKeeper.connect(cluster.zk_settings()) as bk:
        truth = write_ledgers(bk, 12, 30)
        victim = Counter(b for lid in truth for b in bk.ledger_metadata(lid).bookies()).most_common(1)[0][0]
        cluster.kill_bookie(victim)
        wait_absent(cluster, victim)
        wait_for(lambda: all(victim not in bk.ledger_metadata(lid).bookies() for lid in truth), 60,
                 "every ledger to leave the lost bookie")
        wait_for(lambda: queue(cluster) == [], 30, "the queue to drain")
        auditor = ZkStore(zk, root=cluster.root).queue.auditor()
        assert auditor in cluster.ids() and auditor != victim
        assert durability_violations(cluster, bk, sorted(truth), lost={victim}) == []
        assert_readable(bk, truth)
