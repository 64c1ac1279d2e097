"""bkaudit.model.placement: hand-built ensembles with known answers, reference implementations of
BookKeeper's rules, and brute-force oracles for choosing and replacing bookies."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bkaudit import config
from bkaudit.audit.settings import PlacementSettings, policy_from_settings, topology_from_settings
from bkaudit.errors import ConfigError, NotEnoughBookies, QuorumError
from bkaudit.model import placement
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.model.placement import (
    Adherence,
    DefaultPolicy,
    PlacementPolicy,
    RackAwarePolicy,
    RegionAwarePolicy,
    ZoneAwarePolicy,
    ledger_adherence,
    policy_kind,
)
from bkaudit.model.topology import DEFAULT_REGION_AND_RACK, DEFAULT_ZONE_AND_UPGRADEDOMAIN, Topology

FAIL, SOFT, STRICT = Adherence.FAIL, Adherence.MEETS_SOFT, Adherence.MEETS_STRICT
PROPS = settings(max_examples=60, deadline=None)


def racks(**where: str) -> Topology:
    return Topology.from_mapping(where)


def zones(**where: str) -> Topology:
    return Topology.from_mapping(where, default_location=DEFAULT_ZONE_AND_UPGRADEDOMAIN)


def regions(**where: str) -> Topology:
    return Topology.from_mapping(where, default_location=DEFAULT_REGION_AND_RACK)


# =========================================================================================================
# hand-built ensembles
# =========================================================================================================
def test_adherence_values_and_order_match_bookkeeper() -> None:
    assert (FAIL.value, SOFT.value, STRICT.value) == (1, 3, 5)
    assert min(STRICT, SOFT, FAIL) is FAIL


class TestDefault:
    def test_always_strict(self) -> None:
        topo = racks(a="/r1", b="/r1")
        assert DefaultPolicy().adherence(["a", "b"], 2, 2, topo) is STRICT
        assert DefaultPolicy().adherence([], 2, 2, topo) is STRICT
        assert DefaultPolicy().explain(["a", "a"], 2, 1, topo) == []

    def test_choose_and_replace_are_random_but_valid(self) -> None:
        topo = Topology()
        pool = [f"b{i}" for i in range(6)]
        ens = DefaultPolicy().choose_ensemble(4, 2, 2, pool, topo, exclude={"b0"}, rng=random.Random(3))
        assert len(set(ens)) == 4 and "b0" not in ens
        new = DefaultPolicy().replace_bookie(ens, 1, 2, 2, pool, topo, exclude={"b5"}, rng=random.Random(3))
        assert new not in ens and new not in {"b0", "b5"}


class TestRackAware:
    topo = racks(a="/r1", b="/r1", c="/r2", d="/r3", e="/dc1/r1", f="/dc2/r1", g="/default-rack")

    def test_adherent(self) -> None:
        assert RackAwarePolicy().adherence(["a", "c", "d"], 2, 2, self.topo) is STRICT
        assert RackAwarePolicy().explain(["a", "c", "d"], 2, 2, self.topo) == []

    def test_one_write_set_on_a_single_rack_fails(self) -> None:
        ens = ["a", "c", "b"]  # write set 2 = (b, a): both /r1
        level, reasons = RackAwarePolicy().evaluate(ens, 2, 2, self.topo)
        assert level is FAIL
        assert len(reasons) == 1
        assert "write set 2" in reasons[0] and "/r1" in reasons[0] and "needs 2" in reasons[0]

    def test_never_soft(self) -> None:
        policy = RackAwarePolicy(min_racks_per_write_quorum=3)
        assert policy.adherence(["a", "c", "d"], 3, 2, self.topo) is STRICT
        assert policy.adherence(["a", "b", "c"], 3, 2, self.topo) is FAIL

    def test_min_racks_capped_by_write_quorum(self) -> None:
        assert RackAwarePolicy().adherence(["a", "b"], 1, 1, self.topo) is STRICT  # min(WQ=1, 2) = 1
        assert RackAwarePolicy(min_racks_per_write_quorum=5).adherence(["a", "c"], 2, 2, self.topo) is STRICT

    def test_rack_is_the_whole_location(self) -> None:
        # /dc1/r1 and /dc2/r1 are different racks for BookKeeper (it compares network locations)
        assert RackAwarePolicy().adherence(["e", "f"], 2, 2, self.topo) is STRICT

    def test_default_rack_counts_as_a_rack_unless_enforced(self) -> None:
        assert RackAwarePolicy().adherence(["a", "g"], 2, 2, self.topo) is STRICT
        level, reasons = RackAwarePolicy(enforce_min_racks=True).evaluate(["a", "g"], 2, 2, self.topo)
        assert level is FAIL
        assert any("default rack" in r and "g (/default-rack)" in r for r in reasons)

    def test_unknown_bookies_sit_on_the_default_rack(self) -> None:
        # BookKeeper would skip bookies missing from knownBookies; we judge metadata with the topology
        assert RackAwarePolicy().adherence(["x", "y"], 2, 2, self.topo) is FAIL
        assert RackAwarePolicy().adherence(["x", "a"], 2, 2, self.topo) is STRICT
        assert "unmapped" in RackAwarePolicy(enforce_min_racks=True).explain(["x", "a"], 2, 2, self.topo)[0]

    def test_custom_default_rack(self) -> None:
        policy = RackAwarePolicy(enforce_min_racks=True, default_rack="unknown-rack")
        assert policy.default_rack == "/unknown-rack"
        assert policy.adherence(["x", "a"], 2, 2, self.topo) is FAIL
        assert policy.adherence(["g", "a"], 2, 2, self.topo) is FAIL  # topology default → policy default

    def test_degenerate_ensembles_fail(self) -> None:
        assert RackAwarePolicy().evaluate([], 2, 2, self.topo) == (FAIL, ["empty ensemble"])
        level, reasons = RackAwarePolicy().evaluate(["a"], 2, 2, self.topo)
        assert level is FAIL and "write quorum 2" in reasons[0]

    def test_choose_spreads_and_enforce_skips_default_rack(self) -> None:
        topo = racks(a1="/r1", a2="/r1", b1="/r2", b2="/r2", u1="/default-rack", u2="/default-rack")
        policy = RackAwarePolicy(enforce_min_racks=True)
        ens = policy.choose_ensemble(4, 2, 2, list(topo), topo, rng=random.Random(1))
        assert policy.adherence(ens, 2, 2, topo) is STRICT
        assert not {"u1", "u2"} & set(ens)
        with pytest.raises(NotEnoughBookies, match="eligible"):
            policy.choose_ensemble(5, 2, 2, list(topo), topo)

    def test_choose_best_effort_when_not_enforced(self) -> None:
        topo = racks(a="/r1", b="/r1", c="/r1")
        ens = RackAwarePolicy().choose_ensemble(3, 2, 2, ["a", "b", "c"], topo, rng=random.Random(0))
        assert sorted(ens) == ["a", "b", "c"]
        with pytest.raises(NotEnoughBookies, match="cannot place"):
            RackAwarePolicy(enforce_min_racks=True).choose_ensemble(3, 2, 2, ["a", "b", "c"], topo)

    def test_replace_picks_a_rack_absent_from_the_write_sets(self) -> None:
        topo = racks(a="/r1", b="/r2", c="/r3", d="/r1", x="/r2", y="/r4")
        # ensemble a b c d, WQ=2: index 3's write sets are (c, ?) and (?, a): /r3 and /r1 are ruled out
        new = RackAwarePolicy().replace_bookie(["a", "b", "c", "d"], 3, 2, 2, ["x", "y", "a"], topo)
        assert new in {"x", "y"}
        assert RackAwarePolicy().adherence(["a", "b", "c", new], 2, 2, topo) is STRICT
        # an enforced policy refuses a replacement that must break a write set
        with pytest.raises(NotEnoughBookies, match="index 1"):
            RackAwarePolicy(enforce_min_racks=True).replace_bookie(["a", "b"], 1, 2, 2, ["d"], topo)
        assert RackAwarePolicy().replace_bookie(["a", "b"], 1, 2, 2, ["d"], topo) == "d"  # best effort
        with pytest.raises(NotEnoughBookies):
            RackAwarePolicy().replace_bookie(["a", "b"], 0, 2, 2, ["a", "b", "x"], topo, exclude={"x"})
        with pytest.raises(QuorumError):
            RackAwarePolicy().replace_bookie(["a", "b"], 2, 2, 2, ["x"], topo)


class TestZoneAware:
    topo = zones(
        a="/z1/u1", b="/z1/u2", c="/z2/u1", d="/z2/u2", e="/z3/u1", f="/z3/u2",
        g="/z1/u1", h="/z1", i="/default-zone/default-upgradedomain",
    )  # fmt: skip

    def test_adherent(self) -> None:
        assert ZoneAwarePolicy().adherence(["a", "c", "e", "b", "d", "f"], 3, 2, self.topo) is STRICT

    def test_ensemble_not_a_multiple_of_write_quorum(self) -> None:
        level, reasons = ZoneAwarePolicy().evaluate(["a", "c", "e", "b", "d"], 3, 2, self.topo)
        assert level is FAIL and "not a multiple" in reasons[0]
        # BookKeeper applies it in adherence even when strict placement is off
        assert (
            ZoneAwarePolicy(enforce_strict=False).adherence(["a", "c", "e", "b", "d"], 3, 2, self.topo)
            is FAIL
        )

    def test_write_quorum_not_above_min_zones(self) -> None:
        level, reasons = ZoneAwarePolicy().evaluate(["a", "c"], 2, 2, self.topo)
        assert level is FAIL and "min_zones" in reasons[0]
        assert ZoneAwarePolicy(min_zones=1, desired_zones=2).adherence(["a", "c"], 2, 2, self.topo) is STRICT

    @pytest.mark.parametrize("unresolved", ["h", "i", "nobody"])
    def test_unresolved_bookie_fails(self, unresolved: str) -> None:
        level, reasons = ZoneAwarePolicy().evaluate(["a", "c", unresolved], 3, 2, self.topo)
        assert level is FAIL and any("unresolved" in r for r in reasons)

    def test_soft_zones(self) -> None:
        # two zones in each write set of three: above min_zones=2, below desired min(3, 3)
        level, reasons = ZoneAwarePolicy().evaluate(["a", "b", "c"], 3, 2, self.topo)
        assert level is SOFT and reasons and all("desired 3" in r for r in reasons)
        assert ZoneAwarePolicy(desired_zones=2).adherence(["a", "b", "c"], 3, 2, self.topo) is STRICT

    def test_single_upgrade_domain_fails(self) -> None:
        level, reasons = ZoneAwarePolicy().evaluate(["a", "g", "c"], 3, 2, self.topo)  # a, g: /z1/u1
        assert level is FAIL and "one upgrade domain" in reasons[0]

    def test_too_few_zones_in_a_write_set(self) -> None:
        assert ZoneAwarePolicy().adherence(["a", "b", "g"], 3, 2, self.topo) is FAIL

    def test_worst_write_set_wins(self) -> None:
        strict = ["a", "c", "e", "b", "d", "f"]  # every write set spans z1, z2, z3
        assert ZoneAwarePolicy().adherence(strict, 3, 2, self.topo) is STRICT
        soft = ["a", "c", "b", "e", "d", "f"]  # write set 0 = (a, c, b): z1 twice (u1, u2) and z2
        level, reasons = ZoneAwarePolicy().evaluate(soft, 3, 2, self.topo)
        assert level is SOFT and reasons[0].startswith("write set 0")
        failing = ["a", "c", "g", "e", "d", "f"]  # write set 0 = (a, c, g): a and g share /z1/u1
        assert ZoneAwarePolicy().adherence(failing, 3, 2, self.topo) is FAIL

    def test_choose_strict_soft_and_refusal(self) -> None:
        policy = ZoneAwarePolicy()
        ens = policy.choose_ensemble(6, 3, 2, list(self.topo), self.topo, rng=random.Random(5))
        assert policy.adherence(ens, 3, 2, self.topo) is STRICT
        two_zones = ["a", "b", "c", "d"]
        ens = policy.choose_ensemble(3, 3, 2, two_zones, self.topo, rng=random.Random(5))
        assert policy.adherence(ens, 3, 2, self.topo) is SOFT
        with pytest.raises(NotEnoughBookies, match="not a multiple"):
            policy.choose_ensemble(5, 3, 2, list(self.topo), self.topo)
        with pytest.raises(NotEnoughBookies, match="min_zones"):
            policy.choose_ensemble(4, 2, 2, list(self.topo), self.topo)
        relaxed = ZoneAwarePolicy(enforce_strict=False)
        assert len(relaxed.choose_ensemble(5, 3, 2, list(self.topo), self.topo)) == 5

    def test_strict_choice_never_uses_unresolved_bookies(self) -> None:
        pool = ["a", "c", "e", "h", "i", "nobody"]
        ens = ZoneAwarePolicy().choose_ensemble(3, 3, 2, pool, self.topo, rng=random.Random(1))
        assert set(ens) == {"a", "c", "e"}
        with pytest.raises(NotEnoughBookies, match="eligible"):
            ZoneAwarePolicy().choose_ensemble(6, 3, 2, pool, self.topo)

    def test_replace_keeps_zones_apart(self) -> None:
        ens = ["a", "c", "e", "b", "d", "f"]
        new = ZoneAwarePolicy().replace_bookie(ens, 0, 3, 2, ["g", "h", "x1"], self.topo)
        assert new == "g"  # the only resolved candidate; /z1/u1 keeps every write set strict
        trial = ["g", *ens[1:]]
        assert ZoneAwarePolicy().adherence(trial, 3, 2, self.topo) is STRICT


class TestRegionAware:
    topo = regions(
        e1="/east/r1", e2="/east/r2", e1b="/east/r1", w1="/west/r1", w2="/west/r2", n1="/north/r1",
        lone="/r9", d="/default-region/default-rack",
    )  # fmt: skip

    def test_adherent(self) -> None:
        assert RegionAwarePolicy().adherence(["e1", "w1", "e2", "w2"], 2, 2, self.topo) is STRICT

    def test_write_set_within_one_region_fails(self) -> None:
        level, reasons = RegionAwarePolicy().evaluate(["e1", "w1", "e2"], 2, 2, self.topo)
        assert level is FAIL
        assert len(reasons) == 1 and "write set 2" in reasons[0] and "region" in reasons[0]

    def test_racks_within_a_region_are_soft(self) -> None:
        level, reasons = RegionAwarePolicy().evaluate(["e1", "e1b", "w1"], 3, 2, self.topo)
        assert level is SOFT and "region east" in reasons[0]
        assert RegionAwarePolicy().adherence(["e1", "e2", "w1"], 3, 2, self.topo) is STRICT
        assert (
            RegionAwarePolicy(min_racks_per_write_quorum=1).adherence(["e1", "e1b", "w1"], 3, 2, self.topo)
            is STRICT
        )

    def test_regions_to_write(self) -> None:
        policy = RegionAwarePolicy(regions_to_write=("east", "/west"))
        assert policy.regions_to_write == ("east", "west")
        assert policy.adherence(["e1", "w1"], 2, 2, self.topo) is STRICT
        level, reasons = policy.evaluate(["e1", "n1"], 2, 2, self.topo)
        assert level is FAIL and "north" in reasons[0] and "reppRegionsToWrite" in reasons[0]

    @pytest.mark.parametrize("unknown", ["d", "lone", "nobody"])
    def test_unknown_regions_count_for_nothing(self, unknown: str) -> None:
        assert RegionAwarePolicy().adherence(["e1", unknown], 2, 2, self.topo) is FAIL
        assert (
            RegionAwarePolicy(min_regions_for_durability=1).adherence(["e1", unknown], 2, 2, self.topo)
            is STRICT
        )

    def test_min_regions_capped_by_write_quorum(self) -> None:
        assert (
            RegionAwarePolicy(min_regions_for_durability=3).adherence(["e1", "w1"], 2, 2, self.topo) is STRICT
        )
        assert RegionAwarePolicy().adherence(["e1", "e2"], 1, 1, self.topo) is STRICT

    def test_choose_and_replace(self) -> None:
        policy = RegionAwarePolicy(regions_to_write=("east", "west"))
        ens = policy.choose_ensemble(4, 2, 2, list(self.topo), self.topo, rng=random.Random(2))
        assert policy.adherence(ens, 2, 2, self.topo) is STRICT
        assert not {"n1", "lone", "d"} & set(ens)
        new = policy.replace_bookie(["e1", "w1"], 1, 2, 2, ["e2", "n1", "w2"], self.topo)
        assert new == "w2"
        with pytest.raises(NotEnoughBookies):
            policy.replace_bookie(["e1", "w1"], 1, 2, 2, ["e2", "n1"], self.topo)
        # without regions_to_write nothing is enforced: best effort
        assert RegionAwarePolicy().replace_bookie(["e1", "w1"], 1, 2, 2, ["e2"], self.topo) == "e2"


# =========================================================================================================
# ledgers and settings
# =========================================================================================================
def _metadata(*ensembles: tuple[str, ...], wq: int = 2, aq: int = 2) -> LedgerMetadata:
    segments = tuple(Segment(first_entry_id=10 * i, ensemble=ens) for i, ens in enumerate(ensembles))
    return LedgerMetadata(
        ensemble_size=len(ensembles[0]), write_quorum=wq, ack_quorum=aq, state=LedgerState.CLOSED,
        last_entry_id=10 * len(ensembles) + 3, length=100, digest_type=DigestType.CRC32C, password=b"",
        segments=segments,
    )  # fmt: skip


def test_ledger_adherence_is_worst_segment_with_details() -> None:
    topo = racks(a="/r1", b="/r2", c="/r1")
    worst, per_segment = ledger_adherence(_metadata(("a", "b"), ("a", "c")), RackAwarePolicy(), topo)
    assert worst is FAIL
    assert [(i, level) for i, level, _ in per_segment] == [(0, STRICT), (1, FAIL)]
    assert per_segment[0][2] == [] and "rack" in per_segment[1][2][0]
    worst, _ = ledger_adherence(_metadata(("a", "b"), ("b", "c")), RackAwarePolicy(), topo)
    assert worst is STRICT


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("rackaware", "rackaware"),
        ("Rack-Aware", "rackaware"),
        ("org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy", "rackaware"),
        ("ZoneawareEnsemblePlacementPolicyImpl", "zoneaware"),
        ("region_aware", "regionaware"),
        ("DefaultEnsemblePlacementPolicy", "default"),
        ("bogus", None),
    ],
)
def test_policy_kind(name: str, kind: str | None) -> None:
    assert policy_kind(name) == kind


def test_policy_from_settings() -> None:
    assert policy_from_settings(PlacementSettings()) == RackAwarePolicy()
    assert policy_from_settings(PlacementSettings(policy="default")) == DefaultPolicy()
    assert policy_from_settings(
        PlacementSettings(policy="zoneaware", min_zones=1, desired_zones=2, enforce_strict_zoneaware=False)
    ) == ZoneAwarePolicy(min_zones=1, desired_zones=2, enforce_strict=False)
    assert policy_from_settings(
        PlacementSettings(policy="regionaware", regions_to_write=("a;b", "c"), min_regions_for_durability=3)
    ) == RegionAwarePolicy(regions_to_write=("a", "b", "c"), min_regions_for_durability=3)
    rack = policy_from_settings(
        PlacementSettings(enforce_min_racks=True, default_rack="x", min_racks_per_write_quorum=3)
    )
    assert rack == RackAwarePolicy(min_racks_per_write_quorum=3, enforce_min_racks=True, default_rack="/x")


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"policy": "bogus"}, "placement.policy"),
        ({"min_racks_per_write_quorum": 0}, "placement.min_racks_per_write_quorum"),
        ({"min_zones": 3, "desired_zones": 2}, "placement.desired_zones"),
        ({"default_rack": "/"}, "placement.default_rack"),
        ({"regions_to_write": ("a",)}, "placement.regions_to_write"),
        ({"regions_to_write": ("a", "")}, "placement.regions_to_write"),
        ({"locations": {"bk1:3181": ""}}, "placement.locations.bk1:3181"),
        ({"locations": {"bk1:3181": 3}}, "placement.locations.bk1:3181"),
    ],
)
def test_settings_validation_names_the_key(changes: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        PlacementSettings(**changes)  # type: ignore[arg-type]
    assert err.value.key == key


def test_settings_load_from_toml_environment_and_overrides(tmp_path: Path) -> None:
    conf = tmp_path / "bkaudit.toml"
    conf.write_text(
        '[placement]\npolicy = "zoneaware"\nmin_zones = 2\n'
        '[placement.locations]\n"bk1:3181" = "/z1/u1"\n"bk2:3181" = "z2/u1"\n',
        encoding="utf-8",
    )
    loaded = config.load(path=conf, environ={"BKAUDIT_PLACEMENT__DESIRED_ZONES": "2"})
    section = loaded.get(PlacementSettings)
    assert section.desired_zones == 2 and section.locations["bk1:3181"] == "/z1/u1"
    assert policy_from_settings(loaded) == ZoneAwarePolicy(min_zones=2, desired_zones=2)
    topo = topology_from_settings(loaded)
    assert topo.location("bk2:3181") == "/z2/u1"
    assert topo.location("other:3181") == DEFAULT_ZONE_AND_UPGRADEDOMAIN
    pulsar = {"default": {"bk9:3181": {"rack": "/z9/u9"}}}
    assert topology_from_settings(loaded, pulsar).location("bk9:3181") == "/z9/u9"
    loaded = config.load(path=conf, environ={}, overrides={"placement.regions_to_write": "a;b,c"})
    assert loaded.get(PlacementSettings).regions_to_write == ("a", "b", "c")
    with pytest.raises(ConfigError, match=r"placement\.min_zones"):
        config.load(path=conf, environ={"BKAUDIT_PLACEMENT__MIN_ZONES": "0"}).get(PlacementSettings)


def test_shipped_conf_has_a_valid_placement_section() -> None:
    loaded = config.load(path=config.DEFAULT_PATH, environ={})
    assert "placement" in loaded.raw()
    assert loaded.get(PlacementSettings) == PlacementSettings()


# =========================================================================================================
# reference adherence (independent transliterations of the rules) vs the policies
# =========================================================================================================
def ref_rack(ens: Sequence[str], wq: int, topo: Topology, min_racks: int, enforce: bool) -> Adherence:
    size = len(ens)
    for i in range(size):
        seen = set()
        for j in range(wq):
            b = ens[(i + j) % size]
            seen.add("/default-rack" if topo.is_default(b) else topo.location(b))
        if len(seen) < min(wq, min_racks) or (enforce and "/default-rack" in seen):
            return FAIL
    return STRICT if ens else FAIL


def ref_zone(ens: Sequence[str], wq: int, topo: Topology, min_zones: int, desired: int) -> Adherence:
    if not ens or len(ens) % wq != 0 or wq <= min_zones:
        return FAIL
    result = STRICT
    for i in range(len(ens)):
        uds: dict[str, set[str]] = {}
        count: Counter[str] = Counter()
        for j in range(wq):
            b = ens[(i + j) % len(ens)]
            parts = [p for p in topo.location(b).split("/") if p]
            if topo.is_default(b) or len(parts) != 2 or topo.location(b) == DEFAULT_ZONE_AND_UPGRADEDOMAIN:
                return FAIL
            uds.setdefault(parts[0], set()).add(parts[1])
            count[parts[0]] += 1
        if len(count) < min_zones or any(count[z] > 1 and len(uds[z]) < 2 for z in count):
            return FAIL
        if len(count) < min(wq, desired):
            result = SOFT
    return result


def ref_region(
    ens: Sequence[str], wq: int, topo: Topology, min_regions: int, min_racks: int, allowed: tuple[str, ...]
) -> Adherence:
    if not ens:
        return FAIL
    region = {b: topo.region(b) if topo.location(b) != DEFAULT_REGION_AND_RACK else None for b in ens}
    if allowed and any(region[b] not in allowed for b in ens):
        return FAIL
    result = STRICT
    for i in range(len(ens)):
        ws = [ens[(i + j) % len(ens)] for j in range(wq)]
        known = {region[b] for b in ws} - {None}
        if len(known) < min(wq, min_regions):
            return FAIL
        for r in known:
            members = [b for b in ws if region[b] == r]
            if len({topo.location(b) for b in members}) < min(len(members), min_racks):
                result = SOFT
    return result


RACK_LOCATIONS = ["/r1", "/r2", "/r3", "/dc/r1", "/default-rack"]
ZONE_LOCATIONS = [
    "/z1/u1",
    "/z1/u2",
    "/z2/u1",
    "/z2/u2",
    "/z3/u1",
    "/z3",
    "/default-zone/default-upgradedomain",
]
REGION_LOCATIONS = [
    "/east/r1",
    "/east/r2",
    "/west/r1",
    "/west/r2",
    "/north/r1",
    "/r7",
    "/default-region/default-rack",
]


@st.composite
def topologies(
    draw: st.DrawFn, locations: list[str], default: str, max_per: int = 3
) -> tuple[Topology, list[str]]:
    """A topology over a few of `locations` with 1..max_per bookies each, plus unmapped bookies sometimes."""
    chosen = draw(st.lists(st.sampled_from(locations), min_size=1, max_size=4, unique=True))
    mapping: dict[str, str] = {}
    for k, loc in enumerate(chosen):
        for n in range(draw(st.integers(1, max_per))):
            mapping[f"b{k}-{n}:3181"] = loc
    bookies = list(mapping) + [f"u{n}:3181" for n in range(draw(st.integers(0, 1)))]
    return Topology.from_mapping(mapping, default_location=default), bookies


@st.composite
def ensembles(draw: st.DrawFn, bookies: list[str], multiple_of_wq: bool = False) -> tuple[list[str], int]:
    size = draw(st.integers(1, len(bookies)))
    ens = draw(st.permutations(bookies))[:size]
    if multiple_of_wq and draw(st.booleans()):
        divisors = [d for d in range(1, size + 1) if size % d == 0]
        return ens, draw(st.sampled_from(divisors))
    return ens, draw(st.integers(1, size))


@given(st.data(), st.integers(1, 3), st.booleans())
@PROPS
def test_rack_adherence_matches_reference(data: st.DataObject, min_racks: int, enforce: bool) -> None:
    topo, bookies = data.draw(topologies(RACK_LOCATIONS, "/default-rack"))
    ens, wq = data.draw(ensembles(bookies))
    policy = RackAwarePolicy(min_racks_per_write_quorum=min_racks, enforce_min_racks=enforce)
    level, reasons = policy.evaluate(ens, wq, 1, topo)
    assert level is ref_rack(ens, wq, topo, min_racks, enforce)
    assert bool(reasons) == (level is not STRICT)


@given(st.data(), st.integers(1, 2), st.integers(0, 2))
@PROPS
def test_zone_adherence_matches_reference(data: st.DataObject, min_zones: int, extra: int) -> None:
    topo, bookies = data.draw(topologies(ZONE_LOCATIONS, DEFAULT_ZONE_AND_UPGRADEDOMAIN))
    ens, wq = data.draw(ensembles(bookies, multiple_of_wq=True))
    policy = ZoneAwarePolicy(min_zones=min_zones, desired_zones=min_zones + extra)
    level, reasons = policy.evaluate(ens, wq, 1, topo)
    assert level is ref_zone(ens, wq, topo, min_zones, min_zones + extra)
    assert bool(reasons) == (level is not STRICT)


@given(st.data(), st.integers(1, 3), st.integers(1, 2), st.sampled_from([(), ("east", "west")]))
@PROPS
def test_region_adherence_matches_reference(
    data: st.DataObject, min_regions: int, min_racks: int, allowed: tuple[str, ...]
) -> None:
    topo, bookies = data.draw(topologies(REGION_LOCATIONS, DEFAULT_REGION_AND_RACK))
    ens, wq = data.draw(ensembles(bookies))
    policy = RegionAwarePolicy(allowed, min_regions, min_racks)
    level, reasons = policy.evaluate(ens, wq, 1, topo)
    assert level is ref_region(ens, wq, topo, min_regions, min_racks, allowed)
    assert bool(reasons) == (level is not STRICT)


# =========================================================================================================
# choosing and replacing against brute force
# =========================================================================================================
def best_possible(policy: PlacementPolicy, size: int, wq: int, pool: list[str], topo: Topology) -> Adherence:
    """Best adherence any ensemble of `size` distinct bookies from `pool` reaches (by location sequences)."""
    by_location: dict[str, list[str]] = {}
    for b in pool:
        by_location.setdefault(topo.location(b) + ("?" if topo.is_default(b) else ""), []).append(b)
    best = FAIL
    for seq in itertools.product(list(by_location), repeat=size):
        used = Counter(seq)
        if any(n > len(by_location[loc]) for loc, n in used.items()):
            continue
        taken: Counter[str] = Counter()
        ens = []
        for loc in seq:
            ens.append(by_location[loc][taken[loc]])
            taken[loc] += 1
        best = max(best, policy.adherence(ens, wq, 1, topo))
        if best is STRICT:
            break
    return best


def is_strict(policy: PlacementPolicy) -> bool:
    return bool(
        (isinstance(policy, RackAwarePolicy) and policy.enforce_min_racks)
        or (isinstance(policy, ZoneAwarePolicy) and policy.enforce_strict)
        or (isinstance(policy, RegionAwarePolicy) and policy.regions_to_write)
    )


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[PlacementPolicy, Topology, list[str]]:
    kind = draw(st.sampled_from(["default", "rack", "zone", "region"]))
    policy: PlacementPolicy
    if kind == "default":
        policy = DefaultPolicy()
        topo, bookies = draw(topologies(RACK_LOCATIONS, "/default-rack"))
    elif kind == "rack":
        policy = RackAwarePolicy(draw(st.integers(1, 3)), draw(st.booleans()))
        topo, bookies = draw(topologies(RACK_LOCATIONS, "/default-rack"))
    elif kind == "zone":
        min_zones = draw(st.integers(1, 2))
        policy = ZoneAwarePolicy(min_zones, min_zones + draw(st.integers(0, 1)), draw(st.booleans()))
        topo, bookies = draw(topologies(ZONE_LOCATIONS, DEFAULT_ZONE_AND_UPGRADEDOMAIN, max_per=2))
    else:
        allowed = draw(st.sampled_from([(), ("east", "west")]))
        policy = RegionAwarePolicy(allowed, draw(st.integers(1, 2)), draw(st.integers(1, 2)))
        topo, bookies = draw(topologies(REGION_LOCATIONS, DEFAULT_REGION_AND_RACK))
    return policy, topo, bookies


@given(scenarios(), st.data())
@PROPS
def test_choose_ensemble_reaches_the_best_possible_adherence(
    scenario: tuple[PlacementPolicy, Topology, list[str]], data: st.DataObject
) -> None:
    policy, topo, bookies = scenario
    exclude = set(data.draw(st.lists(st.sampled_from(bookies), max_size=2)))
    pool = [b for b in bookies if b not in exclude]
    assume(pool)
    size = data.draw(st.integers(1, min(len(pool), 6)))
    wq = data.draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0] + [size]))
    aq = data.draw(st.integers(1, wq))
    best = best_possible(policy, size, wq, pool, topo)
    seed = data.draw(st.integers(0, 2**16))
    if is_strict(policy) and best is FAIL:
        with pytest.raises(NotEnoughBookies):
            policy.choose_ensemble(size, wq, aq, bookies, topo, exclude=exclude, rng=random.Random(seed))
        return
    ens = policy.choose_ensemble(size, wq, aq, bookies, topo, exclude=exclude, rng=random.Random(seed))
    assert len(ens) == size == len(set(ens))
    assert not set(ens) & exclude and set(ens) <= set(bookies)
    assert policy.adherence(ens, wq, aq, topo) is best
    # same seed, same answer
    assert ens == policy.choose_ensemble(
        size, wq, aq, bookies, topo, exclude=exclude, rng=random.Random(seed)
    )


@given(scenarios(), st.data())
@PROPS
def test_replace_bookie_keeps_the_best_possible_adherence(
    scenario: tuple[PlacementPolicy, Topology, list[str]], data: st.DataObject
) -> None:
    policy, topo, bookies = scenario
    assume(len(bookies) >= 2)
    ens = data.draw(st.permutations(bookies))[: data.draw(st.integers(1, len(bookies) - 1))]
    wq = data.draw(st.integers(1, len(ens)))
    index = data.draw(st.integers(0, len(ens) - 1))
    exclude = set(data.draw(st.lists(st.sampled_from(bookies), max_size=2)))
    pool = [b for b in bookies if b not in ens and b not in exclude]
    outcomes = {c: policy.adherence([*ens[:index], c, *ens[index + 1 :]], wq, 1, topo) for c in pool}
    rng = random.Random(data.draw(st.integers(0, 2**16)))
    try:
        new = policy.replace_bookie(ens, index, wq, 1, bookies, topo, exclude=exclude, rng=rng)
    except NotEnoughBookies:
        assert not pool or (is_strict(policy) and max(outcomes.values()) is FAIL)
        return
    assert new in pool
    assert outcomes[new] is max(outcomes.values())


def test_choose_raises_when_candidates_run_out() -> None:
    topo = racks(a="/r1", b="/r2")
    with pytest.raises(NotEnoughBookies, match="only 1 candidates"):
        RackAwarePolicy().choose_ensemble(2, 2, 2, ["a", "b"], topo, exclude=["b"])
    with pytest.raises(NotEnoughBookies):
        RackAwarePolicy().choose_ensemble(2, 2, 2, ["a", "a"], topo)  # duplicates count once
    with pytest.raises(QuorumError):
        RackAwarePolicy().choose_ensemble(2, 3, 2, ["a", "b", "c"], topo)


def test_search_budget_exhaustion_degrades_gracefully(monkeypatch: pytest.MonkeyPatch) -> None:
    topo = racks(a="/r1", b="/r1", c="/r2", d="/r2")
    monkeypatch.setattr(placement, "SEARCH_BUDGET", 1)
    assert len(RackAwarePolicy().choose_ensemble(4, 2, 2, list(topo), topo)) == 4
    with pytest.raises(NotEnoughBookies, match="gave up after 1 steps"):
        RackAwarePolicy(enforce_min_racks=True).choose_ensemble(4, 2, 2, list(topo), topo)


def test_realistic_cluster_sizes_are_fast() -> None:
    rng = random.Random(7)
    rack_topo = Topology.from_mapping({f"bk{i}:3181": f"/rack{i % 6}" for i in range(60)})
    rack_policy = RackAwarePolicy(min_racks_per_write_quorum=3, enforce_min_racks=True)
    zone_topo = zones(**{f"bk{i}": f"/z{i % 4}/ud{i % 3}" for i in range(48)})
    region_topo = regions(**{f"bk{i}": f"/reg{i % 3}/rack{i % 5}" for i in range(45)})
    for _ in range(20):
        ens = rack_policy.choose_ensemble(12, 3, 2, list(rack_topo), rack_topo, rng=rng)
        assert rack_policy.adherence(ens, 3, 2, rack_topo) is STRICT
        ens = ZoneAwarePolicy().choose_ensemble(9, 3, 2, list(zone_topo), zone_topo, rng=rng)
        assert ZoneAwarePolicy().adherence(ens, 3, 2, zone_topo) is STRICT
        regional = RegionAwarePolicy(("reg0", "reg1", "reg2"), 3)
        ens = regional.choose_ensemble(9, 3, 3, list(region_topo), region_topo, rng=rng)
        assert regional.adherence(ens, 3, 3, region_topo) is STRICT
