"""What callers need from the cluster's coordination state, as Protocols: one per kind of record.

Each Protocol states BookKeeper's (or bkaudit's documented) semantics, not a ZooKeeper call: versions are
compare-and-set tokens, `ABSENT` is the version of a record that does not exist, and a lost race is
MetadataConflict. Both implementations (zookeeper.py, memory.py) keep them, and the contract test proves it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, Literal, Protocol

from bkaudit.errors import FormatError
from bkaudit.formats import records
from bkaudit.model import lifecycle as lc
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.model.topology import RackConfig
from bkaudit.store.ledgers import MetadataStore
from bkaudit.zk.client import RateLimiter
from bkaudit.zk.dataloss import DataLossRecord

ABSENT = -1
"""The version of a state record that does not exist (an Active bookie has none)."""

BookieState = Literal["writable", "readonly", "absent"]
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


class Registry(Protocol):
    """Bookies known to the cluster (cookies) and registered now (writable or read-only)."""

    def cookies(self) -> list[str]:
        """Every bookie ever formatted into the cluster, sorted."""
        ...

    @property
    def cookie_home(self) -> str:
        """Where cookies live, for messages."""
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


class ReplicationQueue(Protocol):
    """BookKeeper's under-replication queue, as far as publishing into it goes."""

    def is_enabled(self) -> bool:
        """False while an operator disabled AutoRecovery (BookKeeper's disable marker)."""
        ...

    def mark(self, ledger_id: int, replicas: Iterable[str]) -> bool:
        """Mark the ledger under-replicated missing `replicas`, merged into an existing marker; True when
        something was written."""
        ...

    def marked(self) -> list[int]:
        """Ledgers marked under-replicated, ascending."""
        ...

    def marker(self, ledger_id: int) -> records.UnderreplicatedMarker | None:
        """The ledger's marker, None when not marked; FormatError for a corrupt one."""
        ...

    def lock_holder(self, ledger_id: int) -> str | None:
        """Who holds the ledger's replication lock (None: unlocked, or a holder that did not say)."""
        ...

    def auditor(self) -> str | None:
        """The elected Auditor's bookie id, None while nobody is voting."""
        ...

    def marker_bytes(
        self, *, rate_limiter: RateLimiter | None = None
    ) -> list[tuple[int, bytes, bytes | None]]:
        """(ledger, its marker, its lock's data or None when unlocked) of every marked ledger, ascending, as
        written (a marker resolved meanwhile is left out); read in bulk as `registration_bytes`."""
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
    def ledgers(self) -> MetadataStore: ...

    def check_bookie_id(self, bookie_id: str) -> str:
        """`bookie_id` if the store can hold records for it; ValueError naming the rule otherwise."""
        ...


def index_ledgers(
    ledgers: Iterable[tuple[int, LedgerMetadata]], bookies: Collection[str], *,
    open_ledgers: set[int] | None = None,
) -> dict[str, dict[int, int]]:
    """LedgerIndex.ledgers_of over (ledger id, metadata) pairs, for every implementation."""
    wanted = set(bookies)
    out: dict[str, dict[int, int]] = {b: {} for b in wanted}
    if not wanted:
        return {}
    for ledger_id, metadata in ledgers:
        for bookie in metadata.bookies():
            if bookie in wanted:
                out[bookie][ledger_id] = max(0, metadata.length)
                if open_ledgers is not None and not metadata.is_closed:
                    open_ledgers.add(ledger_id)
    return out
