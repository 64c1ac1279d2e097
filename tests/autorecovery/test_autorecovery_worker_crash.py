"""A worker process SIGKILLed mid-copy: its lock dies with its ZooKeeper session, the next worker finishes."""

from __future__ import annotations

import signal
import time

import pytest

from bkaudit.client import BookKeeper
from bkaudit.zk import underreplication as ur
from tests.autorecovery.support import (
    assert_readable,
    durability_violations,
    events,
    queue,
    run_once,
    start_run,
    stop,
    wait_absent,
    wait_for,
    write_ledgers,
)

pytestmark = [pytest.mark.slow]


def test_killed_worker_releases_its_lock_with_its_session(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(bookies=4, racks=4)
    zk = cluster.zk_client()
    with BookKeeper.connect(cluster.zk_settings()) as bk:
        truth = write_ledgers(bk, 1, 1500)
        (ledger_id,) = truth
        victim = bk.ledger_metadata(ledger_id).segments[0].ensemble[0]
        cluster.kill_bookie(victim)
        wait_absent(cluster, victim)
        assert ur.mark_underreplicated(zk, ledger_id, [victim], root=cluster.root)

        # ~1000 entries of ~250 bytes at 20 kB/s: the copy takes >10 s, plenty of time to kill it mid-way
        slow = start_run(
            cluster, tmp_path, "slow", "--no-auditor", BKAUDIT_AUTORECOVERY__REPLICATION_RATE_BY_BYTES="20000"
        )
        try:
            wait_for(lambda: [e for e in events(tmp_path, "slow") if e["event"] == "copy"], 30, "the copy")
            time.sleep(1.0)
            assert ur.lock_holder(zk, ledger_id, root=cluster.root) == "slow"
        finally:
            killed_at = time.time()
            stop(slow, signal.SIGKILL)
        assert not [e for e in events(tmp_path, "slow") if e["event"] == "swapped"]  # really mid-copy
        assert ur.is_locked(zk, ledger_id, root=cluster.root)  # until its session expires

        code, summary = run_once(cluster, tmp_path, "next", "--no-auditor", "--timeout", "60")
        assert code == 0, summary
        assert summary["replicated"] == 1
        took = [e for e in events(tmp_path, "next") if e["event"] == "locked" and e["ledger"] == ledger_id]
        assert took and took[0]["t"] > killed_at  # only after the killed worker's session was gone
        assert queue(cluster) == [] and not ur.is_locked(zk, ledger_id, root=cluster.root)
        assert durability_violations(cluster, bk, [ledger_id], lost={victim}) == []
        assert_readable(bk, truth)
