"""Ledger metadata in the cluster store: BookKeeper's LedgerManager (`ClusterStore.ledgers`).

The client's protocol logic (ensemble change, close, recovery) and the replication worker's metadata swap
only need new id / create / read / CAS-write / delete / list, so they talk to this small interface; unit
tests use the in-memory one (bkaudit.store.memory_ledgers) and the real one delegates to
`bkaudit.zk.ledgers`, which owns the BookKeeper znode layout and bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from bkaudit.errors import MetadataConflict
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.zk import ledgers, paths
from bkaudit.zk.client import RateLimiter, is_transient, with_retries

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from kazoo.security import ACL


class MetadataStore(Protocol):
    """Versioned ledger metadata with compare-and-set (the protocol's only coordination primitive)."""

    def new_ledger_id(self) -> int:
        """An id no ledger of the cluster had or will get (BookKeeper's id generator)."""
        ...

    def create(self, ledger_id: int, metadata: LedgerMetadata) -> int:
        """Create the ledger's metadata; returns its version; MetadataConflict if the ledger exists."""
        ...

    def read(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        """(metadata, version); NoSuchLedger if absent."""
        ...

    def write(self, ledger_id: int, metadata: LedgerMetadata, expected_version: int) -> int:
        """CAS write; returns the new version; MetadataConflict if the version moved, NoSuchLedger if
        absent."""
        ...

    def delete(self, ledger_id: int) -> None:
        """NoSuchLedger if absent."""
        ...

    def list_ids(self) -> list[int]:
        """Every ledger id, ascending."""
        ...

    def version(self, ledger_id: int) -> int | None:
        """The metadata's version without decoding it (None if absent): whether a finding computed from
        that version still stands."""
        ...


    def read_raw(self, ledger_ids: Sequence[int], *, rate_limiter: RateLimiter | None = None
                 ) -> dict[int, tuple[bytes, int, int]]:
        """ledger -> (its metadata as stored, version, modification sequence) for those that exist, read in
        bulk (each batch takes a `rate_limiter` token): what a re-check compares with a snapshot."""
        ...


class ZkMetadataStore:
    """MetadataStore over a kazoo client, bound to the ledgers root and the layout new ledgers are written in
    (`[zk] layout`: BookKeeper's ledger manager); `acl` as ZkStore's."""

    def __init__(
        self, zk: KazooClient, *, root: str = "/ledgers", layout: str = "hierarchical",
        acl: list[ACL] | None = None,
    ) -> None:
        self.zk = zk
        self.root = root
        self.layout = layout
        self.acl = acl

    def new_ledger_id(self) -> int:
        return int(ledgers.generate_ledger_id(self.zk, root=self.root, acl=self.acl))

    def create(self, ledger_id: int, metadata: LedgerMetadata) -> int:
        return _version(ledgers.create_ledger_metadata(self.zk, ledger_id, metadata, root=self.root,
                                                       layout=self.layout, acl=self.acl))

    def read(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
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
        ledgers.delete_ledger_metadata(self.zk, ledger_id, root=self.root, layout=self.layout)

    def list_ids(self) -> list[int]:
        return sorted(int(i) for i in ledgers.list_ledger_ids(self.zk, root=self.root))

    def version(self, ledger_id: int) -> int | None:
        stat = self.zk.exists(paths.ledger_path(ledger_id, root=self.root, layout=self.layout))
        return None if stat is None else int(stat.version)

    def read_raw(self, ledger_ids: Sequence[int], *, rate_limiter: RateLimiter | None = None
                 ) -> dict[int, tuple[bytes, int, int]]:
        from bkaudit.zk.multiread import read_batched

        by_path = {paths.ledger_path(i, root=self.root, layout=self.layout): i for i in ledger_ids}
        out: dict[int, tuple[bytes, int, int]] = {}
        for path, data, stat in read_batched(self.zk, list(by_path), rate_limiter=rate_limiter):
            if stat is not None and data is not None:
                out[by_path[path]] = (data, int(stat.version), int(stat.mzxid))
        return out


def _version(value: Any) -> int:
    """A znode version from an int or a kazoo ZnodeStat (the zk module may return either)."""
    return int(getattr(value, "version", value))
