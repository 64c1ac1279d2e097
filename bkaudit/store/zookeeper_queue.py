"""The ZooKeeper store's under-replication queue and Auditor election (bkaudit.store.zookeeper), in
BookKeeper's znodes (bkaudit.zk.underreplication)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import DataWatch

from bkaudit.formats import records
from bkaudit.store.base import (
    Limiter,
)
from bkaudit.zk import ledgers, paths
from bkaudit.zk import underreplication as ur
from bkaudit.zk.client import RateLimiter

if TYPE_CHECKING:

    from bkaudit.store.zookeeper import ZkStore


class ZkQueue:
    def __init__(self, store: ZkStore) -> None:
        self._zk, self._root, self._acl = store.client, store.root, store.acl
        self._max_in_flight = store.max_in_flight

    def ensure_layout(self) -> None:
        ur.ensure_underreplication_layout(self._zk, root=self._root, acl=self._acl)

    def is_enabled(self) -> bool:
        return ur.is_replication_enabled(self._zk, root=self._root)

    def set_enabled(self, enabled: bool) -> bool:
        if enabled:
            return ur.enable_replication(self._zk, root=self._root)
        return ur.disable_replication(self._zk, root=self._root, acl=self._acl)

    def wait_until_enabled(self, timeout: float | None) -> bool:
        return ur.wait_until_enabled(self._zk, timeout, root=self._root)

    def mark(self, ledger_id: int, replicas: Iterable[str], *, rate_limiter: Limiter | None = None) -> bool:
        if rate_limiter is not None:
            rate_limiter.acquire()
        return ur.mark_underreplicated(self._zk, ledger_id, replicas, root=self._root, acl=self._acl)

    def marked(self) -> list[int]:
        return list(ur.list_underreplicated(self._zk, root=self._root))

    def queued(self) -> list[int]:
        return ur.queued_ids(self._zk, root=self._root)

    def marker(self, ledger_id: int) -> records.UnderreplicatedMarker | None:
        found = ur.get_marker(self._zk, ledger_id, root=self._root)
        return None if found is None else found[0]

    def read_marker(self, ledger_id: int) -> tuple[records.UnderreplicatedMarker, int] | None:
        found = ur.get_marker(self._zk, ledger_id, root=self._root)
        return None if found is None else (found[0], int(found[1].version))

    def lock(self, ledger_id: int, *, holder: str | None) -> int | None:
        return ur.acquire_lock(self._zk, ledger_id, root=self._root, holder=holder, acl=self._acl)

    def holds_lock(self, ledger_id: int) -> bool:
        return ur.holds_lock(self._zk, ledger_id, root=self._root)

    def release(self, ledger_id: int) -> bool:
        return ur.release_lock(self._zk, ledger_id, root=self._root)

    def locked(self) -> set[int]:
        return ur.locked_ids(self._zk, root=self._root)

    def resolve(self, ledger_id: int, *, version: int) -> bool:
        return ur.mark_replicated(self._zk, ledger_id, version=version, root=self._root)

    def lock_holder(self, ledger_id: int) -> str | None:
        return ur.lock_holder(self._zk, ledger_id, root=self._root)

    def auditor(self) -> str | None:
        return ur.current_auditor(self._zk, root=self._root)

    def votes(self) -> list[str]:
        return ur.list_votes(self._zk, root=self._root)

    def recovery_delay(self) -> int | None:
        return ur.get_lost_bookie_recovery_delay(self._zk, root=self._root)

    def set_recovery_delay(self, delay_s: int) -> None:
        ur.set_lost_bookie_recovery_delay(self._zk, delay_s, root=self._root)

    def seed_recovery_delay(self, delay_s: int) -> int:
        return ur.seed_lost_bookie_recovery_delay(self._zk, delay_s, root=self._root)

    def watch_recovery_delay(self, on_change: Callable[[bytes | None], bool | None]) -> None:
        DataWatch(self._zk, paths.lost_bookie_recovery_delay_path(root=self._root),
                  lambda data, _stat: on_change(data))


    def markers_of(self, ledger_ids: Sequence[int], *, rate_limiter: RateLimiter | None = None
                   ) -> dict[int, bytes]:
        from bkaudit.zk.multiread import read_batched

        by_path = {paths.underreplicated_ledger_path(i, root=self._root): i for i in ledger_ids}
        found = read_batched(self._zk, list(by_path), rate_limiter=rate_limiter)
        return {by_path[path]: data for path, data, stat in found if stat is not None and data is not None}

    def write_check_ctime(self, kind: str, ctime_ms: int) -> None:
        ur.write_check_ctime(self._zk, kind, ctime_ms, root=self._root, acl=self._acl)

    def marker_bytes(
        self, *, rate_limiter: RateLimiter | None = None
    ) -> list[tuple[int, bytes, bytes | None]]:
        ids = self.marked()
        if not ids:
            return []
        try:
            names = self._zk.get_children(paths.locks_root(root=self._root))
            locked = {paths.parse_lock_name(n) for n in names}
        except NoNodeError:
            locked = set()
        marker_paths = {paths.underreplicated_ledger_path(i, root=self._root): i for i in ids}
        lock_paths = {paths.lock_path(i, root=self._root): i for i in ids if i in locked}
        found: dict[int, bytes] = {}
        locks: dict[int, bytes] = {}
        wanted = [*marker_paths, *lock_paths]
        for path, data, _ in ledgers.read_many(self._zk, wanted, max_in_flight=self._max_in_flight,
                                               rate_limiter=rate_limiter):
            if data is None:
                continue
            if path in marker_paths:
                found[marker_paths[path]] = data
            else:
                locks[lock_paths[path]] = data
        return [(i, found[i], locks.get(i)) for i in ids if i in found]


class ZkElection:
    def __init__(self, store: ZkStore) -> None:
        self._zk, self._root, self._acl = store.client, store.root, store.acl

    def vote(self, node_id: str) -> str:
        return ur.create_vote(self._zk, node_id, root=self._root, acl=self._acl)

    def predecessor(self, vote: str) -> str | None:
        return ur.predecessor(self._zk, vote, root=self._root)

    def announce(self, node_id: str) -> None:
        ur.announce_auditor(self._zk, node_id, root=self._root)

    def withdraw(self, vote: str) -> None:
        self._zk.delete(vote)

    def watch_gone(self, vote: str, on_gone: Callable[[], None]) -> bool:
        return self._zk.exists(vote, watch=lambda _event: on_gone()) is not None

    def on_session_lost(self, listener: Callable[[], None]) -> Callable[[], None]:
        def on_state(state: str) -> None:
            if state == KazooState.LOST:
                listener()

        self._zk.add_listener(on_state)
        return lambda: self._zk.remove_listener(on_state)
