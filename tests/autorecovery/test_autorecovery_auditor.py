"""The auditor's decisions: the lost-bookie delay (BookKeeper: submitAuditTask, knownBookies, delay changes)
and when the bookie check is due (scheduleBookieCheckTask)."""

from __future__ import annotations

import pytest

from bkaudit.autorecovery.auditor import BookieCheckSchedule, LostBookieDelay
from bkaudit.autorecovery.settings import AutoRecoverySettings
from bkaudit.errors import ConfigError

ALL = frozenset({"a", "b", "c", "d"})


def changed(d: LostBookieDelay, lost: set[str], now: float):
    return d.bookies_changed(available=ALL - lost, now=now)


def test_no_delay_audits_at_once() -> None:
    d = LostBookieDelay(0, known=ALL)
    action = changed(d, {"a"}, now=0)
    assert action.audit and not d.pending


def test_one_lost_bookie_waits_for_the_delay() -> None:
    d = LostBookieDelay(30, known=ALL)
    action = changed(d, {"a"}, now=100)
    assert not action.audit and action.scheduled_for == 130
    assert not d.due(129.9)
    assert d.due(130) and not d.pending


def test_the_delayed_audit_is_cancelled_when_the_bookie_returns() -> None:
    d = LostBookieDelay(30, known=ALL)
    changed(d, {"a"}, now=0)
    action = changed(d, set(), now=10)
    assert action.cancelled and not action.audit and not d.pending
    assert not d.due(1000)


def test_the_same_lost_bookie_does_not_restart_the_clock() -> None:
    d = LostBookieDelay(30, known=ALL)
    changed(d, {"a"}, now=0)
    action = changed(d, {"a"}, now=20)
    assert action.scheduled_for is None and d.pending_due == 30


def test_two_lost_bookies_audit_at_once_and_drop_the_delayed_audit() -> None:
    d = LostBookieDelay(30, known=ALL)
    changed(d, {"a"}, now=0)
    action = changed(d, {"a", "b"}, now=5)
    assert action.audit and not d.pending


def test_an_audited_lost_bookie_no_longer_counts() -> None:
    """BookKeeper's knownBookies: A lost and audited; B restarting later is ONE lost bookie, delayed."""
    d = LostBookieDelay(30, known=ALL)
    changed(d, {"a"}, now=0)
    assert d.due(30)  # A audited
    action = changed(d, {"a", "b"}, now=100)  # B restarts while A is still dead
    assert not action.audit and action.scheduled_for == 130
    back = changed(d, {"a"}, now=110)  # B back within the delay
    assert back.cancelled and not back.audit and not d.pending
    again = changed(d, {"a"}, now=200)  # A still dead: nothing new to audit
    assert not again.audit and again.scheduled_for is None


def test_a_returning_audited_bookie_is_known_again() -> None:
    d = LostBookieDelay(0, known=ALL)
    assert changed(d, {"a"}, now=0).audit
    assert not changed(d, set(), now=1).audit  # A re-registers: known again, nothing lost
    assert changed(d, {"a"}, now=2).audit  # and counts when lost again


def test_cookies_unseen_at_start_count_as_lost() -> None:
    """The auditor starts after a bookie died: known = cookies, so it is lost at once."""
    d = LostBookieDelay(0, known=ALL)
    assert d.bookies_changed(available=ALL - {"c"}, now=0).audit


def test_setting_the_delay_to_zero_or_to_its_current_value_triggers_an_audit() -> None:
    d = LostBookieDelay(30, known=ALL)
    assert d.delay_changed(30, now=0).audit  # triggerAudit: re-set the current value
    changed(d, {"a"}, now=0)
    action = d.delay_changed(0, now=1)
    assert action.audit and not d.pending


def test_another_delay_reschedules_a_pending_audit() -> None:
    d = LostBookieDelay(30, known=ALL)
    changed(d, {"a"}, now=0)
    action = d.delay_changed(100, now=10)
    assert not action.audit and action.scheduled_for == 110 and d.pending_due == 110
    plain = LostBookieDelay(30).delay_changed(60, now=0)
    assert not plain.audit and plain.scheduled_for is None


def test_the_bookie_check_runs_at_election_then_at_a_fixed_rate() -> None:
    """scheduleAtFixedRate(task, 0, interval): the next run counts from the previous due time."""
    s = BookieCheckSchedule(86400, now=100.0)
    assert s.due(100.0)
    s.ran()
    assert not s.due(86499.0) and s.due(86500.0)
    s.ran()
    assert s.next_due == 100.0 + 2 * 86400 and s.runs == 2


def test_an_interval_of_zero_runs_the_bookie_check_at_election_only() -> None:
    """BookKeeper: "Auditor periodic bookie checking disabled, running once check now anyhow"."""
    s = BookieCheckSchedule(0, now=5.0)
    assert s.due(5.0)
    s.ran()
    assert s.next_due is None and not s.due(1e12)


def test_the_bookie_check_interval_is_bookkeepers() -> None:
    """auditorPeriodicBookieCheckInterval defaults to 86400 s (ServerConfiguration); negative is refused."""
    assert AutoRecoverySettings().auditor_periodic_bookie_check_interval_s == 86400
    with pytest.raises(ConfigError):
        AutoRecoverySettings(auditor_periodic_bookie_check_interval_s=-1)
