"""What callers need from the cluster's coordination state, as Protocols: one per kind of record.

Each Protocol states BookKeeper's (or bkaudit's documented) semantics, not a ZooKeeper call: versions are
compare-and-set tokens, `ABSENT` is the version of a record that does not exist, and a lost race is
MetadataConflict. Both implementations (zookeeper.py, memory.py) keep them, and the contract test proves it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any, Literal, Protocol, TypeVar

from bkaudit.errors import FormatError
from bkaudit.formats import records
from bkaudit.model import lifecycle as lc
from bkaudit.model.dataloss import DataLossRecord
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.model.topology import RackConfig
from bkaudit.store.ledgers import MetadataStore
from bkaudit.zk.client import RateLimiter

T = TypeVar("T")

ABSENT = -1
"""The version of a state record that does not exist (an Active bookie has none)."""

BookieState = Literal["writable", "readonly", "absent"]
SessionEvent = Literal["lost", "connected"]
Where = Literal["writable", "readonly", "absent"]
Transition = tuple[str, str, int, bytes]
"""A lifecycle history record: (bookie, record name, creation sequence, its bytes)."""


class LifecycleRecords(Protocol):
    """Lifecycle state per bookie, its history, drain progress, per-ledger drain failures, serving switch.

    A state change and its history record are written together or not at all."""

    def read_state(self, bookie_id: str) -> tuple[lc.StateRecord | None, int]:
        """(record, version), (None, ABSENT) for an Active bookie; FormatError for a malformed record."""
        ...

    def list_states(self) -> dict[str, lc.StateRecord | FormatError]:
        """Every bookie with a cookie and a state record -> the record (or its parse error)."""
        ...

    def write_state(self, bookie_id: str, record: lc.StateRecord, *, version: int) -> None:
        """Compare-and-set (create when `version` is ABSENT, which needs the cookie) plus a history record;
        MetadataConflict when the version moved or the cookie is gone."""
        ...

    def remove_bookie(self, bookie_id: str, record: lc.StateRecord, *, version: int) -> None:
        """Delete the state (at `version`) and the cookie together, recording `record` in the history."""
        ...

    def history(self, bookie_id: str) -> list[lc.StateRecord]:
        """Transitions, oldest first; malformed records skipped. Kept after removal."""
        ...

    def transitions(self) -> list[Transition]:
        """Every history record of every bookie, in the order they were written (what webhooks deliver)."""
        ...

    def write_progress(self, bookie_id: str, progress: dict[str, Any]) -> None: ...

    def read_progress(self, bookie_id: str) -> dict[str, Any] | None: ...

    def record_failure(self, bookie_id: str, ledger_id: int, error: str, at: str) -> int:
        """Count one failed replication of `ledger_id` while draining `bookie_id`; returns the new count."""
        ...

    def list_failures(self, bookie_id: str) -> dict[int, dict[str, Any]]: ...

    def clear_drain_records(self, bookie_id: str) -> None:
        """Drop progress and failures (after removal; the history stays)."""
        ...

    def read_serving(self, bookie_id: str) -> bool:
        """Whether an operator asked the bookie to serve reads only."""
        ...

    def write_serving(self, bookie_id: str, read_only: bool, *, by: str, at: str) -> None: ...

    def watch(
        self, bookie_id: str, *, on_state: Callable[[lc.StateRecord | FormatError | None], None],
        on_serving: Callable[[bool], None],
    ) -> None:
        """Call `on_state` with the bookie's state record (None: none, FormatError: unreadable) and
        `on_serving` with its read-only switch, now and at every change (what a running bookie follows)."""
        ...


class Registry(Protocol):
    """Bookies known to the cluster (cookies) and registered now (writable or read-only)."""

    def cookies(self) -> list[str]:
        """Every bookie ever formatted into the cluster, sorted."""
        ...

    @property
    def cookie_home(self) -> str:
        """Where cookies live, for messages."""
        ...

    @property
    def racks_home(self) -> str:
        """Where Pulsar's rack JSON lives, for messages."""
        ...

    def has_cookie(self, bookie_id: str) -> bool:
        """Whether the bookie has a cookie (also when this session may not read it)."""
        ...

    def read_cookie(self, bookie_id: str) -> tuple[records.Cookie, int] | None:
        """(cookie, version), None without one; FormatError for a malformed one."""
        ...

    def writable(self) -> list[str]:
        """Bookies registered writable, sorted."""
        ...

    def readonly(self) -> list[str]:
        """Bookies registered read-only, sorted."""
        ...

    def racks(self) -> dict[str, dict[str, records.BookieRackInfo]]:
        """Pulsar's rack configuration (group -> bookie -> rack info); FormatError when unparseable."""
        ...

    def bookie_state(self, bookie_id: str) -> BookieState: ...

    def registration(self, bookie_id: str) -> tuple[Where, records.BookieServiceInfo | None]:
        """Where it is registered and its BookieServiceInfo, the writable registration first (clients
        choose ensembles from it); FormatError for an unparseable registration."""
        ...

    def instance_id(self) -> str:
        """The cluster's INSTANCEID; ClusterError when the cluster was never initialised."""
        ...

    def create_cookie(self, cookie: records.Cookie) -> None:
        """Stamp a new bookie's cookie; MetadataConflict when another bookie claimed the id first."""
        ...

    def replace_cookie(self, cookie: records.Cookie, *, version: int) -> None:
        """Re-stamp the bookie's cookie at `version` (MetadataConflict when it moved)."""
        ...

    def register(self, bookie_id: str, data: bytes, *, readonly: bool) -> None:
        """Register this session's bookie (writable or read-only; the other registration goes), waiting
        out a registration an ended session left; ZooKeeperError when another live process holds it."""
        ...

    def deregister(self, bookie_id: str) -> None: ...

    def registration_owner(self, bookie_id: str) -> int | None:
        """The session holding the bookie's registration (a restarted bookie registers in a new one); None
        when unregistered, -1 when registered under an ACL this session may not read."""
        ...

    def set_rack(self, bookie_id: str, rack: str, hostname: str | None = None) -> None:
        """Record the bookie's rack in Pulsar's rack JSON, keeping every other entry."""
        ...

    def on_session(self, listener: Callable[[SessionEvent], None]) -> Callable[[], None]:
        """Call `listener` as the session is lost (its registrations go with it) or (re)connected; returns
        what stops that."""
        ...

    def delete_cookie(self, bookie_id: str) -> bool:
        """Remove the bookie's cookie (BookKeeper's `bookie format` of that id); False without one."""
        ...

    def endpoint_hosts(self, writable: Iterable[str], readonly: Iterable[str] = ()) -> dict[str, str]:
        """bookie id -> the host of its `bookie-rpc` endpoint (BookKeeper's DefaultBookieAddressResolver);
        bookies that cannot be resolved are left out."""
        ...

    def watch(
        self, *, on_writable: Callable[[list[str]], None], on_readonly: Callable[[list[str]], None],
        on_racks: Callable[[bytes | None], None],
    ) -> None:
        """Call each function now and on every change of the writable / read-only sets and of the rack
        JSON, from one event thread (the functions must not block or call the store)."""
    def rack_config(self) -> RackConfig:
        """Pulsar's rack groups with the registrations that resolve their keys (`RackConfig.addresses`: each
        registered bookie's `bookie-rpc` host), as placement reads them; FormatError when unparseable."""
        ...

    def registration_bytes(
        self, *, rate_limiter: RateLimiter | None = None
    ) -> list[tuple[str, Where, bytes]]:
        """(bookie, where, its BookieServiceInfo as the bookie wrote it) of every registration, writable ones
        first; a bookie registered both ways appears twice, one gone meanwhile not at all (the snapshot's
        bulk read: `max_in_flight` reads at a time, each taking a `rate_limiter` token)."""
        ...


