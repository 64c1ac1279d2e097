"""The small, driver-side part of a snapshot: bookies, racks and the under-replication queue.

These are a few hundred to a few thousand znodes, so the driver reads them from one store (pipelined, rate
limited like the ledger scan) instead of a Spark stage whose scheduling would cost more than the reads.
Nothing here decodes: raw bytes go to the pure builders in `bkaudit.tables.registry_rows`.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bkaudit.errors import FormatError
from bkaudit.model.topology import Topology
from bkaudit.tables.registry_rows import READONLY, UNAVAILABLE, WRITABLE, BookieRecord, MarkerRecord

if TYPE_CHECKING:
    from bkaudit.store import ClusterStore
    from bkaudit.zk.client import RateLimiter

log = logging.getLogger(__name__)


@dataclass
class ClusterState:
    """What the driver read: bookie records, the rack topology, hostnames and under-replication markers."""

    bookies: list[BookieRecord] = field(default_factory=list)
    topology: Any | None = None
    hostnames: dict[str, str] = field(default_factory=dict)
    markers: list[MarkerRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def known_bookies(self) -> set[str]:
        return {b.bookie_id for b in self.bookies}


def _with_lifecycle(
    store: ClusterStore, bookies: list[BookieRecord], cookies: set[str]
) -> list[BookieRecord]:
    """Each bookie with a cookie gets its lifecycle state (Active when no state record; `unreadable`)."""
    states = store.lifecycle.list_states()
    out = []
    for b in bookies:
        if b.bookie_id in cookies:
            found = states.get(b.bookie_id)
            value = "Active" if found is None else found.state.value if not isinstance(found, FormatError) \
                else "unreadable"
            b = dataclasses.replace(b, lifecycle_state=value)
        out.append(b)
    return out


def read_cluster_state(store: ClusterStore, *, rate_limiter: RateLimiter | None = None) -> ClusterState:
    """Read registrations, cookies, racks and markers from the store (its reads bounded by its
    `max_in_flight`, each taking a `rate_limiter` token)."""
    state = ClusterState()
    cookies = set(store.registry.cookies())
    seen: dict[str, BookieRecord] = {}
    # a bookie registered both ways is mid-transition; read-only wins (the writable znode goes away next)
    for bookie_id, where, data in store.registry.registration_bytes(rate_limiter=rate_limiter):
        kind = READONLY if where == "readonly" else WRITABLE
        if kind == READONLY or bookie_id not in seen:
            seen[bookie_id] = BookieRecord(bookie_id, kind, bookie_id in cookies, data)
    for bookie_id in cookies - set(seen):
        seen[bookie_id] = BookieRecord(bookie_id, UNAVAILABLE, True)
    state.bookies = _with_lifecycle(store, list(seen.values()), cookies)
    _read_racks(store, state)
    state.markers = [MarkerRecord(i, marker, lock)
                     for i, marker, lock in store.queue.marker_bytes(rate_limiter=rate_limiter)]
    return state


def _read_racks(store: ClusterStore, state: ClusterState) -> None:
    """Pulsar's /bookies JSON → Topology, keys resolved through the registrations as Pulsar does; an
    unreadable one is a warning, not a failed snapshot."""
    try:
        racks = store.registry.rack_config()
        state.topology = Topology.from_rack_config(racks) if racks else None
    except Exception as exc:
        state.warnings.append(f"rack configuration /bookies unreadable: {exc}")
        log.warning("rack configuration /bookies unreadable: %s", exc)
        return
    for group in racks.values():
        for bookie_id, info in group.items():
            hostname = getattr(info, "hostname", None)
            if hostname:
                state.hostnames.setdefault(bookie_id, str(hostname))
