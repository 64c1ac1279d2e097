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

The index of entry ids lives in memory as runs per ledger (`EntryRuns`) and is rebuilt at start-up by SQLite
from the covering index alone (a gaps-and-islands window query), so no body is read to list a ledger. Listing
encodings are cached in a byte-bounded LRU (`ListingCache`), invalidated by every commit and deletion.

The in-memory index is only a faithful copy of `ledgers.db` while that file is intact and only this process
writes it, so `check()` (run by the bookie's disk checker every `disk_check_interval_s`) verifies both: the
directory and the file are still the ones opened (not deleted, replaced or unwritable) and carry SQLite's
header; and a commit by any other connection (SQLite's `PRAGMA data_version`) reloads the index from disk,
so entries removed behind the bookie's back are listed as missing. Lost storage fails every later request
with EIO and is reported to the bookie, which shuts down as BookKeeper's Bookie does on a disk failure
(LedgerDirsMonitor -> diskFailed -> triggerBookieShutdown); see docs/storage.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import sqlite3
import struct
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import NamedTuple

from bkaudit.bookie.listing import ListingCache, unknown_item
from bkaudit.bookie.runs import EntryRuns, LedgerIds, StripedIds
from bkaudit.errors import BookieError, QuorumError
from bkaudit.model.quorum import Striping

log = logging.getLogger(__name__)

DB_NAME = "ledgers.db"
LOCK_NAME = "LOCK"
CURRENT_DIR = "current"
SQLITE_HEADER = b"SQLite format 3\x00"
DEFAULT_LISTING_CACHE_BYTES = 256 * 1024 * 1024

Done = Callable[[str], None]
"""Completion callback of a mutation: receives a BookKeeper status name ("EOK", "EFENCED", "EUA", ...)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ledgers (
    ledger_id  INTEGER PRIMARY KEY,
    master_key BLOB,
    fenced     INTEGER NOT NULL DEFAULT 0,
    lac_body   BLOB
);
CREATE TABLE IF NOT EXISTS entries (
    ledger_id INTEGER NOT NULL,
    entry_id  INTEGER NOT NULL,
    body      BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS entries_by_id ON entries (ledger_id, entry_id);
CREATE TABLE IF NOT EXISTS storage_state (flag TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS stripings (
    ledger_id INTEGER NOT NULL,
    first     INTEGER NOT NULL,
    last      INTEGER NOT NULL,
    start     INTEGER NOT NULL,
    period    INTEGER NOT NULL,
    size      INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS stripings_by_ledger ON stripings (ledger_id);
"""
# added with the data-integrity check; older files get the column at open
_LIMBO_COLUMN = "ALTER TABLE ledgers ADD COLUMN limbo INTEGER NOT NULL DEFAULT 0"
NEEDS_INTEGRITY_CHECK = "NEEDS_INTEGRITY_CHECK"
"""Storage state flag (BookKeeper's StorageState.NEEDS_INTEGRITY_CHECK): set by the pre-boot check, cleared
once the full check resolved every ledger; survives restarts so an interrupted check runs again."""
UNKNOWN = "EUNKNOWNLEDGERSTATE"
"""BookKeeper's DataUnknownException on the wire: a ledger in limbo cannot say it lacks an entry."""
# BookKeeper's last write wins when an entry is written twice (recovery write-back, re-replication)
_UPSERT_ENTRY = (
    "INSERT INTO entries (ledger_id, entry_id, body) VALUES (?, ?, ?) "
    "ON CONFLICT (ledger_id, entry_id) DO UPDATE SET body = excluded.body"
)
_UPSERT_LEDGER = (
    "INSERT INTO ledgers (ledger_id, master_key, fenced, lac_body, limbo) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (ledger_id) DO UPDATE SET master_key = excluded.master_key, fenced = excluded.fenced, "
    "lac_body = excluded.lac_body, limbo = excluded.limbo"
)
# maximal runs of consecutive ids per ledger, computed in C from the (ledger_id, entry_id) index only
_RUNS_QUERY = """
SELECT ledger_id, MIN(entry_id), MAX(entry_id) FROM (
    SELECT ledger_id, entry_id,
           entry_id - ROW_NUMBER() OVER (PARTITION BY ledger_id ORDER BY entry_id) AS island
    FROM entries INDEXED BY entries_by_id
) GROUP BY ledger_id, island ORDER BY ledger_id, 2
"""


class LedgerState(NamedTuple):
    """What a bookie persists about a ledger besides its entries (immutable: replaced, never mutated)."""

    master_key: bytes | None
    fenced: bool
    lac_body: bytes | None
    limbo: bool = False
    """In limbo (BookKeeper's LedgerStorage.setLimboState): the bookie may have lost entries of this ledger,
    so it answers EUNKNOWNLEDGERSTATE wherever it would otherwise say "I have no such entry"."""


class StorageLocked(BookieError):
    """Another process (a running bookie, an admin command) holds the data directory."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__("ELOCKED", f"data directory {data_dir} is in use by another process "
                                    "(is the bookie running?)")


class _Op:
    __slots__ = ("body", "done", "entry_id", "key", "kind", "ledger_id", "recovery")

    def __init__(self, kind: str, ledger_id: int, entry_id: int, key: bytes | None, body: bytes | None,
                 recovery: bool, done: Done) -> None:
        self.kind = kind
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.key = key
        self.body = body
        self.recovery = recovery
        self.done = done


class _Admin:
    """An admin operation run alone by the writer thread (fault injection, ledger deletion, with `reload`
    the storage check's re-read of the index, with `limbo` a limbo change, with `flag` a state flag)."""

    __slots__ = ("entry_ids", "flag", "future", "ledger_id", "limbo", "reload")

    def __init__(self, ledger_id: int, entry_ids: list[int] | None, *, reload: bool = False,
                 limbo: bool | None = None, flag: tuple[str, bool] | None = None) -> None:
        self.ledger_id = ledger_id
        self.entry_ids = entry_ids
        self.reload = reload
        self.limbo = limbo
        self.flag = flag
        self.future: Future[int] = Future()


_STOP = object()


def current_dir(data_dir: str | os.PathLike[str]) -> Path:
    return Path(data_dir) / CURRENT_DIR


def connect_db(path: Path, *, readonly: bool = False, create: bool = True) -> sqlite3.Connection:
    """A connection with the durability settings every bookie connection must use.

    `create` False: fail (sqlite3.OperationalError) rather than create an empty database where the file is
    gone, so a reader of lost storage errs instead of finding an empty bookie.
    """
    target: str | Path = path
    if not create:
        target = f"file:{urllib.parse.quote(str(path))}?mode=rw"
    conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False, timeout=30.0,
                           uri=not create)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")  # WAL + FULL: each COMMIT fsyncs the WAL before returning
    if readonly:
        conn.execute("PRAGMA query_only=1")
    return conn


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
        cur = current_dir(self.data_dir)
        cur.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(cur / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise StorageLocked(self.data_dir) from None
        self.path = cur / DB_NAME
        self._conn = connect_db(self.path)
        self.created = _ensure_schema(self._conn)
        """True when this open created `ledgers.db`'s tables: the storage is brand new (or was wiped)."""
        self._identity = _identity(self.path)
        self._data_version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        self.failed: str | None = None
        """Why the storage is lost (None while intact); every request then fails with EIO."""
        self._ledgers: dict[int, LedgerState] = {}
        self._index: dict[int, LedgerIds] = {}
        self._index_lock = threading.Lock()
        self.listing_cache = ListingCache(listing_cache_bytes)
        self._ledgers, self._index = self._load()
        self._flags = frozenset(row[0] for row in self._conn.execute("SELECT flag FROM storage_state"))
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._pending: list[_Op | _Admin] = []
        self._cv = threading.Condition(threading.Lock())
        self._inflight = 0  # queued + being committed
        self._closed = False
        self._writer = threading.Thread(target=self._writer_loop, name="bookie-storage-writer", daemon=True)
        self._writer.start()

    # -- start-up -----------------------------------------------------------------------------------------
    def _load(self) -> tuple[dict[int, LedgerState], dict[int, LedgerIds]]:
        """Ledger states and the entry index as `ledgers.db` holds them (writer connection)."""
        ledgers: dict[int, LedgerState] = {}
        index: dict[int, LedgerIds] = {}
        for ledger_id, key, fenced, lac_body, limbo in self._conn.execute(
            "SELECT ledger_id, master_key, fenced, lac_body, limbo FROM ledgers"
        ):
            ledgers[ledger_id] = LedgerState(key, bool(fenced), lac_body, bool(limbo))
        current: EntryRuns | None = None
        current_id = None
        for ledger_id, first, last in self._conn.execute(_RUNS_QUERY):
            if ledger_id != current_id:
                current = index[ledger_id] = EntryRuns()
                current_id = ledger_id
            assert current is not None
            current.add_run(first, last)
        for ledger_id, stripings in _stored_stripings(self._conn):
            striped = StripedIds(stripings)
            explicit = index.get(ledger_id)
            if isinstance(explicit, EntryRuns):  # entries written over a bulk load: one mutable index
                for first, last in striped.runs():
                    explicit.add_run(first, last)
            else:
                index[ledger_id] = striped
        log.info("storage %s: %d ledgers, %d with entries", self.path, len(ledgers), len(index))
        return ledgers, index

    # -- mutations (callback style: the service's hot path) -------------------------------------------------
    def submit_add(self, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, recovery: bool,
                   done: Done) -> None:
        """Queue an add; `done(status)` runs on the writer thread once it is durable (or refused)."""
        self._submit(_Op("add", ledger_id, entry_id, master_key, body, recovery, done))

    def submit_fence(self, ledger_id: int, master_key: bytes, done: Done) -> None:
        """Fence a ledger (creating it with `master_key` if unknown); `done` runs once the flag is durable."""
        state = self._ledgers.get(ledger_id)
        if state is not None and state.fenced and state.master_key:  # already durable: answer at once
            done("EOK" if state.master_key == master_key else "EUA")
            return
        self._submit(_Op("fence", ledger_id, -1, master_key, None, False, done))

    def submit_write_lac(self, ledger_id: int, master_key: bytes, body: bytes, done: Done) -> None:
        """Persist an explicit LAC body (WriteLac); `done` runs once durable."""
        self._submit(_Op("lac", ledger_id, -1, master_key, body, False, done))

    def _submit(self, op: _Op) -> None:
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
                        _resolver(fut, ledger_id=ledger_id, entry_id=entry_id))
        return fut

    def fence(self, ledger_id: int, master_key: bytes) -> Future[None]:
        fut: Future[None] = Future()
        self.submit_fence(ledger_id, master_key, _resolver(fut, ledger_id=ledger_id))
        return fut

    def write_lac(self, ledger_id: int, master_key: bytes, body: bytes) -> Future[None]:
        fut: Future[None] = Future()
        self.submit_write_lac(ledger_id, master_key, body, _resolver(fut, ledger_id=ledger_id))
        return fut

    @property
    def pending(self) -> int:
        """Operations queued or being committed (0 once drained)."""
        return self._inflight

    # -- reads (any thread; committed state only) ------------------------------------------------------------
    def ledger_state(self, ledger_id: int) -> LedgerState | None:
        return self._ledgers.get(ledger_id)

    def knows(self, ledger_id: int) -> bool:
        return ledger_id in self._ledgers

    def ledger_ids(self) -> list[int]:
        return sorted(self._ledgers)

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        """The stored entry bytes; entry_id -1 reads the last entry. BookieError ENOLEDGER / ENOENTRY."""
        self._intact(ledger_id)
        if ledger_id not in self._ledgers:
            raise BookieError("ENOLEDGER", ledger_id=ledger_id, entry_id=entry_id)
        if entry_id < 0:
            # the last entry stands for the LAC (getLastEntry): unknowable in limbo, even with entries
            self._unknown_if_limbo(ledger_id, entry_id)
            with self._index_lock:
                runs = self._index.get(ledger_id)
                last = runs.last if runs is not None else None
            if last is None:
                raise BookieError("ENOENTRY", "ledger has no entries", ledger_id=ledger_id, entry_id=entry_id)
            entry_id = last
        row = self._reader().execute(
            "SELECT body FROM entries WHERE ledger_id = ? AND entry_id = ?", (ledger_id, entry_id)
        ).fetchone()
        if row is None:
            if self._reader().execute(_STRIPED_ENTRY, (ledger_id, entry_id, entry_id, entry_id)).fetchone():
                return bulk_body(ledger_id, entry_id)
            self._unknown_if_limbo(ledger_id, entry_id)
            raise BookieError("ENOENTRY", ledger_id=ledger_id, entry_id=entry_id)
        return bytes(row[0])

    def _unknown_if_limbo(self, ledger_id: int, entry_id: int | None = None) -> None:
        """BookKeeper's throwIfLimbo: only a negative answer about a limbo ledger becomes 'unknown'."""
        state = self._ledgers.get(ledger_id)
        if state is not None and state.limbo:
            raise BookieError(UNKNOWN, "ledger is in limbo (data-integrity check pending)",
                              ledger_id=ledger_id, entry_id=entry_id)

    def read_lac(self, ledger_id: int) -> tuple[bytes | None, bytes | None]:
        """(explicit LAC body or None, last entry body or None); ENOLEDGER when the ledger is unknown."""
        state = self._ledgers.get(ledger_id)
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
        with self._index_lock:
            return self._availability(ledger_id)

    def availability_many(self, ledger_ids: Iterable[int]) -> list[tuple[int, bytes | None]]:
        """Availability for many ledgers under one lock acquisition (the batch operation's hot loop)."""
        self._intact()
        with self._index_lock:
            return [(lid, self._availability(lid)) for lid in ledger_ids]

    def listing_items(self, ledger_ids: Iterable[int]) -> list[tuple[int, bytes | None]]:
        """Each ledger's listing as a ready batch item (`listing.ledger_item`; None when unknown), cached."""
        self._intact()
        with self._index_lock:
            cache = self.listing_cache
            out: list[tuple[int, bytes | None]] = []
            for lid in ledger_ids:
                state = self._ledgers.get(lid)
                if state is not None and state.limbo:
                    out.append((lid, unknown_item(lid)))
                    continue
                item = cache.item(lid)
                if item is None:
                    data = self._encode(lid)
                    item = None if data is None else cache.put(lid, data)
                out.append((lid, item))
            return out

    def _availability(self, ledger_id: int) -> bytes | None:
        cache = self.listing_cache
        data = cache.get(ledger_id)
        if data is None:
            data = self._encode(ledger_id)
            if data is not None:
                cache.put(ledger_id, data)
        return data

    def _encode(self, ledger_id: int) -> bytes | None:
        runs = self._index.get(ledger_id)
        if runs is not None:
            return runs.encoded()
        if ledger_id in self._ledgers:
            return _EMPTY_ENCODING
        return None

    def _intact(self, ledger_id: int | None = None) -> None:
        if self.failed is not None:
            raise BookieError("EIO", f"storage lost: {self.failed}", ledger_id=ledger_id)

    def entry_runs(self, ledger_id: int) -> list[tuple[int, int]] | None:
        """The ledger's stored ids as inclusive runs; None when unknown."""
        self._intact(ledger_id)
        with self._index_lock:
            runs = self._index.get(ledger_id)
            if runs is not None:
                return runs.runs()
        return [] if ledger_id in self._ledgers else None

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
        problem = _storage_problem(self.path, self._identity)
        if problem is None and not self._closed:
            try:
                self._admin(_Admin(-1, None, reload=True))
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
        self._admin(_Admin(ledger_id, None, limbo=True))

    def clear_limbo(self, ledger_id: int) -> None:
        """The ledger's state is known again (recovered by the check): negative answers are final again."""
        if self.in_limbo(ledger_id):
            self._admin(_Admin(ledger_id, None, limbo=False))

    def in_limbo(self, ledger_id: int) -> bool:
        state = self._ledgers.get(ledger_id)
        return state is not None and state.limbo

    def limbo_ledgers(self) -> list[int]:
        return sorted(lid for lid, state in self._ledgers.items() if state.limbo)

    def has_entry(self, ledger_id: int, entry_id: int) -> bool:
        """Whether the entry is stored (the index; limbo does not matter)."""
        with self._index_lock:
            runs = self._index.get(ledger_id)
            return runs is not None and entry_id in runs

    def set_flag(self, flag: str, on: bool) -> None:
        """Set or clear a durable storage state flag (NEEDS_INTEGRITY_CHECK)."""
        if (flag in self._flags) != on:
            self._admin(_Admin(-1, None, flag=(flag, on)))

    @property
    def flags(self) -> frozenset[str]:
        return self._flags

    # -- admin (fault injection by tests; ledger deletion) ---------------------------------------------------
    def delete_entries(self, ledger_id: int, entry_ids: Iterable[int]) -> int:
        """Durably remove entries (tests inject holes with this); returns how many existed."""
        return self._admin(_Admin(ledger_id, sorted(set(entry_ids))))

    def delete_ledger(self, ledger_id: int) -> int:
        """Durably remove a ledger, its state and all its entries; returns the number of entries removed."""
        return self._admin(_Admin(ledger_id, None))

    def _admin(self, op: _Admin) -> int:
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
            ops: list[_Op] = []
            stop = False
            for item in batch:
                if item is _STOP:
                    stop = True
                elif isinstance(item, _Admin):
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

    def _commit(self, ops: list[_Op]) -> None:
        if not ops:
            return
        overlay: dict[int, LedgerState] = {}
        rows: list[tuple[int, int, bytes]] = []
        statuses = [self._apply(op, overlay, rows) for op in ops]
        if rows or overlay:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                if rows:
                    self._conn.executemany(_UPSERT_ENTRY, rows)
                if overlay:
                    self._conn.executemany(_UPSERT_LEDGER, [
                        (lid, st.master_key, int(st.fenced), st.lac_body, int(st.limbo))
                        for lid, st in overlay.items()
                    ])
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                log.error("storage commit of %d operations failed: %s", len(ops), exc)
                _rollback(self._conn)
                statuses = ["EIO" if s == "EOK" else s for s in statuses]
                overlay, rows = {}, []
        # publish the committed state, then acknowledge
        self._ledgers.update(overlay)
        if rows or overlay:
            with self._index_lock:
                index = self._index
                invalidate = self.listing_cache.invalidate
                for ledger_id in overlay:
                    invalidate(ledger_id)
                for ledger_id, entry_id, _ in rows:
                    runs = index.get(ledger_id)
                    if runs is None:
                        runs = index[ledger_id] = EntryRuns()
                    elif isinstance(runs, StripedIds):  # stripings stay in SQLite; the index turns mutable
                        runs = index[ledger_id] = runs.materialized()
                    runs.add(entry_id)
                    invalidate(ledger_id)
        with self._cv:
            self._inflight -= len(ops)
        for op, status in zip(ops, statuses, strict=True):
            try:
                op.done(status)
            except Exception:  # a broken callback must not kill the writer
                log.exception("storage completion callback failed")

    def _apply(self, op: _Op, overlay: dict[int, LedgerState], rows: list[tuple[int, int, bytes]]) -> str:
        """Validate one operation against durable + batch state; stage its writes; return its status."""
        lid = op.ledger_id
        state = overlay.get(lid)
        if state is None:
            state = self._ledgers.get(lid)
        if state is None:
            state = overlay[lid] = LedgerState(op.key, False, None)
        elif not state.master_key and op.key:
            # created without a key by the data-integrity check: the first real key is adopted, as
            # BookKeeper's LedgerMetadataIndex.setMasterKey replaces an all-zero stored key
            state = overlay[lid] = state._replace(master_key=op.key)
        elif state.master_key != op.key:
            return "EUA"
        if op.kind == "add":
            if state.fenced and not op.recovery:
                return "EFENCED"
            assert op.body is not None
            rows.append((lid, op.entry_id, op.body))
        elif op.kind == "fence":
            if not state.fenced:
                overlay[lid] = state._replace(fenced=True)
        else:  # explicit LAC
            overlay[lid] = state._replace(lac_body=op.body)
        return "EOK"

    def _reload_if_changed(self, op: _Admin) -> None:
        """The check's second half, on the writer thread: reload the index if another connection committed."""
        try:
            version = self._conn.execute("PRAGMA data_version").fetchone()[0]
            changed = version != self._data_version
            if changed:
                log.warning("%s was changed by another process: reloading the entry index", self.path)
                ledgers, index = self._load()
                with self._index_lock:
                    self._ledgers, self._index = ledgers, index
                    self.listing_cache.clear()
                self._data_version = version
        except sqlite3.Error as exc:
            op.future.set_exception(BookieError("EIO", str(exc)))
        else:
            op.future.set_result(int(changed))
        finally:
            with self._cv:
                self._inflight -= 1

    def _run_admin(self, op: _Admin) -> None:
        if op.reload:
            self._reload_if_changed(op)
            return
        if op.limbo is not None or op.flag is not None:
            self._run_state_change(op)
            return
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            _materialize_stripings(conn, op.ledger_id)  # striped ids are counted and deleted as rows
            if op.entry_ids is None:
                cur = conn.execute("DELETE FROM entries WHERE ledger_id = ?", (op.ledger_id,))
                conn.execute("DELETE FROM ledgers WHERE ledger_id = ?", (op.ledger_id,))
            else:
                cur = conn.executemany("DELETE FROM entries WHERE ledger_id = ? AND entry_id = ?",
                                       [(op.ledger_id, e) for e in op.entry_ids])
            removed = cur.rowcount
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(conn)
            op.future.set_exception(BookieError("EIO", str(exc), ledger_id=op.ledger_id))
        else:
            with self._index_lock:
                self.listing_cache.invalidate(op.ledger_id)
                if op.entry_ids is None:
                    self._ledgers.pop(op.ledger_id, None)
                    self._index.pop(op.ledger_id, None)
                else:
                    runs = EntryRuns()
                    for (first, last) in self._ledger_runs(op.ledger_id):
                        runs.add_run(first, last)
                    self._index[op.ledger_id] = runs
            op.future.set_result(removed)
        finally:
            with self._cv:
                self._inflight -= 1

    def _run_state_change(self, op: _Admin) -> None:
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
                old = self._ledgers.get(op.ledger_id) or LedgerState(b"", False, None)
                state = old._replace(limbo=True, fenced=True) if op.limbo else old._replace(limbo=False)
                conn.execute(_UPSERT_LEDGER, (op.ledger_id, state.master_key, int(state.fenced),
                                              state.lac_body, int(state.limbo)))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(conn)
            op.future.set_exception(BookieError("EIO", str(exc), ledger_id=op.ledger_id))
        else:
            if op.flag is not None:
                flag, on = op.flag
                self._flags = self._flags | {flag} if on else self._flags - {flag}
            elif state is not None:
                with self._index_lock:
                    self._ledgers[op.ledger_id] = state
                    self.listing_cache.invalidate(op.ledger_id)
            op.future.set_result(1)
        finally:
            with self._cv:
                self._inflight -= 1

    def _ledger_runs(self, ledger_id: int) -> list[tuple[int, int]]:
        query = _RUNS_QUERY.replace("FROM entries INDEXED BY entries_by_id",
                                    "FROM entries INDEXED BY entries_by_id WHERE ledger_id = ?")
        return [(first, last) for _, first, last in self._conn.execute(query, (ledger_id,))]

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


_EMPTY_ENCODING = EntryRuns().encoded()


def _ensure_schema(conn: sqlite3.Connection) -> bool:
    """Create the tables (or add the limbo column to an older file); True when there were none before."""
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ledgers'").fetchone()
    new = found is None
    conn.executescript(_SCHEMA)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(ledgers)")}
    if "limbo" not in columns:
        conn.execute(_LIMBO_COLUMN)
    return new


def _identity(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _storage_problem(path: Path, identity: tuple[int, int]) -> str | None:
    """What BookKeeper's DiskChecker.checkDir verifies of a ledger directory (exists, is a directory,
    readable, writable), without re-creating a missing one (that would hide the loss), plus: `ledgers.db` is
    still the file the storage opened and starts with SQLite's header."""
    directory = path.parent
    if not directory.is_dir():
        return f"ledger directory {directory} is gone"
    if not os.access(directory, os.R_OK | os.W_OK | os.X_OK):
        return f"ledger directory {directory} is not readable and writable"
    try:
        if _identity(path) != identity:
            return f"{path} was replaced by another file"
        with open(path, "rb") as f:
            header = f.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return f"{path} was deleted"
    except OSError as exc:
        return f"{path} cannot be read: {exc}"
    if header != SQLITE_HEADER:
        return f"{path} does not start with SQLite's header (overwritten or corrupt)"
    probe = directory / f".disk-check-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return f"cannot write in ledger directory {directory}: {exc}"
    return None


def _resolver(fut: Future[None], *, ledger_id: int, entry_id: int | None = None) -> Done:
    def done(status: str) -> None:
        if status == "EOK":
            fut.set_result(None)
        else:
            fut.set_exception(BookieError(status, ledger_id=ledger_id, entry_id=entry_id))

    return done


# -- bulk load for benchmarks --------------------------------------------------------------------------------
_HEADER = struct.Struct(">qqqq")
# SHA1("ledger" + ""): the master key of the empty password
BULK_MASTER_KEY = bytes.fromhex("850bf1071c5e3d8c24235676f8816ae0cbe2f14f")
_STRIPINGS_QUERY = "SELECT ledger_id, first, last, start, period, size FROM stripings"
# is the entry in one of its ledger's stripings (SQLite's % keeps the dividend's sign, hence the + period)
_STRIPED_ENTRY = ("SELECT 1 FROM stripings WHERE ledger_id = ? AND first <= ? AND last >= ? "
                  "AND ((? - start) % period + period) % period < size LIMIT 1")


def bulk_body(ledger_id: int, entry_id: int) -> bytes:
    """The entry a bulk load stores: `ledgerId | entryId | LAC | length`, DUMMY digest, empty payload."""
    return _HEADER.pack(ledger_id, entry_id, entry_id - 1, 0)


def _stored_stripings(conn: sqlite3.Connection,
                      ledger_id: int | None = None) -> Iterable[tuple[int, list[Striping]]]:
    """(ledger, its stripings) from the `stripings` table; a row no Striping can be is lost storage."""
    sql = _STRIPINGS_QUERY + (" WHERE ledger_id = ?" if ledger_id is not None else "") + " ORDER BY ledger_id"
    current: list[Striping] = []
    current_id: int | None = None
    for lid, first, last, start, period, size in conn.execute(sql, () if ledger_id is None else (ledger_id,)):
        if lid != current_id:
            if current_id is not None:
                yield current_id, current
            current, current_id = [], lid
        try:
            current.append(Striping(first=first, last=last, start=start, period=period, size=size))
        except QuorumError as exc:
            raise sqlite3.DatabaseError(f"ledger {lid}: corrupt striping row: {exc}") from exc
    if current_id is not None:
        yield current_id, current


def _materialize_stripings(conn: sqlite3.Connection, ledger_id: int) -> None:
    """Within the caller's transaction: a ledger's striped entries become entry rows (explicit rows win)."""
    for lid, stripings in _stored_stripings(conn, ledger_id):
        conn.executemany(
            "INSERT OR IGNORE INTO entries (ledger_id, entry_id, body) VALUES (?, ?, ?)",
            ((lid, e, bulk_body(lid, e)) for e in StripedIds(stripings)),
        )
    conn.execute("DELETE FROM stripings WHERE ledger_id = ?", (ledger_id,))


def bulk_load_stripings(data_dir: str | os.PathLike[str],
                        ledgers: Iterable[tuple[int, Iterable[Striping]]],
                        *, master_key: bytes = BULK_MASTER_KEY, chunk: int = 200_000) -> int:
    """Store index-only entries for many ledgers as stripings (benchmarks): one row per striping.

    The entries are those `bulk_load_index` would write for the same ids (`bulk_body`, synthesised on
    read), but a 50,000-entry E3/WQ2 ledger is one row per segment instead of ~33,000, so a million
    realistic ledgers fit this machine. Listings, reads, deletions and restarts see them as stored entries;
    deleting some of a striped ledger's entries first turns its stripings into entry rows. Returns the
    number of entries stored.
    """
    total = 0
    with _bulk_connection(data_dir) as conn:
        ledger_rows: list[tuple[int, bytes, int, None, int]] = []
        batch: list[tuple[int, int, int, int, int, int]] = []
        for lid, stripings in ledgers:
            ledger_rows.append((lid, master_key, 0, None, 0))
            for st in stripings:
                total += st.count()
                batch.append((lid, st.first, st.last, st.start, st.period, st.size))
            if len(batch) >= chunk:
                _insert_stripings(conn, batch, ledger_rows)
                batch, ledger_rows = [], []
        _insert_stripings(conn, batch, ledger_rows)
    return total


def _insert_stripings(conn: sqlite3.Connection, rows: list[tuple[int, int, int, int, int, int]],
                      ledger_rows: list[tuple[int, bytes, int, None, int]]) -> None:
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO stripings (ledger_id, first, last, start, period, size) "
                     "VALUES (?, ?, ?, ?, ?, ?)", rows)
    conn.executemany(_UPSERT_LEDGER, ledger_rows)
    conn.execute("COMMIT")


def bulk_load_index(data_dir: str | os.PathLike[str],
                    ledgers: Iterable[tuple[int, Iterable[tuple[int, int]]]],
                    *, master_key: bytes = BULK_MASTER_KEY, chunk: int = 200_000) -> int:
    """Write entries for many ledgers fast (benchmarks): tiny DUMMY-digest entries for each inclusive run.

    Each body is a valid entry (`ledgerId | entryId | LAC | length`, DUMMY digest, empty payload). Loaded as
    `bulk_load_entries` loads; returns the number of entries written.
    """
    def bodies(ledger_id: int, runs: Iterable[tuple[int, int]]) -> Iterable[tuple[int, bytes]]:
        for first, last in runs:
            for e in range(first, last + 1):
                yield e, bulk_body(ledger_id, e)

    return bulk_load_entries(data_dir, ((lid, bodies(lid, runs)) for lid, runs in ledgers),
                             master_key=master_key, chunk=chunk)


def bulk_load_entries(data_dir: str | os.PathLike[str],
                      ledgers: Iterable[tuple[int, Iterable[tuple[int, bytes]]]],
                      *, master_key: bytes = BULK_MASTER_KEY, chunk: int = 200_000) -> int:
    """Write given entry bodies for many ledgers fast (benchmarks): `(ledger_id, [(entry_id, body), ...])`.

    The bodies are stored as given (callers package them with `formats.entry.DigestManager`), every ledger is
    recorded with `master_key`, unfenced. The data directory must not be in use (the directory lock is taken).
    Commits every `chunk` rows with `synchronous=OFF` (a crash mid-load only loses the load, which is then
    re-run) and returns the number of entries written; the final checkpoint leaves a normal WAL database.
    """
    with _bulk_connection(data_dir) as conn:
        total = 0
        rows: list[tuple[int, int, bytes]] = []
        ledger_rows: list[tuple[int, bytes, int, None, int]] = []
        conn.execute("BEGIN")
        for ledger_id, entries in ledgers:
            ledger_rows.append((ledger_id, master_key, 0, None, 0))
            rows.extend((ledger_id, e, body) for e, body in entries)
            if len(rows) >= chunk:
                conn.executemany(_UPSERT_ENTRY, rows)
                conn.executemany(_UPSERT_LEDGER, ledger_rows)
                total += len(rows)
                rows, ledger_rows = [], []
                conn.execute("COMMIT")
                conn.execute("BEGIN")
        conn.executemany(_UPSERT_ENTRY, rows)
        conn.executemany(_UPSERT_LEDGER, ledger_rows)
        total += len(rows)
        conn.execute("COMMIT")
    return total


@contextlib.contextmanager
def _bulk_connection(data_dir: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
    """The writer connection of a bulk load: directory lock held, `synchronous=OFF` (a crash mid-load only
    loses the load, which is then re-run), a normal WAL database with a truncated WAL afterwards."""
    cur = current_dir(data_dir)
    cur.mkdir(parents=True, exist_ok=True)
    fd = os.open(cur / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StorageLocked(Path(data_dir)) from None
        conn = connect_db(cur / DB_NAME)
        try:
            _ensure_schema(conn)
            conn.execute("PRAGMA synchronous=OFF")
            yield conn
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
    finally:
        os.close(fd)


def _rollback(conn: sqlite3.Connection) -> None:
    """Undo a failed transaction; a connection too broken to roll back has nothing to undo."""
    with contextlib.suppress(sqlite3.Error):
        conn.execute("ROLLBACK")
