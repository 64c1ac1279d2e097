"""The `[client]` settings section: ledger client defaults and timeouts.

Defaults mirror BookKeeper's ClientConfiguration where a key exists (named in docs/config.md), so a
bkaudit client behaves like a Java client on the same cluster.
"""

from __future__ import annotations

import dataclasses

from bkaudit.errors import ConfigError
from bkaudit.model.ledger import DigestType

DIGEST_NAMES = {
    "crc32c": DigestType.CRC32C,
    "crc32": DigestType.CRC32,
    "mac": DigestType.MAC,
    "hmac": DigestType.MAC,
    "dummy": DigestType.DUMMY,
}


def digest_from_name(name: str) -> DigestType:
    """`crc32c` / `crc32` / `mac` / `dummy` (case-insensitive) -> DigestType; ConfigError otherwise."""
    try:
        return DIGEST_NAMES[name.strip().lower()]
    except KeyError:
        raise ConfigError(
            "client.digest_type", f"unknown digest {name!r} (crc32c, crc32, mac, dummy)"
        ) from None


@dataclasses.dataclass(frozen=True)
class ClientSettings:
    """Ledger client settings (one per `BookKeeper` instance)."""

    ensemble_size: int = 3  # BookKeeper API default of createLedger
    write_quorum: int = 2
    ack_quorum: int = 2
    digest_type: str = "crc32c"
    add_timeout_s: float = 30.0  # addEntryTimeoutSec: a bookie silent this long is replaced
    read_timeout_s: float = 30.0  # readEntryTimeoutSec
    recovery_read_batch_size: int = 4  # recoveryReadBatchSize (BookKeeper default 1)
    max_ensemble_changes: int = 100  # maxAllowedEnsembleChanges
    max_outstanding_adds: int = 10000  # back-pressure: add_entry_async blocks above this
    close_timeout_s: float = 60.0  # how long close() waits for in-flight adds

    def __post_init__(self) -> None:
        digest_from_name(self.digest_type)
        if not (self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1):
            raise ConfigError("client.ensemble_size", "need ensemble_size >= write_quorum >= ack_quorum >= 1")
        for key in ("add_timeout_s", "read_timeout_s", "close_timeout_s"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"client.{key}", "must be > 0")
        for key in ("recovery_read_batch_size", "max_ensemble_changes", "max_outstanding_adds"):
            if getattr(self, key) < 1:
                raise ConfigError(f"client.{key}", "must be >= 1")

    @property
    def digest(self) -> DigestType:
        return digest_from_name(self.digest_type)
