"""BookKeeper's knownBookies on a real cluster: a bookie already audited as lost does not count again, so a
rolling restart of another bookie is delayed by lostBookieRecoveryDelay instead of marking its ledgers."""

from __future__ import annotations

import subprocess

import pytest

from bkaudit.client import BookKeeper
from bkaudit.zk import registry
from bkaudit.zk import underreplication as ur
from tests.autorecovery.support import (
    ROOT,
    ar_command,
    env,
    events,
    queue,
    start_run,
    stop,
    wait_absent,
    wait_for,
    write_ledgers,
)

pytestmark = [pytest.mark.slow]

DELAY_S = 600  # far longer than the test: B's restart always falls inside it


def kinds(tmp, name) -> list[str]:
    return [e["event"] for e in events(tmp, name)]


def test_a_restart_after_an_audited_loss_is_delayed_not_marked(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(bookies=5, racks=5)
    zk = cluster.zk_client()
    with BookKeeper.connect(cluster.zk_settings()) as bk:
        truth = write_ledgers(bk, 12, 5)
        ensembles = {lid: set(bk.ledger_metadata(lid).bookies()) for lid in truth}
    counts = {bookie: sum(bookie in e for e in ensembles.values()) for bookie in cluster.ids()}
    b, a = sorted(counts, key=lambda x: -counts[x])[:2]  # B stores ledgers (so an audit would mark them)
    assert counts[b] > 0
    ar = start_run(cluster, tmp_path, "ar", BKAUDIT_AUTORECOVERY__LOST_BOOKIE_RECOVERY_DELAY_S=str(DELAY_S))
    try:
        wait_for(lambda: "auditor_started" in kinds(tmp_path, "ar"), 60, "the auditor")
        wait_for(lambda: "audit_done" in kinds(tmp_path, "ar"), 60, "the bookie check at election")
        # bookie A dies and is audited (trigger-audit instead of waiting out the delay)
        cluster.kill_bookie(a)
        wait_absent(cluster, a)
        wait_for(lambda: "audit_delayed" in kinds(tmp_path, "ar"), 30, "A's audit to be delayed")
        trig = subprocess.run(ar_command(cluster, "trigger-audit"), capture_output=True, text=True,
                              env=env(), cwd=ROOT, timeout=60)
        assert trig.returncode == 0, trig.stderr
        done = wait_for(
            lambda: [e for e in events(tmp_path, "ar") if e["event"] == "audit_done" and e["lost"]], 60,
            "A's audit",
        )[-1]
        assert done["lost"] == [a]
        wait_for(lambda: queue(cluster) == [], 120, "A's ledgers to be re-replicated")
        audits = kinds(tmp_path, "ar").count("audit_started")
        delayed = kinds(tmp_path, "ar").count("audit_delayed")

        # bookie B restarts (A still dead): the auditor sees one lost bookie and waits
        cluster.stop_bookie(b)
        wait_absent(cluster, b)
        wait_for(
            lambda: kinds(tmp_path, "ar").count("audit_delayed") > delayed
            or kinds(tmp_path, "ar").count("audit_started") > audits,
            30, "the auditor's reaction to B's loss",
        )
        assert kinds(tmp_path, "ar").count("audit_started") == audits, "B's loss audited at once"
        cluster.start_bookie(b)
        wait_for(lambda: "audit_cancelled" in kinds(tmp_path, "ar"), 30, "the delayed audit to be cancelled")
        assert registry.bookie_state(zk, b, cluster.root) == "writable"
        assert kinds(tmp_path, "ar").count("audit_started") == audits
        for ledger_id in ur.list_underreplicated(zk, root=cluster.root):
            marker = ur.get_marker(zk, ledger_id, root=cluster.root)
            assert marker is None or b not in marker[0].replicas
    finally:
        assert stop(ar) == 0
