"""The memory store's lifecycle, registry, data-loss, webhook and index records (bkaudit.store.memory)."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from bkaudit.errors import ClusterError, FormatError, MetadataConflict
from bkaudit.formats import records
from bkaudit.model import lifecycle as lc
from bkaudit.model.dataloss import DataLossRecord
from bkaudit.model.dataloss import parse as parse_data_loss
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.model.topology import RackConfig
from bkaudit.store.base import (
    ABSENT,
    BookieState,
    SessionEvent,
    Transition,
    Where,
)
from bkaudit.store.derived import index_bookies, index_ledgers
from bkaudit.zk.client import RateLimiter
from bkaudit.zk.lifecycle import encode_serving, serving_read_only
from bkaudit.zk.paths import validate_bookie_id

if TYPE_CHECKING:
    from bkaudit.store.memory import MemoryStore


_CHANGED = "{what}: the state changed meanwhile; re-read it"


def _json(value: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(value, sort_keys=True))
    assert isinstance(out, dict)
    return out


class MemoryLifecycle:
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
            return serving_read_only(self._s.serving.get(validate_bookie_id(bookie_id)))

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
            self._s.serving[validate_bookie_id(bookie_id)] = encode_serving(read_only, by=by, at=at)
        self._s.notify_lifecycle(bookie_id)


class MemoryRegistry:
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

    def registration_owner(self, bookie_id: str) -> int | None:
        with self._s.lock:
            return self._s.session if validate_bookie_id(bookie_id) in self._s.registrations else None

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


    def rack_config(self) -> RackConfig:
        groups = self.racks()
        if not groups:
            return RackConfig({}, addresses={})
        return RackConfig(groups, addresses=self.endpoint_hosts(self.writable(), self.readonly()))

    def registration_bytes(
        self, *, rate_limiter: RateLimiter | None = None
    ) -> list[tuple[str, Where, bytes]]:
        with self._s.lock:
            found = sorted(self._s.registrations.items(), key=lambda r: (r[1][0] != "writable", r[0]))
        return [(b, where, data) for b, (where, data) in found]


class MemoryDataLoss:
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


class MemoryWebhooks:
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


class MemoryIndex:
    def __init__(self, store: MemoryStore) -> None:
        self._s = store

    def ledgers_of(
        self, bookies: Collection[str], *, open_ledgers: set[int] | None = None
    ) -> dict[str, dict[int, int]]:
        return index_ledgers(self._s.ledgers.items(), bookies, open_ledgers=open_ledgers)

    def every_ledger(self) -> Iterator[tuple[int, LedgerMetadata]]:
        return iter(self._s.ledgers.items())

    def every_bookie(self) -> dict[str, list[int]]:
        return index_bookies(self.every_ledger())
