"""The live set of writable and read-only bookies and their racks, kept current by ZooKeeper watches.

The auditor reacts to every registration change (BookKeeper's watch on `available` and `available/readonly`);
the workers need the same sets for every ledger they repair. Watches keep both in memory, so repairing a
ledger costs no registry reads, and listeners wake the auditor on change. Cookies (every bookie ever known)
change rarely and are read on demand.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bkaudit.errors import FormatError
from bkaudit.formats import records

if TYPE_CHECKING:

    from bkaudit.model.topology import Topology
    from bkaudit.store.base import Registry

log = logging.getLogger(__name__)


class BookieView:
    """Writable / read-only bookies and the topology, from watches; thread-safe reads."""

    def __init__(self, registry: Registry, *, settings: Any = None) -> None:
        self.registry = registry
        self.settings = settings  # bkaudit.config.Settings: [placement] policy and locations
        self._writable: frozenset[str] = frozenset()
        self._readonly: frozenset[str] = frozenset()
        self._racks: dict[str, Any] = {}
        self._hosts: dict[str, str | None] = {}  # registered bookie -> endpoint host (None: unresolvable)
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._started = False
        self._since = time.monotonic()  # bookies never seen registered count as absent from here
        self._gone_at: dict[str, float] = {}  # bookie -> when it left both registration sets

    def start(self) -> BookieView:
        if self._started:
            return self
        self._started = True
        self.registry.watch(
            on_writable=self._on_available, on_readonly=self._on_readonly, on_racks=self._on_racks
        )
        return self

    # -- watches (the store's event thread: no store calls here) --------------------------------------------
    def _on_available(self, children: list[str]) -> None:
        with self._lock:
            before = self._writable | self._readonly
            self._writable = frozenset(children)
            self._note_absences(before)
        self._notify()

    def _on_readonly(self, children: list[str]) -> None:
        with self._lock:
            before = self._writable | self._readonly
            self._readonly = frozenset(children)
            self._note_absences(before)
        self._notify()

    def _note_absences(self, before: frozenset[str]) -> None:
        now = self._writable | self._readonly
        for bookie in now:
            self._gone_at.pop(bookie, None)
        for bookie in before - now:
            self._gone_at.setdefault(bookie, time.monotonic())

    def _on_racks(self, data: bytes | None) -> None:
        try:
            racks = records.parse_rack_config(data) if data else {}
        except FormatError as exc:
            log.warning(
                "%s holds unparseable rack JSON (%s); keeping the previous racks", self.registry.racks_home,
                exc,
            )
            return
        with self._lock:
            self._racks = dict(racks)

    def _notify(self) -> None:
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:
                log.exception("bookie change listener failed")

    # -- queries ---------------------------------------------------------------------------------------------
    def add_listener(self, listener: Callable[[], None]) -> None:
        """Called (on kazoo's event thread: must not block) whenever either set changes."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def writable(self) -> frozenset[str]:
        with self._lock:
            return self._writable

    def readonly(self) -> frozenset[str]:
        with self._lock:
            return self._readonly

    def available(self) -> frozenset[str]:
        with self._lock:
            return self._writable | self._readonly

    def absent_for(self, bookie: str) -> float:
        """Seconds `bookie` has been in neither registration set (0 while registered; a bookie this view never
        saw registered counts from the view's start): how long a "lost" bookie has really been gone."""
        with self._lock:
            if bookie in self._writable or bookie in self._readonly:
                return 0.0
            return time.monotonic() - self._gone_at.get(bookie, self._since)

    def cookies(self) -> list[str]:
        """Every bookie known to the cluster (BookKeeper's admin.getAllBookies): a registry read."""
        return self.registry.cookies()

    def lost(self) -> set[str]:
        """BookKeeper's lost bookies: known (cookies) - writable - read-only."""
        return set(self.cookies()) - self.available()

    def topology(self) -> Topology:
        """Locations for placement: Pulsar's /bookies map (its keys resolved through the registrations, as
        Pulsar does), else [placement] locations, else default racks."""
        from bkaudit.audit.settings import PlacementSettings, topology_from_settings
        from bkaudit.model.topology import RackConfig

        with self._lock:
            racks = dict(self._racks)
        conf = self.settings.get(PlacementSettings) if self.settings is not None else PlacementSettings()
        if not racks:
            return topology_from_settings(conf, racks)
        hosts = self._endpoint_hosts()
        return topology_from_settings(conf, RackConfig(racks, addresses=hosts))

    def _endpoint_hosts(self) -> dict[str, str]:
        """Registered bookie -> its bookie-rpc endpoint's host; a registration is read once while it stays
        (BookKeeper's ZKRegistrationClient caches BookieServiceInfo the same way, dropping it on deletion)."""
        with self._lock:
            writable, readonly = self._writable, self._readonly
            known = dict(self._hosts)
        current = writable | readonly
        new = current - set(known)
        if new:
            found = self.registry.endpoint_hosts(new & writable, new & readonly)
            known.update({b: found.get(b) for b in new})
        known = {b: h for b, h in known.items() if b in current}
        with self._lock:
            self._hosts = known
        return {b: h for b, h in known.items() if h is not None}
