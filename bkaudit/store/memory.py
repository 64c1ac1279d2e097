"""The ClusterStore in memory, for unit tests that need no JVM.

It keeps what ZooKeeper would keep, in the same encodings where a caller can tell the difference (state
records and registrations as bytes, so a malformed one raises FormatError as it does from a znode; JSON
records round-tripped), and loses races the way ZooKeeper's compare-and-set does (MetadataConflict).
tests/store_contract.py holds the assertions run against it and against a real ZooKeeper.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any

from bkaudit.errors import ClusterError, FormatError, MetadataConflict, MetadataError
from bkaudit.formats import records
from bkaudit.model import lifecycle as lc
from bkaudit.model.dataloss import DataLossRecord
from bkaudit.model.dataloss import encode as encode_data_loss
from bkaudit.model.dataloss import parse as parse_data_loss
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.store.base import (
    ABSENT,
    BookieState,
    Limiter,
    SessionEvent,
    T,
    Transition,
    Where,
    index_bookies,
    index_ledgers,
)
from bkaudit.zk.paths import validate_bookie_id

_CHANGED = "{what}: the state changed meanwhile; re-read it"


def _json(value: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(value, sort_keys=True))
    assert isinstance(out, dict)
    return out


class _Lifecycle:
    def __init__(self, store: MemoryStore) -> None:
        self._s = store

    def read_state(self, bookie_id: str) -> tuple[lc.StateRecord | None, int]:
        with self._s.lock:
            found = self._s.states.get(validate_bookie_id(bookie_id))
        return (None, ABSENT) if found is None else (lc.parse(found[0]), found[1])

    def list_states(self) -> dict[str, lc.StateRecord | FormatError]:
        out: dict[str, lc.StateRecord | FormatError] = {}
        with self._s.lock:
            found = {b: self._s.states[b][0] for b in sorted(self._s.cookie_bytes) if b in self._s.states}
        for bookie, data in found.items():
            try:
                out[bookie] = lc.parse(data)
            except FormatError as exc:
                out[bookie] = exc
        return out

    def write_state(self, bookie_id: str, record: lc.StateRecord, *, version: int) -> None:
        with self._s.lock:
            current = self._s.states.get(validate_bookie_id(bookie_id))
            if version == ABSENT:
                if current is not None or bookie_id not in self._s.cookie_bytes:
                    raise MetadataConflict(_CHANGED.format(what=f"lifecycle of {bookie_id}"))
                self._s.states[bookie_id] = (lc.encode(record), 0)
            else:
                if current is None or current[1] != version:
                    raise MetadataConflict(_CHANGED.format(what=f"lifecycle of {bookie_id}"))
                self._s.states[bookie_id] = (lc.encode(record), version + 1)
            self._s.append_history(bookie_id, lc.encode(record))
        self._s.notify_lifecycle(bookie_id)


    def remove_bookie(self, bookie_id: str, record: lc.StateRecord, *, version: int) -> None:
        with self._s.lock:
            current = self._s.states.get(validate_bookie_id(bookie_id))
            if current is None or current[1] != version or bookie_id not in self._s.cookie_bytes:
                raise MetadataConflict(_CHANGED.format(what=f"removing {bookie_id}"))
            del self._s.states[bookie_id]
            del self._s.cookie_bytes[bookie_id]
            self._s.append_history(bookie_id, lc.encode(record))
        self._s.notify_lifecycle(bookie_id)


    def history(self, bookie_id: str) -> list[lc.StateRecord]:
        with self._s.lock:
            found = [data for _, _, data in self._s.histories.get(validate_bookie_id(bookie_id), ())]
        out = []
        for data in found:
            try:
                out.append(lc.parse(data))
            except FormatError:
                continue
        return out

    def transitions(self) -> list[Transition]:
        with self._s.lock:
            found = [(b, name, seq, data) for b, records_ in self._s.histories.items()
                     for name, seq, data in records_]
        return sorted(found, key=lambda t: t[2])

    def write_progress(self, bookie_id: str, progress: dict[str, Any]) -> None:
        with self._s.lock:
            self._s.progress[validate_bookie_id(bookie_id)] = _json(progress)

    def read_progress(self, bookie_id: str) -> dict[str, Any] | None:
        with self._s.lock:
            found = self._s.progress.get(validate_bookie_id(bookie_id))
        return None if found is None else _json(found)

    def record_failure(self, bookie_id: str, ledger_id: int, error: str, at: str) -> int:
        with self._s.lock:
            failures = self._s.failures.setdefault(validate_bookie_id(bookie_id), {})
            count = int(failures.get(ledger_id, {}).get("count", 0)) + 1
            failures[ledger_id] = {"ledger_id": ledger_id, "count": count, "error": error, "at": at}
            return count

    def list_failures(self, bookie_id: str) -> dict[int, dict[str, Any]]:
        with self._s.lock:
            found = self._s.failures.get(validate_bookie_id(bookie_id), {})
            return {lid: dict(f) for lid, f in found.items()}

    def clear_drain_records(self, bookie_id: str) -> None:
        with self._s.lock:
            self._s.failures.pop(validate_bookie_id(bookie_id), None)
            self._s.progress.pop(bookie_id, None)

    def read_serving(self, bookie_id: str) -> bool:
        with self._s.lock:
            value = self._s.serving.get(validate_bookie_id(bookie_id))
        return bool(value and value.get("readOnly") is True)

    def watch(
        self, bookie_id: str, *, on_state: Callable[[lc.StateRecord | FormatError | None], None],
        on_serving: Callable[[bool], None],
    ) -> None:
        with self._s.lock:
            found = self._s.lifecycle_watchers.setdefault(validate_bookie_id(bookie_id), [])
            found.append((on_state, on_serving))
        self._s.notify_lifecycle(bookie_id)

    def write_serving(self, bookie_id: str, read_only: bool, *, by: str, at: str) -> None:
        with self._s.lock:
            self._s.serving[validate_bookie_id(bookie_id)] = {"readOnly": read_only, "by": by, "at": at}
        self._s.notify_lifecycle(bookie_id)


class _Registry:
    cookie_home = "the memory store's cookies"
    racks_home = "the memory store's racks"


    def __init__(self, store: MemoryStore) -> None:
        self._s = store

    def cookies(self) -> list[str]:
        with self._s.lock:
            return sorted(self._s.cookie_bytes)

    def has_cookie(self, bookie_id: str) -> bool:
        with self._s.lock:
            return validate_bookie_id(bookie_id) in self._s.cookie_bytes

    def read_cookie(self, bookie_id: str) -> tuple[records.Cookie, int] | None:
        with self._s.lock:
            data = self._s.cookie_bytes.get(validate_bookie_id(bookie_id))
        return None if data is None else (records.parse_cookie(data), 0)

    def writable(self) -> list[str]:
        with self._s.lock:
            return sorted(b for b, (where, _) in self._s.registrations.items() if where == "writable")

    def readonly(self) -> list[str]:
        with self._s.lock:
            return sorted(b for b, (where, _) in self._s.registrations.items() if where == "readonly")

    def racks(self) -> dict[str, dict[str, records.BookieRackInfo]]:
        with self._s.lock:
            data = self._s.racks
        return {} if data is None else records.parse_rack_config(data)

    def bookie_state(self, bookie_id: str) -> BookieState:
        with self._s.lock:
            found = self._s.registrations.get(validate_bookie_id(bookie_id))
        return "absent" if found is None else found[0]

    def registration(self, bookie_id: str) -> tuple[Where, records.BookieServiceInfo | None]:
        with self._s.lock:
            found = self._s.registrations.get(validate_bookie_id(bookie_id))
        if found is None:
            return "absent", None
        return found[0], records.parse_bookie_service_info(found[1], bookie_id)

    def instance_id(self) -> str:
        if self._s.instance is None:
            raise ClusterError("no BookKeeper cluster in the memory store (init_cluster it first)")
        return self._s.instance

    def create_cookie(self, cookie: records.Cookie) -> None:
        with self._s.lock:
            if validate_bookie_id(cookie.bookie_host) in self._s.cookie_bytes:
                raise MetadataConflict(f"the cookie of {cookie.bookie_host} exists")
            self._s.cookie_bytes[cookie.bookie_host] = records.encode_cookie(cookie)
            self._s.cookie_versions[cookie.bookie_host] = 0

    def replace_cookie(self, cookie: records.Cookie, *, version: int) -> None:
        with self._s.lock:
            if self._s.cookie_versions.get(cookie.bookie_host, 0) != version or (
                cookie.bookie_host not in self._s.cookie_bytes
            ):
                raise MetadataConflict(f"the cookie of {cookie.bookie_host} changed meanwhile")
            self._s.cookie_bytes[cookie.bookie_host] = records.encode_cookie(cookie)
            self._s.cookie_versions[cookie.bookie_host] = version + 1

    def register(self, bookie_id: str, data: bytes, *, readonly: bool) -> None:
        self._s.register(bookie_id, data, readonly=readonly)

    def deregister(self, bookie_id: str) -> None:
        self._s.deregister(bookie_id)

    def set_rack(self, bookie_id: str, rack: str, hostname: str | None = None) -> None:
        with self._s.lock:
            data = records.update_rack_entry(self._s.racks or b"", bookie_id=bookie_id, rack=rack,
                                             hostname=hostname)
        if data is not None:
            self._s.set_racks(data)

    def on_session(self, listener: Callable[[SessionEvent], None]) -> Callable[[], None]:
        with self._s.lock:
            self._s.session_watchers.append(listener)

        def stop() -> None:
            with self._s.lock:
                if listener in self._s.session_watchers:
                    self._s.session_watchers.remove(listener)

        return stop

    def delete_cookie(self, bookie_id: str) -> bool:
        with self._s.lock:
            return self._s.cookie_bytes.pop(validate_bookie_id(bookie_id), None) is not None

    def endpoint_hosts(self, writable: Iterable[str], readonly: Iterable[str] = ()) -> dict[str, str]:
        out: dict[str, str] = {}
        for bookie in {*writable, *readonly}:
            try:
                _, info = self.registration(bookie)
            except FormatError:
                continue
            endpoint = info.endpoint() if info is not None else None
            if endpoint is not None:
                out[bookie] = endpoint.host
        return out

    def watch(
        self, *, on_writable: Callable[[list[str]], None], on_readonly: Callable[[list[str]], None],
        on_racks: Callable[[bytes | None], None],
    ) -> None:
        with self._s.lock:
            self._s.watchers.append((on_writable, on_readonly, on_racks))
        self._s.notify_registry()


class _DataLoss:
    def __init__(self, store: MemoryStore) -> None:
        self._s = store

    def exists(self, ledger_id: int) -> bool:
        with self._s.lock:
            return ledger_id in self._s.lost

    def ids(self) -> list[int]:
        with self._s.lock:
            return sorted(self._s.lost)

    def read(self, ledger_id: int) -> DataLossRecord | None:
        with self._s.lock:
            data = self._s.lost.get(ledger_id)
        return None if data is None else parse_data_loss(data)

    def write(self, record: DataLossRecord) -> None:
        self._s.record_data_loss(record)

    def delete(self, ledger_id: int) -> bool:
        with self._s.lock:
            return self._s.lost.pop(ledger_id, None) is not None

    def migrate_legacy(self) -> list[int]:
        return []  # a memory store has no earlier release


class _Queue:
    def __init__(self, store: MemoryStore) -> None:
        self._s = store

    def ensure_layout(self) -> None:
        pass

    def is_enabled(self) -> bool:
        return self._s.replication_enabled

    def set_enabled(self, enabled: bool) -> bool:
        with self._s.lock:
            changed = self._s.replication_enabled != enabled
            self._s.replication_enabled = enabled
        return changed

    def wait_until_enabled(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._s.replication_enabled:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def mark(self, ledger_id: int, replicas: Iterable[str], *, rate_limiter: Limiter | None = None) -> bool:
        wanted = tuple(dict.fromkeys(replicas))
        if rate_limiter is not None:
            rate_limiter.acquire()
        with self._s.lock:
            before = self._s.markers.get(ledger_id)
            merged = tuple(dict.fromkeys((*(before or ()), *wanted)))
            if before == merged:
                return False
            self._s.markers[ledger_id] = merged
            versions = self._s.marker_versions
            versions[ledger_id] = 0 if before is None else versions.get(ledger_id, 0) + 1
            return True

    def marked(self) -> list[int]:
        with self._s.lock:
            return sorted(self._s.markers)

    queued = marked

    def marker(self, ledger_id: int) -> records.UnderreplicatedMarker | None:
        found = self.read_marker(ledger_id)
        return None if found is None else found[0]

    def read_marker(self, ledger_id: int) -> tuple[records.UnderreplicatedMarker, int] | None:
        with self._s.lock:
            found = self._s.markers.get(ledger_id)
            version = self._s.marker_versions.get(ledger_id, 0)
        return None if found is None else (records.UnderreplicatedMarker(found, None), version)

    def lock(self, ledger_id: int, *, holder: str | None) -> int | None:
        with self._s.lock:
            if ledger_id not in self._s.markers or ledger_id in self._s.locks:
                return None
            self._s.locks[ledger_id] = holder or ""
            self._s.own_locks.add(ledger_id)
            return self._s.marker_versions.get(ledger_id, 0)

    def holds_lock(self, ledger_id: int) -> bool:
        with self._s.lock:
            return ledger_id in self._s.own_locks

    def release(self, ledger_id: int) -> bool:
        with self._s.lock:
            if ledger_id not in self._s.own_locks:
                return False
            self._s.own_locks.discard(ledger_id)
            self._s.locks.pop(ledger_id, None)
            return True

    def locked(self) -> set[int]:
        with self._s.lock:
            return set(self._s.locks)

    def resolve(self, ledger_id: int, *, version: int) -> bool:
        with self._s.lock:
            try:
                if ledger_id in self._s.markers:
                    if self._s.marker_versions.get(ledger_id, 0) != version:
                        return False
                    del self._s.markers[ledger_id]
                    self._s.marker_versions.pop(ledger_id, None)
                return True
            finally:
                self.release(ledger_id)

    def lock_holder(self, ledger_id: int) -> str | None:
        with self._s.lock:
            return self._s.locks.get(ledger_id) or None

    def auditor(self) -> str | None:
        with self._s.lock:
            return self._s.votes[0][1] if self._s.votes else None

    def votes(self) -> list[str]:
        with self._s.lock:
            return [name for name, _ in self._s.votes]

    def recovery_delay(self) -> int | None:
        return self._s.recovery_delay

    def set_recovery_delay(self, delay_s: int) -> None:
        with self._s.lock:
            self._s.recovery_delay = delay_s
            watchers = list(self._s.delay_watchers)
        data = str(delay_s).encode("ascii")
        for watcher in watchers:
            if watcher(data) is False:
                with self._s.lock:
                    self._s.delay_watchers.remove(watcher)

    def seed_recovery_delay(self, delay_s: int) -> int:
        with self._s.lock:
            if self._s.recovery_delay is None:
                self._s.recovery_delay = delay_s
            return self._s.recovery_delay

    def watch_recovery_delay(self, on_change: Callable[[bytes | None], bool | None]) -> None:
        value = self._s.recovery_delay
        if on_change(None if value is None else str(value).encode("ascii")) is not False:
            with self._s.lock:
                self._s.delay_watchers.append(on_change)


class _Election:
    """Votes in one session (this store); `MemoryStore.expire_session` loses them as ZooKeeper would."""

    def __init__(self, store: MemoryStore) -> None:
        self._s = store

    def vote(self, node_id: str) -> str:
        with self._s.lock:
            name = f"V_{self._s.next_seq():010d}"
            self._s.votes.append((name, node_id))
            return name

    def predecessor(self, vote: str) -> str | None:
        with self._s.lock:
            names = [name for name, _ in self._s.votes]
        if vote not in names:
            raise MetadataError(f"vote {vote} is not in the election (session expired?)")
        index = names.index(vote)
        return names[index - 1] if index > 0 else None

    def announce(self, node_id: str) -> None:
        self._s.announced = node_id

    def withdraw(self, vote: str) -> None:
        self._s.drop_votes({vote})

    def watch_gone(self, vote: str, on_gone: Callable[[], None]) -> bool:
        with self._s.lock:
            if vote not in {name for name, _ in self._s.votes}:
                return False
            self._s.vote_watchers.setdefault(vote, []).append(on_gone)
            return True

    def on_session_lost(self, listener: Callable[[], None]) -> Callable[[], None]:
        with self._s.lock:
            self._s.session_listeners.append(listener)

        def stop() -> None:
            with self._s.lock:
                if listener in self._s.session_listeners:
                    self._s.session_listeners.remove(listener)

        return stop


class _Webhooks:
    def __init__(self, store: MemoryStore) -> None:
        self._s = store

    def create(self, hook_id: str, data: bytes) -> None:
        with self._s.lock:
            if validate_bookie_id(hook_id) in self._s.hooks:
                raise MetadataConflict(f"webhook {hook_id} exists")
            self._s.hooks[hook_id] = (data, self._s.next_seq())

    def read(self, hook_id: str) -> tuple[bytes, int] | None:
        with self._s.lock:
            return self._s.hooks.get(validate_bookie_id(hook_id))

    def ids(self) -> list[str]:
        with self._s.lock:
            return sorted(self._s.hooks)

    def delete(self, hook_id: str) -> bool:
        hook_id = validate_bookie_id(hook_id)
        with self._s.lock:
            self._s.deliveries.pop(hook_id, None)
            return self._s.hooks.pop(hook_id, None) is not None

    def deliveries(self, hook_id: str) -> list[bytes]:
        with self._s.lock:
            found = self._s.deliveries.get(validate_bookie_id(hook_id), {})
            return [found[key] for key in sorted(found)]

    def claim(self, hook_id: str, key: str, data: bytes) -> bool:
        with self._s.lock:
            found = self._s.deliveries.setdefault(validate_bookie_id(hook_id), {})
            if key in found:
                return False
            found[key] = data
            return True

    def finish(self, hook_id: str, key: str, data: bytes) -> None:
        with self._s.lock:
            found = self._s.deliveries.get(validate_bookie_id(hook_id))
            if found is not None and key in found:
                found[key] = data


class _Index:
    def __init__(self, store: MemoryStore) -> None:
        self._s = store

    def ledgers_of(
        self, bookies: Collection[str], *, open_ledgers: set[int] | None = None
    ) -> dict[str, dict[int, int]]:
        with self._s.lock:
            every = sorted(self._s.ledgers.items())
        return index_ledgers(every, bookies, open_ledgers=open_ledgers)

    def every_ledger(self) -> Iterator[tuple[int, LedgerMetadata]]:
        with self._s.lock:
            every = sorted(self._s.ledgers.items())
        return iter(every)

    def every_bookie(self) -> dict[str, list[int]]:
        return index_bookies(self.every_ledger())


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
        self.serving: dict[str, dict[str, Any]] = {}
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
        self.instance: str | None = None  # INSTANCEID: set by init_cluster
        self.cookie_versions: dict[str, int] = {}
        self.recovery_delay: int | None = None  # lostBookieRecoveryDelay
        self.delay_watchers: list[Callable[[bytes | None], bool | None]] = []
        self.lifecycle_watchers: dict[str, list[tuple[Callable[[lc.StateRecord | FormatError | None], None],
                                                      Callable[[bool], None]]]] = {}
        self.watchers: list[tuple[Callable[[list[str]], None], Callable[[list[str]], None],
                                  Callable[[bytes | None], None]]] = []
        self.racks: bytes | None = None  # Pulsar's rack JSON
        self.hooks: dict[str, tuple[bytes, int]] = {}  # webhook id -> (record, creation sequence)
        self.deliveries: dict[str, dict[str, bytes]] = {}  # webhook id -> key -> delivery record
        self._seq = 0  # ZooKeeper's zxid: one order for every record created
        self.ledgers: dict[int, LedgerMetadata] = {}
        self.replication_enabled = True
        self.lifecycle = _Lifecycle(self)
        self.registry = _Registry(self)
        self.data_loss = _DataLoss(self)
        self.queue = _Queue(self)
        self.index = _Index(self)
        self.webhooks = _Webhooks(self)
        self.election = _Election(self)

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
        with self.lock:
            self.ledgers[ledger_id] = metadata

    def delete_ledger(self, ledger_id: int) -> None:
        with self.lock:
            self.ledgers.pop(ledger_id, None)

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
        state: lc.StateRecord | FormatError | None = None
        if found is not None:
            try:
                state = lc.parse(found[0])
            except FormatError as exc:
                state = exc
        read_only = bool(switch and switch.get("readOnly") is True)
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
