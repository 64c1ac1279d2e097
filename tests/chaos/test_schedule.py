"""The schedule is a pure function of the seed (a replay injects the same faults); the budget holds."""

from __future__ import annotations

import itertools

import pytest

from bkaudit.chaos.schedule import (
    AUTORECOVERY_FAULTS,
    BOOKIE_FAILURES,
    FaultKind,
    make_schedule,
    parse_kinds,
)

ALL = tuple(FaultKind)


def schedule(seed: int, **kw):  # type: ignore[no-untyped-def]
    args = {"seed": seed, "duration_s": 120.0, "bookies": 5, "kinds": ALL, "max_bookie_failures": 1}
    return make_schedule(**{**args, **kw})


def test_same_seed_same_schedule_other_seed_other_schedule() -> None:
    assert schedule(42) == schedule(42)
    assert schedule(42).faults != schedule(43).faults
    assert schedule(42).faults  # a two-minute schedule holds faults


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("budget", [1, 2])
def test_never_more_bookie_failures_than_the_budget(seed: int, budget: int) -> None:
    s = schedule(seed, max_bookie_failures=budget, repair_window_s=20.0)
    spans = []
    for f in s.faults:
        if f.kind in BOOKIE_FAILURES:
            end = f.at_s + f.hold_s + (20.0 if f.kind is FaultKind.BOOKIE_WIPE else 1.0)
            spans.append((f.at_s, end, f.target))
    for start, _, _ in spans:  # the failures overlapping any moment a failure starts
        active = [(b, s0, e) for s0, e, b in spans if s0 <= start < e]
        assert len(active) <= budget, (seed, start, active)
        assert len({b for b, _, _ in active}) == len(active)  # one fault per bookie at a time
    assert all(0 <= f.target < 5 for f in s.faults if f.kind in BOOKIE_FAILURES)


def test_zero_budget_has_no_bookie_failure_and_faults_stay_in_the_run() -> None:
    s = schedule(7, max_bookie_failures=0)
    assert not [f for f in s.faults if f.kind in BOOKIE_FAILURES]
    assert s.faults and all(0 < f.at_s < 120 for f in s.faults)
    assert [f.index for f in s.faults] == list(range(len(s.faults)))


def test_one_zookeeper_restart_and_one_fault_per_autorecovery_process_at_a_time() -> None:
    s = schedule(3, duration_s=600.0, kinds=(FaultKind.ZK_RESTART, *AUTORECOVERY_FAULTS))
    restarts = [f for f in s.faults if f.kind is FaultKind.ZK_RESTART]
    assert len(restarts) > 3
    for a, b in itertools.pairwise(restarts):
        assert b.at_s >= a.at_s + a.hold_s
    for proc in (0, 1):
        mine = [f for f in s.faults if f.kind in AUTORECOVERY_FAULTS and f.target == proc]
        for a, b in itertools.pairwise(mine):
            assert b.at_s >= a.at_s + a.hold_s


def test_only_the_asked_kinds_and_session_faults_outlast_the_session() -> None:
    kinds = parse_kinds("bookie_session_expiry,proxy_drop")
    s = schedule(11, kinds=kinds, session_timeout_s=6.0)
    assert {f.kind for f in s.faults} <= set(kinds)
    assert all(f.hold_s > 6.0 for f in s.faults if f.kind is FaultKind.BOOKIE_SESSION_EXPIRY)


def test_parse_kinds_rejects_unknown_names() -> None:
    assert parse_kinds(None) == ALL
    assert parse_kinds("all") == ALL
    with pytest.raises(ValueError, match="bookie_explode"):
        parse_kinds("bookie_kill,bookie_explode")
    with pytest.raises(ValueError):
        make_schedule(seed=1, duration_s=0, bookies=5, kinds=ALL)
