"""Opening a ledger with recovery: mark IN_RECOVERY, fence, read forward, write back, close.

This is BookKeeper's `ReadOnlyLedgerHandle.recover` + `LedgerRecoveryOp` + `closeRecovered`:
1. CAS the metadata to IN_RECOVERY (skipped if already CLOSED, done) - the writer's next ensemble change
   will now fail its CAS and see it was fenced.
2. Fence the last ensemble (`fencing.fence`) and learn the highest piggy-backed LAC.
3. From max(maxLAC, first entry of the last ensemble - 1) read forward with fence + high priority. An entry is
   found on the first valid answer from its write set and is absent once WQ-AQ+1 bookies of its write set say
   ENOENTRY/ENOLEDGER (so at most AQ-1 could hold it: never acknowledged). Found entries are written back
   with recovery adds to their whole write set (ensemble changes stay local until the close).
   Deliberate difference: a bookie the caller knows lost its copies (`lost_copies`: wiped, back under the
   same id) cannot vouch that an entry was never written, so its ENOENTRY counts as no answer, as a dead
   bookie's would. BookKeeper counts it, and closes the ledger before acknowledged entries when the wiped
   bookie answers first; it guards against that only with cookies and, opt-in, limbo
   (`dataIntegrityCheckingEnabled`).
4. CAS to CLOSED at the last recovered entry; a recoverer that loses that CAS to another one accepts the
   CLOSED result, so concurrent recoverers converge.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import Future
from typing import Any

from bkaudit.client import rules
from bkaudit.client.context import ClientContext, digest_for, master_key_for
from bkaudit.client.fencing import fence
from bkaudit.client.pipeline import AddPipeline
from bkaudit.client.reader import MISSING, read_entry_async, replicas
from bkaudit.errors import BkAuditError, MetadataConflict, RecoveryError
from bkaudit.model.ledger import LedgerMetadata, LedgerState
from bkaudit.model.quorum import recovery_absent_threshold

log = logging.getLogger(__name__)

ABSENT = None


class RecoveryRead:
    """One entry's recovery read from its write set: found, absent, or failed (no I/O)."""

    def __init__(self, entry_id: int, replicas: int, absent_threshold: int) -> None:
        self.entry_id = entry_id
        self.replicas = replicas
        self.absent_threshold = absent_threshold
        self.missing = 0
        self.errors: list[str] = []
        self.entry: Any = None
        self.body: bytes | None = None

    def found(self, entry: Any, body: bytes) -> None:
        if self.entry is None:
            self.entry, self.body = entry, body

    def nothing(self) -> None:
        self.missing += 1

    def failed(self, reason: str) -> None:
        self.errors.append(reason)

    @property
    def is_found(self) -> bool:
        return self.entry is not None

    @property
    def is_absent(self) -> bool:
        return self.entry is None and self.missing >= self.absent_threshold

    @property
    def decided(self) -> bool:
        """Found, absent, or every replica answered without settling it (a failure)."""
        return self.is_found or self.is_absent or self.missing + len(self.errors) >= self.replicas


def recovery_read(
    ctx: ClientContext,
    digest: Any,
    ledger_id: int,
    metadata: LedgerMetadata,
    entry_id: int,
    master_key: bytes,
    lost_copies: frozenset[str] = frozenset(),
) -> Future[RecoveryRead]:
    """Read `entry_id` from its whole write set with fence + high priority; resolves once decided."""
    bookies = replicas(metadata, entry_id)
    state = RecoveryRead(
        entry_id, len(bookies), recovery_absent_threshold(metadata.write_quorum, metadata.ack_quorum)
    )
    result: Future[RecoveryRead] = Future()
    lock = threading.Lock()
    settled = [False]

    def settle(update: Any) -> None:
        with lock:
            if settled[0]:
                return
            update()
            if not state.decided:
                return
            settled[0] = True
        result.set_result(state)

    def on_reply(bookie: str, fut: Future[bytes]) -> None:
        exc = fut.exception()
        if exc is None:
            body = fut.result()
            try:
                entry = digest.verify(body, entry_id=entry_id)
            except Exception as bad:
                reason = f"{bookie}: bad entry: {bad}"
                settle(lambda: state.failed(reason))
                return
            settle(lambda: state.found(entry, bytes(body)))
        elif getattr(exc, "status", None) in MISSING and bookie in lost_copies:
            settle(lambda: state.failed(f"{bookie}: says missing, but it lost its copies"))
        elif getattr(exc, "status", None) in MISSING:
            settle(state.nothing)
        else:
            settle(lambda: state.failed(f"{bookie}: {exc}"))

    for bookie in bookies:
        try:
            fut = ctx.pool.get(bookie).read_entry(
                ledger_id, entry_id, fence=True, master_key=master_key, high_priority=True
            )
        except Exception as exc:
            settle(lambda b=bookie, e=exc: state.failed(f"{b}: {e}"))
            continue
        fut.add_done_callback(lambda f, b=bookie: on_reply(b, f))
    return result


def mark_in_recovery(ctx: ClientContext, ledger_id: int) -> tuple[LedgerMetadata, int]:
    """CAS OPEN -> IN_RECOVERY (retrying on conflicts); returns the metadata as it now stands."""
    metadata, version = ctx.store.read(ledger_id)
    while metadata.state is LedgerState.OPEN:
        target = metadata.evolve(state=LedgerState.IN_RECOVERY)
        try:
            version = ctx.store.write(ledger_id, target, version)
            return target, version
        except MetadataConflict:
            metadata, version = ctx.store.read(ledger_id)
    return metadata, version