class DataLossRecords(Protocol):
    """bkaudit's records of ledgers whose entries are lost (under `[zk] state_root`)."""

    def exists(self, ledger_id: int) -> bool: ...

    def ids(self) -> list[int]:
        """Ledgers with a record, ascending."""
        ...

    def read(self, ledger_id: int) -> DataLossRecord | None:
        """The ledger's record; FormatError for a malformed one."""
        ...

    def write(self, record: DataLossRecord) -> None:
        """Create or replace the ledger's record."""
        ...

    def delete(self, ledger_id: int) -> bool:
        """Drop the ledger's record; False when there was none."""
        ...

    def migrate_legacy(self) -> list[int]:
        """Move records from where bkaudit kept them before `[zk] state_root` existed; the ids moved."""
        ...


class Limiter(Protocol):
    """A rate limit a caller waits on (bkaudit.zk.client.RateLimiter)."""

    def acquire(self, n: int = 1) -> float: ...


class ReplicationQueue(Protocol):
    """BookKeeper's under-replication queue (LedgerUnderreplicationManager): markers, the workers' locks,
    the disable switch and the Auditor's lostBookieRecoveryDelay."""

    def ensure_layout(self) -> None:
        """Create the queue's parents (and the layout record) when absent, as BookKeeper's manager does."""
        ...

    def is_enabled(self) -> bool:
        """False while an operator disabled AutoRecovery (BookKeeper's disable marker)."""
        ...

    def set_enabled(self, enabled: bool) -> bool:
        """Remove (enabled) or create the disable marker; False when it already was so."""
        ...

    def wait_until_enabled(self, timeout: float | None) -> bool:
        """Block until replication is enabled; False when `timeout` passed first."""
        ...

    def mark(self, ledger_id: int, replicas: Iterable[str], *, rate_limiter: Limiter | None = None) -> bool:
        """Mark the ledger under-replicated missing `replicas`, merged into an existing marker; True when
        something was written (after one permit of `rate_limiter`)."""
        ...

    def marked(self) -> list[int]:
        """Ledgers marked under-replicated, ascending."""
        ...

    def queued(self) -> list[int]:
        """The marked ledgers as the queue's directories spell them: a cheaper listing that may still name a
        ledger whose marker was just resolved (taking it then finds no marker)."""
        ...

    def marker(self, ledger_id: int) -> records.UnderreplicatedMarker | None:
        """The ledger's marker, None when not marked; FormatError for a corrupt one."""
        ...

    def read_marker(self, ledger_id: int) -> tuple[records.UnderreplicatedMarker, int] | None:
        """(marker, version) as `resolve` needs it; None when not marked."""
        ...

    def lock(self, ledger_id: int, *, holder: str | None) -> int | None:
        """Take the ledger's replication lock for this session; the marker version seen, or None (locked
        elsewhere, or not marked). The lock goes with the session."""
        ...

    def holds_lock(self, ledger_id: int) -> bool:
        """Whether this session holds the ledger's lock now."""
        ...

    def release(self, ledger_id: int) -> bool:
        """Release this session's lock on the ledger; True when it was released."""
        ...

    def locked(self) -> set[int]:
        """Ledgers some worker holds the lock of."""
        ...

    def resolve(self, ledger_id: int, *, version: int) -> bool:
        """Remove the marker if still at `version` and release the lock; False (marker kept) when it was
        re-marked since."""
        ...

    def lock_holder(self, ledger_id: int) -> str | None:
        """Who holds the ledger's replication lock (None: unlocked, or a holder that did not say)."""
        ...

    def auditor(self) -> str | None:
        """The elected Auditor's bookie id, None while nobody is voting."""
        ...

    def votes(self) -> list[str]:
        """The Auditor election's votes, in order (the first leads)."""
        ...

    def recovery_delay(self) -> int | None:
        """lostBookieRecoveryDelay in seconds, None when never set; FormatError when not a number."""
        ...

    def set_recovery_delay(self, delay_s: int) -> None: ...

    def seed_recovery_delay(self, delay_s: int) -> int:
        """Set it to `delay_s` unless it is set already (as BookKeeper's Auditor does); the value in force."""
        ...

    def watch_recovery_delay(self, on_change: Callable[[bytes | None], bool | None]) -> None:
        """Call `on_change(bytes)` now and on every change until it returns False."""
        ...

    def markers_of(self, ledger_ids: Sequence[int], *, rate_limiter: RateLimiter | None = None
                   ) -> dict[int, bytes]:
        """ledger -> its marker as stored, for those of `ledger_ids` that are marked (read in bulk)."""
        ...

    def write_check_ctime(self, kind: str, ctime_ms: int) -> None:
        """Record when the Auditor's `kind` check last completed (as BookKeeper's Auditor does)."""
        ...

    def marker_bytes(
        self, *, rate_limiter: RateLimiter | None = None
    ) -> list[tuple[int, bytes, bytes | None]]:
        """(ledger, its marker, its lock's data or None when unlocked) of every marked ledger, ascending, as
        written (a marker resolved meanwhile is left out); read in bulk as `registration_bytes`."""
        ...


