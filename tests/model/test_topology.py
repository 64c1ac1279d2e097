"""bkaudit.model.topology: location grammar, Pulsar /bookies resolution, accessors."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkaudit.errors import FormatError
from bkaudit.model.topology import (
    DEFAULT_RACK,
    DEFAULT_REGION_AND_RACK,
    DEFAULT_ZONE_AND_UPGRADEDOMAIN,
    RackConfig,
    Topology,
    host_of,
    location_components,
    normalize_location,
)


@dataclass(frozen=True)
class BookieRackInfo:
    """Stand-in for bkaudit.formats.records.BookieRackInfo (attributes, not a dict)."""

    rack: str
    hostname: str | None = None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/rack1", "/rack1"),
        ("rack1", "/rack1"),  # Pulsar adds the missing leading slash
        ("/r1/", "/r1"),  # NodeBase.normalize drops a trailing slash
        ("//region1//rack2/", "/region1/rack2"),
        ("  /z1/ud1  ", "/z1/ud1"),
        ("", None),  # Pulsar: empty rack means "default"
        ("/", None),
        ("   ", None),
        (None, None),
    ],
)
def test_normalize_location(raw: str | None, expected: str | None) -> None:
    assert normalize_location(raw) == expected


@given(st.lists(st.text(alphabet="abcXYZ-_.0123 ", min_size=1, max_size=6), max_size=4))
@settings(max_examples=100, deadline=None)
def test_normalize_is_idempotent_and_keeps_components(parts: list[str]) -> None:
    raw = "/".join(parts)
    once = normalize_location(raw)
    assert normalize_location(once) == once
    expected = tuple(p.strip() for p in parts if p.strip())
    assert (location_components(once) if once else ()) == expected


@pytest.mark.parametrize(
    ("bookie", "host"),
    [
        ("bk1.example.com:3181", "bk1.example.com"),
        ("10.0.0.5:3181", "10.0.0.5"),
        ("[fe80::1]:3181", "fe80::1"),
        ("bookie-1", "bookie-1"),  # custom bookie id without a port
        ("fe80::1", "fe80::1"),  # a bare IPv6 address is not host:port
    ],
)
def test_host_of(bookie: str, host: str) -> None:
    assert host_of(bookie) == host


PULSAR = {
    "default": {
        "bk1:3181": {"rack": "/rack1", "hostname": "bk1.example.com"},
        "bk2:3181": {"rack": "rack2", "hostname": "bk2.example.com"},
        "bk3:3181": {"rack": "", "hostname": "bk3.example.com"},
        "10.0.0.4:3181": {"rack": "/", "hostname": "bk4.example.com"},
        "10.0.0.5:3181": {"rack": "/rack5", "hostname": "bk5.example.com"},
    },
    "other": {"bk1:3181": {"rack": "/elsewhere"}, "bk6:3181": {"rack": "/rack6"}},
}


def test_from_rack_config_resolves_like_pulsar() -> None:
    topo = Topology.from_rack_config(PULSAR)
    # BookKeeper asks about host "bk1"; Pulsar's host map is filled group by group (sorted), so the
    # later group's entry wins (getBookie's first-wins only serves host:port queries BookKeeper never makes)
    assert topo.location("bk1:3181") == "/elsewhere"
    assert topo.location("bk2:3181") == "/rack2"  # leading slash added
    assert topo.location("bk3:3181") == DEFAULT_RACK  # empty rack → default
    assert topo.location("10.0.0.4:3181") == DEFAULT_RACK  # "/" → default
    assert topo.location("bk6:3181") == "/rack6"
    assert topo.location("nobody:3181") == DEFAULT_RACK


def test_from_rack_config_falls_back_to_host_then_hostname() -> None:
    topo = Topology.from_rack_config(PULSAR)
    assert topo.location("bk1:4181") == "/elsewhere"  # same host, other port: Pulsar's host index
    assert topo.location("bk1") == "/elsewhere"  # bare host
    assert topo.location("bk2:4181") == "/rack2"
    assert topo.location("10.0.0.5") == "/rack5"  # IP
    assert topo.location("bk5.example.com:3181") == "/rack5"  # via the hostname field
    assert topo.is_resolved("bk5.example.com:3181")
    # an exact entry with an empty rack is the default; it does not fall through to another host match
    assert topo.location("bk3:3181") == DEFAULT_RACK
    assert not topo.is_resolved("bk3:3181")


def test_from_rack_config_accepts_parsed_records() -> None:
    parsed = {"default": {"bk1:3181": BookieRackInfo("/r1", "h1"), "bk2:3181": BookieRackInfo("")}}
    topo = Topology.from_rack_config(parsed)
    assert topo.location("bk1:3181") == "/r1"
    assert topo.location("h1:3181") == "/r1"
    assert topo.is_default("bk2:3181")


@pytest.mark.parametrize(
    "bad",
    [
        ["not", "a", "mapping"],
        {"default": ["bk1:3181"]},
        {"default": {"bk1:3181": "rack1"}},
        {"default": {"bk1:3181": {"rack": 7}}},
        {"default": {"bk1:3181": {"rack": "/r", "hostname": 3}}},
    ],
)
def test_from_rack_config_rejects_malformed_json(bad: object) -> None:
    with pytest.raises(FormatError):
        Topology.from_rack_config(bad)  # type: ignore[arg-type]


def test_mapping_interface_and_immutability() -> None:
    topo = Topology.from_mapping({"a:1": "/r1", "b:1": "", "c:1": "r3/"})
    assert dict(topo) == {"a:1": "/r1", "b:1": DEFAULT_RACK, "c:1": "/r3"}
    assert len(topo) == 3 and "a:1" in topo and "z:1" not in topo
    with pytest.raises(KeyError):
        topo["z:1"]
    with pytest.raises(TypeError):
        topo["a:1"] = "/x"  # type: ignore[index]
    assert topo == Topology.from_mapping({"a:1": "/r1", "b:1": None, "c:1": "/r3"})
    assert hash(topo) == hash(Topology.from_mapping({"a:1": "/r1", "b:1": "/", "c:1": "/r3"}))
    assert "default_location='/default-rack'" in repr(topo)


def test_rack_aware_accessors() -> None:
    topo = Topology.from_mapping({"a": "/r1", "b": "/dc1/r7"})
    assert topo.rack("a") == "r1" and topo.rack("b") == "r7"
    assert topo.rack("unknown") == "default-rack"
    assert topo.is_default("unknown") and not topo.is_default("a")
    assert topo.components("b") == ("dc1", "r7")


def test_region_accessors() -> None:
    topo = Topology.from_mapping({"a": "/east/r1", "b": "/r1"}, default_location=DEFAULT_REGION_AND_RACK)
    assert topo.region("a") == "east" and topo.rack("a") == "r1"
    assert topo.region("b") is None  # a single component is no region
    assert topo.region("unknown") is None and topo.location("unknown") == DEFAULT_REGION_AND_RACK


def test_zone_accessors() -> None:
    topo = Topology.from_mapping(
        {"a": "/z1/ud1", "b": "/z1", "c": "/z1/ud1/x"}, default_location=DEFAULT_ZONE_AND_UPGRADEDOMAIN
    )
    assert (topo.zone("a"), topo.upgrade_domain("a")) == ("z1", "ud1")
    for bookie in ("b", "c", "unknown"):  # zone-aware needs exactly /zone/upgradedomain
        assert topo.zone(bookie) is None and topo.upgrade_domain(bookie) is None


def test_with_default_location_rereads_unknowns() -> None:
    topo = Topology.from_mapping({"a": "/r1", "b": ""})
    zoned = topo.with_default_location(DEFAULT_ZONE_AND_UPGRADEDOMAIN)
    assert zoned.location("b") == DEFAULT_ZONE_AND_UPGRADEDOMAIN
    assert zoned.location("a") == "/r1"
    assert topo.location("b") == DEFAULT_RACK  # the original is untouched
    with pytest.raises(ValueError):
        Topology(default_location="/")


def test_mapped_versus_resolved() -> None:
    topo = Topology.from_rack_config(PULSAR)
    assert topo.is_mapped("bk3:3181") and not topo.is_resolved("bk3:3181")  # listed, empty rack
    assert topo.is_mapped("bk1:9999") and topo.is_resolved("bk1:9999")  # by host
    assert not topo.is_mapped("nobody:3181") and not topo.is_resolved("nobody:3181")


# -- BookKeeper asks the rack mapper with the host only (NetUtils.resolveNetworkLocation) ------------------
def test_three_bookies_on_one_host_are_one_rack_as_in_bookkeeper() -> None:
    """Pulsar indexes /bookies by host, the last entry for a host wins: r1/r2/r3 on one host is ONE rack."""
    from bkaudit.model.placement import Adherence, RackAwarePolicy

    doc = {"default": {"10.0.0.1:3181": {"rack": "/r1"}, "10.0.0.1:3182": {"rack": "/r2"},
                       "10.0.0.1:3183": {"rack": "/r3"}}}
    topo = Topology.from_rack_config(doc)
    ensemble = ["10.0.0.1:3181", "10.0.0.1:3182", "10.0.0.1:3183"]
    assert {topo.location(b) for b in ensemble} == {"/r3"}
    assert RackAwarePolicy().adherence(ensemble, 2, 2, topo) is Adherence.FAIL


def test_the_last_entry_for_a_host_wins_in_pulsars_group_order() -> None:
    """Groups are read in sorted order (Pulsar's TreeMap), members in document order; later entries win."""
    doc = {"zeta": {"h:1": {"rack": "/z"}}, "alpha": {"h:2": {"rack": "/a"}, "h:3": {"rack": "/a2"}}}
    assert Topology.from_rack_config(doc).location("h:9") == "/z"
    assert Topology.from_mapping({"h:1": "/x", "h:2": "/y"}).location("h:1") == "/y"


# -- keys resolved through registrations, as Pulsar's BookieRackAffinityMapping.updateRacksWithHost --------
REGISTERED = {"bk-a": "10.0.0.2", "bk-b": "10.0.0.2", "bk-c": "10.0.0.3", "10.0.0.4:3181": "10.0.0.4"}


def test_custom_ids_resolve_to_their_endpoint_host() -> None:
    """Two ids on one endpoint host are one rack (the later entry wins); an id without an entry takes its
    endpoint host's rack; a key naming no registered bookie covers nobody else."""
    doc = {"default": {"bk-a": {"rack": "/r1"}, "bk-b": {"rack": "/r2"}, "10.0.0.3:3181": {"rack": "/r3"}}}
    topo = Topology.from_rack_config(RackConfig(doc, addresses=REGISTERED))
    assert topo.location("bk-a") == topo.location("bk-b") == "/r2"
    assert topo.location("bk-c") == DEFAULT_RACK  # "10.0.0.3:3181" is no registered id: skipped by Pulsar
    assert not topo.is_mapped("bk-c")
    assert topo.location("10.0.0.4:3181") == DEFAULT_RACK
    # the same document without registrations reads every key by its id's own host (the legacy reading)
    legacy = Topology.from_rack_config(doc)
    assert (legacy.location("bk-a"), legacy.location("bk-c:3181")) == ("/r1", DEFAULT_RACK)
    assert legacy.location("10.0.0.3:9999") == "/r3"


def test_an_unregistered_bookie_keeps_its_own_entry() -> None:
    """Pulsar skips it until it registers again; the checker judges ensembles as recorded, so a down bookie
    keeps its rack. Its entry covers its id only, not the host other bookies resolve to."""
    doc = {"default": {"bk-gone": {"rack": "/r9"}, "10.0.0.9:3181": {"rack": "/r8"}, "bk-a": {"rack": "/r1"}}}
    topo = Topology.from_rack_config(RackConfig(doc, addresses={"bk-a": "10.0.0.9"}))
    assert topo.location("bk-gone") == "/r9" and topo.is_resolved("bk-gone")
    assert topo.location("bk-a") == "/r1"  # the unregistered "10.0.0.9:3181" does not claim host 10.0.0.9
    assert topo.location("10.0.0.9:3181") == "/r8"  # but still covers that (down) id itself


def test_registrations_survive_a_default_change_and_a_pickle() -> None:
    """The topology is shipped to Spark executors and re-read with each policy's default."""
    import pickle

    doc = {"default": {"bk-a": {"rack": "/r1"}}}
    topo = Topology.from_rack_config(RackConfig(doc, addresses={"bk-a": "h", "bk-z": "h"}))
    regional = topo.with_default_location(DEFAULT_REGION_AND_RACK)
    assert regional.location("bk-z") == "/r1" and regional.location("bk-q") == DEFAULT_REGION_AND_RACK
    assert pickle.loads(pickle.dumps(topo)) == topo
    assert topo != Topology.from_rack_config(doc)  # same entries, resolved differently


def test_a_rack_config_reads_like_the_document() -> None:
    doc = {"g": {"bk-a": {"rack": "/r1"}}}
    config = RackConfig(doc, addresses={})
    assert dict(config) == doc and len(config) == 1 and not RackConfig({}, addresses={})
