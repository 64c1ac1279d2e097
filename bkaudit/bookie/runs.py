"""The in-memory entry index of one ledger: its stored entry ids as sorted, disjoint, inclusive runs.

GetListOfEntriesOfLedger must answer without touching entry bodies (the checker asks about every ledger of a
bookie), so each ledger keeps its ids as runs; the encoded AvailabilityOfEntriesOfLedger bytes are cached,
bounded, by the storage (bkaudit.bookie.listing.ListingCache). Writers append ids almost always in order, so
the common add is O(1); an out-of-order id (a
recovery write-back, a re-replicated hole) costs one bisect.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator

import numpy as np

from bkaudit.formats.availability import (
    VECTOR_MIN_RUNS,
    encode_runs,
    encode_segment_stripings,
    encode_separated_run_arrays,
)
from bkaudit.model.quorum import Striping, union_run_arrays


class EntryRuns:
    """Sorted disjoint inclusive runs of entry ids, runs never touching (two parallel int64 arrays: `bisect`
    works on the starts, and the listing encodes them with numpy without converting a Python list)."""

    __slots__ = ("ends", "starts")

    def __init__(self, runs: Iterable[tuple[int, int]] = ()) -> None:
        self.starts = array("q")
        self.ends = array("q")
        for first, last in runs:
            self.add_run(first, last)

    def add(self, entry_id: int) -> None:
        """Record one stored id (already present ids are ignored)."""
        starts, ends = self.starts, self.ends
        if ends:
            last = ends[-1]
            if entry_id == last + 1:
                ends[-1] = entry_id
                return
            if entry_id <= last:
                self._insert(entry_id)
                return
        starts.append(entry_id)
        ends.append(entry_id)

    def add_run(self, first: int, last: int) -> None:
        """Record the ids first..last (used when loading runs computed by SQLite)."""
        if last < first:
            return
        starts, ends = self.starts, self.ends
        if not ends or first > ends[-1] + 1:
            starts.append(first)
            ends.append(last)
            return
        # merge with every run that overlaps or touches [first, last]
        lo = bisect_right(ends, first - 2)  # first run whose end >= first - 1
        hi = bisect_right(starts, last + 1)  # runs [lo, hi) touch the new run
        if lo < hi:
            first = min(first, starts[lo])
            last = max(last, ends[hi - 1])
        starts[lo:hi] = array("q", (first,))
        ends[lo:hi] = array("q", (last,))

    def _insert(self, entry_id: int) -> None:
        starts, ends = self.starts, self.ends
        i = bisect_right(starts, entry_id) - 1
        if i >= 0 and entry_id <= ends[i]:
            return
        left = i >= 0 and ends[i] == entry_id - 1
        right = i + 1 < len(starts) and starts[i + 1] == entry_id + 1
        if left and right:
            ends[i] = ends[i + 1]
            del starts[i + 1], ends[i + 1]
        elif left:
            ends[i] = entry_id
        elif right:
            starts[i + 1] = entry_id
        else:
            starts.insert(i + 1, entry_id)
            ends.insert(i + 1, entry_id)

    def __contains__(self, entry_id: object) -> bool:
        if not isinstance(entry_id, int):
            return False
        i = bisect_right(self.starts, entry_id) - 1
        return i >= 0 and entry_id <= self.ends[i]

    def __iter__(self) -> Iterator[int]:
        for first, last in zip(self.starts, self.ends, strict=True):
            yield from range(first, last + 1)

    def runs(self) -> list[tuple[int, int]]:
        return list(zip(self.starts, self.ends, strict=True))

    @property
    def last(self) -> int | None:
        """The highest stored id (the entry a LAC read, entry -1, returns)."""
        return self.ends[-1] if self.ends else None

    def count(self) -> int:
        return sum(e - s + 1 for s, e in zip(self.starts, self.ends, strict=True))

    def encoded(self) -> bytes:
        """AvailabilityOfEntriesOfLedger bytes (not cached here: see bkaudit.bookie.listing)."""
        if len(self.starts) >= VECTOR_MIN_RUNS:
            return encode_separated_run_arrays(
                np.frombuffer(self.starts, dtype=np.int64), np.frombuffer(self.ends, dtype=np.int64)
            )
        return encode_runs(self.runs())


class StripedIds:
    """A ledger's stored ids given as stripings (bulk-loaded index-only entries), read-only.

    A striped ledger of 50,000 entries is one `Striping` per segment here instead of ~17,000 runs, so a
    bookie can hold a million such ledgers. Its answers are those of the runs it stands for: `runs()` and
    `encoded()` give the maximal runs of the union (runs touching across a segment boundary merged), the
    bytes a per-entry index of the same ids would give. The storage turns it into `EntryRuns` before the
    ledger's ids change.
    """

    __slots__ = ("last", "stripings")

    def __init__(self, stripings: Iterable[Striping]) -> None:
        self.stripings = tuple(s for s in stripings if s.last >= s.first and s.count())
        self.last: int | None = max((_last_id(s) for s in self.stripings), default=None)
        """The highest stored id (the entry a LAC read, entry -1, returns)."""

    def __contains__(self, entry_id: object) -> bool:
        return any(entry_id in s for s in self.stripings)

    def __iter__(self) -> Iterator[int]:
        for first, last in self.runs():
            yield from range(first, last + 1)

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return union_run_arrays(self.stripings)

    def runs(self) -> list[tuple[int, int]]:
        firsts, lasts = self._arrays()
        return list(zip(firsts.tolist(), lasts.tolist(), strict=True))

    def count(self) -> int:
        firsts, lasts = self._arrays()
        return int((lasts - firsts + 1).sum())

    def encoded(self) -> bytes:
        return encode_segment_stripings(self.stripings)

    def materialized(self) -> EntryRuns:
        """The same ids as a mutable `EntryRuns`."""
        return EntryRuns(self.runs())


def _last_id(s: Striping) -> int:
    """The highest id of a non-empty striping."""
    x = s.last
    while x not in s:  # at most period - size steps back
        x -= 1
    return x


LedgerIds = EntryRuns | StripedIds
"""What the storage's in-memory index holds for one ledger."""
