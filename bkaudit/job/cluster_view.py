"""The checker's view of the cluster at the start of a run: who is registered, where bookies listen, racks.

Read once on the driver with the run's ZooKeeper session; executors get the resulting static maps and need no
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
from bkaudit.rpc.pool import BookieClientPool
from bkaudit.zk import registry

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from bkaudit.config import Settings

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


def read_cluster_view(zk: KazooClient, *, root: str, known: Iterable[str]) -> ClusterView:
    """Registered bookies (now) and where every bookie of `known` or the registry listens."""
    registered: dict[str, str] = {}
    for b in registry.list_writable(zk, root):
        registered[b] = WRITABLE
    for b in registry.list_readonly(zk, root):
        registered[b] = READONLY
    pool = BookieClientPool(zk=zk, root=root)
    addresses = {b: pool.lookup(b) for b in sorted(set(known) | set(registered))}
    return ClusterView(
        registered=registered,
        targets={b: a.target for b, a in addresses.items()},
        batch_listing=frozenset(b for b, a in addresses.items() if a.batch_listing),
    )


def registered_now(zk: KazooClient, *, root: str) -> frozenset[str]:
    """Bookies registered (writable or read-only) now: read again after the fan-out's delayed re-check, so a
    bookie is lost only if it stayed unregistered through it (`bookie_stats.lost_bookies`)."""
    return frozenset(registry.list_writable(zk, root)) | frozenset(registry.list_readonly(zk, root))


@dataclass(frozen=True)
class PlacementInputs:
    """What the placement check judges with (picklable: shipped to the ledger pass)."""

    policy: PlacementPolicy
    topology: Topology
    policy_name: str

    def check(self, writable: frozenset[str]) -> PlacementCheck:
        return PlacementCheck(self.policy, self.topology, self.policy_name, writable=writable)


def read_placement_inputs(zk: KazooClient, settings: Settings, *, root: str) -> PlacementInputs:
    """The policy and topology of `[placement]`, with the one precedence rule of client and worker:
    Pulsar's `/bookies` rack map wins over `[placement] locations` (`model.topology.resolve_topology`), its
    keys resolved through the registrations under `root` as client and worker do (`read_rack_config`).

    Unreadable rack JSON must not stop an audit: it is logged and the configured locations are used.
    """
    conf = settings.get(PlacementSettings)
    racks: Mapping[str, object]
    try:
        racks = registry.read_rack_config(zk, root=root)
    except FormatError as exc:
        log.warning("rack configuration /bookies unreadable (%s); using [placement] locations", exc)
        racks = {}
    return PlacementInputs(policy_from_settings(conf), topology_from_settings(conf, racks), conf.policy)
