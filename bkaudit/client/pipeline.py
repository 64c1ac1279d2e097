"""Pipelined adds to a ledger's write sets, with ensemble changes when a bookie fails.

This is the write path shared by a ledger writer (`WriteHandle`) and by recovery's write-back of found
entries (BookKeeper runs both through the same LedgerHandle/PendingAddOp). Many entries are in flight at once;
bookie replies arrive on RPC threads, so all state sits behind one lock and futures are completed outside it,
in entry order, by `_deliver`.

Failure handling follows the replication protocol: EFENCED means a reader is recovering the ledger, so every
outstanding and future add fails with FencedError; any other bookie failure (UNAVAILABLE, EIO, EREADONLY,
timeouts...) replaces that bookie. The replacement starts a new segment at the first unacknowledged entry
(acknowledgements are held back while the change is in progress so that point cannot move), is written to the
metadata store with compare-and-set (a writer) or kept locally until the close (recovery), and then the
unacknowledged entries of the affected write sets are resent to the new bookie.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from bkaudit.client import rules
from bkaudit.client.directory import BookieDirectory
from bkaudit.client.pending import AddQueue, PendingAdd
from bkaudit.errors import (
    BkAuditError,
    BookieError,
    FencedError,
    LedgerStateError,
    MetadataConflict,
    NotEnoughBookies,
)
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.model.quorum import write_set
from bkaudit.store.ledgers import MetadataStore

log = logging.getLogger(__name__)

# statuses that mean "this request can never succeed on any bookie" rather than "replace the bookie"
_TERMINAL = {"EUA"}

Packager = Callable[[int, int, int], bytes]  # (entry_id, last_add_confirmed, cumulative length) -> body


class AddPipeline:
    """In-flight entries of one ledger, their acknowledgements and the ensemble that stores them."""

    def __init__(
        self,
        *,
        ledger_id: int,
        metadata: LedgerMetadata,
        version: int,
        master_key: bytes,
        pool: Any,
        directory: BookieDirectory,
        executor: Executor,
        store: MetadataStore | None,
        recovery: bool = False,
        last_add_confirmed: int = -1,
        length: int = 0,
        add_timeout_s: float = 30.0,
        max_outstanding: int = 10000,
        max_ensemble_changes: int = 100,
    ) -> None:
        self.ledger_id = ledger_id
        self.master_key = master_key
        self.recovery = recovery
        self._pool = pool
        self._directory = directory
        self._executor = executor
        self._store = store  # None: ensemble changes stay local (recovery)
        self._add_timeout_s = add_timeout_s
        self._max_outstanding = max_outstanding
        self._max_changes = max_ensemble_changes
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._deliver_lock = threading.Lock()
        self._ready: deque[tuple[Future[int], int, BaseException | None]] = deque()
        self._queue = AddQueue(last_add_confirmed, length)
        self._next_entry = last_add_confirmed + 1
        self._submitted_length = length
        self._metadata = metadata
        self._version = version
        self._ensemble = metadata.segments[-1].ensemble  # the last ensemble: where new entries go
        # the E distinct write sets, by entry_id mod E (E and WQ never change for a ledger)
        self._write_sets = [
            write_set(i, metadata.ensemble_size, metadata.write_quorum) for i in range(metadata.ensemble_size)
        ]
        self._failed: dict[int, str] = {}  # index in last ensemble -> bookie awaiting replacement
        self._ever_failed: set[str] = set()
        self._changing = False
        self._changes = 0
        self._error: BaseException | None = None
        self._closed = False
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None

    # -- views -----------------------------------------------------------------------------------------
    @property
    def metadata(self) -> LedgerMetadata:
        with self._lock:
            return self._metadata

    @property
    def version(self) -> int:
        with self._lock:
            return self._version

    @property
    def last_add_confirmed(self) -> int:
        with self._lock:
            return self._queue.last_add_confirmed

    @property
    def length(self) -> int:
        """Cumulative length of the acknowledged entries."""
        with self._lock:
            return self._queue.length

    @property
    def error(self) -> BaseException | None:
        with self._lock:
            return self._error

    @property
    def outstanding(self) -> int:
        with self._lock:
            return len(self._queue)

    def snapshot(self) -> tuple[LedgerMetadata, int, int, int]:
        """(metadata, version, last_add_confirmed, length) read atomically, for close."""
        with self._lock:
            return self._metadata, self._version, self._queue.last_add_confirmed, self._queue.length

    # -- submitting ------------------------------------------------------------------------------------
    def add(self, package: Packager, payload_length: int) -> Future[int]:
        """Assign the next entry id, package it with the current LAC and length, and send it."""
        return self._submit(
            None, lambda eid, lac, total: (package(eid, lac, total + payload_length), total + payload_length)
        )

    def add_raw(self, entry_id: int, body: bytes, length: int) -> Future[int]:
        """Send an already packaged entry (recovery write-back); `entry_id` must be the next one."""
        return self._submit(entry_id, lambda eid, lac, total: (body, length))

    def _submit(
        self, entry_id: int | None, build: Callable[[int, int, int], tuple[bytes, int]]
    ) -> Future[int]:
        with self._cond:
            while len(self._queue) >= self._max_outstanding and self._error is None and not self._closed:
                self._cond.wait(1.0)
            eid = self._next_entry if entry_id is None else entry_id
            if self._error is not None:
                return _failed(_entry_error(self._error, self.ledger_id, eid))
            if self._closed:
                return _failed(LedgerStateError(f"entry {eid}: handle is closed", ledger_id=self.ledger_id))
            if eid != self._next_entry:
                raise ValueError(
                    f"ledger {self.ledger_id}: entry {eid} out of order (next is {self._next_entry})"
                )
            body, length = build(eid, self._queue.last_add_confirmed, self._submitted_length)
            md = self._metadata
            ensemble = self._ensemble
            ws = self._write_sets[eid % md.ensemble_size]
            add = PendingAdd(eid, body, length, ws, md.write_quorum, md.ack_quorum)
            self._queue.append(add)
            self._next_entry = eid + 1
            self._submitted_length = length
            targets = [(i, ensemble[i]) for i in ws if i not in self._failed]
            self._start_watchdog()
        for index, bookie in targets:
            self._send(add, index, bookie)
        return add.future

    def _send(self, add: PendingAdd, index: int, bookie: str) -> None:
        try:
            fut = self._pool.get(bookie).add_entry(
                self.ledger_id, add.entry_id, self.master_key, add.body, recovery=self.recovery
            )
        except Exception as exc:  # connection refused at once, unknown bookie, ...
            self._on_failure(add, index, bookie, exc)
            return
        fut.add_done_callback(lambda f: self._on_reply(add, index, bookie, f))

    # -- replies ---------------------------------------------------------------------------------------
    def _on_reply(self, add: PendingAdd, index: int, bookie: str, fut: Future[None]) -> None:
        try:
            exc = fut.exception()
        except BaseException as cancelled:  # cancelled future
            exc = cancelled
        if exc is None:
            self._on_ack(add, index, bookie)
        else:
            self._on_failure(add, index, bookie, exc)

    def _on_ack(self, add: PendingAdd, index: int, bookie: str) -> None:
        with self._cond:
            if self._error is not None or self._ensemble[index] != bookie:
                return  # handle failed, or a reply from a bookie that has since been replaced
            if not add.ack(index) or self._changing:
                return
            if not self._release_completed():
                return
        self._deliver()

    def _release_completed(self) -> bool:
        """Move the complete prefix of the queue to the delivery queue (lock held)."""
        done = self._queue.pop_completed()
        for a in done:
            self._ready.append((a.future, a.entry_id, None))
        if done:
            self._cond.notify_all()
        return bool(done)

    def _deliver(self) -> None:
        """Complete futures in entry order (one deliverer at a time keeps the order across threads)."""
        with self._deliver_lock:
            while True:
                with self._lock:
                    if not self._ready:
                        return
                    batch = list(self._ready)
                    self._ready.clear()
                for fut, entry_id, exc in batch:
                    if fut.done():
                        continue
                    if exc is None:
                        fut.set_result(entry_id)
                    else:
                        fut.set_exception(exc)

    def _on_failure(self, add: PendingAdd, index: int, bookie: str, exc: BaseException) -> None:
        status = getattr(exc, "status", "UNAVAILABLE")
        if isinstance(exc, FencedError) or status == "EFENCED":
            log.info(
                "ledger %s fenced (EFENCED from bookie %s on entry %s)", self.ledger_id, bookie, add.entry_id
            )
            self.fail(
                FencedError(
                    "ledger fenced by a recovering reader", ledger_id=self.ledger_id, bookie_id=bookie
                )
            )
            return
        if status in _TERMINAL:
            self.fail(BookieError(status, str(exc), bookie_id=bookie, ledger_id=self.ledger_id))
            return
        with self._lock:
            if self._error is not None or self._ensemble[index] != bookie:
                return
            if index in self._failed:
                return
            log.warning(
                "ledger %s: bookie %s failed entry %s (%s); replacing it",
                self.ledger_id,
                bookie,
                add.entry_id,
                exc,
            )
            self._failed[index] = bookie
            self._ever_failed.add(bookie)
            if self._changing:
                return
            self._changing = True
        try:
            self._executor.submit(self._change_ensemble)
        except RuntimeError:  # the client was closed under this handle: nothing can replace the bookie
            self.fail(BookieError("UNAVAILABLE", "client closed", ledger_id=self.ledger_id, bookie_id=bookie))

    # -- ensemble change -------------------------------------------------------------------------------
    def _change_ensemble(self) -> None:
        try:
            self._change_ensemble_loop()
        except BkAuditError as exc:
            self.fail(exc)
        except Exception as exc:  # never leave adds hanging on an unexpected error
            log.exception("ledger %s: ensemble change crashed", self.ledger_id)
            self.fail(BookieError("UNAVAILABLE", f"ensemble change failed: {exc}", ledger_id=self.ledger_id))

    def _change_ensemble_loop(self) -> None:
        while True:
            with self._lock:
                if self._error is not None:
                    self._changing = False
                    return
                failed = dict(self._failed)
                if not failed:
                    self._changing = False
                    released = self._release_completed()
                    break
                metadata, version, lac = self._metadata, self._version, self._queue.last_add_confirmed
                exclude = sorted(self._ever_failed)
            self._changes += 1
            if self._changes > self._max_changes:
                raise NotEnoughBookies(
                    f"ledger {self.ledger_id}: more than {self._max_changes} ensemble changes"
                )
            ensemble = list(metadata.segments[-1].ensemble)
            replacements: dict[int, str] = {}
            for index, bookie in sorted(failed.items()):
                if ensemble[index] != bookie:
                    continue
                new = self._directory.replace_bookie(
                    ensemble,
                    index,
                    metadata.write_quorum,
                    metadata.ack_quorum,
                    exclude=sorted(set(exclude) | set(ensemble)),
                )
                ensemble[index] = new
                replacements[index] = new
            proposed = rules.with_replacements(metadata, lac + 1, replacements)
            new_version = version
            if self._store is not None:
                try:
                    new_version = self._store.write(self.ledger_id, proposed, version)
                except MetadataConflict:
                    fresh, fresh_version = self._store.read(self.ledger_id)
                    outcome, why = rules.writer_ensemble_change(fresh)
                    if outcome is rules.Outcome.FAIL:
                        raise FencedError(why, ledger_id=self.ledger_id) from None
                    with self._lock:
                        self._set_metadata(fresh, fresh_version)
                    continue
            log.info(
                "ledger %s: ensemble change at entry %s: %s",
                self.ledger_id,
                lac + 1,
                ", ".join(f"{failed[i]} -> {b}" for i, b in replacements.items()),
            )
            resend: list[tuple[PendingAdd, int, str]] = []
            with self._lock:
                self._set_metadata(proposed, new_version)
                for index, bookie in failed.items():
                    if self._failed.get(index) == bookie:
                        del self._failed[index]
                for add in self._queue:
                    for index, new in replacements.items():
                        if index in add.write_set:
                            add.unset(index)
                            add.submitted_at = time.monotonic()
                            if index not in self._failed:
                                resend.append((add, index, new))
            for add, index, bookie in resend:
                self._send(add, index, bookie)
        if released:
            self._deliver()

    def _set_metadata(self, metadata: LedgerMetadata, version: int) -> None:
        """Adopt new metadata (lock held)."""
        self._metadata, self._version = metadata, version
        self._ensemble = metadata.segments[-1].ensemble

    # -- timeouts --------------------------------------------------------------------------------------
    def _start_watchdog(self) -> None:
        if self._watchdog is None:
            self._watchdog = threading.Thread(
                target=self._watch, name=f"ledger-{self.ledger_id}-adds", daemon=True
            )
            self._watchdog.start()

    def _watch(self) -> None:
        """Treat a bookie that has not answered an add within add_timeout_s as failed (addEntryTimeoutSec)."""
        period = min(1.0, self._add_timeout_s / 4)
        while not self._stop.wait(period):
            now = time.monotonic()
            stale: list[tuple[PendingAdd, int, str]] = []
            with self._lock:
                ensemble = self._ensemble
                for add in self._queue:
                    if now - add.submitted_at < self._add_timeout_s:
                        break
                    stale.extend((add, i, ensemble[i]) for i in add.waiting_on() if i not in self._failed)
            for add, index, bookie in stale:
                self._on_failure(
                    add,
                    index,
                    bookie,
                    BookieError(
                        "UNAVAILABLE",
                        f"no reply within {self._add_timeout_s:g}s",
                        bookie_id=bookie,
                        ledger_id=self.ledger_id,
                        entry_id=add.entry_id,
                    ),
                )

    # -- ending ----------------------------------------------------------------------------------------
    def fail(self, error: BaseException) -> None:
        """Fail every outstanding and future add with `error` (named per entry)."""
        with self._cond:
            if self._error is None:
                self._error = error
            for add in self._queue.drain():
                self._ready.append(
                    (add.future, add.entry_id, _entry_error(self._error, self.ledger_id, add.entry_id))
                )
            self._cond.notify_all()
        self._stop.set()
        self._deliver()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no add is in flight (or the pipeline failed); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue or self._error is not None, timeout)

    def shutdown(self, reason: str = "handle closed") -> None:
        """Stop accepting adds; whatever is still in flight fails with LedgerStateError."""
        with self._cond:
            self._closed = True
            leftovers = self._queue.drain()
            for add in leftovers:
                self._ready.append(
                    (
                        add.future,
                        add.entry_id,
                        LedgerStateError(
                            f"entry {add.entry_id}: {reason} before it was acknowledged",
                            ledger_id=self.ledger_id,
                        ),
                    )
                )
            self._cond.notify_all()
        self._stop.set()
        self._deliver()


def _entry_error(error: BaseException, ledger_id: int, entry_id: int) -> BaseException:
    """The handle's error, restated for one entry (so each failed future names its entry)."""
    if isinstance(error, FencedError):
        return FencedError(
            "ledger fenced by a recovering reader; the entry may or may not have been written",
            ledger_id=ledger_id,
            entry_id=entry_id,
            bookie_id=error.bookie_id,
        )
    if isinstance(error, BookieError):
        return BookieError(
            error.status, str(error), ledger_id=ledger_id, entry_id=entry_id, bookie_id=error.bookie_id
        )
    return error


def _failed(exc: BaseException) -> Future[int]:
    fut: Future[int] = Future()
    fut.set_exception(exc)
    return fut
