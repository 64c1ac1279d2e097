"""The files of a bookie's storage: `<data_dir>/current/ledgers.db` (SQLite, WAL), its schema and its lock.

Everything that knows the tables lives here, so the storage (bkaudit.bookie.storage), its bulk loads
(bkaudit.bookie.bulkload) and its check (bkaudit.bookie.storage_check) agree on one layout. Bulk-loaded
ledgers may keep their entries as stripings (one row per segment) instead of entry rows: their bodies are
synthesised on read (`bulk_body`) and become rows when some of the ledger's entries are deleted.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import struct
import urllib.parse
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from bkaudit.bookie.runs import StripedIds
from bkaudit.errors import BookieError, QuorumError
from bkaudit.model.quorum import Striping

DB_NAME = "ledgers.db"
LOCK_NAME = "LOCK"
CURRENT_DIR = "current"

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
# BookKeeper's last write wins when an entry is written twice (recovery write-back, re-replication)
UPSERT_ENTRY = (
    "INSERT INTO entries (ledger_id, entry_id, body) VALUES (?, ?, ?) "
    "ON CONFLICT (ledger_id, entry_id) DO UPDATE SET body = excluded.body"
)
UPSERT_LEDGER = (
    "INSERT INTO ledgers (ledger_id, master_key, fenced, lac_body, limbo) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (ledger_id) DO UPDATE SET master_key = excluded.master_key, fenced = excluded.fenced, "
    "lac_body = excluded.lac_body, limbo = excluded.limbo"
)
# maximal runs of consecutive ids per ledger, computed in C from the (ledger_id, entry_id) index only
RUNS_QUERY = """
SELECT ledger_id, MIN(entry_id), MAX(entry_id) FROM (
    SELECT ledger_id, entry_id,
           entry_id - ROW_NUMBER() OVER (PARTITION BY ledger_id ORDER BY entry_id) AS island
    FROM entries INDEXED BY entries_by_id
) GROUP BY ledger_id, island ORDER BY ledger_id, 2
"""
_HEADER = struct.Struct(">qqqq")
_STRIPINGS_QUERY = "SELECT ledger_id, first, last, start, period, size FROM stripings"
# is the entry in one of its ledger's stripings (SQLite's % keeps the dividend's sign, hence the + period)
STRIPED_ENTRY = ("SELECT 1 FROM stripings WHERE ledger_id = ? AND first <= ? AND last >= ? "
                 "AND ((? - start) % period + period) % period < size LIMIT 1")


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


def current_dir(data_dir: str | os.PathLike[str]) -> Path:
    return Path(data_dir) / CURRENT_DIR


def lock_directory(data_dir: str | os.PathLike[str]) -> int:
    """Create `<data_dir>/current` if needed and lock it exclusively: the descriptor holding the lock
    (closing it releases the lock), so a running bookie and an admin command never write the same file."""
    cur = current_dir(data_dir)
    cur.mkdir(parents=True, exist_ok=True)
    fd = os.open(cur / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StorageLocked(Path(data_dir)) from None
    return fd


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


def ensure_schema(conn: sqlite3.Connection) -> bool:
    """Create the tables (or add the limbo column to an older file); True when there were none before."""
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ledgers'").fetchone()
    new = found is None
    conn.executescript(_SCHEMA)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(ledgers)")}
    if "limbo" not in columns:
        conn.execute(_LIMBO_COLUMN)
    return new


def rollback(conn: sqlite3.Connection) -> None:
    """Undo a failed transaction; a connection too broken to roll back has nothing to undo."""
    with contextlib.suppress(sqlite3.Error):
        conn.execute("ROLLBACK")


def ledger_runs(conn: sqlite3.Connection, ledger_id: int) -> Iterator[tuple[int, int]]:
    """One ledger's stored entry rows as inclusive runs (stripings not included), queried as iterated."""
    query = RUNS_QUERY.replace("FROM entries INDEXED BY entries_by_id",
                               "FROM entries INDEXED BY entries_by_id WHERE ledger_id = ?")
    for _, first, last in conn.execute(query, (ledger_id,)):
        yield first, last


def bulk_body(ledger_id: int, entry_id: int) -> bytes:
    """The entry a bulk load stores: `ledgerId | entryId | LAC | length`, DUMMY digest, empty payload."""
    return _HEADER.pack(ledger_id, entry_id, entry_id - 1, 0)


def stored_stripings(conn: sqlite3.Connection,
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


def materialize_stripings(conn: sqlite3.Connection, ledger_id: int) -> None:
    """Within the caller's transaction: a ledger's striped entries become entry rows (explicit rows win)."""
    for lid, stripings in stored_stripings(conn, ledger_id):
        conn.executemany(
            "INSERT OR IGNORE INTO entries (ledger_id, entry_id, body) VALUES (?, ?, ?)",
            ((lid, e, bulk_body(lid, e)) for e in StripedIds(stripings)),
        )
    conn.execute("DELETE FROM stripings WHERE ledger_id = ?", (ledger_id,))
