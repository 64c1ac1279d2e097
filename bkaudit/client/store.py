"""Where the client keeps ledger metadata: a compare-and-set store, ZooKeeper in production.

The client's protocol logic (ensemble change, close, recovery) only needs read / CAS-write / create, so it
talks to this small interface; tests substitute an in-memory store and the real one delegates to
`bkaudit.zk.ledgers`, which owns the BookKeeper znode layout and bytes.
"""

from __future__ import annotations

from typing import Any, Protocol

from bkaudit.errors import MetadataConflict
from bkaudit.model.ledger import LedgerMetadata


class MetadataStore(Protocol):
    """Versioned ledger metadata with compare-and-set (the protocol's only coordination primitive)."""

    def new_ledger_id(self) -> int: ...

    def create(self, ledger_id: int, metadata: LedgerMetadata) -> int:
        """Create the ledger's metadata; returns its version."""
        ...

    def read(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        """(metadata, version); NoSuchLedger if absent."""
        ...

    def write(self, ledger_id: int, metadata: LedgerMetadata, expected_version: int) -> int:
        """CAS write; returns the new version; MetadataConflict if the version moved."""
        ...

    def delete(self, ledger_id: int) -> None: ...

    def list_ids(self) -> list[int]: ...


class ZkMetadataStore:
    """MetadataStore over a kazoo client using BookKeeper's hierarchical layout (bkaudit.zk.ledgers)."""

    def __init__(
        self, zk: Any, *, root: str = "/ledgers", layout: str = "hierarchical", acl: Any = None
    ) -> None:
        self.zk = zk
        self.root = root
        self.layout = layout
        self.acl = acl

    def new_ledger_id(self) -> int:
        from bkaudit.zk import ledgers

        if self.acl is not None:
            return int(ledgers.generate_ledger_id(self.zk, root=self.root, acl=self.acl))
        return int(ledgers.generate_ledger_id(self.zk, root=self.root))

    def create(self, ledger_id: int, metadata: LedgerMetadata) -> int:
        from bkaudit.zk import ledgers

        kwargs: dict[str, Any] = {"root": self.root, "layout": self.layout}
        if self.acl is not None:
            kwargs["acl"] = self.acl
        return _version(ledgers.create_ledger_metadata(self.zk, ledger_id, metadata, **kwargs))

    def read(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        from bkaudit.zk import ledgers
        from bkaudit.zk.client import with_retries

        metadata, stat = with_retries(
            lambda: ledgers.read_ledger_metadata(self.zk, ledger_id, root=self.root, layout=self.layout),
            client=self.zk,
            what=f"read of ledger {ledger_id}'s metadata",
        )
        return metadata, _version(stat)

    def write(self, ledger_id: int, metadata: LedgerMetadata, expected_version: int) -> int:
        """CAS write, retried across a lost connection (as BookKeeper's ZooKeeperClient retries). A write
        that landed before the connection dropped makes its retry conflict; if the stored metadata is then
        exactly ours, the write succeeded (BookKeeper's MetadataUpdateLoop finds nothing left to change)."""
        from bkaudit.zk import ledgers
        from bkaudit.zk.client import is_transient, with_retries

        lost = False

        def attempt() -> int:
            nonlocal lost
            try:
                return ledgers.write_ledger_metadata(
                    self.zk,
                    ledger_id,
                    metadata,
                    expected_version=expected_version,
                    root=self.root,
                    layout=self.layout,
                )
            except Exception as exc:
                lost = lost or is_transient(exc)
                raise

        try:
            what = f"write of ledger {ledger_id}'s metadata"
            return _version(with_retries(attempt, client=self.zk, what=what))
        except MetadataConflict:
            if lost:
                current, version = self.read(ledger_id)
                if current == metadata:
                    return version
            raise

    def delete(self, ledger_id: int) -> None:
        from bkaudit.zk import ledgers

        ledgers.delete_ledger_metadata(self.zk, ledger_id, root=self.root, layout=self.layout)

    def list_ids(self) -> list[int]:
        from bkaudit.zk import ledgers

        return sorted(int(i) for i in ledgers.list_ledger_ids(self.zk, root=self.root))


def _version(value: Any) -> int:
    """A znode version from an int or a kazoo ZnodeStat (the zk module may return either)."""
    return int(getattr(value, "version", value))
