"""Durable entry storage of one bookie: SQLite in WAL mode with group commit (see docs/storage.md).

Invariants (the protocol's safety rests on them):
- An add, a fence or a WriteLac is acknowledged only after the transaction holding it committed, and a commit
  with `synchronous=FULL` in WAL mode returns only after the WAL is fsynced: everything acknowledged survives
  kill -9 and power loss.
- One writer thread owns every mutation. It drains the queue of pending operations, applies them in arrival
  order against the durable state plus the batch's own changes, commits the batch in ONE transaction (one
  fsync for many adds), and only then publishes the new state to readers and completes the callbacks. A fence
  therefore linearizes with adds: a plain add queued after a fence fails with EFENCED, one queued before it
  succeeds and is acknowledged before the fence is.
- Readers (any thread) see only committed state: the in-memory ledger table and entry index are updated after
  the commit, and bodies are read through per-thread SQLite connections (WAL readers never block the writer).

The index of entry ids lives in memory as runs per ledger (bkaudit.bookie.entryindex) and is rebuilt at
start-up by SQLite from the covering index alone, so no body is read to list a ledger. Listing encodings are
cached in a byte-bounded LRU (`ListingCache`), invalidated by every commit and deletion. The file's layout is
bkaudit.bookie.ledgerdb's, the bulk loads of benchmarks bkaudit.bookie.bulkload's.

The in-memory index is only a faithful copy of `ledgers.db` while that file is intact and only this process
writes it, so `check()` (run by the bookie's disk checker every `disk_check_interval_s`) verifies both: the
directory and the file are still the ones opened (not deleted, replaced or unwritable) and carry SQLite's
header (bkaudit.bookie.storage_check); and a commit by any other connection (SQLite's `PRAGMA data_version`)
reloads the index from disk, so entries removed behind the bookie's back are listed as missing. Lost storage
fails every later request with EIO and is reported to the bookie, which shuts down as BookKeeper's Bookie
does on a disk failure (LedgerDirsMonitor -> diskFailed -> triggerBookieShutdown); see docs/storage.md.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import sqlite3
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from pathlib import Path

from bkaudit.bookie import entryindex
from bkaudit.bookie.entryindex import EntryIndex
from bkaudit.bookie.ledgerdb import (
    DB_NAME,
    STRIPED_ENTRY,
    UPSERT_ENTRY,
    UPSERT_LEDGER,
    LedgerState,
    bulk_body,
    connect_db,
    current_dir,
    ensure_schema,
    ledger_runs,
    lock_directory,
    materialize_stripings,
    rollback,
)
from bkaudit.bookie.listing import ListingCache
from bkaudit.bookie.runs import LedgerIds
from bkaudit.bookie.storage_check import identity, storage_problem
from bkaudit.bookie.writes import AdminOp, Done, Write, resolver, stage
from bkaudit.errors import BookieError

log = logging.getLogger(__name__)

DEFAULT_LISTING_CACHE_BYTES = 256 * 1024 * 1024

NEEDS_INTEGRITY_CHECK = "NEEDS_INTEGRITY_CHECK"
"""Storage state flag (BookKeeper's StorageState.NEEDS_INTEGRITY_CHECK): set by the pre-boot check, cleared
once the full check resolved every ledger; survives restarts so an interrupted check runs again."""
UNKNOWN = "EUNKNOWNLEDGERSTATE"
"""BookKeeper's DataUnknownException on the wire: a ledger in limbo cannot say it lacks an entry."""

_STOP = object()


class Storage:
    """The bookie's entries, ledger states and in-memory index, in `<data_dir>/current/ledgers.db`.

    Opening takes an exclusive lock on `<data_dir>/current/LOCK` for the object's lifetime, so a running
    bookie and an admin command can never write the same file.
    """

    def __init__(self, data_dir: str | os.PathLike[str], *, max_batch: int = 2000,
                 max_pending: int = 20000, listing_cache_bytes: int = DEFAULT_LISTING_CACHE_BYTES) -> None:
        self.data_dir = Path(data_dir)
        self.max_batch = max_batch
        self.max_pending = max_pending
        self._lock_fd = lock_directory(self.data_dir)
        self.path = current_dir(self.data_dir) / DB_NAME
        self._conn = connect_db(self.path)
        self.created = ensure_schema(self._conn)
        """True when this open created `ledgers.db`'s tables: the storage is brand new (or was wiped)."""
        self._identity = identity(self.path)
        self._data_version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        self.failed: str | None = None
        """Why the storage is lost (None while intact); every request then fails with EIO."""
        self.listing_cache = ListingCache(listing_cache_bytes)
        self._index = EntryIndex(*self._load(), listing_cache=self.listing_cache)
        self._flags = frozenset(row[0] for row in self._conn.execute("SELECT flag FROM storage_state"))
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._pending: list[Write | AdminOp] = []
        self._cv = threading.Condition(threading.Lock())
        self._inflight = 0  # queued + being committed
        self._closed = False
        self._writer = threading.Thread(target=self._writer_loop, name="bookie-storage-writer", daemon=True)
        self._writer.start()

    # -- start-up -----------------------------------------------------------------------------------------
    def _load(self) -> tuple[dict[int, LedgerState], dict[int, LedgerIds]]:
        """Ledger states and the entry index as `ledgers.db` holds them (writer connection)."""
        ledgers, index = entryindex.load(self._conn)
        log.info("storage %s: %d ledgers, %d with entries", self.path, len(ledgers), len(index))
        return ledgers, index

    # -- mutations (callback style: the service's hot path) -------------------------------------------------
    def submit_add(self, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, recovery: bool,
                   done: Done) -> None:
        """Queue an add; `done(status)` runs on the writer thread once it is durable (or refused)."""
        self._submit(Write("add", ledger_id, entry_id, master_key, body, recovery, done))

    def submit_fence(self, ledger_id: int, master_key: bytes, done: Done) -> None:
        """Fence a ledger (creating it with `master_key` if unknown); `done` runs once the flag is durable."""
        state = self._index.ledgers.get(ledger_id)
        if state is not None and state.fenced and state.master_key:  # already durable: answer at once
            done("EOK" if state.master_key == master_key else "EUA")
            return
        self._submit(Write("fence", ledger_id, -1, master_key, None, False, done))

    def submit_write_lac(self, ledger_id: int, master_key: bytes, body: bytes, done: Done) -> None:
        """Persist an explicit LAC body (WriteLac); `done` runs once durable."""
        self._submit(Write("lac", ledger_id, -1, master_key, body, False, done))

    def _submit(self, op: Write) -> None:
        with self._cv:
            if self._closed or self.failed is not None:
                refused = "EIO"
            elif self._inflight >= self.max_pending:
                refused = "ETOOMANYREQUESTS"
            else:
                self._inflight += 1
                self._pending.append(op)
                self._cv.notify()
                return
        op.done(refused)

    # -- mutations (future style: tests, admin) -------------------------------------------------------------
    def add_entry(self, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, *,
                  recovery: bool = False) -> Future[None]:
        fut: Future[None] = Future()
        self.submit_add(ledger_id, entry_id, master_key, body, recovery,
                        resolver(fut, ledger_id=ledger_id, entry_id=entry_id))
        return fut

    def fence(self, ledger_id: int, master_key: bytes) -> Future[None]:
        fut: Future[None] = Future()
        self.submit_fence(ledger_id, master_key, resolver(fut, ledger_id=ledger_id))
        return fut

    def write_lac(self, ledger_id: int, master_key: bytes, body: bytes) -> Future[None]:
        fut: Future[None] = Future()
        self.submit_write_lac(ledger_id, master_key, body, resolver(fut, ledger_id=ledger_id))
        return fut

    @property
    def pending(self) -> int:
        """Operations queued or being committed (0 once drained)."""
        return self._inflight

    # -- reads (any thread; committed state only) ------------------------------------------------------------
    def ledger_state(self, ledger_id: int) -> LedgerState | None:
        return self._index.ledgers.get(ledger_id)

    def knows(self, ledger_id: int) -> bool:
        return ledger_id in self._index.ledgers

    def ledger_ids(self) -> list[int]:
        return sorted(self._index.ledgers)

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        """The stored entry bytes; entry_id -1 reads the last entry. BookieError ENOLEDGER / ENOENTRY."""
        self._intact(ledger_id)
        if ledger_id not in self._index.ledgers:
            raise BookieError("ENOLEDGER", ledger_id=ledger_id, entry_id=entry_id)
        if entry_id < 0:
            # the last entry stands for the LAC (getLastEntry): unknowable in limbo, even with entries
            self._unknown_if_limbo(ledger_id, entry_id)
            last = self._index.last_entry(ledger_id)
            if last is None:
                raise BookieError("ENOENTRY", "ledger has no entries", ledger_id=ledger_id, entry_id=entry_id)
            entry_id = last
        row = self._reader().execute(
            "SELECT body FROM entries WHERE ledger_id = ? AND entry_id = ?", (ledger_id, entry_id)
        ).fetchone()
        if row is None:
            if self._reader().execute(STRIPED_ENTRY, (ledger_id, entry_id, entry_id, entry_id)).fetchone():
                return bulk_body(ledger_id, entry_id)
            self._unknown_if_limbo(ledger_id, entry_id)
            raise BookieError("ENOENTRY", ledger_id=ledger_id, entry_id=entry_id)
        return bytes(row[0])

    def _unknown_if_limbo(self, ledger_id: int, entry_id: int | None = None) -> None:
        """BookKeeper's throwIfLimbo: only a negative answer about a limbo ledger becomes 'unknown'."""
        state = self._index.ledgers.get(ledger_id)
        if state is not None and state.limbo:
            raise BookieError(UNKNOWN, "ledger is in limbo (data-integrity check pending)",
                              ledger_id=ledger_id, entry_id=entry_id)

    def read_lac(self, ledger_id: int) -> tuple[bytes | None, bytes | None]:
        """(explicit LAC body or None, last entry body or None); ENOLEDGER when the ledger is unknown."""
        state = self._index.ledgers.get(ledger_id)
        if state is None:
            raise BookieError("ENOLEDGER", ledger_id=ledger_id)
        self._unknown_if_limbo(ledger_id)  # getLastAddConfirmed / getExplicitLac throw in limbo
        try:
            last = self.read_entry(ledger_id, -1)
        except BookieError:
            last = None
        return state.lac_body, last

    def availability(self, ledger_id: int) -> bytes | None:
        """AvailabilityOfEntriesOfLedger bytes (index, cache); None when unknown; EIO once storage is lost."""
        self._intact(ledger_id)
        self._unknown_if_limbo(ledger_id)
        return self._index.availability(ledger_id)

    def availability_many(self, ledger_ids: Iterable[int]) -> list[tuple[int, bytes | None]]:
        """Availability for many ledgers under one lock acquisition (the batch operation's hot loop)."""
        self._intact()
        return self._index.availability_many(ledger_ids)

    def listing_items(self, ledger_ids: Iterable[int]) -> list[tuple[int, bytes | None]]:
        """Each ledger's listing as a ready batch item (`listing.ledger_item`; None when unknown), cached."""
        self._intact()
        return self._index.listing_items(ledger_ids)

    def _intact(self, ledger_id: int | None = None) -> None:
        if self.failed is not None:
            raise BookieError("EIO", f"storage lost: {self.failed}", ledger_id=ledger_id)

    def entry_runs(self, ledger_id: int) -> list[tuple[int, int]] | None:
        """The ledger's stored ids as inclusive runs; None when unknown."""
        self._intact(ledger_id)
        return self._index.entry_runs(ledger_id)

    def disk_usage(self) -> tuple[int, int]:
        """(total bytes, free bytes) of the file system holding the data directory."""
        usage = shutil.disk_usage(self.data_dir)
        return usage.total, usage.free

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect_db(self.path, readonly=True, create=False)
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    # -- storage check (the bookie's disk checker) -----------------------------------------------------------
    def check(self) -> str | None:
        """Verify the storage under the in-memory index; returns why it is lost, or None while intact.

        Lost (permanently, `failed` set): the ledger directory or `ledgers.db` is gone, replaced, unreadable
        or not writable, or the file no longer starts with SQLite's header. Intact but written by another
        connection since the last check: the index and the listing cache are reloaded from disk first.
        """
        if self.failed is not None:
            return self.failed
        problem = storage_problem(self.path, self._identity)
        if problem is None and not self._closed:
            try:
                self._admin(AdminOp(-1, None, reload=True))
            except BookieError as exc:
                if self._closed:  # closed while checking: nothing was lost
                    return None
                problem = f"cannot re-read {self.path}: {exc}"
        if problem is not None and self.failed is None:
            self.failed = problem
            log.error("storage %s lost: %s; every request now fails with EIO", self.path, problem)
        return self.failed

    # -- limbo and storage state (the data-integrity check, bkaudit.autorecovery.integrity) ------------------
    def enter_limbo(self, ledger_id: int) -> None:
        """Put a ledger in limbo and fence it, durably (DataIntegrityCheckImpl's pre-boot MARK_LIMBO:
        setLimboState + setFenced); an unknown ledger is created without a master key (the first request's
        key is adopted). Adds keep working as on any fenced ledger: recovery adds land, plain adds EFENCED."""
        self._admin(AdminOp(ledger_id, None, limbo=True))

    def clear_limbo(self, ledger_id: int) -> None:
        """The ledger's state is known again (recovered by the check): negative answers are final again."""
        if self.in_limbo(ledger_id):
            self._admin(AdminOp(ledger_id, None, limbo=False))

    def in_limbo(self, ledger_id: int) -> bool:
        state = self._index.ledgers.get(ledger_id)
        return state is not None and state.limbo

    def limbo_ledgers(self) -> list[int]:
        return sorted(lid for lid, state in self._index.ledgers.items() if state.limbo)

    def has_entry(self, ledger_id: int, entry_id: int) -> bool:
        """Whether the entry is stored (the index; limbo does not matter)."""
        return self._index.has_entry(ledger_id, entry_id)

    def set_flag(self, flag: str, on: bool) -> None:
        """Set or clear a durable storage state flag (NEEDS_INTEGRITY_CHECK)."""
        if (flag in self._flags) != on:
            self._admin(AdminOp(-1, None, flag=(flag, on)))

    @property
    def flags(self) -> frozenset[str]:
        return self._flags

    # -- admin (fault injection by tests; ledger deletion) ---------------------------------------------------
    def delete_entries(self, ledger_id: int, entry_ids: Iterable[int]) -> int:
        """Durably remove entries (tests inject holes with this); returns how many existed."""
        return self._admin(AdminOp(ledger_id, sorted(set(entry_ids))))

    def delete_ledger(self, ledger_id: int) -> int:
        """Durably remove a ledger, its state and all its entries; returns the number of entries removed."""
        return self._admin(AdminOp(ledger_id, None))

    def _admin(self, op: AdminOp) -> int:
        with self._cv:
            if self._closed:
                raise BookieError("EIO", "storage is closed")
            self._inflight += 1
            self._pending.append(op)
            self._cv.notify()
        return op.future.result()

    # -- the writer thread -----------------------------------------------------------------------------------
    def _writer_loop(self) -> None:
        while True:
            with self._cv:
                while not self._pending:
                    self._cv.wait()
                batch, self._pending = self._pending, []
            ops: list[Write] = []
            stop = False
            for item in batch:
                if item is _STOP:
                    stop = True
                elif isinstance(item, AdminOp):
                    self._commit(ops)
                    ops = []
                    self._run_admin(item)
                else:
                    ops.append(item)
                    if len(ops) >= self.max_batch:
                        self._commit(ops)
                        ops = []
            self._commit(ops)
            if stop:
                return

    def _commit(self, ops: list[Write]) -> None:
        if not ops:
            return
        overlay: dict[int, LedgerState] = {}
        rows: list[tuple[int, int, bytes]] = []
        statuses = [stage(op, self._index.ledgers, overlay, rows) for op in ops]
        if rows or overlay:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                if rows:
                    self._conn.executemany(UPSERT_ENTRY, rows)
                if overlay:
                    self._conn.executemany(UPSERT_LEDGER, [
                        (lid, st.master_key, int(st.fenced), st.lac_body, int(st.limbo))
                        for lid, st in overlay.items()
                    ])
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                log.error("storage commit of %d operations failed: %s", len(ops), exc)
                rollback(self._conn)
                statuses = ["EIO" if s == "EOK" else s for s in statuses]
                overlay, rows = {}, []
        # publish the committed state, then acknowledge
        self._index.publish(overlay, rows)
        with self._cv:
            self._inflight -= len(ops)
        for op, status in zip(ops, statuses, strict=True):
            try:
                op.done(status)
            except Exception:  # a broken callback must not kill the writer
                log.exception("storage completion callback failed")

    def _reload_if_changed(self, op: AdminOp) -> None:
        """The check's second half, on the writer thread: reload the index if another connection committed."""
        try:
            version = self._conn.execute("PRAGMA data_version").fetchone()[0]
            changed = version != self._data_version
            if changed:
                log.warning("%s was changed by another process: reloading the entry index", self.path)
                self._index.replace(*self._load())
                self._data_version = version
        except sqlite3.Error as exc:
            op.future.set_exception(BookieError("EIO", str(exc)))
        else:
            op.future.set_result(int(changed))
        finally:
            with self._cv:
                self._inflight -= 1

    def _run_admin(self, op: AdminOp) -> None:
        if op.reload:
            self._reload_if_changed(op)
            return
        if op.limbo is not None or op.flag is not None:
            self._run_state_change(op)
            return
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            materialize_stripings(conn, op.ledger_id)  # striped ids are counted and deleted as rows
            if op.entry_ids is None:
                cur = conn.execute("DELETE FROM entries WHERE ledger_id = ?", (op.ledger_id,))
                conn.execute("DELETE FROM ledgers WHERE ledger_id = ?", (op.ledger_id,))
            else:
                cur = conn.executemany("DELETE FROM entries WHERE ledger_id = ? AND entry_id = ?",
                                       [(op.ledger_id, e) for e in op.entry_ids])
            removed = cur.rowcount
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            rollback(conn)
            op.future.set_exception(BookieError("EIO", str(exc), ledger_id=op.ledger_id))
        else:
            if op.entry_ids is None:
                self._index.remove_ledger(op.ledger_id)
            else:
                self._index.set_runs(op.ledger_id, ledger_runs(conn, op.ledger_id))
            op.future.set_result(removed)
        finally:
            with self._cv:
                self._inflight -= 1

    def _run_state_change(self, op: AdminOp) -> None:
        """Limbo in or out (entering also fences, creating an unknown ledger without a key), or a flag."""
        conn = self._conn
        state: LedgerState | None = None
        try:
            conn.execute("BEGIN IMMEDIATE")
            if op.flag is not None:
                flag, on = op.flag
                sql = "INSERT OR IGNORE INTO storage_state (flag) VALUES (?)" if on else \
                    "DELETE FROM storage_state WHERE flag = ?"
                conn.execute(sql, (flag,))
            else:
                old = self._index.ledgers.get(op.ledger_id) or LedgerState(b"", False, None)
                state = old._replace(limbo=True, fenced=True) if op.limbo else old._replace(limbo=False)
                conn.execute(UPSERT_LEDGER, (op.ledger_id, state.master_key, int(state.fenced),
                                              state.lac_body, int(state.limbo)))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            rollback(conn)
            op.future.set_exception(BookieError("EIO", str(exc), ledger_id=op.ledger_id))
        else:
            if op.flag is not None:
                flag, on = op.flag
                self._flags = self._flags | {flag} if on else self._flags - {flag}
            elif state is not None:
                self._index.set_state(op.ledger_id, state)
            op.future.set_result(1)
        finally:
            with self._cv:
                self._inflight -= 1

    # -- shutdown --------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Commit everything queued, stop the writer, close connections and release the directory lock."""
        with self._cv:
            if self._closed:
                return
            self._closed = True
            self._pending.append(_STOP)  # type: ignore[arg-type]
            self._cv.notify()
        self._writer.join()
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        self._conn.close()
        fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        os.close(self._lock_fd)

    def __enter__(self) -> Storage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
