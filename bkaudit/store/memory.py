"""The ClusterStore in memory, for unit tests that need no JVM.

It keeps what ZooKeeper would keep, in the same encodings where a caller can tell the difference (state
records and registrations as bytes, so a malformed one raises FormatError as it does from a znode; JSON
records round-tripped), and loses races the way ZooKeeper's compare-and-set does (MetadataConflict).
tests/store_contract.py holds the assertions run against it and against a real ZooKeeper.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Iterable
from typing import Any

from bkaudit.errors import FormatError, MetadataConflict
from bkaudit.formats import records
from bkaudit.model import lifecycle as lc
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.model.topology import RackConfig
from bkaudit.store.base import ABSENT, BookieState, Transition, Where, index_ledgers
from bkaudit.store.memory_ledgers import MemoryMetadataStore
from bkaudit.zk.client import RateLimiter
from bkaudit.zk.dataloss import DataLossRecord
from bkaudit.zk.dataloss import encode as encode_data_loss
from bkaudit.zk.dataloss import parse as parse_data_loss
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

    def remove_bookie(self, bookie_id: str, record: lc.StateRecord, *, version: int) -> None:
        with self._s.lock:
            current = self._s.states.get(validate_bookie_id(bookie_id))
            if current is None or current[1] != version or bookie_id not in self._s.cookie_bytes:
                raise MetadataConflict(_CHANGED.format(what=f"removing {bookie_id}"))
            del self._s.states[bookie_id]
            del self._s.cookie_bytes[bookie_id]
            self._s.append_history(bookie_id, lc.encode(record))

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

    def write_serving(self, bookie_id: str, read_only: bool, *, by: str, at: str) -> None:
        with self._s.lock:
            self._s.serving[validate_bookie_id(bookie_id)] = {"readOnly": read_only, "by": by, "at": at}


class _Registry:
    cookie_home = "the memory store's cookies"

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

    def rack_config(self) -> RackConfig:
        groups = self.racks()
        if not groups:
            return RackConfig({}, addresses={})
        with self._s.lock:
            found = dict(self._s.registrations)
        addresses = {}
        for bookie_id, (_, data) in found.items():
            try:
                endpoint = records.parse_bookie_service_info(data, bookie_id).endpoint()
            except FormatError:
                continue  # unresolvable: a rack entry covers its id only
            if endpoint is not None:
                addresses[bookie_id] = endpoint.host
        return RackConfig(groups, addresses=addresses)

    def registration_bytes(
        self, *, rate_limiter: RateLimiter | None = None
    ) -> list[tuple[str, Where, bytes]]:
        with self._s.lock:
            found = sorted(self._s.registrations.items(), key=lambda r: (r[1][0] != "writable", r[0]))
        return [(b, where, data) for b, (where, data) in found]


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


class _Queue:
    def __init__(self, store: MemoryStore) -> None:
        self._s = store

    def is_enabled(self) -> bool:
        return self._s.replication_enabled

    def mark(self, ledger_id: int, replicas: Iterable[str]) -> bool:
        wanted = tuple(dict.fromkeys(replicas))
        with self._s.lock:
            before = self._s.markers.get(ledger_id)
            merged = tuple(dict.fromkeys((*(before or ()), *wanted)))
            if before == merged:
                return False
            self._s.markers[ledger_id] = merged
            return True

    def marked(self) -> list[int]:
        with self._s.lock:
            return sorted(self._s.markers)

    def marker(self, ledger_id: int) -> records.UnderreplicatedMarker | None:
        with self._s.lock:
            found = self._s.markers.get(ledger_id)
        return None if found is None else records.UnderreplicatedMarker(found, None)

    def lock_holder(self, ledger_id: int) -> str | None:
        with self._s.lock:
            return self._s.locks.get(ledger_id)

    def auditor(self) -> str | None:
        return self._s.elected

    def marker_bytes(
        self, *, rate_limiter: RateLimiter | None = None
    ) -> list[tuple[int, bytes, bytes | None]]:
        with self._s.lock:
            found = sorted(self._s.markers.items())
            locks = dict(self._s.locks)
        return [(lid, records.encode_underreplicated_marker(records.UnderreplicatedMarker(replicas, None)),
                 records.encode_lock_data(locks[lid]) if lid in locks else None) for lid, replicas in found]


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
            every = self._s.ledgers.items()
        return index_ledgers(every, bookies, open_ledgers=open_ledgers)


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
        self.locks: dict[int, str] = {}  # ledger -> the worker holding its replication lock
        self.elected: str | None = None  # the Auditor
        self.racks: bytes | None = None  # Pulsar's rack JSON
        self.hooks: dict[str, tuple[bytes, int]] = {}  # webhook id -> (record, creation sequence)
        self.deliveries: dict[str, dict[str, bytes]] = {}  # webhook id -> key -> delivery record
        self._seq = 0  # ZooKeeper's zxid: one order for every record created
        self.ledgers = MemoryMetadataStore(lock=self.lock)
        self.replication_enabled = True
        self.lifecycle = _Lifecycle(self)
        self.registry = _Registry(self)
        self.data_loss = _DataLoss(self)
        self.queue = _Queue(self)
        self.index = _Index(self)
        self.webhooks = _Webhooks(self)

    def check_bookie_id(self, bookie_id: str) -> str:
        return validate_bookie_id(bookie_id)

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

    def deregister(self, bookie_id: str) -> None:
        with self.lock:
            self.registrations.pop(bookie_id, None)

    def put_ledger(self, ledger_id: int, metadata: LedgerMetadata) -> None:
        self.ledgers.force(ledger_id, metadata)

    def delete_ledger(self, ledger_id: int) -> None:
        with self.lock:
            self.ledgers.data.pop(ledger_id, None)

    def record_data_loss(self, record: DataLossRecord) -> None:
        with self.lock:
            self.lost[record.ledger_id] = encode_data_loss(record)

    # -- what the store itself keeps in order ---------------------------------------------------------------
    def next_seq(self) -> int:
        with self.lock:
            self._seq += 1
            return self._seq

    def append_history(self, bookie_id: str, data: bytes) -> None:
        """A history record, named as ZooKeeper names a sequential `h-` child."""
        with self.lock:
            found = self.histories.setdefault(bookie_id, [])
            found.append((f"h-{len(found):010d}", self.next_seq(), data))
