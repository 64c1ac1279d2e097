"""The operator switches: `disable` stops the auditor's marking and the workers' replicating; `enable`
resumes both; `status` reports who audits, the queue and the lost bookies; `trigger-audit` audits at once."""

from __future__ import annotations

import json
import subprocess

import pytest

from bkaudit.client import BookKeeper
from bkaudit.zk import underreplication as ur
from tests.autorecovery.support import (
    ROOT,
    ar_command,
    assert_readable,
    durability_violations,
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


def cli(cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ar_command(cluster, *args), capture_output=True, text=True, env=env(), cwd=ROOT, timeout=60
    )


def status(cluster) -> dict:
    proc = cli(cluster, "status", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def kinds(tmp, name) -> list[str]:
    return [e["event"] for e in events(tmp, name)]


def test_disable_stops_auditor_and_workers_until_enabled(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(bookies=4, racks=4)
    zk = cluster.zk_client()
    with BookKeeper.connect(cluster.zk_settings()) as bk:
        truth = write_ledgers(bk, 12, 20)
        first = next(iter(truth))
        victim = bk.ledger_metadata(first).segments[0].ensemble[0]
        on_victim = {lid for lid in truth if victim in bk.ledger_metadata(lid).bookies()}

        assert cli(cluster, "disable").returncode == 0
        assert not ur.is_replication_enabled(zk, root=cluster.root)
        # the work is there before AutoRecovery starts: a lost bookie and a marked ledger (as a checker would)
        cluster.kill_bookie(victim)
        wait_absent(cluster, victim)
        ur.mark_underreplicated(zk, first, [victim], root=cluster.root)
        ar = start_run(cluster, tmp_path, "ar")
        try:
            # At start the auditor finds the lost bookie (known from its cookie) and every worker looks for
            # work: the moments they would audit and lock, were replication enabled. Each says it held back.
            started = wait_for(lambda: [e for e in events(tmp_path, "ar") if e["event"] == "started"], 30,
                               "the service")
            wait_for(lambda: "audit_paused" in kinds(tmp_path, "ar"), 30, "the auditor to hold its audit")
            wait_for(lambda: kinds(tmp_path, "ar").count("paused") >= started[0]["workers"], 30,
                     "every worker to hold back")
            assert "audit_started" not in kinds(tmp_path, "ar")
            assert "locked" not in kinds(tmp_path, "ar")
            assert queue(cluster) == [first] and not ur.is_locked(zk, first, root=cluster.root)
            doc = status(cluster)
            assert doc["enabled"] is False and doc["auditor"] == "ar" and doc["queue_size"] == 1
            assert doc["bookies"]["lost"] == [victim]

            assert cli(cluster, "enable").returncode == 0
            wait_for(lambda: "audit_done" in kinds(tmp_path, "ar"), 30, "the audit after enable")
            wait_for(lambda: queue(cluster) == [], 60, "the queue to drain")

            def replicated() -> set[int]:
                return {e["ledger"] for e in events(tmp_path, "ar") if e["event"] == "replicated"}

            # the worker logs "replicated" just after deleting the marker: let the event log catch up
            wait_for(lambda: replicated() >= on_victim, 10, "every replicated event")
            assert replicated() == on_victim

            audits = kinds(tmp_path, "ar").count("audit_started")
            trigger = cli(cluster, "trigger-audit")
            assert trigger.returncode == 0, trigger.stderr
            assert "ar" in trigger.stdout
            wait_for(
                lambda: kinds(tmp_path, "ar").count("audit_started") == audits + 1, 20, "triggered audit"
            )
            doc = status(cluster)
            assert doc["queue_size"] == 0 and doc["data_lost"] == [] and doc["enabled"] is True
        finally:
            assert stop(ar) == 0
        assert durability_violations(cluster, bk, sorted(truth), lost={victim}) == []
        assert_readable(bk, truth)

    proc = cli(cluster, "trigger-audit")
    assert proc.returncode == 1 and "no auditor" in proc.stderr  # nobody runs now: say so
