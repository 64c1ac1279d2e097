"""One auditor at a time, and failover while marking: separate `bkaudit autorecovery run` processes, leaders
SIGKILLed (their ZooKeeper sessions expire; no goodbye)."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from bkaudit.client import BookKeeper
from bkaudit.zk import underreplication as ur
from tests.autorecovery.support import (
    events,
    queue,
    start_run,
    stop,
    wait_absent,
    wait_for,
    write_ledgers,
)

pytestmark = [pytest.mark.slow]

SLOW_PUBLISH = {"BKAUDIT_AUTORECOVERY__PUBLISH_RATE_LIMIT": "5"}


def elected(tmp, name) -> bool:
    """True if the process's last election event says it is the auditor now."""
    state = [e["event"] for e in events(tmp, name) if e["event"] in ("elected", "demoted")]
    return bool(state) and state[-1] == "elected"


def auditors(tmp, names) -> list[str]:
    return [n for n in names if elected(tmp, n)]


def test_one_auditor_at_a_time_and_marking_survives_killed_leaders(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(bookies=5, racks=5)
    zk = cluster.zk_client()
    with BookKeeper.connect(cluster.zk_settings()) as bk:
        truth = write_ledgers(bk, 40, 5)
        victim = Counter(b for lid in truth for b in bk.ledger_metadata(lid).bookies()).most_common(1)[0][0]
        on_victim = {lid for lid in truth if victim in bk.ledger_metadata(lid).bookies()}
    names = ["p0", "p1", "p2"]
    procs = {"p0": start_run(cluster, tmp_path, "p0", "--workers", "0", **SLOW_PUBLISH)}
    try:
        wait_for(lambda: elected(tmp_path, "p0"), 30, "p0 to win the empty election")
        for n, name in enumerate(names[1:], start=2):  # one after the other: votes in process order
            procs[name] = start_run(cluster, tmp_path, name, "--workers", "0", **SLOW_PUBLISH)
            wait_for(lambda n=n: len(ur.list_votes(zk, root=cluster.root)) == n, 30, f"{name}'s vote")
        assert ur.current_auditor(zk, root=cluster.root) == "p0"
        assert auditors(tmp_path, names) == ["p0"]

        cluster.kill_bookie(victim)
        wait_absent(cluster, victim)
        wait_for(lambda: len(queue(cluster)) >= 8, 30, "p0 to publish some markers")
        assert len(queue(cluster)) < len(on_victim), "publishing should still be under way (rate limit)"
        p0_killed = time.time()
        stop(procs["p0"], signal.SIGKILL)

        # p1 (p0's successor) takes over once p0's session expires, and finishes the marking
        wait_for(lambda: ur.current_auditor(zk, root=cluster.root) == "p1", 30, "p1 to become auditor")
        wait_for(lambda: elected(tmp_path, "p1"), 10, "p1's election event")
        assert auditors(tmp_path, names[1:]) == ["p1"]
        term = [e for e in events(tmp_path, "p1") if e["event"] == "elected"]
        assert len(term) == 1 and term[0]["t"] > p0_killed  # never two auditors at once
        wait_for(lambda: set(queue(cluster)) == on_victim, 60, "every ledger of the lost bookie marked")
        for lid in on_victim:
            assert ur.get_marker(zk, lid, root=cluster.root)[0].replicas == (victim,)

        p1_killed = time.time()
        stop(procs["p1"], signal.SIGKILL)
        wait_for(lambda: ur.current_auditor(zk, root=cluster.root) == "p2", 30, "p2 to become auditor")
        wait_for(lambda: elected(tmp_path, "p2"), 10, "p2's election event")
        assert [e["t"] > p1_killed for e in events(tmp_path, "p2") if e["event"] == "elected"] == [True]
        assert ur.list_votes(zk, root=cluster.root) and len(ur.list_votes(zk, root=cluster.root)) == 1
        data, _ = zk.get(f"{cluster.root}/underreplication/auditorelection")
        assert data == b'bookieId: "p2"\n'  # the winner's vote text on the election node, as BookKeeper

        assert stop(procs["p2"]) == 0  # graceful: the vote is deleted at once
        wait_for(lambda: ur.current_auditor(zk, root=cluster.root) is None, 10, "no auditor left")
        attempts = [e for n in names for e in events(tmp_path, n) if e["event"] == "voted"]
        assert len(attempts) == 3  # one vote per process, no churn
    finally:
        for proc in procs.values():
            stop(proc, signal.SIGKILL)
