"""The ClusterStore in memory, for unit tests that need no JVM.

It keeps what ZooKeeper would keep, in the same encodings where a caller can tell the difference (state
records and registrations as bytes, so a malformed one raises FormatError as it does from a znode; JSON
records round-tripped), and loses races the way ZooKeeper's compare-and-set does (MetadataConflict).
tests/store_contract.py holds the assertions run against it and against a real ZooKeeper.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from bkaudit.errors import FormatError
from bkaudit.formats import records
from bkaudit.model import lifecycle as lc
from bkaudit.model.dataloss import DataLossRecord
from bkaudit.model.dataloss import encode as encode_data_loss
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.store.base import (
    SessionEvent,
    T,
    Where,
)
from bkaudit.store.memory_ledgers import MemoryMetadataStore
from bkaudit.store.memory_queue import MemoryElection, MemoryQueue
from bkaudit.store.memory_records import (
    MemoryDataLoss,
    MemoryIndex,
    MemoryLifecycle,
    MemoryRegistry,
    MemoryWebhooks,
)
from bkaudit.zk.lifecycle import parse_state, serving_read_only
from bkaudit.zk.paths import validate_bookie_id


class MemoryStore:
    """A ClusterStore in dicts. Tests arrange the cluster through the methods below (what bookies and
    writers would do), then hand the store to the code under test."""

    def __init__(self, *, label: str = "memory") -> None:
        self.label = label
        self.lock = threading.RLock()
        self.cookie_bytes: dict[str, bytes] = {}  # bookie id -> its cookie, as the bookie wrote it
        self.registrations: dict[str, tuple[Where, bytes]] = {}
        self.states: dict[str, tuple[bytes, int]] = {}
        self.histories: dict[str, list[tuple[str, int, bytes]]] = {}  # bookie -> (name, sequence, record)
        self.progress: dict[str, dict[str, Any]] = {}
        self.failures: dict[str, dict[int, dict[str, Any]]] = {}
        self.serving: dict[str, bytes] = {}  # bookie id -> its serving switch, as ZooKeeper holds it
        self.lost: dict[int, bytes] = {}  # ledger -> its data-loss record
        self.markers: dict[int, tuple[str, ...]] = {}
        self.marker_versions: dict[int, int] = {}  # ledger -> its marker's version (0 when created)
        self.locks: dict[int, str] = {}  # ledger -> the worker holding its replication lock
        self.own_locks: set[int] = set()  # the locks this store's session took
        self.announced: str | None = None  # what the elected Auditor wrote for people
        self.votes: list[tuple[str, str]] = []  # (vote, node id), in order
        self.vote_watchers: dict[str, list[Callable[[], None]]] = {}
        self.session_listeners: list[Callable[[], None]] = []  # the election's
        self.session_watchers: list[Callable[[SessionEvent], None]] = []  # the registry's
        self.session = 1  # this store's session: registrations are ephemerals of it, as every vote and lock
        self.instance: str | None = None  # INSTANCEID: set by init_cluster
        self.cookie_versions: dict[str, int] = {}
        self.recovery_delay: int | None = None  # lostBookieRecoveryDelay
        self.check_ctimes: dict[str, int] = {}  # the Auditor checks' last completion (epoch ms)
        self.delay_watchers: list[Callable[[bytes | None], bool | None]] = []
        self.lifecycle_watchers: dict[str, list[tuple[Callable[[lc.StateRecord | FormatError | None], None],
                                                      Callable[[bool], None]]]] = {}
        self.watchers: list[tuple[Callable[[list[str]], None], Callable[[list[str]], None],
                                  Callable[[bytes | None], None]]] = []
        self.racks: bytes | None = None  # Pulsar's rack JSON
        self.hooks: dict[str, tuple[bytes, int]] = {}  # webhook id -> (record, creation sequence)
        self.deliveries: dict[str, dict[str, bytes]] = {}  # webhook id -> key -> delivery record
        self._seq = 0  # ZooKeeper's zxid: one order for every record created
        self.ledgers = MemoryMetadataStore(lock=self.lock)
        self.replication_enabled = True
        self.lifecycle = MemoryLifecycle(self)
        self.registry = MemoryRegistry(self)
        self.data_loss = MemoryDataLoss(self)
        self.queue = MemoryQueue(self)
        self.index = MemoryIndex(self)
        self.webhooks = MemoryWebhooks(self)
        self.election = MemoryElection(self)

    def check_bookie_id(self, bookie_id: str) -> str:
        return validate_bookie_id(bookie_id)

    def retrying(self, call: Callable[[], T], *, what: str) -> T:
        return call()  # memory does not lose its connection

    def init_cluster(self, *, instance: str = "memory-instance") -> None:
        """What `bkaudit cluster init` creates (the INSTANCEID bookies stamp into their cookies)."""
        self.instance = instance

    # -- arranging a cluster --------------------------------------------------------------------------------
    def add_cookie(self, bookie_id: str, data: bytes | None = None) -> None:
        """The cookie a bookie writes when it is formatted into the cluster (`data`: its bytes)."""
        cookie = records.Cookie(bookie_id, ("/journal",), ("/ledgers",), None)
        with self.lock:
            self.cookie_bytes[validate_bookie_id(bookie_id)] = (
                records.encode_cookie(cookie) if data is None else data
            )

    def register(self, bookie_id: str, data: bytes = b"", *, readonly: bool = False) -> None:
        """A bookie's registration with its BookieServiceInfo bytes (empty: legacy), as the bookie writes it;
        a writable one replaces a read-only one and vice versa."""
        with self.lock:
            self.registrations[validate_bookie_id(bookie_id)] = ("readonly" if readonly else "writable", data)
        self.notify_registry()

    def deregister(self, bookie_id: str) -> None:
        with self.lock:
            self.registrations.pop(bookie_id, None)
        self.notify_registry()

    def set_racks(self, data: bytes | None) -> None:
        """Pulsar's rack JSON as an operator writes it (None: deleted)."""
        with self.lock:
            self.racks = data
            watchers = list(self.watchers)
        for _, _, on_racks in watchers:
            on_racks(data)

    def expire_session(self) -> None:
        """What ZooKeeper does when this session expires: its votes, locks and registrations go, listeners
        hear of it, and a new session connects."""
        with self.lock:
            for ledger_id in self.own_locks:
                self.locks.pop(ledger_id, None)
            self.own_locks.clear()
            self.registrations.clear()
            self.session += 1  # "a new session connects"
            listeners = list(self.session_listeners)
            watchers = list(self.session_watchers)
        self.drop_votes({name for name, _ in self.votes})
        self.notify_registry()
        for listener in listeners:
            listener()
        events: tuple[SessionEvent, ...] = ("lost", "connected")
        for event in events:
            for watcher in watchers:
                watcher(event)

    def put_ledger(self, ledger_id: int, metadata: LedgerMetadata) -> None:
        self.ledgers.force(ledger_id, metadata)

    def delete_ledger(self, ledger_id: int) -> None:
        with self.lock:
            self.ledgers.data.pop(ledger_id, None)

    def record_data_loss(self, record: DataLossRecord) -> None:
        with self.lock:
            self.lost[record.ledger_id] = encode_data_loss(record)

    # -- what the store itself keeps in order ---------------------------------------------------------------
    def notify_registry(self) -> None:
        """Tell registry watchers the writable and read-only sets, as ZooKeeper's child watches would."""
        with self.lock:
            writable = sorted(b for b, (where, _) in self.registrations.items() if where == "writable")
            readonly = sorted(b for b, (where, _) in self.registrations.items() if where == "readonly")
            watchers, racks = list(self.watchers), self.racks
        for on_writable, on_readonly, on_racks in watchers:
            on_writable(writable)
            on_readonly(readonly)
            on_racks(racks)

    def notify_lifecycle(self, bookie_id: str) -> None:
        """Tell a bookie's lifecycle watchers its state record and serving switch, as DataWatches would."""
        with self.lock:
            watchers = list(self.lifecycle_watchers.get(bookie_id, ()))
            found = self.states.get(bookie_id)
            switch = self.serving.get(bookie_id)
        state = parse_state(None if found is None else found[0])  # as ZooKeeper's DataWatch delivers it
        read_only = serving_read_only(switch)
        for on_state, on_serving in watchers:
            on_state(state)
            on_serving(read_only)

    def drop_votes(self, gone: set[str]) -> None:
        with self.lock:
            self.votes = [(name, node) for name, node in self.votes if name not in gone]
            fired = [w for name in gone for w in self.vote_watchers.pop(name, ())]
        for watcher in fired:
            watcher()

    def next_seq(self) -> int:
        with self.lock:
            self._seq += 1
            return self._seq

    def append_history(self, bookie_id: str, data: bytes) -> None:
        """A history record, named as ZooKeeper names a sequential `h-` child."""
        with self.lock:
            found = self.histories.setdefault(bookie_id, [])
            found.append((f"h-{len(found):010d}", self.next_seq(), data))
