"""Placement check: worst segment classifies the ledger; reasons and locations travel with the finding."""

from __future__ import annotations

from bkaudit.audit.base import Category
from bkaudit.audit.placement import PlacementCheck
from bkaudit.audit.settings import PlacementSettings, policy_from_settings
from bkaudit.model.ledger import Segment
from bkaudit.model.placement import (
    Adherence,
    DefaultPolicy,
    RackAwarePolicy,
    ZoneAwarePolicy,
)
from bkaudit.model.shape import LedgerShape
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


# -- what BookKeeper's own Auditor would have said, next to our finding -----------------------------------
ALL_UP = frozenset(RACKS)
REGIONS = {"a1:3181": "/east/r1", "a2:3181": "/east/r2", "b1:3181": "/west/r1"}


def test_region_aware_finding_records_bookkeepers_unconditional_strict():
    """RegionAwareEnsemblePlacementPolicy always answers MEETS_STRICT (TODO #1898); ours fails one region."""
    policy = policy_from_settings(PlacementSettings(policy="regionaware", min_regions_for_durability=2))
    check = PlacementCheck(policy, Topology.from_mapping(REGIONS), "regionaware", writable=ALL_UP)
    (f,) = check.evaluate(ledger(("a1:3181", "a2:3181")))
    assert f.category is Category.PLACEMENT_FAIL
    assert f.detail["bookkeeper_verdict"] == "MEETS_STRICT"


def test_rack_aware_bookkeeper_counts_only_writable_bookies():
    # ensemble spread over 3 racks: ours strict; with b1 down BookKeeper sees write set {a1, b1} as one rack
    check = PlacementCheck(RackAwarePolicy(), Topology.from_mapping(RACKS), "rackaware",
                           writable=ALL_UP - {"b1:3181"})
    assert check.evaluate(ledger(("a1:3181", "b1:3181", "c1:3181"))) == []
    assert check.bookkeeper_only == 1  # BookKeeper would count this ledger as failing; we do not
    (f,) = check.evaluate(ledger(("a1:3181", "a2:3181", "c1:3181"), ledger_id=10))
    assert f.detail["bookkeeper_verdict"] == "FAIL"
    assert check.bookkeeper_only == 1


def test_open_ledgers_are_not_checked_by_bookkeeper():
    check = PlacementCheck(RackAwarePolicy(), Topology.from_mapping(RACKS), "rackaware", writable=ALL_UP)
    (f,) = check.evaluate(ledger(("a1:3181", "a2:3181"), closed=False))
    assert f.detail["bookkeeper_verdict"] == "NOT_CHECKED"  # its placementPolicyCheck skips open ledgers


def test_bookkeeper_adherence_of_each_policy():
    topo = Topology.from_mapping(RACKS)
    ens = ("a1:3181", "b1:3181", "c1:3181")
    up = frozenset({"a1:3181", "c1:3181"})
    assert RackAwarePolicy().bookkeeper_adherence(ens, 2, 2, topo, writable=up) is Adherence.FAIL
    assert RackAwarePolicy().bookkeeper_adherence(ens, 2, 2, topo, writable=ALL_UP) is Adherence.MEETS_STRICT
    assert DefaultPolicy().bookkeeper_adherence(("a1:3181", "a2:3181"), 2, 2, topo, writable=up) is (
        Adherence.MEETS_STRICT
    )
    zones = Topology.from_mapping({"a:1": "/z1/u1", "b:1": "/z2/u1", "c:1": "/z3/u1"})
    zone = ZoneAwarePolicy()
    assert zone.bookkeeper_adherence(("a:1", "b:1", "c:1"), 3, 2, zones, writable=set()) is zone.adherence(
        ("a:1", "b:1", "c:1"), 3, 2, zones
    )
