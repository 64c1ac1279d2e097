"""Quorum math shared by the client, bookie, auditor, replication worker and Spark checks.

BookKeeper stripes entries round robin: entry `e` of a segment with ensemble size E and write quorum WQ is
written to bookie indexes (e mod E), (e+1 mod E), ... (e+WQ-1 mod E). Everything here is arithmetic, never a
per-entry loop, because ledgers hold millions of entries.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from bkaudit.errors import QuorumError


def validate_quorum(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    """Raise QuorumError unless E >= WQ >= AQ >= 1 (the protocol's creation invariant)."""
    if not (ensemble_size >= write_quorum >= ack_quorum >= 1):
        raise QuorumError(
            f"quorum sizes must satisfy ensemble_size >= write_quorum >= ack_quorum >= 1, "
            f"got E={ensemble_size} WQ={write_quorum} AQ={ack_quorum}"
        )


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> tuple[int, ...]:
    """Bookie indexes (into the segment's ensemble) that store `entry_id`, in write order."""
    start = entry_id % ensemble_size
    return tuple((start + j) % ensemble_size for j in range(write_quorum))


def stores_entry(bookie_index: int, entry_id: int, ensemble_size: int, write_quorum: int) -> bool:
    """True when bookie index `bookie_index` is in the write set of `entry_id`.

    The same rule as BookKeeper's RoundRobinDistributionSchedule, in O(1).
    """
    return (bookie_index - entry_id) % ensemble_size < write_quorum


@dataclass(frozen=True, slots=True)
class Striping:
    """The entries in [first, last] whose offset from `start` modulo `period` is below `size`.

    That is the exact shape of a BP-34 SequenceGroup: runs of `size` consecutive ids every `period` ids.
    `last` may be below `first` for an empty range. `period == size` means every id in the range.
    """

    first: int
    last: int
    start: int
    period: int
    size: int

    def __post_init__(self) -> None:
        if self.period < 1 or not (1 <= self.size <= self.period):
            raise QuorumError(f"invalid striping period={self.period} size={self.size}")

    def __contains__(self, entry_id: object) -> bool:
        if not isinstance(entry_id, int) or not (self.first <= entry_id <= self.last):
            return False
        return (entry_id - self.start) % self.period < self.size

    def runs(self) -> Iterator[tuple[int, int]]:
        """Yield maximal (run_first, run_last) inclusive runs of stored ids, ascending; O(runs)."""
        if self.last < self.first:
            return
        if self.size == self.period:
            yield (self.first, self.last)
            return
        # first run start at or before `first`
        run_start = self.first - ((self.first - self.start) % self.period)
        while run_start <= self.last:
            lo = max(run_start, self.first)
            hi = min(run_start + self.size - 1, self.last)
            if lo <= hi:
                yield (lo, hi)
            run_start += self.period

    def first_run_start(self) -> int:
        """Start of the first run that meets [first, last] (it may begin before `first`); O(1)."""
        start = self.first - ((self.first - self.start) % self.period)  # the run at or before `first` ...
        return start if start + self.size > self.first else start + self.period  # ... or, ended, the next

    def run_count(self) -> int:
        """Number of maximal runs `runs()` yields, in O(1) (the groups of its BP-34 encoding)."""
        if self.last < self.first:
            return 0
        if self.size == self.period:
            return 1
        # run starts r = start (mod period) whose run [r, r + size - 1] meets [first, last]
        return (self.last - self.start) // self.period - (self.first - self.size - self.start) // self.period

    def last_held(self) -> int | None:
        """The highest id in the striping (None when empty), in O(1)."""
        if self.last < self.first:
            return None
        past = (self.last - self.start) % self.period  # ids since the run start at or before `last`
        if past < self.size:
            return self.last
        end = self.last - past + self.size - 1  # that run ended before `last`
        return end if end >= self.first else None

    def count(self) -> int:
        """Number of ids in the striping, in O(1)."""
        if self.last < self.first:
            return 0
        return _count_upto(self, self.last) - _count_upto(self, self.first - 1)

    def __len__(self) -> int:
        return self.count()

    def __iter__(self) -> Iterator[int]:
        for lo, hi in self.runs():
            yield from range(lo, hi + 1)


def union_run_arrays(stripings: Iterable[Striping]) -> tuple[np.ndarray, np.ndarray]:
    """Maximal runs of the ids in any of `stripings`, ascending, as (firsts, lasts) int64 columns.

    What a bookie of a multi-segment ledger must hold is the union of one striping per segment it serves; its
    BP-34 answer has one group per maximal run of that union, runs touching across a segment boundary
    merged. Long striped ledgers have tens of thousands of runs, so they are computed column-wise.
    """
    los: list[np.ndarray] = []
    his: list[np.ndarray] = []
    for s in stripings:
        if s.last < s.first:
            continue
        if s.size == s.period:
            los.append(np.array([s.first], dtype=np.int64))
            his.append(np.array([s.last], dtype=np.int64))
            continue
        base = s.first - ((s.first - s.start) % s.period)  # a run start at or before `first`
        starts = base + s.period * np.arange((s.last - base) // s.period + 1, dtype=np.int64)
        lo = np.maximum(starts, s.first)
        hi = np.minimum(starts + (s.size - 1), s.last)
        keep = lo <= hi
        los.append(lo[keep])
        his.append(hi[keep])
    if len(los) == 1:  # one striping's runs are ascending with gaps of period - size >= 1 between them
        return los[0], his[0]
    lo = np.concatenate(los) if los else np.empty(0, dtype=np.int64)
    hi = np.concatenate(his) if his else np.empty(0, dtype=np.int64)
    if not len(lo):
        return lo, hi
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    reach = np.maximum.accumulate(hi)
    new = np.empty(len(lo), dtype=bool)
    new[0] = True
    new[1:] = lo[1:] > reach[:-1] + 1
    heads = np.flatnonzero(new)
    tails = np.append(heads[1:] - 1, len(lo) - 1)
    return lo[heads], reach[tails]


def _count_upto(s: Striping, x: int) -> int:
    """Ids e in [anchor, x] with (e - start) mod period < size.

    The anchor is a fixed run start below `first - 1` (the lowest x ever asked), so differences of two calls
    count exactly the ids between them.
    """
    anchor = s.start - ((s.start - (s.first - 1)) // s.period + 1) * s.period
    n = x - anchor + 1
    if n <= 0:
        return 0
    full, rem = divmod(n, s.period)
    return full * s.size + min(rem, s.size)


def entries_of_bookie(
    bookie_index: int, first_entry_id: int, last_entry_id: int, ensemble_size: int, write_quorum: int
) -> Striping:
    """Entries of the segment [first_entry_id, last_entry_id] that bookie index `bookie_index` must store.

    Bookie b stores e iff (b - e) mod E < WQ, i.e. e mod E lies in the circular window [b-WQ+1, b]: runs of WQ
    consecutive ids every E ids, the first run starting at b-WQ+1 (mod E).
    """
    if not 0 <= bookie_index < ensemble_size:
        raise QuorumError(f"bookie index {bookie_index} outside ensemble of size {ensemble_size}")
    validate_quorum(ensemble_size, write_quorum, 1)
    return Striping(
        first=first_entry_id,
        last=last_entry_id,
        start=(bookie_index - write_quorum + 1) % ensemble_size,
        period=ensemble_size,
        size=write_quorum,
    )


def fencing_covered(
    responded: Collection[int], ensemble_size: int, write_quorum: int, ack_quorum: int
) -> bool:
    """BookKeeper's RRQuorumCoverageSet: every write set has fewer than AQ bookies that did not respond.

    Equivalently each write set has >= WQ-AQ+1 responders (fenced bookies), so an old writer can never again
    gather AQ acknowledgements, and no acknowledged entry can be invisible to recovery.
    """
    ok = set(responded)
    for i in range(ensemble_size):
        unknown = sum(1 for j in range(write_quorum) if (i + j) % ensemble_size not in ok)
        if unknown >= ack_quorum:
            return False
    return True


def recovery_absent_threshold(write_quorum: int, ack_quorum: int) -> int:
    """How many bookies of a write set must say NoSuchEntry before recovery declares the entry absent."""
    return write_quorum - ack_quorum + 1


class AckSet:
    """Write-side quorum tracking for one entry (BookKeeper's AckSetImpl).

    Complete once AQ distinct bookie indexes acked; failed once more than WQ-AQ of the write set failed.
    """

    __slots__ = ("_acked", "_failed", "ack_quorum", "write_quorum")

    def __init__(self, write_quorum: int, ack_quorum: int) -> None:
        self.write_quorum = write_quorum
        self.ack_quorum = ack_quorum
        self._acked: set[int] = set()
        self._failed: set[int] = set()

    def ack(self, bookie_index: int) -> bool:
        """Record an ack; True when the entry just became (or already was) acknowledged by AQ bookies."""
        self._failed.discard(bookie_index)
        self._acked.add(bookie_index)
        return self.complete

    def fail(self, bookie_index: int) -> bool:
        """Record a failure; True when AQ can no longer be reached from this write set.

        The latest answer from an index wins, as in BookKeeper's failBookieAndCheck: a failure withdraws an
        earlier ack from that index (its bookie may have been replaced), so an entry is never counted as
        acknowledged by a replica that later reported failure.
        """
        self._acked.discard(bookie_index)
        self._failed.add(bookie_index)
        return self.failed

    @property
    def complete(self) -> bool:
        return len(self._acked) >= self.ack_quorum

    @property
    def failed(self) -> bool:
        return len(self._failed) > self.write_quorum - self.ack_quorum

    @property
    def acked(self) -> frozenset[int]:
        return frozenset(self._acked)
