"""Ledger metadata in memory (`MemoryStore.ledgers`), for unit tests of the client, the worker and the drain.

Versions are compare-and-set tokens as a znode's are (0 on create, +1 per write). Tests inject a concurrent
writer with `on_write` or `force`, and read what the code under test wrote from `writes`.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence

from bkaudit.errors import MetadataConflict, NoSuchLedger
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.zk.client import RateLimiter


class MemoryMetadataStore:
    """Versioned metadata with CAS; `on_write` runs (once) before the next write, to inject a concurrent
    change."""

    def __init__(self, *, lock: threading.RLock | None = None) -> None:
        self.data: dict[int, tuple[LedgerMetadata, int]] = {}
        self.ids = itertools.count()
        self.on_write: Callable[[int, LedgerMetadata], None] | None = None
        self.writes: list[LedgerMetadata] = []
        self.lock = lock or threading.RLock()

    def new_ledger_id(self) -> int:
        with self.lock:
            return next(self.ids)

    def create(self, ledger_id: int, metadata: LedgerMetadata) -> int:
        with self.lock:
            if ledger_id in self.data:
                raise MetadataConflict("metadata znode already exists", ledger_id=ledger_id)
            self.data[ledger_id] = (metadata, 0)
            return 0

    def read(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        with self.lock:
            if ledger_id not in self.data:
                raise NoSuchLedger("no such ledger", ledger_id=ledger_id)
            return self.data[ledger_id]

    def write(self, ledger_id: int, metadata: LedgerMetadata, expected_version: int) -> int:
        hook, self.on_write = self.on_write, None
        if hook is not None:
            hook(ledger_id, metadata)
        with self.lock:
            if ledger_id not in self.data:
                raise NoSuchLedger("no such ledger", ledger_id=ledger_id)
            _current, version = self.data[ledger_id]
            if version != expected_version:
                raise MetadataConflict(f"version {expected_version} != {version}", ledger_id=ledger_id)
            self.data[ledger_id] = (metadata, version + 1)
            self.writes.append(metadata)
            return version + 1

    def delete(self, ledger_id: int) -> None:
        with self.lock:
            if self.data.pop(ledger_id, None) is None:
                raise NoSuchLedger("no such ledger", ledger_id=ledger_id)

    def list_ids(self) -> list[int]:
        with self.lock:
            return sorted(self.data)

    def version(self, ledger_id: int) -> int | None:
        with self.lock:
            found = self.data.get(ledger_id)
        return None if found is None else found[1]

    def read_raw(self, ledger_ids: Sequence[int], *, rate_limiter: RateLimiter | None = None
                 ) -> dict[int, tuple[bytes, int, int]]:
        from bkaudit.formats.ledger_metadata import serialize

        with self.lock:
            found = {i: self.data[i] for i in ledger_ids if i in self.data}
        return {i: (serialize(md), version, version) for i, (md, version) in found.items()}

    # -- arranging a cluster --------------------------------------------------------------------------------
    def force(self, ledger_id: int, metadata: LedgerMetadata) -> None:
        """Another writer's change: create the ledger, or replace its metadata and bump its version."""
        with self.lock:
            found = self.data.get(ledger_id)
            self.data[ledger_id] = (metadata, 0 if found is None else found[1] + 1)

    def items(self) -> list[tuple[int, LedgerMetadata]]:
        """(ledger id, metadata) of every ledger, ascending (the index's pass)."""
        with self.lock:
            return [(lid, metadata) for lid, (metadata, _) in sorted(self.data.items())]
