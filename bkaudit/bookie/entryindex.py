"""The storage's committed state in memory: each ledger's `LedgerState` and stored entry ids, and the listing
cache of their encodings (see bkaudit.bookie.storage for who changes it and when).

Listing a ledger must not read a body, so the ids live here as runs per ledger (`EntryRuns`), rebuilt at
start-up from SQLite's covering index alone (`load`: a gaps-and-islands window query). Readers on any thread
take `lock` for the ids and the cache; only the storage's writer thread changes them, after its commits,
and every change drops the ledger's cached encoding.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable

from bkaudit.bookie.ledgerdb import RUNS_QUERY, LedgerState, stored_stripings
from bkaudit.bookie.listing import ListingCache, unknown_item
from bkaudit.bookie.runs import EntryRuns, LedgerIds, StripedIds

_EMPTY_ENCODING = EntryRuns().encoded()


def load(conn: sqlite3.Connection) -> tuple[dict[int, LedgerState], dict[int, LedgerIds]]:
    """Ledger states and the entry index as `ledgers.db` holds them."""
    ledgers: dict[int, LedgerState] = {}
    index: dict[int, LedgerIds] = {}
    for ledger_id, key, fenced, lac_body, limbo in conn.execute(
        "SELECT ledger_id, master_key, fenced, lac_body, limbo FROM ledgers"
    ):
        ledgers[ledger_id] = LedgerState(key, bool(fenced), lac_body, bool(limbo))
    current: EntryRuns | None = None
    current_id = None
    for ledger_id, first, last in conn.execute(RUNS_QUERY):
        if ledger_id != current_id:
            current = index[ledger_id] = EntryRuns()
            current_id = ledger_id
        assert current is not None
        current.add_run(first, last)
    for ledger_id, stripings in stored_stripings(conn):
        striped = StripedIds(stripings)
        explicit = index.get(ledger_id)
        if isinstance(explicit, EntryRuns):  # entries written over a bulk load: one mutable index
            for first, last in striped.runs():
                explicit.add_run(first, last)
        else:
            index[ledger_id] = striped
    return ledgers, index


class EntryIndex:
    """Ledger states (`ledgers`, read without the lock: replaced, never mutated in place) and entry ids."""

    def __init__(self, ledgers: dict[int, LedgerState], index: dict[int, LedgerIds], *,
                 listing_cache: ListingCache) -> None:
        self.ledgers = ledgers
        self.ids = index
        self.lock = threading.Lock()
        self.listing_cache = listing_cache

    # -- reads (any thread) ----------------------------------------------------------------------------------
    def last_entry(self, ledger_id: int) -> int | None:
        with self.lock:
            runs = self.ids.get(ledger_id)
            return runs.last if runs is not None else None

    def availability(self, ledger_id: int) -> bytes | None:
        with self.lock:
            return self._availability(ledger_id)

    def availability_many(self, ledger_ids: Iterable[int]) -> list[tuple[int, bytes | None]]:
        with self.lock:
            return [(lid, self._availability(lid)) for lid in ledger_ids]

    def listing_items(self, ledger_ids: Iterable[int]) -> list[tuple[int, bytes | None]]:
        with self.lock:
            cache = self.listing_cache
            out: list[tuple[int, bytes | None]] = []
            for lid in ledger_ids:
                state = self.ledgers.get(lid)
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
        runs = self.ids.get(ledger_id)
        if runs is not None:
            return runs.encoded()
        if ledger_id in self.ledgers:
            return _EMPTY_ENCODING
        return None

    def entry_runs(self, ledger_id: int) -> list[tuple[int, int]] | None:
        with self.lock:
            runs = self.ids.get(ledger_id)
            if runs is not None:
                return runs.runs()
        return [] if ledger_id in self.ledgers else None

    def has_entry(self, ledger_id: int, entry_id: int) -> bool:
        with self.lock:
            runs = self.ids.get(ledger_id)
            return runs is not None and entry_id in runs

    # -- changes (the writer thread, after a commit) ---------------------------------------------------------
    def publish(self, overlay: dict[int, LedgerState], rows: list[tuple[int, int, bytes]]) -> None:
        """A committed batch: its new ledger states and its entry rows."""
        self.ledgers.update(overlay)
        if rows or overlay:
            with self.lock:
                index = self.ids
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

    def replace(self, ledgers: dict[int, LedgerState], index: dict[int, LedgerIds]) -> None:
        """Everything reloaded from disk (another connection changed the file)."""
        with self.lock:
            self.ledgers, self.ids = ledgers, index
            self.listing_cache.clear()

    def remove_ledger(self, ledger_id: int) -> None:
        with self.lock:
            self.listing_cache.invalidate(ledger_id)
            self.ledgers.pop(ledger_id, None)
            self.ids.pop(ledger_id, None)

    def set_runs(self, ledger_id: int, runs: Iterable[tuple[int, int]]) -> None:
        """The ledger's ids after some were deleted (as the file now holds them)."""
        with self.lock:
            self.listing_cache.invalidate(ledger_id)
            ids = EntryRuns()
            for (first, last) in runs:
                ids.add_run(first, last)
            self.ids[ledger_id] = ids

    def set_state(self, ledger_id: int, state: LedgerState) -> None:
        with self.lock:
            self.ledgers[ledger_id] = state
            self.listing_cache.invalidate(ledger_id)
