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

if TYPE_CHECKING:
    from bkaudit.store.base import ReplicationQueue

SNAPSHOT_MAX_AGE_S = 30.0


class LedgerPicker:
    """One worker's view of the queue: a shuffled snapshot of ids, re-listed when used up or stale."""

    def __init__(
        self,
        queue: ReplicationQueue,
        *,
        holder: str | None,
        rng: random.Random | None = None,
        max_age_s: float = SNAPSHOT_MAX_AGE_S,
        on_refresh: Callable[[], None] | None = None,
    ) -> None:
        self.queue = queue
        self.on_refresh = on_refresh  # e.g. reload the data-loss records other workers wrote
        self.holder = holder
        self.rng = rng or random.Random()
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
                version = self.queue.lock(ledger_id, holder=self.holder)
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
        ids = self.queue.queued()
        locked = self.queue.locked()
        self._snapshot = [i for i in ids if i not in locked]
        self.rng.shuffle(self._snapshot)
        self._taken_at = time.monotonic()
