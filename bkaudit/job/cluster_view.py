"""The checker's view of the cluster at the start of a run: who is registered, where bookies listen, racks.

Read once on the driver from the run's cluster store; executors get the resulting static maps and need no
ZooKeeper session of their own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bkaudit.audit.placement import PlacementCheck
from bkaudit.audit.settings import PlacementSettings, policy_from_settings, topology_from_settings
from bkaudit.errors import FormatError
from bkaudit.model.placement import PlacementPolicy
from bkaudit.model.topology import Topology
from bkaudit.rpc.pool import lookup_address

if TYPE_CHECKING:
    from bkaudit.config import Settings
    from bkaudit.formats.records import BookieServiceInfo
    from bkaudit.store import ClusterStore

log = logging.getLogger(__name__)

WRITABLE = "writable"
READONLY = "readonly"
ABSENT = "absent"


@dataclass(frozen=True)
class ClusterView:
    """Registration now (bookie → writable / readonly) and every known bookie's endpoint."""

    registered: Mapping[str, str]
    targets: Mapping[str, str]
    """Bookie id → host:port, for every bookie the snapshot or the registry names."""
    batch_listing: frozenset[str] = frozenset()
    """Bookies that advertised the batch listing (op 1000)."""

    @property
    def writable(self) -> frozenset[str]:
        """Bookies writable now: the only ones BookKeeper's rack-aware Auditor counts (bookkeeper_verdict)."""
        return frozenset(b for b, state in self.registered.items() if state == WRITABLE)

    def state(self, bookie_id: str) -> str:
        return self.registered.get(bookie_id, ABSENT)


def read_cluster_view(store: ClusterStore, *, known: Iterable[str]) -> ClusterView:
    """Registered bookies (now) and where every bookie of `known` or the registry listens."""
    registered: dict[str, str] = {}
    for b in store.registry.writable():
        registered[b] = WRITABLE
    for b in store.registry.readonly():
        registered[b] = READONLY

    def registration(bookie_id: str) -> BookieServiceInfo | None:
        return store.registry.registration(bookie_id)[1]

    addresses = {b: lookup_address(b, registration, static={})
                 for b in sorted(set(known) | set(registered))}
    return ClusterView(
        registered=registered,
        targets={b: a.target for b, a in addresses.items()},
        batch_listing=frozenset(b for b, a in addresses.items() if a.batch_listing),
    )


def registered_now(store: ClusterStore) -> frozenset[str]:
    """Bookies registered (writable or read-only) now: read again after the fan-out's delayed re-check, so a
    bookie is lost only if it stayed unregistered through it (`bookie_stats.lost_bookies`)."""
    return frozenset(store.registry.writable()) | frozenset(store.registry.readonly())


@dataclass(frozen=True)
class PlacementInputs:
    """What the placement check judges with (picklable: shipped to the ledger pass)."""

    policy: PlacementPolicy
    topology: Topology
    policy_name: str

    def check(self, writable: frozenset[str]) -> PlacementCheck:
        return PlacementCheck(self.policy, self.topology, self.policy_name, writable=writable)


def read_placement_inputs(store: ClusterStore, settings: Settings) -> PlacementInputs:
    """The policy and topology of `[placement]`, with the one precedence rule of client and worker:
    Pulsar's `/bookies` rack map wins over `[placement] locations` (`model.topology.resolve_topology`), its
    keys resolved through the registrations as client and worker do (`Registry.rack_config`).

    Unreadable rack JSON must not stop an audit: it is logged and the configured locations are used.
    """
    conf = settings.get(PlacementSettings)
    racks: Mapping[str, object]
    try:
        racks = store.registry.rack_config()
    except FormatError as exc:
        log.warning("rack configuration /bookies unreadable (%s); using [placement] locations", exc)
        racks = {}
    return PlacementInputs(policy_from_settings(conf), topology_from_settings(conf, racks), conf.policy)
