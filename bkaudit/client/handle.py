"""The writer's handle on an OPEN ledger: pipelined adds and the writer's close.

Adds go through `AddPipeline` (write sets, in-order acknowledgement, ensemble changes, fencing). `close()`
applies the protocol's writer rules: CAS the metadata to CLOSED at the last acknowledged entry; after a lost
CAS, re-read and retry while OPEN, fail if IN_RECOVERY, succeed only if already CLOSED at the same entry.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from types import TracebackType
from typing import Any

from bkaudit.client import rules
from bkaudit.client.pipeline import AddPipeline
from bkaudit.errors import BkAuditError, LedgerStateError, MetadataConflict
from bkaudit.model.ledger import LedgerMetadata, LedgerState
from bkaudit.store.ledgers import MetadataStore

log = logging.getLogger(__name__)


class WriteHandle:
    """Adds entries to a ledger this client created; the only writer of that ledger (SWMR)."""

    def __init__(
        self,
        ledger_id: int,
        pipeline: AddPipeline,
        digest: Any,
        store: MetadataStore,
        *,
        close_timeout_s: float = 60.0,
        add_timeout_s: float = 30.0,
    ) -> None:
        self.ledger_id = ledger_id
        self._pipeline = pipeline
        self._digest = digest
        self._store = store
        self._close_timeout_s = close_timeout_s
        self._add_timeout_s = add_timeout_s
        self._closed_metadata: LedgerMetadata | None = None

    @property
    def metadata(self) -> LedgerMetadata:
        """The metadata as this writer last wrote or read it (segments grow with ensemble changes)."""
        return self._closed_metadata or self._pipeline.metadata

    @property
    def last_add_confirmed(self) -> int:
        """Last entry acknowledged to this client (-1 before the first)."""
        return self._pipeline.last_add_confirmed

    @property
    def length(self) -> int:
        """Bytes acknowledged so far (the ledger length a close records)."""
        return self._pipeline.length

    @property
    def closed(self) -> bool:
        return self._closed_metadata is not None

    def add_entry_async(self, payload: bytes) -> Future[int]:
        """Send an entry without waiting; the future yields its entry id once acknowledged (in order)."""
        data = bytes(payload)
        return self._pipeline.add(
            lambda eid, lac, total: self._digest.package(eid, lac, total, data), len(data)
        )

    def add_entry(self, payload: bytes, timeout: float | None = None) -> int:
        """Add an entry and wait for its acknowledgement; raises FencedError if a reader fenced the ledger."""
        return self.add_entry_async(payload).result(
            timeout if timeout is not None else self._add_timeout_s * 4
        )

    def close(self) -> LedgerMetadata:
        """Wait for in-flight adds, then CAS the metadata to CLOSED at the last acknowledged entry.

        BookKeeper fails in-flight adds on close; waiting for them instead (up to close_timeout_s) means a
        caller that pipelines adds and then closes does not lose entries it already handed over.
        """
        if self._closed_metadata is not None:
            return self._closed_metadata
        if not self._pipeline.wait_idle(self._close_timeout_s):
            log.warning(
                "ledger %s: adds still in flight after %ss; closing without them",
                self.ledger_id,
                self._close_timeout_s,
            )
        self._pipeline.shutdown("ledger closed")
        metadata, version, lac, length = self._pipeline.snapshot()
        while True:
            target = metadata.evolve(state=LedgerState.CLOSED, last_entry_id=lac, length=length)
            try:
                self._store.write(self.ledger_id, target, version)
                self._closed_metadata = target
                return target
            except MetadataConflict:
                fresh, fresh_version = self._store.read(self.ledger_id)
                outcome, why = rules.writer_close(fresh, lac)
                if outcome is rules.Outcome.RETRY:
                    metadata, version = fresh, fresh_version
                    continue
                if outcome is rules.Outcome.DONE:
                    self._closed_metadata = fresh
                    return fresh
                raise LedgerStateError(f"close failed: {why}", ledger_id=self.ledger_id) from None

    def abandon(self) -> None:
        """Stop without closing, as a crashed writer would (the ledger stays OPEN for recovery)."""
        self._pipeline.shutdown("handle abandoned")

    def __enter__(self) -> WriteHandle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self.close()
            return
        try:  # do not hide the error that ended the block behind a close error
            self.close()
        except BkAuditError as close_error:
            log.warning("ledger %s: close after error failed: %s", self.ledger_id, close_error)

    def __repr__(self) -> str:
        return f"WriteHandle(ledger_id={self.ledger_id}, last_add_confirmed={self.last_add_confirmed})"
