"""Under-replication progress: markers older than the grace period."""

from __future__ import annotations

from bkaudit.audit.base import Category
from bkaudit.audit.progress import Marker, ProgressCheck

NOW = 1_700_000_000_000


def test_old_marker_is_overdue():
    (f,) = ProgressCheck(600, NOW).evaluate(Marker(5, ("b1:3181",), NOW - 601_000, "host1"))
    assert f.category is Category.UNDERREPLICATED_TOO_LONG
    assert f.ledger_id == 5 and f.bookie_id == "b1:3181"
    assert f.detail["age_s"] == 601.0 and f.detail["grace_period_s"] == 600
    assert f.detail["replicas"] == ["b1:3181"] and f.detail["locked_by"] == "host1"


def test_young_marker_and_boundary():
    assert ProgressCheck(600, NOW).evaluate(Marker(5, (), NOW - 599_000)) == []
    assert (
        ProgressCheck(600, NOW).evaluate(Marker(5, (), NOW - 600_000)) == []
    )  # BookKeeper: now - ctime > grace


def test_zero_grace_disables_like_bookkeeper():
    assert ProgressCheck(0, NOW).evaluate(Marker(5, (), 0)) == []


def test_marker_without_ctime_has_no_age():
    assert ProgressCheck(1, NOW).evaluate(Marker(5, ("a:1", "b:1"), None)) == []


def test_several_replicas_leave_bookie_empty():
    (f,) = ProgressCheck(1, NOW).evaluate(Marker(5, ("a:1", "b:1"), 0))
    assert f.bookie_id is None and f.detail["replicas"] == ["a:1", "b:1"]


def test_age_is_whole_elapsed_seconds_as_bookkeeper():
    """AuditorPlacementPolicyCheckTask: elapsedTimeInSecs = (now - ctime) / 1000 (long division) > grace."""
    check = ProgressCheck(600, NOW)
    assert check.evaluate(Marker(5, (), NOW - 600_999)) == []  # 600.999 s is 600 whole seconds: not over
    assert check.evaluate(Marker(5, (), NOW - 601_000)) != []
    assert check.evaluate(Marker(5, (), NOW + 5_000)) == []  # a mark time in the future is never overdue
