"""One exception hierarchy for the whole project.

Every error names what it is about (ledger, entry, bookie, config key, byte offset) so an operator
reading a log line or a violation row can act without a debugger.
"""

from __future__ import annotations


class BkAuditError(Exception):
    """Base of every error bkaudit raises on purpose."""


class FormatError(BkAuditError, ValueError):
    """Bytes that do not decode as the BookKeeper format they claim to be.

    `field` and `offset` say where decoding stopped, for forensics on a corrupt znode or response.
    """

    def __init__(self, message: str, *, field: str | None = None, offset: int | None = None) -> None:
        where = []
        if field is not None:
            where.append(f"field {field}")
        if offset is not None:
            where.append(f"offset {offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.field = field
        self.offset = offset


class ConfigError(BkAuditError, ValueError):
    """An invalid setting; names the key and why."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"invalid configuration {key!r}: {reason}")
        self.key = key
        self.reason = reason


class QuorumError(BkAuditError, ValueError):
    """Ensemble / write quorum / ack quorum sizes that break E >= WQ >= AQ >= 1."""


class MetadataError(BkAuditError):
    """A ledger metadata operation failed."""

    def __init__(self, message: str, *, ledger_id: int | None = None) -> None:
        super().__init__(f"ledger {ledger_id}: {message}" if ledger_id is not None else message)
        self.ledger_id = ledger_id


class MetadataConflict(MetadataError):
    """A compare-and-set on ledger metadata lost against a concurrent writer (BadVersion)."""


class NoSuchLedger(MetadataError):
    """The ledger's metadata znode does not exist."""


class LedgerStateError(MetadataError):
    """An operation that the ledger's state (OPEN / IN_RECOVERY / CLOSED) does not allow."""


class ZooKeeperError(BkAuditError):
    """ZooKeeper unreachable or a session problem that retries did not cure."""


class BookieError(BkAuditError):
    """A bookie answered with a non-OK status, or could not be reached.

    `status` is the BookKeeper v3 StatusCode name (e.g. "EFENCED") or "UNAVAILABLE" for transport failures.
    """

    def __init__(
        self,
        status: str,
        message: str = "",
        *,
        bookie_id: str | None = None,
        ledger_id: int | None = None,
        entry_id: int | None = None,
    ) -> None:
        parts = [status]
        if bookie_id is not None:
            parts.append(f"bookie {bookie_id}")
        if ledger_id is not None:
            parts.append(f"ledger {ledger_id}")
        if entry_id is not None:
            parts.append(f"entry {entry_id}")
        text = ", ".join(parts)
        super().__init__(f"{text}: {message}" if message else text)
        self.status = status
        self.bookie_id = bookie_id
        self.ledger_id = ledger_id
        self.entry_id = entry_id


class FencedError(BookieError):
    """The ledger was fenced by a recovering reader: this writer must stop.

    BookKeeper's BKLedgerFencedException.
    """

    def __init__(self, message: str = "ledger fenced", **kw: object) -> None:
        super().__init__("EFENCED", message, **kw)  # type: ignore[arg-type]


class NotEnoughBookies(BkAuditError):
    """The placement policy could not find enough suitable bookies."""


class RecoveryError(BkAuditError):
    """Ledger recovery could not complete (e.g. fencing coverage impossible)."""

    def __init__(self, message: str, *, ledger_id: int | None = None) -> None:
        super().__init__(f"ledger {ledger_id}: {message}" if ledger_id is not None else message)
        self.ledger_id = ledger_id


class DataLossError(BkAuditError):
    """Entries that no surviving replica can serve."""

    def __init__(self, message: str, *, ledger_id: int, entries: tuple[tuple[int, int], ...] = ()) -> None:
        super().__init__(f"ledger {ledger_id}: {message}")
        self.ledger_id = ledger_id
        self.entries = entries


class ClusterError(BkAuditError):
    """Local cluster orchestration failed (a process did not start or register)."""
