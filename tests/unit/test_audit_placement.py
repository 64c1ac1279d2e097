"""Placement check: worst segment classifies the ledger; reasons and locations travel with the finding."""

from __future__ import annotations

from bkaudit.audit.base import Category
from bkaudit.audit.durability import LedgerShape
from bkaudit.audit.placement import PlacementCheck
from bkaudit.model.ledger import Segment
from bkaudit.model.placement import (
    DefaultPolicy,
    PlacementSettings,
    RackAwarePolicy,
    ZoneAwarePolicy,
    policy_from_settings,
)
from bkaudit.model.topology import Topology

RACKS = {"a1:3181": "/r1", "a2:3181": "/r1", "b1:3181": "/r2", "b2:3181": "/r2", "c1:3181": "/r3"}


def ledger(*ensembles, wq=2, aq=2, closed=True, starts=None, ledger_id=9):
    e = len(ensembles[0])
    starts = starts or [i * 10 for i in range(len(ensembles))]
    return LedgerShape(
        ledger_id,
        e,
        wq,
        aq,
        closed,
        100,
        tuple(Segment(s, tuple(x)) for s, x in zip(starts, ensembles, strict=True)),
    )


def rackaware():
    return PlacementCheck(
        RackAwarePolicy(min_racks_per_write_quorum=2), Topology.from_mapping(RACKS), "rackaware"
    )


def test_spread_ensemble_is_strict():
    assert rackaware().evaluate(ledger(("a1:3181", "b1:3181", "c1:3181"))) == []


def test_one_rack_ensemble_fails_with_reasons():
    (f,) = rackaware().evaluate(ledger(("a1:3181", "a2:3181")))
    assert f.category is Category.PLACEMENT_FAIL
    assert f.ledger_id == 9 and f.segment_index == 0
    assert f.detail["adherence"] == "FAIL"
    (seg,) = f.detail["segments"]
    assert seg["segment"] == 0 and seg["adherence"] == "FAIL" and seg["reasons"]
    assert "rack" in " ".join(seg["reasons"])
    assert f.detail["locations"] == {"a1:3181": "/r1", "a2:3181": "/r1"}


def test_worst_segment_wins_and_points_at_first_worst():
    good = ("a1:3181", "b1:3181", "c1:3181")
    bad = ("a1:3181", "a2:3181", "c1:3181")  # write set {a1, a2} spans one rack
    (f,) = rackaware().evaluate(ledger(good, bad, bad))
    assert f.category is Category.PLACEMENT_FAIL
    assert f.segment_index == 1
    assert [s["segment"] for s in f.detail["segments"]] == [1, 2]


def test_open_ledgers_are_judged_too():
    (f,) = rackaware().evaluate(ledger(("a1:3181", "a2:3181"), closed=False))
    assert f.category is Category.PLACEMENT_FAIL


def test_unmapped_bookies_sit_on_default_rack():
    check = PlacementCheck(RackAwarePolicy(), Topology.from_mapping({}), "rackaware")
    (f,) = check.evaluate(ledger(("x:1", "y:1")))
    assert f.category is Category.PLACEMENT_FAIL
    assert set(f.detail["locations"].values()) == {"/default-rack"}


def test_zoneaware_soft():
    zones = {
        "z1a:1": "/z1/ud1",
        "z1b:1": "/z1/ud2",
        "z2a:1": "/z2/ud1",
        "z2b:1": "/z2/ud2",
        "z3a:1": "/z3/ud1",
        "z3b:1": "/z3/ud2",
    }
    policy = ZoneAwarePolicy(min_zones=2, desired_zones=3)
    check = PlacementCheck(policy, Topology.from_mapping(zones, default_location=policy.default_location))
    # E=3, WQ=3: the write set spans 2 zones (z1 on two upgrade domains): between min and desired -> SOFT
    ens = ("z1a:1", "z1b:1", "z2a:1")
    findings = check.evaluate(ledger(ens, wq=3, aq=2))
    assert [f.category for f in findings] == [Category.PLACEMENT_SOFT]
    spread = ("z1a:1", "z2a:1", "z3a:1")
    assert check.evaluate(ledger(spread, wq=3, aq=2)) == []


def test_default_policy_never_complains():
    check = PlacementCheck(DefaultPolicy(), Topology.from_mapping({}))
    assert check.evaluate(ledger(("a:1", "a:1"))) == []


def test_policy_from_settings_and_memo():
    check = PlacementCheck(policy_from_settings(PlacementSettings()), Topology.from_mapping(RACKS))
    shape = ledger(("a1:3181", "a2:3181"))
    first = check.evaluate(shape)
    assert check.evaluate(shape) == first
    assert len(check._memo) == 1


def test_malformed_metadata_is_not_a_placement_finding():
    bad = LedgerShape(1, 3, 2, 2, True, 5, (Segment(0, ("a1:3181", "a2:3181")),))  # 2 bookies, E=3
    assert rackaware().evaluate(bad) == []
    assert rackaware().evaluate(LedgerShape(1, 3, 2, 2, True, 5, ())) == []
