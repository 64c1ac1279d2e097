"""Taking work from the under-replication queue: random order, locked ledgers skipped, then the lock.

BookKeeper's getLedgerToRereplicate walks the 4-level hex tree shuffling each level, skips children having a
lock and creates the EPHEMERAL lock, once per ledger. bkaudit lists the queue's ids in one pipelined walk of
the four hex levels (the hex directories spell the ledger id, so the leaves need not be listed: 2,000 queued
ledgers cost 4 getChildren, not 2,000), shuffles them, and hands them out until the snapshot is used up or
stale; taking a ledger is then one `exists` on its marker and one lock `create`. Random order still spreads
many workers over the queue; a lock another worker holds costs one failed create.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from kazoo.exceptions import NoNodeError

from bkaudit.zk import paths
from bkaudit.zk import underreplication as ur
from bkaudit.zk.client import get_children_many

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from kazoo.security import ACL

LEVELS = ur.UR_HEX_LEVELS
SNAPSHOT_MAX_AGE_S = 30.0


def locked_ids(zk: KazooClient, *, root: str = paths.DEFAULT_ROOT) -> set[int]:
    """Ledgers currently locked by some worker (children of `underreplication/locks`)."""
    try:
        names = zk.get_children(paths.locks_root(root=root))
    except NoNodeError:
        return set()
    return {i for i in (paths.parse_lock_name(n) for n in names) if i is not None}


def queued_ids(zk: KazooClient, *, root: str = paths.DEFAULT_ROOT, max_in_flight: int = 100) -> list[int]:
    """Ids of the marked ledgers, from the hex directories alone (a directory may be left empty for a moment
    after its marker was resolved: taking that ledger then simply finds no marker)."""
    level = [(paths.ur_ledgers_root(root=root), 0)]
    for _ in range(LEVELS):
        values = dict(level)
        nxt = []
        for parent, kids in get_children_many(zk, [p for p, _ in level], max_in_flight):
            for kid in kids:
                try:
                    nxt.append((f"{parent}/{kid}", (values[parent] << 16) | int(kid, 16)))
                except ValueError:
                    continue  # not a hex dir: not BookKeeper's layout, ignore
        level = nxt
    return sorted(ledger_id for _, ledger_id in level if ledger_id <= paths.LONG_MAX)


class LedgerPicker:
    """One worker's view of the queue: a shuffled snapshot of ids, re-listed when used up or stale."""

    def __init__(
        self,
        zk: KazooClient,
        *,
        root: str = paths.DEFAULT_ROOT,
        holder: str | None,
        rng: random.Random | None = None,
        acl: list[ACL] | None = None,
        max_age_s: float = SNAPSHOT_MAX_AGE_S,
        on_refresh: Callable[[], None] | None = None,
    ) -> None:
        self.zk = zk
        self.on_refresh = on_refresh  # e.g. reload the data-loss records other workers wrote
        self.root = root
        self.holder = holder
        self.rng = rng or random.Random()
        self.acl = acl
        self.max_age_s = max_age_s
        self._snapshot: list[int] = []
        self._taken_at = 0.0

    def pick(self, skip: Callable[[int], bool] = lambda _lid: False) -> tuple[int, int] | None:
        """Lock a queued ledger not `skip`ped; (ledger id, marker version at lock time) or None if none.

        Keep the version for `mark_replicated`, so a ledger re-marked meanwhile stays queued.
        """
        fresh = False
        while True:
            if not self._snapshot or time.monotonic() - self._taken_at > self.max_age_s:
                if fresh:
                    return None  # a fresh listing held nothing we could take
                self._refresh()
                fresh = True
            while self._snapshot:
                ledger_id = self._snapshot.pop()
                if skip(ledger_id):
                    continue
                version = ur.acquire_lock(
                    self.zk, ledger_id, root=self.root, holder=self.holder, acl=self.acl
                )
                if version is not None:
                    return ledger_id, version
            if fresh:
                return None

    def invalidate(self) -> None:
        """Forget the snapshot (e.g. new markers are expected): the next pick lists the queue again."""
        self._snapshot = []

    def _refresh(self) -> None:
        if self.on_refresh is not None:
            self.on_refresh()
        ids = queued_ids(self.zk, root=self.root)
        locked = locked_ids(self.zk, root=self.root)
        self._snapshot = [i for i in ids if i not in locked]
        self.rng.shuffle(self._snapshot)
        self._taken_at = time.monotonic()


def holds_lock(zk: KazooClient, ledger_id: int, *, root: str = paths.DEFAULT_ROOT) -> bool:
    """True while THIS session owns the ledger's lock (it vanishes when the session expires)."""
    stat = zk.exists(paths.lock_path(ledger_id, root=root))
    return stat is not None and zk.client_id is not None and stat.ephemeralOwner == zk.client_id[0]
