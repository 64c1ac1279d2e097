"""The ClusterStore over ZooKeeper, in BookKeeper's layout and bytes (bkaudit.zk owns both).

One `ZkStore` is bound to its client, ledgers root, state root (`[zk] state_root`: bkaudit's own records)
and ACL; every record kind is an attribute that delegates to the bkaudit.zk module that knows its znodes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from bkaudit.errors import FormatError, MetadataConflict
from bkaudit.formats import records
from bkaudit.model import lifecycle as lc
from bkaudit.model.dataloss import DataLossRecord
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.model.topology import RackConfig
from bkaudit.store.base import (
    BookieState,
    SessionEvent,
    T,
    Transition,
    Where,
)
from bkaudit.store.derived import index_bookies, index_ledgers
from bkaudit.store.ledgers import ZkMetadataStore
from bkaudit.store.zookeeper_queue import ZkElection, ZkQueue
from bkaudit.zk import dataloss, ledgers, paths, registry
from bkaudit.zk import lifecycle as zk_lifecycle
from bkaudit.zk.client import RateLimiter, read_children, with_retries

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from kazoo.security import ACL

    from bkaudit.zk.settings import ZkSettings


class _Lifecycle:
    def __init__(self, store: ZkStore) -> None:
        self._zk, self._root, self._state_root = store.client, store.root, store.state_root

    def read_state(self, bookie_id: str) -> tuple[lc.StateRecord | None, int]:
        return zk_lifecycle.read_state(self._zk, bookie_id, root=self._root)

    def list_states(self) -> dict[str, lc.StateRecord | FormatError]:
        return zk_lifecycle.list_states(self._zk, root=self._root)

    def write_state(self, bookie_id: str, record: lc.StateRecord, *, version: int) -> None:
        zk_lifecycle.write_state(self._zk, bookie_id, record, version=version, root=self._root,
                                 state_root=self._state_root)

    def remove_bookie(self, bookie_id: str, record: lc.StateRecord, *, version: int) -> None:
        zk_lifecycle.remove_bookie(self._zk, bookie_id, record, version=version, root=self._root,
                                   state_root=self._state_root)

    def history(self, bookie_id: str) -> list[lc.StateRecord]:
        return zk_lifecycle.history(self._zk, bookie_id, root=self._root, state_root=self._state_root)

    def transitions(self) -> list[Transition]:
        base = f"{paths.lifecycle_root(root=self._root, state_root=self._state_root)}/history"
        try:
            bookies = self._zk.get_children(base)
        except NoNodeError:
            return []
        out = []
        for bookie in bookies:
            try:
                names = self._zk.get_children(f"{base}/{bookie}")
            except NoNodeError:
                continue
            for name in names:
                try:
                    data, stat = self._zk.get(f"{base}/{bookie}/{name}")
                except NoNodeError:
                    continue
                out.append((bookie, name, stat.czxid, data))
        return sorted(out, key=lambda t: t[2])

    def write_progress(self, bookie_id: str, progress: dict[str, Any]) -> None:
        zk_lifecycle.write_progress(self._zk, bookie_id, progress, root=self._root,
                                    state_root=self._state_root)

    def read_progress(self, bookie_id: str) -> dict[str, Any] | None:
        return zk_lifecycle.read_progress(self._zk, bookie_id, root=self._root, state_root=self._state_root)

    def record_failure(self, bookie_id: str, ledger_id: int, error: str, at: str) -> int:
        return zk_lifecycle.record_failure(self._zk, bookie_id, ledger_id, error, at, root=self._root,
                                           state_root=self._state_root)

    def list_failures(self, bookie_id: str) -> dict[int, dict[str, Any]]:
        return zk_lifecycle.list_failures(self._zk, bookie_id, root=self._root, state_root=self._state_root)

    def clear_drain_records(self, bookie_id: str) -> None:
        zk_lifecycle.clear_drain_records(self._zk, bookie_id, root=self._root, state_root=self._state_root)

    def read_serving(self, bookie_id: str) -> bool:
        return zk_lifecycle.read_serving(self._zk, bookie_id, root=self._root, state_root=self._state_root)

    def watch(
        self, bookie_id: str, *, on_state: Callable[[lc.StateRecord | FormatError | None], None],
        on_serving: Callable[[bool], None],
    ) -> None:
        zk_lifecycle.watch(self._zk, bookie_id, root=self._root, state_root=self._state_root,
                           on_state=on_state, on_serving=on_serving)

    def write_serving(self, bookie_id: str, read_only: bool, *, by: str, at: str) -> None:
        zk_lifecycle.write_serving(self._zk, bookie_id, read_only, by=by, at=at, root=self._root,
                                   state_root=self._state_root)


class _Registry:
    def __init__(self, store: ZkStore) -> None:
        self._zk, self._root, self._acl = store.client, store.root, store.acl
        self.cookie_home = paths.cookies_root(root=store.root)
        self.racks_home = paths.RACKS_PATH
        self._max_in_flight = store.max_in_flight

    def cookies(self) -> list[str]:
        return registry.list_cookies(self._zk, self._root)

    def has_cookie(self, bookie_id: str) -> bool:
        return registry.exists(self._zk, paths.cookie_path(bookie_id, root=self._root))

    def read_cookie(self, bookie_id: str) -> tuple[records.Cookie, int] | None:
        return registry.read_cookie(self._zk, bookie_id, self._root)

    def writable(self) -> list[str]:
        return registry.list_writable(self._zk, self._root)

    def readonly(self) -> list[str]:
        return registry.list_readonly(self._zk, self._root)

    def racks(self) -> dict[str, dict[str, records.BookieRackInfo]]:
        return registry.read_racks(self._zk)

    def bookie_state(self, bookie_id: str) -> BookieState:
        return registry.bookie_state(self._zk, bookie_id, self._root)

    def registration(self, bookie_id: str) -> tuple[Where, records.BookieServiceInfo | None]:
        return registry.registration(self._zk, bookie_id, self._root)

    def instance_id(self) -> str:
        return registry.instance_id(self._zk, self._root)

    def create_cookie(self, cookie: records.Cookie) -> None:
        try:
            registry.create_cookie(self._zk, cookie, root=self._root, acl=self._acl)
        except NodeExistsError:
            raise MetadataConflict(f"the cookie of {cookie.bookie_host} exists") from None

    def replace_cookie(self, cookie: records.Cookie, *, version: int) -> None:
        try:
            path = paths.cookie_path(cookie.bookie_host, root=self._root)
            self._zk.set(path, records.encode_cookie(cookie), version=version)
        except (BadVersionError, NoNodeError):
            raise MetadataConflict(f"the cookie of {cookie.bookie_host} changed meanwhile") from None

    def register(self, bookie_id: str, data: bytes, *, readonly: bool) -> None:
        registry.register(self._zk, bookie_id, data, readonly=readonly, root=self._root, acl=self._acl)

    def deregister(self, bookie_id: str) -> None:
        registry.deregister(self._zk, bookie_id, root=self._root)

    def registration_owner(self, bookie_id: str) -> int | None:
        return registry.registration_owner(self._zk, bookie_id, self._root)

    def set_rack(self, bookie_id: str, rack: str, hostname: str | None = None) -> None:
        registry.set_rack(self._zk, bookie_id, rack, hostname, acl=self._acl)

    def on_session(self, listener: Callable[[SessionEvent], None]) -> Callable[[], None]:
        def on_state(state: str) -> None:
            if state == KazooState.LOST:
                listener("lost")
            elif state == KazooState.CONNECTED:
                listener("connected")

        self._zk.add_listener(on_state)
        return lambda: self._zk.remove_listener(on_state)

    def delete_cookie(self, bookie_id: str) -> bool:
        return registry.delete_cookie(self._zk, bookie_id, self._root)

    def endpoint_hosts(self, writable: Iterable[str], readonly: Iterable[str] = ()) -> dict[str, str]:
        return registry.endpoint_hosts(self._zk, writable, readonly, root=self._root)

    def watch(
        self, *, on_writable: Callable[[list[str]], None], on_readonly: Callable[[list[str]], None],
        on_racks: Callable[[bytes | None], None],
    ) -> None:
        available, readonly_node = paths.available_root(root=self._root), paths.READONLY_NODE
        for path in (available, paths.readonly_root(root=self._root)):
            try:
                self._zk.ensure_path(path)
            except NodeExistsError:
                pass
        ChildrenWatch(self._zk, available, lambda kids: on_writable([k for k in kids if k != readonly_node]))
        ChildrenWatch(self._zk, paths.readonly_root(root=self._root), on_readonly)
        DataWatch(self._zk, paths.RACKS_PATH, lambda data, _stat: on_racks(data))
    def rack_config(self) -> RackConfig:
        return registry.read_rack_config(self._zk, root=self._root)

    def registration_bytes(
        self, *, rate_limiter: RateLimiter | None = None
    ) -> list[tuple[str, Where, bytes]]:
        znodes: dict[str, tuple[str, Where]] = {
            paths.available_path(b, root=self._root): (b, "writable") for b in self.writable()
        }
        znodes.update({paths.readonly_path(b, root=self._root): (b, "readonly") for b in self.readonly()})
        found = ledgers.read_many(self._zk, list(znodes), max_in_flight=self._max_in_flight,
                                  rate_limiter=rate_limiter)
        return [(*znodes[path], data) for path, data, _ in found if data is not None]


class _DataLoss:
    def __init__(self, store: ZkStore) -> None:
        self._zk, self._root, self._state_root = store.client, store.root, store.state_root
        self._acl = store.acl

    def exists(self, ledger_id: int) -> bool:
        return dataloss.exists(self._zk, ledger_id, root=self._root, state_root=self._state_root)

    def ids(self) -> list[int]:
        return list(dataloss.list_ids(self._zk, root=self._root, state_root=self._state_root))

    def read(self, ledger_id: int) -> DataLossRecord | None:
        return dataloss.read(self._zk, ledger_id, root=self._root, state_root=self._state_root)

    def write(self, record: DataLossRecord) -> None:
        dataloss.write(self._zk, record, root=self._root, state_root=self._state_root, acl=self._acl)

    def delete(self, ledger_id: int) -> bool:
        return dataloss.delete(self._zk, ledger_id, root=self._root, state_root=self._state_root)

    def migrate_legacy(self) -> list[int]:
        return dataloss.migrate_legacy(self._zk, root=self._root, state_root=self._state_root)


class _Webhooks:
    def __init__(self, store: ZkStore) -> None:
        self._zk, self._root, self._state_root = store.client, store.root, store.state_root

    def _path(self, hook_id: str) -> str:
        return paths.webhook_path(hook_id, root=self._root, state_root=self._state_root)

    def _deliveries(self, hook_id: str) -> str:
        return paths.webhook_deliveries_root(hook_id, root=self._root, state_root=self._state_root)

    def create(self, hook_id: str, data: bytes) -> None:
        self._zk.create(self._path(hook_id), data, makepath=True)

    def read(self, hook_id: str) -> tuple[bytes, int] | None:
        try:
            data, stat = self._zk.get(self._path(hook_id))
        except NoNodeError:
            return None
        return data, stat.czxid

    def ids(self) -> list[str]:
        try:
            root = paths.webhooks_root(root=self._root, state_root=self._state_root)
            return sorted(self._zk.get_children(root))
        except NoNodeError:
            return []

    def delete(self, hook_id: str) -> bool:
        try:
            self._zk.delete(self._path(hook_id))
        except NoNodeError:
            return False
        try:
            self._zk.delete(self._deliveries(hook_id), recursive=True)
        except NoNodeError:
            pass
        return True

    def deliveries(self, hook_id: str) -> list[bytes]:
        return read_children(self._zk, self._deliveries(hook_id), bytes, skip=())

    def claim(self, hook_id: str, key: str, data: bytes) -> bool:
        try:
            self._zk.create(f"{self._deliveries(hook_id)}/{key}", data, makepath=True)
            return True
        except NodeExistsError:
            return False

    def finish(self, hook_id: str, key: str, data: bytes) -> None:
        try:
            self._zk.set(f"{self._deliveries(hook_id)}/{key}", data)
        except NoNodeError:
            pass  # the webhook was deleted meanwhile


class _Index:
    def __init__(self, store: ZkStore) -> None:
        self._zk, self._root, self._max_in_flight = store.client, store.root, store.max_in_flight

    def ledgers_of(
        self, bookies: Collection[str], *, open_ledgers: set[int] | None = None
    ) -> dict[str, dict[int, int]]:
        if not bookies:
            return {}
        every = ledgers.iter_all_metadata(self._zk, root=self._root, max_in_flight=self._max_in_flight)
        return index_ledgers(every, bookies, open_ledgers=open_ledgers)

    def every_ledger(self) -> Iterator[tuple[int, LedgerMetadata]]:
        return ledgers.iter_all_metadata(self._zk, root=self._root, max_in_flight=self._max_in_flight)

    def every_bookie(self) -> dict[str, list[int]]:
        return index_bookies(self.every_ledger())


class ZkStore:
    """A ClusterStore over one kazoo client.

    `state_root` is `[zk] state_root` ("" or None: "/bkaudit" + root); `acl` the ACL for the znodes it
    creates outside the session's default (BookKeeper's zkEnableSecurity); `max_in_flight` bounds the reads
    of one metadata pass (BookKeeper's BookieLedgerIndexer pipelines them too)."""

    def __init__(
        self, client: KazooClient, *, root: str = paths.DEFAULT_ROOT, state_root: str | None = None,
        acl: list[ACL] | None = None, max_in_flight: int = 500, layout: str = "hierarchical",
    ) -> None:
        self.client = client
        self.root = self.label = paths.validate_root(root)
        self.state_root = state_root or None
        paths.bkaudit_state_root(root=self.root, state_root=self.state_root)  # validates it
        self.acl = acl
        self.max_in_flight = max_in_flight
        self.lifecycle = _Lifecycle(self)
        self.registry = _Registry(self)
        self.data_loss = _DataLoss(self)
        self.queue = ZkQueue(self)
        self.index = _Index(self)
        self.webhooks = _Webhooks(self)
        self.election = ZkElection(self)
        self.ledgers = ZkMetadataStore(client, root=self.root, layout=layout, acl=acl)

    def check_bookie_id(self, bookie_id: str) -> str:
        return paths.validate_bookie_id(bookie_id)

    def retrying(self, call: Callable[[], T], *, what: str) -> T:
        return with_retries(call, client=self.client, what=what)

    def init_cluster(self, *, layout: str) -> bool:
        """Create a new cluster's metadata under the root (BookKeeper's initNewCluster); False when it
        exists already."""
        return ledgers.init_cluster(self.client, root=self.root, layout=layout, acl=self.acl)

    def __repr__(self) -> str:
        return f"ZkStore(root={self.root!r}, state_root={self.state_root!r})"


def connect(settings: ZkSettings, *, max_in_flight: int = 500) -> ZkStore:
    """A ZkStore on a new session for `[zk]` (close it with `close`)."""
    from bkaudit.zk import client as zkclient

    return bind(zkclient.connect(settings), settings, max_in_flight=max_in_flight)


def bind(client: KazooClient, settings: ZkSettings, *, max_in_flight: int = 500,
         layout: str | None = None) -> ZkStore:
    """A ZkStore on a session the caller owns (a bookie shares its session with its embedded AutoRecovery),
    bound as `connect` binds one: `[zk]` root, state root, ACL and layout (`layout`: the cluster's own
    LAYOUT when the caller read it). The one reading of those keys for a store."""
    from bkaudit.zk import client as zkclient

    return ZkStore(client, root=settings.root, state_root=settings.state_root or None,
                   acl=zkclient.acls(settings), max_in_flight=max_in_flight,
                   layout=settings.layout if layout is None else layout)


def close(store: ZkStore) -> None:
    """End the store's session."""
    from bkaudit.zk import client as zkclient

    zkclient.close(store.client)
