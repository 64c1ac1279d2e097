"""The memory store's under-replication queue and Auditor election (bkaudit.store.memory)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from bkaudit.errors import MetadataError
from bkaudit.formats import records
from bkaudit.store.base import Limiter
from bkaudit.zk.client import RateLimiter

if TYPE_CHECKING:
    from bkaudit.store.memory import MemoryStore


class MemoryQueue:
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


    def markers_of(self, ledger_ids: Sequence[int], *, rate_limiter: RateLimiter | None = None
                   ) -> dict[int, bytes]:
        with self._s.lock:
            found = {i: self._s.markers[i] for i in ledger_ids if i in self._s.markers}
        return {i: records.encode_underreplicated_marker(records.UnderreplicatedMarker(replicas, None))
                for i, replicas in found.items()}

    def write_check_ctime(self, kind: str, ctime_ms: int) -> None:
        with self._s.lock:
            self._s.check_ctimes[kind] = ctime_ms

    def marker_bytes(
        self, *, rate_limiter: RateLimiter | None = None
    ) -> list[tuple[int, bytes, bytes | None]]:
        with self._s.lock:
            found = sorted(self._s.markers.items())
            locks = dict(self._s.locks)
        return [(lid, records.encode_underreplicated_marker(records.UnderreplicatedMarker(replicas, None)),
                 records.encode_lock_data(locks[lid] or None) if lid in locks else None)
                for lid, replicas in found]


class MemoryElection:
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
