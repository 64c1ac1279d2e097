"""Bulk loads of a bookie's storage for benchmarks: many ledgers written straight into `ledgers.db`.

A load bypasses the bookie (no group commit, `synchronous=OFF`) but takes the data directory's lock, so it
can never run under a live bookie; what it leaves is a normal WAL database the storage opens as any other.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterable, Iterator

from bkaudit.bookie.ledgerdb import (
    DB_NAME,
    UPSERT_ENTRY,
    UPSERT_LEDGER,
    bulk_body,
    connect_db,
    current_dir,
    ensure_schema,
    lock_directory,
)
from bkaudit.model.quorum import Striping

# SHA1("ledger" + ""): the master key of the empty password
BULK_MASTER_KEY = bytes.fromhex("850bf1071c5e3d8c24235676f8816ae0cbe2f14f")


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
    conn.executemany(UPSERT_LEDGER, ledger_rows)
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
                conn.executemany(UPSERT_ENTRY, rows)
                conn.executemany(UPSERT_LEDGER, ledger_rows)
                total += len(rows)
                rows, ledger_rows = [], []
                conn.execute("COMMIT")
                conn.execute("BEGIN")
        conn.executemany(UPSERT_ENTRY, rows)
        conn.executemany(UPSERT_LEDGER, ledger_rows)
        total += len(rows)
        conn.execute("COMMIT")
    return total


@contextlib.contextmanager
def _bulk_connection(data_dir: str | os.PathLike[str]) -> Iterator[sqlite3.Connection]:
    """The writer connection of a bulk load: directory lock held, `synchronous=OFF` (a crash mid-load only
    loses the load, which is then re-run), a normal WAL database with a truncated WAL afterwards."""
    fd = lock_directory(data_dir)
    try:
        conn = connect_db(current_dir(data_dir) / DB_NAME)
        try:
            ensure_schema(conn)
            conn.execute("PRAGMA synchronous=OFF")
            yield conn
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
    finally:
        os.close(fd)
