"""What every ReplicationWorker thread of one process shares, and what one pass over a ledger reports.

`Shared` is the process's sessions and caches (the cluster store, the bookie view and clients, the placement
policy, the limiters) plus its per-ledger history: failure counts and backoffs, data-loss attempts, bookies
known to leave listings unanswered. `Outcome`, `Held` and `RepairReport` are the worker's vocabulary.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bkaudit.autorecovery import metrics as m
from bkaudit.autorecovery.copier import CopyResult
from bkaudit.autorecovery.events import EventLog
from bkaudit.autorecovery.settings import AutoRecoverySettings
from bkaudit.model.ledger import LedgerMetadata

if TYPE_CHECKING:
    from bkaudit.autorecovery.view import BookieView
    from bkaudit.lifecycle.drain import LifecycleCache
    from bkaudit.model.placement import PlacementPolicy
    from bkaudit.rpc.pool import BookieClientPool
    from bkaudit.store.base import ClusterStore
    from bkaudit.store.ledgers import MetadataStore
    from bkaudit.zk.client import RateLimiter

LISTING_RETRY_S = 600.0  # a bookie found not answering listings is judged from reads this long


class Outcome(enum.Enum):
    REPLICATED = "replicated"  # marker resolved
    REMARKED = "remarked"  # repaired, but re-marked since the lock: stays queued
    DELETED = "deleted"  # ledger gone: marker removed
    DEFERRED = "deferred"  # OPEN ledger within its grace period: lock held
    FAILED = "failed"  # lock held for the failed-ledger backoff
    DATA_LOST = "data_lost"  # terminal record written
    LOCK_LOST = "lock_lost"  # session expired mid-pass
    SKIPPED = "skipped"  # marker vanished or the ledger is already recorded as data-lost


@dataclass
class Shared:
    """What every worker thread of one process shares (sessions, caches, counters, per-ledger history)."""

    cluster: ClusterStore  # the queue, its locks, data-loss records
    settings: AutoRecoverySettings
    view: BookieView
    pool: BookieClientPool
    store: MetadataStore  # ledger metadata (BookKeeper's LedgerManager)
    policy: PlacementPolicy
    metrics: m.AutoRecoveryMetrics
    events: EventLog
    holder: str
    # fence + recover + close a ledger: (ledger id, bookies known to have lost copies) -> anything
    # (BookKeeper.open_ledger(recover=True, lost_copies=...))
    recover: Callable[[int, frozenset[str]], object]
    lifecycle: LifecycleCache | None = None  # Draining bookies move out; none is a target
    read_timeout_s: float = 30.0
    task_limiter: RateLimiter | None = None
    byte_limiter: RateLimiter | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    data_lost: set[int] = field(default_factory=set)
    failures: dict[int, int] = field(default_factory=dict)
    data_loss_attempts: dict[int, int] = field(default_factory=dict)
    last_error: dict[int, str] = field(default_factory=dict)
    listing_silent: dict[str, float] = field(default_factory=dict)  # bookie -> judged from reads until

    def judged_by_reads(self, bookie: str) -> bool:
        """True while `bookie` is known to leave listings unanswered (see learn_listing_silent)."""
        with self.lock:
            return self.listing_silent.get(bookie, 0.0) > time.monotonic()

    def learn_listing_silent(self, bookie: str) -> bool:
        """Judge `bookie` from reads for LISTING_RETRY_S (then its listing is tried again); True when it was
        not known yet."""
        now = time.monotonic()
        with self.lock:
            known = self.listing_silent.get(bookie, 0.0) > now
            self.listing_silent[bookie] = now + LISTING_RETRY_S
            return not known

    def count_failure(self, ledger_id: int, why: str) -> int:
        with self.lock:
            n = self.failures[ledger_id] = self.failures.get(ledger_id, 0) + 1
            self.last_error[ledger_id] = why
            return n

    def forget(self, ledger_id: int) -> None:
        with self.lock:
            self.failures.pop(ledger_id, None)
            self.data_loss_attempts.pop(ledger_id, None)
            self.last_error.pop(ledger_id, None)


@dataclass
class Held:
    """A lock kept after a pass: until `due` (monotonic), then released (failed) or acted on (open)."""

    due: float
    version: int
    kind: str  # "failed" | "open"


@dataclass
class RepairReport:
    repaired: int = 0  # segments fixed (copied + swapped, or refilled)
    copy: CopyResult = field(default_factory=CopyResult)
    lost_bookies: set[str] = field(default_factory=set)  # replicas of entries nobody has
    errors: list[str] = field(default_factory=list)
    changed: bool = False
    gone: bool = False
    lock_lost: bool = False
    cluster_problem: bool = False  # NotEnoughBookies: nothing to gain from retrying other ledgers now
    disabled: bool = False  # the disable switch appeared mid-pass
    known: tuple[LedgerMetadata, int] | None = None  # the metadata as our last swap left it

    @property
    def clean(self) -> bool:
        """Everything planned was copied and swapped in: nothing failed, nothing changed under us."""
        return (
            self.known is not None
            and not self.errors
            and not self.copy.missing
            and not self.changed
            and not self.gone
            and not self.lock_lost
            and not self.disabled
        )