class AuditorElection(Protocol):
    """The votes of BookKeeper's AuditorElector: one vote per process in a session, the lowest leads."""

    def vote(self, node_id: str) -> str:
        """Enter the election; the vote's name."""
        ...

    def predecessor(self, vote: str) -> str | None:
        """The vote just before `vote` (None: `vote` leads); MetadataError when `vote` is gone."""
        ...

    def announce(self, node_id: str) -> None:
        """What the winner writes for people and BookKeeper's `whoisauditor`."""
        ...

    def withdraw(self, vote: str) -> None:
        """Delete the vote (a stopped process lets its successor lead at once)."""
        ...

    def watch_gone(self, vote: str, on_gone: Callable[[], None]) -> bool:
        """Call `on_gone` once at the vote's next change (its deletion: votes are never rewritten); False,
        and no call, when it is gone already."""
        ...

    def on_session_lost(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener` when the session (and every vote of it) is lost; returns what stops that."""
        ...


class WebhookRecords(Protocol):
    """bkaudit's webhooks and their deliveries (under `[zk] state_root`), as bytes: the admin app owns
    their JSON. A webhook's creation sequence orders it against lifecycle transitions (`transitions`)."""

    def create(self, hook_id: str, data: bytes) -> None: ...

    def read(self, hook_id: str) -> tuple[bytes, int] | None:
        """(its bytes, its creation sequence), None when there is no such webhook."""
        ...

    def ids(self) -> list[str]:
        """Every webhook id, sorted."""
        ...

    def delete(self, hook_id: str) -> bool:
        """Delete it and its deliveries; False when there was none."""
        ...

    def deliveries(self, hook_id: str) -> list[bytes]:
        """Its delivery records, by key."""
        ...

    def claim(self, hook_id: str, key: str, data: bytes) -> bool:
        """Create the delivery record `key` unless it exists (one deliverer per transition across servers);
        True when this caller created it."""
        ...

    def finish(self, hook_id: str, key: str, data: bytes) -> None:
        """Replace a claimed delivery record (nothing when the webhook was deleted meanwhile)."""
        ...


class LedgerIndex(Protocol):
    """Which ledgers reference which bookies: one pass over every ledger's metadata."""

    def ledgers_of(
        self, bookies: Collection[str], *, open_ledgers: set[int] | None = None
    ) -> dict[str, dict[int, int]]:
        """bookie -> {ledger id: length in bytes} of every ledger whose ensembles name it; `open_ledgers`,
        when given, receives the ids of those not closed yet."""
        ...

    def every_ledger(self) -> Iterator[tuple[int, LedgerMetadata]]:
        """(id, metadata) of every ledger, in ascending id order (read pipelined, bounded in flight)."""
        ...

    def every_bookie(self) -> dict[str, list[int]]:
        """Every bookie named in any segment -> its ledgers, ascending (BookKeeper's BookieLedgerIndexer)."""
        ...


class ClusterStore(Protocol):
    """The cluster's coordination state, bound to one cluster (its roots, its credentials)."""

    @property
    def label(self) -> str:
        """Which cluster this is, for people (the ledgers root)."""
        ...

    @property
    def lifecycle(self) -> LifecycleRecords: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def data_loss(self) -> DataLossRecords: ...

    @property
    def queue(self) -> ReplicationQueue: ...

    @property
    def index(self) -> LedgerIndex: ...

    @property
    def webhooks(self) -> WebhookRecords: ...

    @property
    def election(self) -> AuditorElection: ...

    @property
    def ledgers(self) -> MetadataStore: ...

    def check_bookie_id(self, bookie_id: str) -> str:
        """`bookie_id` if the store can hold records for it; ValueError naming the rule otherwise."""
        ...

    def retrying(self, call: Callable[[], T], *, what: str) -> T:
        """`call()`, retried while the store's connection is being re-established (a ZooKeeper restart
        while a bookie starts must not kill it); ZooKeeperError once that takes too long."""
        ...
