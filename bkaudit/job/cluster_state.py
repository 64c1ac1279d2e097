"""The small, driver-side part of a snapshot: bookies, racks and the under-replication queue.

These are a few hundred to a few thousand znodes, so one session on the driver reads them (pipelined, rate
limited like the ledger scan) instead of a Spark stage whose scheduling would cost more than the reads.
Nothing here decodes: raw bytes go to the pure builders in `bkaudit.tables.registry_rows`.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NoNodeError

from bkaudit.errors import FormatError
from bkaudit.model.topology import Topology
from bkaudit.tables.registry_rows import READONLY, UNAVAILABLE, WRITABLE, BookieRecord, MarkerRecord
from bkaudit.zk import paths, registry
from bkaudit.zk.ledgers import read_many
from bkaudit.zk.lifecycle import list_states
from bkaudit.zk.underreplication import list_underreplicated

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
    zk: Any, root: str, bookies: list[BookieRecord], cookies: set[str]
) -> list[BookieRecord]:
    """Each bookie with a cookie gets its lifecycle state (Active when no state znode; `unreadable`)."""
    states = list_states(zk, root=root)
    out = []
    for b in bookies:
        if b.bookie_id in cookies:
            found = states.get(b.bookie_id)
            value = "Active" if found is None else found.state.value if not isinstance(found, FormatError) \
                else "unreadable"
            b = dataclasses.replace(b, lifecycle_state=value)
        out.append(b)
    return out


def read_cluster_state(
    zk: Any, root: str, *, max_in_flight: int = 500, rate_limiter: Any = None
) -> ClusterState:
    """Read registrations, cookies, racks and markers with one session (`zk`)."""
    state = ClusterState()
    writable = registry.list_writable(zk, root)
    readonly = registry.list_readonly(zk, root)
    cookies = set(registry.list_cookies(zk, root))
    znodes = {paths.available_path(b, root=root): (b, WRITABLE) for b in writable}
    # a bookie registered both ways is mid-transition; read-only wins (the writable znode goes away next)
    znodes.update({paths.readonly_path(b, root=root): (b, READONLY) for b in readonly})
    seen: dict[str, BookieRecord] = {}
    for path, data, _ in read_many(zk, list(znodes), max_in_flight=max_in_flight, rate_limiter=rate_limiter):
        bookie_id, kind = znodes[path]
        if data is None:
            continue  # unregistered meanwhile: it is reported from its cookie, if any
        if kind == READONLY or bookie_id not in seen:
            seen[bookie_id] = BookieRecord(bookie_id, kind, bookie_id in cookies, data)
    for bookie_id in cookies - set(seen):
        seen[bookie_id] = BookieRecord(bookie_id, UNAVAILABLE, True)
    state.bookies = _with_lifecycle(zk, root, list(seen.values()), cookies)
    _read_racks(zk, root, state)
    state.markers = _read_markers(zk, root, max_in_flight, rate_limiter)
    return state


def _read_racks(zk: Any, root: str, state: ClusterState) -> None:
    """Pulsar's /bookies JSON → Topology, keys resolved through the registrations as Pulsar does; an
    unreadable one is a warning, not a failed snapshot."""
    try:
        racks = registry.read_rack_config(zk, root=root)
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


def _read_markers(zk: Any, root: str, max_in_flight: int, rate_limiter: Any) -> list[MarkerRecord]:
    """Every urL marker with its lock data (a marker resolved between listing and reading is absent)."""
    ids = list(list_underreplicated(zk, root=root))
    if not ids:
        return []
    try:
        locked = {paths.parse_lock_name(n) for n in zk.get_children(paths.locks_root(root=root))}
    except NoNodeError:
        locked = set()
    marker_paths = {paths.underreplicated_ledger_path(i, root=root): i for i in ids}
    lock_paths = {paths.lock_path(i, root=root): i for i in ids if i in locked}
    found: dict[int, bytes] = {}
    locks: dict[int, bytes] = {}
    wanted = [*marker_paths, *lock_paths]
    for path, data, _ in read_many(zk, wanted, max_in_flight=max_in_flight, rate_limiter=rate_limiter):
        if data is None:
            continue
        if path in marker_paths:
            found[marker_paths[path]] = data
        else:
            locks[lock_paths[path]] = data
    return [MarkerRecord(i, found[i], locks.get(i)) for i in ids if i in found]
