"""Which parts of a ledger are under-replicated, and where their copies should go (pure, no I/O).

A *fragment* is one (segment, bookie index): the entries of that segment the bookie at that index must store,
a `Striping` (BookKeeper's LedgerFragment with one bad index). It is under-replicated when its bookie is lost
(neither writable nor read-only), or when the bookie answers GetListOfEntries without some entries it should
hold. The worker gathers those answers; this module only decides, so every rule here is tested without
servers.

A bookie that cannot list a ledger it holds (a Java bookie on DbLedgerStorage never answers that request) is
judged from reads instead, as BookKeeper's LedgerChecker judges every bookie: `entries_to_read` says which
entries (LedgerChecker's first and last stored entry of each fragment, or every entry of a bookie the marker
names), `ReadEvidence` is what the reads showed.

Two repairs exist:
- replace: the bookie is lost (or read-only / unreachable and named by the marker): copy its whole striping
  to a new bookie chosen by the placement policy, then swap it into that segment's ensemble;
- refill: a writable bookie lacks some of its entries (e.g. a wiped disk that came back): write just the
  missing ones back to it, no metadata change. BookKeeper always replaces, which deadlocks when every
  bookie is already in the ensemble (#3905).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from bkaudit.audit.reads import first_stored, last_stored
from bkaudit.model.ledger import LedgerMetadata, LedgerState
from bkaudit.model.placement import PlacementPolicy
from bkaudit.model.quorum import Striping, entries_of_bookie
from bkaudit.model.topology import Topology


class BookieState(enum.Enum):
    WRITABLE = "writable"
    READONLY = "readonly"
    LOST = "lost"  # registered nowhere: cookies - writable - read-only (or not even a cookie)


class Reason(enum.Enum):
    LOST = "lost"
    MISSING_ENTRIES = "missing_entries"
    UNREACHABLE = "unreachable"  # registered but not answering, and named by the marker
    READONLY_INCOMPLETE = "readonly_incomplete"  # read-only and lacking entries: cannot be refilled
    DRAINING = "draining"  # the bookie is Draining (docs/lifecycle.md): its copy moves out while readable


class AvailabilityLike(Protocol):
    def missing(
        self, first: int, last: int, expected: Striping | Iterable[int] | None = None
    ) -> list[tuple[int, int]]: ...

    def __contains__(self, entry_id: object) -> bool: ...


# per bookie: decoded GetListOfEntries answer, None = the bookie has no such ledger (ENOLEDGER), or the
# exception that kept us from asking
Answer = AvailabilityLike | None | BaseException


@dataclass(frozen=True)
class Fragment:
    """One under-replicated (segment, bookie index)."""

    segment_index: int
    first_entry_id: int
    last_entry_id: int | None  # None: the open last segment of an OPEN ledger (end unknown)
    bookie_index: int
    bookie: str
    reason: Reason
    closed: bool  # entries can no longer change: safe to copy (BookKeeper's LedgerFragment.isClosed)
    expected: Striping | None  # what the index must store (None while the segment is open)
    missing: tuple[tuple[int, int], ...] | None = None  # refill ranges; None = the whole striping

    @property
    def replace(self) -> bool:
        """True when the bookie must leave the ensemble (its copy goes to a new bookie)."""
        return self.reason is not Reason.MISSING_ENTRIES

    def entry_ranges(self) -> list[tuple[int, int]]:
        """Inclusive runs of the entries to copy: only what this index stores, never every id."""
        if self.missing is not None:
            return list(self.missing)
        return list(self.expected.runs()) if self.expected is not None else []

    def entry_count(self) -> int:
        if self.missing is not None:
            return sum(hi - lo + 1 for lo, hi in self.missing)
        return self.expected.count() if self.expected is not None else 0


@dataclass(frozen=True)
class ReadEvidence:
    """A bookie's copy as reads showed it (an `AvailabilityLike`): the entries it answered ENOENTRY for, or
    whose bytes did not verify, are `absent`; entries not read count as present (BookKeeper's LedgerChecker
    reads only some), so what it reports missing is proven missing."""

    absent: frozenset[int] = frozenset()
    read: int = 0

    def missing(
        self, first: int, last: int, expected: Striping | Iterable[int] | None = None
    ) -> list[tuple[int, int]]:
        wanted = (e for e in sorted(self.absent) if first <= e <= last)
        if expected is not None:
            holds = expected if isinstance(expected, Striping) else frozenset(expected)
            wanted = (e for e in wanted if e in holds)
        runs: list[tuple[int, int]] = []
        for e in wanted:
            if runs and runs[-1][1] == e - 1:
                runs[-1] = (runs[-1][0], e)
            else:
                runs.append((e, e))
        return runs

    def __contains__(self, entry_id: object) -> bool:
        return entry_id not in self.absent


def entries_to_read(
    metadata: LedgerMetadata, bookie: str, lac: int | None, *, every: bool, open_end: int | None = None
) -> list[int]:
    """What to read from a bookie that cannot list: per segment it stores entries of (closed, or the open last
    one up to `lac`), the first and the last entry it stores there (LedgerChecker at BookKeeper's default
    auditorLedgerVerificationPercentage of 0), or with `every` each of them (a bookie the marker names: a
    hole between the two must be found, else the marker would be resolved with the hole still there)."""
    chosen: set[int] = set()
    for seg_index, segment, _ in metadata.segment_ranges():
        for b, member in enumerate(segment.ensemble):
            if member != bookie:
                continue
            expected = expected_entries(metadata, seg_index, b, lac, open_end=open_end)
            if expected is None or expected.count() == 0:
                continue
            if every:
                chosen.update(expected)
            else:
                chosen.update(e for e in (first_stored(expected), last_stored(expected)) if e is not None)
    return sorted(chosen)


def bookie_state(bookie: str, writable: Collection[str], readonly: Collection[str]) -> BookieState:
    if bookie in writable:
        return BookieState.WRITABLE
    if bookie in readonly:
        return BookieState.READONLY
    return BookieState.LOST


def segment_closed(metadata: LedgerMetadata, index: int, lac: int | None) -> bool:
    """BookKeeper's isClosed: the ledger is closed, or the segment is not the last and every entry before the
    last segment is confirmed (LAC >= first entry of the last segment - 1)."""
    if metadata.is_closed:
        return True
    if index + 1 >= len(metadata.segments) or lac is None:
        return False
    return lac >= metadata.segments[-1].first_entry_id - 1


def expected_entries(
    metadata: LedgerMetadata,
    index: int,
    bookie_index: int,
    lac: int | None = None,
    *,
    open_end: int | None = None,
) -> Striping | None:
    """What the index stores in the segment; in the open last segment of an OPEN ledger, up to the LAC when
    known (BookKeeper's LedgerChecker checks the last fragment up to the LAC), else None. `open_end` replaces
    the LAC there when LedgerChecker's first-entry probe found the first entry may be written (`open_end`)."""
    last = metadata.segment_last_entry(index)
    first = metadata.segments[index].first_entry_id
    if last is None:
        end = lac if open_end is None else open_end
        if end is None or end < first:
            return None
        last = end
    return entries_of_bookie(bookie_index, first, last, metadata.ensemble_size, metadata.write_quorum)


def last_expected(
    metadata: LedgerMetadata, bookie: str, lac: int | None = None, *, open_end: int | None = None
) -> int | None:
    """The highest entry `bookie` must hold (`expected_entries` over its segments), None for none: the one
    entry a Java bookie's listing can hide (rpc.listing.confirm_tail)."""
    lasts = [
        held
        for index, segment in enumerate(metadata.segments)
        for b, member in enumerate(segment.ensemble)
        if member == bookie
        and (st := expected_entries(metadata, index, b, lac, open_end=open_end)) is not None
        and (held := st.last_held()) is not None
    ]
    return max(lasts, default=None)


def find_fragments(
    metadata: LedgerMetadata,
    states: Mapping[str, BookieState],
    answers: Mapping[str, Answer],
    *,
    lac: int | None = None,
    marked: Collection[str] = (),
    draining: Collection[str] = (),
    open_end: int | None = None,
) -> list[Fragment]:
    """Every under-replicated fragment of the ledger, closed ones and (for decisions only) open ones.

    `answers` holds one GetListOfEntries answer per non-lost bookie of the closed segments; a bookie missing
    from `answers` is not judged on entries. A bookie that could not be asked counts as under-replicated only
    if the marker names it (`marked`): otherwise one slow answer would swap a healthy bookie out. A bookie in
    `draining` is replaced wherever it stores entries, even when complete and readable.
    """
    out: list[Fragment] = []
    for seg_index, segment, last in metadata.segment_ranges():
        closed = segment_closed(metadata, seg_index, lac)
        for b, bookie in enumerate(segment.ensemble):
            expected = expected_entries(metadata, seg_index, b, lac, open_end=open_end)
            judged = _judge(states.get(bookie, BookieState.LOST), expected, answers, bookie, marked, draining)
            if judged is not None:
                reason, missing = judged
                out.append(
                    Fragment(
                        seg_index, segment.first_entry_id, last, b, bookie, reason, closed, expected, missing
                    )
                )
    return out


def _judge(
    state: BookieState,
    expected: Striping | None,
    answers: Mapping[str, Answer],
    bookie: str,
    marked: Collection[str],
    draining: Collection[str] = (),
) -> tuple[Reason, tuple[tuple[int, int], ...] | None] | None:
    """(reason, refill ranges) when this (segment, index) is under-replicated, else None."""
    if state is BookieState.LOST:
        return Reason.LOST, None
    if bookie in draining:
        # like a lost bookie: it leaves every segment naming it, even one where it stores no entry (the drain
        # counts any ensemble naming it, so skipping those would mark and skip the ledger forever). A closed
        # fragment is copied and swapped; the open last segment of an OPEN ledger is the writer's (grace, then
        # fence + recover: open_last_segment_at_risk counts a draining bookie as not writable).
        return Reason.DRAINING, None
    if expected is None or expected.count() == 0 or bookie not in answers:
        return None
    answer = answers[bookie]
    if isinstance(answer, BaseException):
        return (Reason.UNREACHABLE, None) if bookie in marked else None
    gaps = (
        list(expected.runs()) if answer is None else answer.missing(expected.first, expected.last, expected)
    )
    if not gaps:
        return None
    if state is BookieState.READONLY:  # cannot be written: its copy moves to a new bookie
        return Reason.READONLY_INCOMPLETE, None
    return Reason.MISSING_ENTRIES, tuple(gaps)


def bookies_to_probe(
    metadata: LedgerMetadata,
    states: Mapping[str, BookieState],
    lac: int | None,
    *,
    open_end: int | None = None,
) -> list[str]:
    """Non-lost bookies that must store at least one entry: whom to ask. Closed segments, and the open last
    segment of an OPEN ledger up to its LAC: entries missing there are an open fragment, which makes the
    worker defer the ledger, not mark it replicated (BookKeeper's ReplicationWorker, foundOpenFragments)."""
    wanted: dict[str, None] = {}
    last_index = len(metadata.segments) - 1
    for seg_index, segment, _ in metadata.segment_ranges():
        if not segment_closed(metadata, seg_index, lac) and seg_index != last_index:
            continue
        for b, bookie in enumerate(segment.ensemble):
            expected = expected_entries(metadata, seg_index, b, lac, open_end=open_end)
            if (
                states.get(bookie, BookieState.LOST) is not BookieState.LOST
                and expected is not None
                and expected.count() > 0
            ):
                wanted[bookie] = None
    return list(wanted)


def first_entry_unconfirmed(metadata: LedgerMetadata, lac: int | None) -> int | None:
    """The open last segment's first entry when the LAC is known and below it: LedgerChecker then asks that
    entry's write set whether it was written (audit.open_segments, EntryExistsCallback); else None."""
    if metadata.is_closed or lac is None or not metadata.segments:
        return None
    first = metadata.segments[-1].first_entry_id
    return first if lac < first else None


def open_last_segment_at_risk(
    metadata: LedgerMetadata, writable: Collection[str], draining: Collection[str] = ()
) -> bool:
    """BookKeeper's isLastSegmentOpenAndMissingBookies: not CLOSED and a bookie of the last ensemble is not
    writable (read-only counts as missing: the writer cannot add to it). A Draining bookie counts as missing
    even in the moment before it re-registers read-only."""
    if metadata.state is LedgerState.CLOSED:
        return False
    return any(b not in writable or b in draining for b in metadata.segments[-1].ensemble)


@dataclass
class SegmentRepair:
    """All fragments of one closed segment, repaired together (one metadata swap for all replacements)."""

    segment_index: int
    first_entry_id: int
    ensemble: tuple[str, ...]
    fragments: list[Fragment] = field(default_factory=list)
    targets: dict[int, str] = field(default_factory=dict)  # bookie index -> new bookie (replacements)

    def target_of(self, fragment: Fragment) -> str:
        """Where the fragment's entries go: its new bookie, or the bookie itself for a refill."""
        return self.targets[fragment.bookie_index] if fragment.replace else fragment.bookie

    def replaced(self) -> set[int]:
        return {f.bookie_index for f in self.fragments if f.replace}


def plan_repairs(metadata: LedgerMetadata, fragments: Iterable[Fragment]) -> list[SegmentRepair]:
    """Closed fragments grouped by segment, in segment order (open ones are never copied)."""
    repairs: dict[int, SegmentRepair] = {}
    for f in fragments:
        if not f.closed:
            continue
        seg = metadata.segments[f.segment_index]
        repair = repairs.setdefault(
            f.segment_index, SegmentRepair(f.segment_index, seg.first_entry_id, tuple(seg.ensemble))
        )
        repair.fragments.append(f)
    return [repairs[i] for i in sorted(repairs)]


def choose_targets(
    repair: SegmentRepair,
    metadata: LedgerMetadata,
    policy: PlacementPolicy,
    candidates: Sequence[str],
    topology: Topology,
    *,
    exclude: Collection[str] = (),
    rng: random.Random | None = None,
) -> dict[int, str]:
    """A new bookie for every replaced index of the segment, chosen one after the other.

    Each choice sees the previous ones in the ensemble (so racks spread), and the candidates never include a
    bookie already in the segment's ensemble (stricter than BookKeeper's "not in the write set"), a lost or
    read-only one (`candidates` are writable bookies) or anything in `exclude`. NotEnoughBookies propagates.
    """
    ensemble = list(repair.ensemble)
    banned = set(exclude) | set(repair.ensemble)
    chosen: dict[int, str] = {}
    for index in sorted(repair.replaced()):
        target = policy.replace_bookie(
            tuple(ensemble),
            index,
            metadata.write_quorum,
            metadata.ack_quorum,
            [c for c in candidates if c not in banned],
            topology,
            exclude=tuple(banned),
            rng=rng,
        )
        ensemble[index] = target
        banned.add(target)
        chosen[index] = target
    repair.targets = chosen
    return chosen
