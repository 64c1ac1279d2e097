"""The auditor's lost-bookie delay decisions (BookKeeper: submitAuditTask, delay changes)."""

from __future__ import annotations

from bkaudit.autorecovery.auditor import LostBookieDelay


def test_no_delay_audits_at_once() -> None:
    d = LostBookieDelay(0)
    action = d.bookies_changed({"a"}, now=0)
    assert action.audit and not d.pending


def test_one_lost_bookie_waits_for_the_delay() -> None:
    d = LostBookieDelay(30)
    action = d.bookies_changed({"a"}, now=100)
    assert not action.audit and action.scheduled_for == 130
    assert not d.due(129.9)
    assert d.due(130) and not d.pending


def test_the_delayed_audit_is_cancelled_when_the_bookie_returns() -> None:
    d = LostBookieDelay(30)
    d.bookies_changed({"a"}, now=0)
    action = d.bookies_changed(set(), now=10)
    assert action.cancelled and not action.audit and not d.pending
    assert not d.due(1000)


def test_the_same_lost_bookie_does_not_restart_the_clock() -> None:
    d = LostBookieDelay(30)
    d.bookies_changed({"a"}, now=0)
    action = d.bookies_changed({"a"}, now=20)
    assert action.scheduled_for is None and d.pending_due == 30


def test_two_lost_bookies_audit_at_once_and_drop_the_delayed_audit() -> None:
    d = LostBookieDelay(30)
    d.bookies_changed({"a"}, now=0)
    action = d.bookies_changed({"a", "b"}, now=5)
    assert action.audit and not d.pending


def test_setting_the_delay_to_zero_or_to_its_current_value_triggers_an_audit() -> None:
    d = LostBookieDelay(30)
    assert d.delay_changed(30, now=0).audit  # triggerAudit: re-set the current value
    d.bookies_changed({"a"}, now=0)
    action = d.delay_changed(0, now=1)
    assert action.audit and not d.pending


def test_another_delay_reschedules_a_pending_audit() -> None:
    d = LostBookieDelay(30)
    d.bookies_changed({"a"}, now=0)
    action = d.delay_changed(100, now=10)
    assert not action.audit and action.scheduled_for == 110 and d.pending_due == 110
    plain = LostBookieDelay(30).delay_changed(60, now=0)
    assert not plain.audit and plain.scheduled_for is None
