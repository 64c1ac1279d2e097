"""Where each bookie lives: bookie id → network location, as BookKeeper's placement policies see it.

Location grammar (BookKeeper's `NetworkTopology` paths)::

    location  := "/" component ( "/" component )*
    component := one or more characters other than "/"

One grammar, three readings, chosen by the placement policy:

* rack-aware   ``/rack``                the whole path is the rack (``/dc1/r7`` differs from ``/r7``)
* region-aware ``/region/rack``         first component = region, last = rack within it
* zone-aware   ``/zone/upgradedomain``  exactly two components; anything else is "unresolved"

Normalisation mirrors what Pulsar's ``BookieRackAffinityMapping`` and BookKeeper's ``NodeBase.normalize`` do
to a configured rack, so the same input gives the same answer here and in the brokers: surrounding whitespace
is dropped, a missing leading ``/`` is added, empty components (a trailing ``/``, ``//``) vanish, and an empty
string or a bare ``/`` means "no location", i.e. the default location. Names are case sensitive.

A bookie without a location maps to ``default_location``: ``/default-rack`` for rack-aware (BookKeeper's
``NetworkTopology.DEFAULT_RACK``), ``/default-region/default-rack`` for region-aware and
``/default-zone/default-upgradedomain`` for zone-aware; build the topology with the policy's default
(`PlacementPolicy.default_location`) so "unknown" reads the way BookKeeper reads it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from bkaudit.errors import FormatError

DEFAULT_RACK = "/default-rack"
DEFAULT_REGION_AND_RACK = "/default-region/default-rack"
DEFAULT_ZONE_AND_UPGRADEDOMAIN = "/default-zone/default-upgradedomain"


def normalize_location(location: str | None) -> str | None:
    """The canonical form of a configured location, or None when it means "use the default".

    Lenient on purpose: Pulsar accepts ``rack1`` for ``/rack1`` and ``/`` for "unset", and operators' rack
    JSON contains both; an audit must read what the brokers read rather than reject it.
    """
    if location is None:
        return None
    parts = [p for p in location.strip().split("/") if p.strip()]
    if not parts:
        return None
    return "/" + "/".join(p.strip() for p in parts)


def location_components(location: str) -> tuple[str, ...]:
    """The non-empty path components of a location: ``/r1/rack2`` → ``("r1", "rack2")``."""
    return tuple(p for p in location.split("/") if p)


def host_of(bookie_id: str) -> str:
    """The host part of a ``host:port`` bookie id (``[v6]:port`` too); the id itself when it has no port.

    The legacy reading of an id (`BookieSocketAddress(String)`, and what a registration without data says:
    `BookieServiceInfoUtils.buildLegacyBookieServiceInfo`). It stands in for the registration when none is
    known; a registered bookie's host is its `bookie-rpc` endpoint's (`Topology`, `RackConfig`).
    """
    text = bookie_id.strip()
    if text.startswith("["):
        end = text.find("]")
        return text[1:end] if end > 0 else text
    host, sep, port = text.rpartition(":")
    if sep and port.isdigit() and host and ":" not in host:
        return host
    return text


class RackConfig(Mapping[str, Mapping[str, Any]]):
    """Pulsar's ``/bookies`` groups, with the registrations their keys resolve through.

    Pulsar's `BookieRackAffinityMapping.updateRacksWithHost` resolves each key (a BookieId) through the
    bookie's registration (`DefaultBookieAddressResolver`: the `bookie-rpc` endpoint of its BookieServiceInfo)
    and files the rack under that endpoint's host, because BookKeeper asks the mapping about hosts, found the
    same way. `addresses` is that resolution: bookie id → its endpoint's host, for every bookie registered
    (writable or read-only) when it was read (`bkaudit.zk.registry.read_rack_config`).
    """

    __slots__ = ("_groups", "addresses")

    def __init__(self, groups: Mapping[str, Mapping[str, Any]], *, addresses: Mapping[str, str]) -> None:
        self._groups = dict(groups)
        self.addresses: Mapping[str, str] = dict(addresses)

    def __getitem__(self, group: str) -> Mapping[str, Any]:
        return self._groups[group]

    def __iter__(self) -> Iterator[str]:
        return iter(self._groups)

    def __len__(self) -> int:
        return len(self._groups)


class Topology(Mapping[str, str]):
    """An immutable map bookie id → normalised network location, with a default for unmapped bookies.

    As a Mapping it holds only the explicitly configured ids (an entry whose rack is empty maps to the
    default location). `location()` follows BookKeeper and Pulsar: a bookie's location is its HOST's
    location, so bookies sharing a host share a rack whatever their ports or ids (the last configured entry
    for a host wins, as in Pulsar's host-keyed map). The host of an id is its registration's endpoint host
    when `addresses` (the registrations) are given, else the id's own host part (`host_of`). With
    registrations known, an entry whose bookie is not registered covers that id only (Pulsar skips it until
    the bookie registers; a down bookie keeps its rack here, for judging ensembles as recorded). Pulsar
    ``hostname`` fields only fill hosts no entry names (bkaudit's stand-in for the DNS Pulsar does); anything
    else is the default.
    """

    __slots__ = ("_addresses", "_by_host", "_by_id", "_entries", "default_location")

    def __init__(
        self,
        entries: Mapping[str, str | None] | None = None,
        *,
        default_location: str = DEFAULT_RACK,
        hosts: Mapping[str, str | None] | None = None,
        addresses: Mapping[str, str] | None = None,
    ) -> None:
        default = normalize_location(default_location)
        if default is None:
            raise ValueError(f"default location must be a non-empty path, got {default_location!r}")
        self.default_location = default
        self._entries: dict[str, str | None] = {k: normalize_location(v) for k, v in (entries or {}).items()}
        self._addresses: dict[str, str] | None = None if addresses is None else dict(addresses)
        # each entry under its bookie's host (a later entry for the same host replaces an earlier one, as
        # Pulsar's HashMap.put), or under its own id when the bookie is known not to be registered; then the
        # informative `hostname` fields, which only fill gaps that DNS would have filled for Pulsar
        self._by_host: dict[str, str | None] = {}
        self._by_id: dict[str, str | None] = {}
        for key, value in self._entries.items():
            host = self._host(key)
            if host is None:
                self._by_id[key] = value
            else:
                self._by_host[host] = value
        for key, value in (hosts or {}).items():
            self._by_host.setdefault(key, normalize_location(value))

    # -- constructors --------------------------------------------------------------------------------------
    @classmethod
    def from_mapping(
        cls, mapping: Mapping[str, str | None], *, default_location: str = DEFAULT_RACK
    ) -> Topology:
        """From a plain ``{bookie_id: location}`` map (the ``[placement] locations`` setting)."""
        return cls(dict(mapping), default_location=default_location)

    @classmethod
    def from_rack_config(cls, config: Mapping[str, Any], *, default_location: str = DEFAULT_RACK) -> Topology:
        """From Pulsar's ``/bookies`` rack configuration: ``{group: {"host:port": {"rack", "hostname"}}}``.

        Accepts the decoded JSON (plain dicts) and `bkaudit.formats.records.parse_rack_config` output (values
        with ``rack``/``hostname`` attributes). The group name plays no part in placement, but groups are
        read in sorted order (Pulsar's ``BookiesRackConfiguration`` is a TreeMap) and members in document
        order, so when several entries share a host the last one read wins, as in Pulsar's host map.
        """
        if not isinstance(config, Mapping):
            raise FormatError("rack configuration must be an object of groups", field="/bookies")
        addresses = config.addresses if isinstance(config, RackConfig) else None
        entries: dict[str, str | None] = {}
        hosts: dict[str, str | None] = {}
        for group, bookies in sorted(config.items(), key=lambda kv: str(kv[0])):
            if not isinstance(bookies, Mapping):
                raise FormatError("rack group must be an object of bookies", field=f"/bookies.{group}")
            for bookie_id, info in bookies.items():
                rack, hostname = _rack_and_hostname(info, f"/bookies.{group}.{bookie_id}")
                entries.pop(str(bookie_id), None)  # re-inserted: its host's entry is the latest read
                entries[str(bookie_id)] = rack
                if hostname:
                    hosts.setdefault(hostname, rack)
        return cls(entries, default_location=default_location, hosts=hosts, addresses=addresses)

    def with_default_location(self, default_location: str) -> Topology:
        """The same map read with another default (each policy has its own "unknown" location)."""
        clone = Topology(default_location=default_location)
        clone._entries = dict(self._entries)
        clone._addresses = None if self._addresses is None else dict(self._addresses)
        clone._by_host = dict(self._by_host)
        clone._by_id = dict(self._by_id)
        return clone

    # -- lookups -------------------------------------------------------------------------------------------
    def location(self, bookie_id: str) -> str:
        """The bookie's network location (the default location when nothing maps it)."""
        found = self._lookup(bookie_id)
        return found if found is not None else self.default_location

    def is_mapped(self, bookie_id: str) -> bool:
        """True when some configured entry (by id or host) covers this bookie, even with an empty rack."""
        return bookie_id in self._entries or self._find(bookie_id)[0]

    def is_resolved(self, bookie_id: str) -> bool:
        """True when a configured entry (by id or host) gives this bookie a non-default location."""
        return self._lookup(bookie_id) is not None and not self.is_default(bookie_id)

    def is_default(self, bookie_id: str) -> bool:
        """True when the bookie sits on the default location (unmapped, empty rack, or the default itself)."""
        return self.location(bookie_id) == self.default_location

    def components(self, bookie_id: str) -> tuple[str, ...]:
        """The path components of the bookie's location."""
        return location_components(self.location(bookie_id))

    def rack(self, bookie_id: str) -> str:
        """The last path component: the rack for ``/rack`` and ``/region/rack`` (for display and grouping).

        Rack-aware adherence compares whole locations, as BookKeeper does; use `location()` for identity.
        """
        parts = self.components(bookie_id)
        return parts[-1] if parts else ""

    def region(self, bookie_id: str) -> str | None:
        """The region of a ``/region/rack`` location; None for a default or single-component location."""
        parts = self.components(bookie_id)
        if self.is_default(bookie_id) or len(parts) < 2:
            return None
        return parts[0]

    def zone(self, bookie_id: str) -> str | None:
        """The zone of a ``/zone/upgradedomain`` location; None unless it has exactly two components."""
        parts = self.components(bookie_id)
        if self.is_default(bookie_id) or len(parts) != 2:
            return None
        return parts[0]

    def upgrade_domain(self, bookie_id: str) -> str | None:
        """The upgrade domain of a ``/zone/upgradedomain`` location; None unless exactly two components."""
        parts = self.components(bookie_id)
        if self.is_default(bookie_id) or len(parts) != 2:
            return None
        return parts[1]

    def _host(self, bookie_id: str) -> str | None:
        """The host BookKeeper asks the rack mapping about (`NetUtils.resolveNetworkLocation` with the
        resolved address's host name); None for a bookie known not to be registered."""
        if self._addresses is None:
            return host_of(bookie_id)
        return self._addresses.get(bookie_id)

    def _find(self, bookie_id: str) -> tuple[bool, str | None]:
        """(covered, location or None for the default) of one bookie."""
        host = self._host(bookie_id)
        if host is None:  # not registered: its own entry, else the host its id names
            if bookie_id in self._by_id:
                return True, self._by_id[bookie_id]
            host = host_of(bookie_id)
        if host in self._by_host:
            return True, self._by_host[host]
        return False, None

    def _lookup(self, bookie_id: str) -> str | None:
        return self._find(bookie_id)[1]

    # -- Mapping -------------------------------------------------------------------------------------------
    def __getitem__(self, bookie_id: str) -> str:
        value = self._entries[bookie_id]
        return value if value is not None else self.default_location

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Topology):
            return NotImplemented
        return (
            self.default_location == other.default_location
            and self._entries == other._entries
            and self._by_host == other._by_host
            and self._by_id == other._by_id
            and self._addresses == other._addresses
        )

    def __hash__(self) -> int:
        return hash((self.default_location, frozenset(self._entries.items())))

    def __repr__(self) -> str:
        return f"Topology({dict(self)!r}, default_location={self.default_location!r})"


def resolve_topology(
    *, racks: Mapping[str, Any] | None, locations: Mapping[str, str | None], default_location: str
) -> Topology:
    """The one precedence rule for bookie locations (client, replication worker and checker alike).

    Pulsar's ``/bookies`` rack map (`racks`, the parsed JSON, or a `RackConfig` whose keys resolve through
    the registrations as Pulsar resolves them) wins whenever it holds anything; only without it do the
    ``[placement] locations`` apply (docs/config.md). Bookies neither covers sit on `default_location` (the
    placement policy's own "unknown" location).
    """
    if racks:
        return Topology.from_rack_config(racks, default_location=default_location)
    return Topology.from_mapping(locations, default_location=default_location)


def _rack_and_hostname(info: Any, where: str) -> tuple[str | None, str | None]:
    """(rack, hostname) of one Pulsar BookieInfo, given as a dict or as an object with attributes."""
    if isinstance(info, Mapping):
        rack, hostname = info.get("rack"), info.get("hostname")
    elif hasattr(info, "rack"):
        rack, hostname = info.rack, getattr(info, "hostname", None)
    else:
        raise FormatError("bookie rack info must be an object with 'rack'", field=where)
    if rack is not None and not isinstance(rack, str):
        raise FormatError(f"rack must be a string, got {type(rack).__name__}", field=f"{where}.rack")
    if hostname is not None and not isinstance(hostname, str):
        raise FormatError(
            f"hostname must be a string, got {type(hostname).__name__}", field=f"{where}.hostname"
        )
    return rack, (hostname or None)