def recover(
    ctx: ClientContext, ledger_id: int, *, lost_copies: frozenset[str] = frozenset()
) -> tuple[LedgerMetadata, int]:
    """Recover and close `ledger_id`; returns the CLOSED metadata and its version. `lost_copies`: bookies
    known to miss entries they stored, whose "no such entry" is not evidence (module docstring, 3.)."""
    metadata, version = mark_in_recovery(ctx, ledger_id)
    if metadata.is_closed:
        return metadata, version
    settings = ctx.settings
    digest = digest_for(ledger_id, metadata.password, metadata.digest_type)
    key = master_key_for(metadata.password)
    fenced = fence(ctx.pool, digest, ledger_id, metadata, key, settings.read_timeout_s)
    start = max(fenced.max_lac, metadata.segments[-1].first_entry_id - 1)
    log.info(
        "ledger %s fenced by %d bookies; max LAC %s, reading forward from %s",
        ledger_id,
        len(fenced.responded),
        fenced.max_lac,
        start + 1,
    )
    pipeline = AddPipeline(
        ledger_id=ledger_id,
        metadata=metadata,
        version=version,
        master_key=key,
        pool=ctx.pool,
        directory=ctx.directory,
        executor=ctx.executor,
        store=None,
        recovery=True,
        last_add_confirmed=start,
        length=0,
        add_timeout_s=settings.add_timeout_s,
        max_outstanding=1000,
        max_ensemble_changes=settings.max_ensemble_changes,
    )
    try:
        last, length = _read_forward(ctx, digest, ledger_id, metadata, key, start, pipeline, lost_copies)
        if not pipeline.wait_idle(settings.add_timeout_s * 4):
            raise RecoveryError("write-back of recovered entries did not complete", ledger_id=ledger_id)
        if pipeline.error is not None:
            raise RecoveryError(
                f"write-back of recovered entries failed: {pipeline.error}", ledger_id=ledger_id
            ) from pipeline.error
        recovered_md = pipeline.metadata
    finally:
        pipeline.shutdown("recovery ended")
    if length is None:
        length = _length_of(ctx, digest, ledger_id, metadata, last)
    target = recovered_md.evolve(state=LedgerState.CLOSED, last_entry_id=last, length=length)
    return _close_recovered(ctx, ledger_id, target, metadata, version)


def _read_forward(
    ctx: ClientContext,
    digest: Any,
    ledger_id: int,
    metadata: LedgerMetadata,
    key: bytes,
    start: int,
    pipeline: AddPipeline,
    lost_copies: frozenset[str],
) -> tuple[int, int | None]:
    """Read entries after `start` until one is absent; write each back. Returns (last entry, its length)."""
    batch = ctx.settings.recovery_read_batch_size
    timeout = ctx.settings.read_timeout_s * 2
    in_flight: deque[Future[RecoveryRead]] = deque()
    nxt = start + 1
    last, length = start, None
    while True:
        while len(in_flight) < batch:
            in_flight.append(recovery_read(ctx, digest, ledger_id, metadata, nxt, key, lost_copies))
            nxt += 1
        try:
            read = in_flight.popleft().result(timeout)
        except TimeoutError:
            raise RecoveryError(
                f"recovery read of entry {last + 1} got no decision within {timeout:g}s", ledger_id=ledger_id
            ) from None
        if read.is_absent:
            log.info(
                "ledger %s: entry %s absent on %d bookies: last entry is %s",
                ledger_id,
                read.entry_id,
                read.missing,
                last,
            )
            return last, length
        if not read.is_found:
            raise RecoveryError(
                f"entry {read.entry_id} could not be read from any replica "
                f"({'; '.join(read.errors)}; {read.missing} said missing)",
                ledger_id=ledger_id,
            )
        if pipeline.error is not None:
            raise RecoveryError(f"write-back failed: {pipeline.error}", ledger_id=ledger_id)
        assert read.body is not None
        pipeline.add_raw(read.entry_id, read.body, int(read.entry.length))
        last, length = read.entry_id, int(read.entry.length)


def _length_of(
    ctx: ClientContext, digest: Any, ledger_id: int, metadata: LedgerMetadata, entry_id: int
) -> int:
    """Ledger length at `entry_id`, from that entry's header (0 for an empty ledger)."""
    if entry_id < 0:
        return 0
    try:
        entry = read_entry_async(ctx.pool, digest, ledger_id, metadata, entry_id).result(
            ctx.settings.read_timeout_s * 2
        )
    except (BkAuditError, TimeoutError) as exc:
        raise RecoveryError(
            f"cannot read the last entry {entry_id} for the ledger length: {exc}", ledger_id=ledger_id
        ) from exc
    return int(entry.length)


def _close_recovered(
    ctx: ClientContext, ledger_id: int, target: LedgerMetadata, started_from: LedgerMetadata, version: int
) -> tuple[LedgerMetadata, int]:
    while True:
        try:
            return target, ctx.store.write(ledger_id, target, version)
        except MetadataConflict:
            fresh, fresh_version = ctx.store.read(ledger_id)
            outcome, why = rules.recovery_close(fresh, started_from)
            if outcome is rules.Outcome.DONE:
                if fresh.last_entry_id != target.last_entry_id:
                    log.info(
                        "ledger %s: another recoverer closed at %s (this one found %s); accepting it",
                        ledger_id,
                        fresh.last_entry_id,
                        target.last_entry_id,
                    )
                return fresh, fresh_version
            if outcome is rules.Outcome.FAIL:
                raise RecoveryError(why, ledger_id=ledger_id) from None
            # keep whatever else changed (e.g. custom metadata); ours are state, end and segments
            target = fresh.evolve(
                state=target.state,
                last_entry_id=target.last_entry_id,
                length=target.length,
                segments=target.segments,
            )
            version = fresh_version
