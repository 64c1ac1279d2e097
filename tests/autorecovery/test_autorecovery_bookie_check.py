"""The Auditor's bookie check (BookKeeper's AuditorBookieCheckTask), on a real ZooKeeper (issue 30, item 5).

At election and then every `auditorPeriodicBookieCheckInterval`, every bookie named in any ensemble is
compared with the registered bookies (writable + read-only) and the ledgers of the missing ones are marked at
once, whatever `lostBookieRecoveryDelay` says, unless a delayed audit is pending. The far end is BookKeeper's:
the ledgers, registrations and cookies are written as Java writes them (tests/bookkeeper_znodes.py).
Ground truth is what the test wrote: which ensembles name which bookie, who is registered.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bkaudit.autorecovery import metrics as m
from bkaudit.autorecovery.auditor import Auditor
from bkaudit.autorecovery.events import EventLog, read_events
from bkaudit.autorecovery.settings import AutoRecoverySettings
from bkaudit.autorecovery.view import BookieView
from bkaudit.store import ZkStore
from bkaudit.zk import underreplication as ur
from tests.bookkeeper_znodes import add_cookie, add_ledger, register, service_info
from tests.helpers import wait_for

A, B, C = "10.1.0.1:3181", "10.1.0.2:3181", "10.1.0.3:3181"
GONE = "10.1.0.9:3181"  # named by ensembles, no cookie, no registration: BookKeeper's auditor still finds it
LONG_DELAY = 600  # lostBookieRecoveryDelay far beyond the test: a delayed audit never runs here


def marked(zk: Any, root: str) -> dict[int, tuple[str, ...]]:
    out = {}
    for ledger_id in ur.list_underreplicated(zk, root=root):
        marker = ur.get_marker(zk, ledger_id, root=root)
        if marker is not None:
            out[ledger_id] = tuple(sorted(marker[0].replicas))
    return out


@pytest.fixture
def start_auditor(zk: Any, zk_root: str, tmp_path: Path) -> Iterator[Any]:
    started: list[Auditor] = []

    def start(**settings: Any) -> tuple[Auditor, Path]:
        events = tmp_path / f"auditor{len(started)}.events"
        cluster = ZkStore(zk, root=zk_root)
        auditor = Auditor(
            cluster, settings=AutoRecoverySettings(**settings),
            view=BookieView(cluster.registry).start(), metrics=m.AutoRecoveryMetrics(),
            events=EventLog(str(events)),
        ).start()
        started.append(auditor)
        return auditor, events

    yield start
    for auditor in started:
        auditor.stop()


def cluster(zk: Any, root: str) -> None:
    """A and B writable, C read-only (all with cookies); GONE appears only in ensembles."""
    for bookie in (A, B, C):
        add_cookie(zk, root, bookie)
    register(zk, root, A, service_info("10.1.0.1", 3181))
    register(zk, root, B, service_info("10.1.0.2", 3181))
    register(zk, root, C, service_info("10.1.0.3", 3181), readonly=True)
    add_ledger(zk, root, 1, [(0, (A, B, GONE))])
    add_ledger(zk, root, 2, [(0, (GONE, A)), (10, (A, B))])  # GONE only in an earlier segment
    add_ledger(zk, root, 3, [(0, (A, C))])  # a read-only bookie still serves its data
    add_ledger(zk, root, 4, [(0, (B, A))])


def test_the_check_at_election_marks_a_lost_bookie_that_has_no_cookie(zk, zk_root, start_auditor) -> None:
    cluster(zk, zk_root)
    auditor, events = start_auditor(lost_bookie_recovery_delay_s=LONG_DELAY)
    wait_for(lambda: marked(zk, zk_root), 20, "the bookie check at election")
    wait_for(lambda: not auditor.busy, 20, "the check to finish")
    assert marked(zk, zk_root) == {1: (GONE,), 2: (GONE,)}
    done = [e for e in read_events(events) if e["event"] == "audit_done"]
    assert [(e["reason"], e["lost"]) for e in done] == [("bookie check at election", [GONE])]
    assert auditor.metrics.get(m.NUM_BOOKIE_AUDITS_DELAYED) == 0  # not delayed: the check marks at once


def test_the_periodic_check_finds_a_loss_no_registration_change_announced(zk, zk_root, start_auditor) -> None:
    cluster(zk, zk_root)
    _, events = start_auditor(
        lost_bookie_recovery_delay_s=LONG_DELAY, auditor_periodic_bookie_check_interval_s=1
    )
    wait_for(lambda: marked(zk, zk_root) == {1: (GONE,), 2: (GONE,)}, 20, "the check at election")
    later = "10.1.0.8:3181"  # a ledger written later names another bookie nobody registered
    add_ledger(zk, zk_root, 5, [(0, (later, B))])
    wait_for(lambda: 5 in marked(zk, zk_root), 20, "the periodic bookie check")
    assert marked(zk, zk_root) == {1: (GONE,), 2: (GONE,), 5: (later,)}
    reasons = [e["reason"] for e in read_events(events) if e["event"] == "audit_done"]
    assert reasons[0] == "bookie check at election"
    assert "periodic bookie check (every 1s)" in reasons[1:]


def test_the_periodic_check_is_skipped_while_a_delayed_audit_is_pending(
    zk, zk_root, start_auditor, sessions
) -> None:
    cluster(zk, zk_root)
    d = "10.1.0.4:3181"  # known (cookie), registered by its own session, which then ends: one lost bookie
    add_cookie(zk, zk_root, d)
    own = sessions()
    register(own, zk_root, d, service_info("10.1.0.4", 3181))
    add_ledger(zk, zk_root, 6, [(0, (d, A))])
    auditor, events = start_auditor(lost_bookie_recovery_delay_s=LONG_DELAY,
                                    auditor_periodic_bookie_check_interval_s=1)
    wait_for(lambda: marked(zk, zk_root) == {1: (GONE,), 2: (GONE,)}, 20, "the check at election")
    own.stop()
    own.close()
    wait_for(lambda: auditor.metrics.get(m.NUM_BOOKIE_AUDITS_DELAYED) == 1, 20, "the delayed audit")
    wait_for(lambda: auditor.metrics.get(m.NUM_SKIPPING_CHECK_TASK_TIMES) >= 2, 20, "skipped checks")
    assert 6 not in marked(zk, zk_root)  # the delay is honoured: the operator asked for it
    assert any(e["event"] == "bookie_check_skipped" for e in read_events(events))
