"""Durability contract (BP-34): every entry has WQ copies placed by round-robin striping.

The check works in two halves so that it can be distributed:

1. **Per (ledger, bookie)**, where the bookie's answer arrives (a Spark executor): `compare_bookie` turns the
   bookie's `AvailabilityOfEntriesOfLedger` into missing ranges per (segment, bookie index) and the entries it
   holds but should not (`extra_entries`). Expected entries are `Striping`s from `bkaudit.model.quorum`, and
   the difference is group arithmetic in `bkaudit.formats.availability`: no per-entry loop anywhere.
2. **Per ledger**, once every bookie answered: `assess` merges the missing ranges of all bookie indexes of a
   segment with a sweep line. Because a bookie index's expected striping only contains entries whose write set
   includes it, the number of overlapping missing ranges at an entry is exactly the number of copies it lacks;
   `min_replicas = WQ - max overlap` (BookKeeper's multiset `maxMissing`, but computed on ranges and with an
   exact per-level entry histogram).

What is checked, and why it differs from BookKeeper's replicas check (bookkeeper-behavior.md 1.6):

* closed ledgers, and every segment of open / in-recovery ledgers: the last one up to the last-add-confirmed
  its bookies report (`LedgerShape.open_end`, `bkaudit.audit.open_segments`), as BookKeeper's
  `checkAllLedgers` does (it opens every ledger without recovery and LedgerChecker checks the last segment
  up to the LAC); only BookKeeper's replicas check skips open ledgers. Entries past the LAC are still being
  written: never counted missing, never extra;
* `ENOLEDGER` means "this bookie holds nothing", so every expected entry is missing (as BookKeeper);
* a lost bookie (not registered, no answer through the delayed re-check: `STATUS_LOST_BOOKIE`) holds nothing
  either: its copies count missing (`detail.cause = lost_bookie`), as the Auditor marks a lost bookie's
  ledgers under-replicated;
* any other failure leaves that bookie *unverified*: its entries are not counted missing (no false alarm), the
  ledger is reported `ledger_unverifiable` by the availability check, and what the other bookies proved
  missing is still reported, flagged `partial` (a lower bound on the damage).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from bkaudit.audit.base import Category, Check, Finding, Range, cap_ranges, merge_ranges, range_count
from bkaudit.audit.classification import durability_category
from bkaudit.audit.statuses import (
    ANSWERED,
    SETTLED,
    STATUS_LOST_BOOKIE,
    STATUS_NO_LEDGER,
    STATUS_NOT_CHECKED,
    STATUS_OK,
)
from bkaudit.model.quorum import Striping, entries_of_bookie
from bkaudit.model.shape import LedgerShape


class EntrySet(Protocol):
    """What the check needs from a decoded `bkaudit.formats.availability.Availability`."""

    @property
    def total(self) -> int: ...

    def runs(self) -> Iterator[tuple[int, int]]: ...

    def missing(self, first: int, last: int, expected: Striping | None = None) -> list[tuple[int, int]]: ...

    def missing_count(self, first: int, last: int, expected: Striping | None = None) -> int: ...


@dataclass(frozen=True, slots=True)
class SegmentSpan:
    """A segment whose entries are known: [first, last] with last >= first."""

    index: int
    first: int
    last: int
    ensemble: tuple[str, ...]


def checked_segments(shape: LedgerShape) -> tuple[SegmentSpan, ...]:
    """Segments whose entries must all be on their write sets: all of a closed ledger; of one still open, all
    but the last, and the last up to `shape.open_end` when the run established it.

    A middle segment ends right before the next one starts; the last segment of a closed ledger ends at
    `last_entry_id`, that of an open ledger at `open_end` (its bookies' last-add-confirmed; entries past it
    may still be in flight). Empty segments (no entries) are left out: nobody must hold anything for them. In
    a closed ledger no segment reaches past `last_entry_id` (BookKeeper's check would expect entries that were
    never written if a later segment started beyond the end; that is a false alarm we do not raise).
    """
    segs = shape.segments
    limit = len(segs) if shape.closed else len(segs) - 1
    out: list[SegmentSpan] = []
    for i in range(max(limit, 0)):
        first = segs[i].first_entry_id
        last = segs[i + 1].first_entry_id - 1 if i + 1 < len(segs) else shape.last_entry_id
        if shape.closed:
            last = min(last, shape.last_entry_id)
        if last >= first:
            out.append(SegmentSpan(i, first, last, segs[i].ensemble))
    tail = open_segment(shape)
    if tail is not None:
        out.append(tail)
    return tuple(out)


def open_segment(shape: LedgerShape) -> SegmentSpan | None:
    """The last segment of a ledger that is not closed, as far as this run checks it (None: not checked)."""
    if shape.closed or not shape.segments or shape.open_end is None:
        return None
    last = shape.segments[-1]
    if shape.open_end < last.first_entry_id:
        return None
    return SegmentSpan(len(shape.segments) - 1, last.first_entry_id, shape.open_end, last.ensemble)


def checked_limit(shape: LedgerShape) -> int | None:
    """Highest entry id whose placement is judged (None = no limit: a closed ledger owns no entry after it).

    For an open ledger the last segment is still being written: entries up to its checked end (`open_end`)
    are judged, later ones (in flight) are not; a bookie holding entries past that is not holding anything
    "extra".
    """
    if shape.closed:
        return None
    if not shape.segments:
        return -1
    tail = open_segment(shape)
    return tail.last if tail is not None else shape.segments[-1].first_entry_id - 1


@dataclass(frozen=True, slots=True)
class Expected:
    """The entries bookie index `bookie_index` of segment `segment_index` must store."""

    segment_index: int
    bookie_index: int
    striping: Striping

    @property
    def count(self) -> int:
        return self.striping.count()


def expected_by_bookie(shape: LedgerShape) -> dict[str, list[Expected]]:
    """Per distinct bookie, the stripings it must hold; bookies that must hold nothing are left out.

    One entry per bookie is one GetListOfEntries call per (ledger, bookie), covering every segment the bookie
    appears in, as BookKeeper's replicas check does.
    """
    out: dict[str, list[Expected]] = {}
    e, wq = shape.ensemble_size, shape.write_quorum
    for span in checked_segments(shape):
        for idx, bookie in enumerate(span.ensemble[:e]):
            striping = entries_of_bookie(idx, span.first, span.last, e, wq)
            if striping.count() > 0:
                out.setdefault(bookie, []).append(Expected(span.index, idx, striping))
    return out


# -- per (ledger, bookie): on the executor that talked to the bookie ------------------------------


@dataclass(frozen=True, slots=True)
class MissingRun:
    """Expected entries of one (segment, bookie index) that the bookie does not hold."""

    segment_index: int
    bookie_index: int
    ranges: tuple[Range, ...]
    count: int


@dataclass(frozen=True, slots=True)
class BookieEvidence:
    """What one bookie said about one ledger, reduced to what the per-ledger assessment needs.

    `status` is OK / ENOLEDGER for an answer, anything else (UNAVAILABLE, DEADLINE_EXCEEDED, EIO,
    INVALID_RESPONSE, ...) for a bookie that could not be verified; `error` says why in words.
    """

    bookie_id: str
    status: str
    missing: tuple[MissingRun, ...] = ()
    extra: tuple[Range, ...] = ()
    extra_count: int = 0
    error: str | None = None
    evidence: str = "listing"
    """"listing" (the bookie's exact list of entries) or "reads" (LedgerChecker-style sampled reads)."""
    entries_read: int = 0
    entries_expected: int = 0
    corrupt: tuple[Range, ...] = ()
    """Entries read back whose digest or ids did not verify (counted in `missing` too: not a replica)."""

    @property
    def answered(self) -> bool:
        return self.status in ANSWERED

    @property
    def settled(self) -> bool:
        """What the bookie holds is known (an answer, or a lost bookie): its missing entries count."""
        return self.status in SETTLED

    @property
    def missing_count(self) -> int:
        return sum(m.count for m in self.missing)


def failed_evidence(
    bookie_id: str, status: str, error: str | None = None, evidence: str = "listing"
) -> BookieEvidence:
    """Evidence for a bookie that could not be verified (nothing counted missing, nothing counted extra)."""
    return BookieEvidence(bookie_id=bookie_id, status=status, error=error, evidence=evidence)


def lost_evidence(shape: LedgerShape, bookie_id: str, error: str | None = None) -> BookieEvidence:
    """Evidence for a lost bookie: it holds none of its entries (every expected entry missing, as after
    ENOLEDGER), with status LOST_BOOKIE so the findings can say why."""
    ev = compare_bookie(shape, bookie_id, None)
    return BookieEvidence(bookie_id, STATUS_LOST_BOOKIE, ev.missing, error=error)


def compare_bookie(
    shape: LedgerShape,
    bookie_id: str,
    holding: EntrySet | None,
    expected: Sequence[Expected] | None = None,
) -> BookieEvidence:
    """Missing and extra entries of `bookie_id` for this ledger; `holding=None`: the bookie said ENOLEDGER.

    `expected` may be passed when the caller already computed `expected_by_bookie(shape)[bookie_id]`.
    """
    wants = list(expected) if expected is not None else expected_by_bookie(shape).get(bookie_id, [])
    missing: list[MissingRun] = []
    for exp in wants:
        s = exp.striping
        ranges = list(s.runs()) if holding is None else holding.missing(s.first, s.last, s)
        if ranges:
            run = MissingRun(exp.segment_index, exp.bookie_index, tuple(ranges), range_count(ranges))
            missing.append(run)
    if holding is None:
        return BookieEvidence(bookie_id, STATUS_NO_LEDGER, tuple(missing))
    extra = _extra_entries(shape, holding, wants, sum(m.count for m in missing))
    return BookieEvidence(bookie_id, STATUS_OK, tuple(missing), tuple(extra), range_count(extra))


def _extra_entries(
    shape: LedgerShape, holding: EntrySet, wants: Sequence[Expected], missing_total: int
) -> list[Range]:
    """Held entries in the judged range that no segment striping assigns to this bookie.

    Fast path: when the stripings are disjoint (the bookie appears once per segment) the number of extras is
    `held in range - (expected - missing)`, so a healthy bookie costs two arithmetic queries; only a bookie
    that does hold extras pays for the ranges.
    """
    limit = checked_limit(shape)
    if limit is not None and limit < 0:
        return []
    disjoint = len({w.segment_index for w in wants}) == len(wants)
    if disjoint:
        present = sum(w.count for w in wants) - missing_total
        held = holding.total if limit is None else (limit + 1) - holding.missing_count(0, limit, None)
        if limit is None:
            held -= _held_below_zero(holding)
        if held - present <= 0:
            return []
    stripings = sorted((w.striping for w in wants), key=lambda s: s.first)
    out: list[Range] = []
    for lo, hi in holding.runs():
        lo = max(lo, 0)
        if limit is not None:
            if lo > limit:
                break
            hi = min(hi, limit)
        if hi < lo:
            continue
        covered: list[Range] = []
        for s in stripings:
            if s.last < lo:
                continue
            if s.first > hi:
                break
            sub = Striping(max(lo, s.first), min(hi, s.last), s.start, s.period, s.size)
            covered.extend(sub.runs())
        out.extend(_subtract(lo, hi, merge_ranges(covered)))
    return merge_ranges(out)


def _held_below_zero(holding: EntrySet) -> int:
    """Held ids below 0 (never produced by BookKeeper's encoder, but a decoder may accept them)."""
    n = 0
    for lo, hi in holding.runs():
        if lo >= 0:
            break
        n += min(hi, -1) - lo + 1
    return n


def _subtract(lo: int, hi: int, covered: Sequence[Range]) -> Iterator[Range]:
    """[lo, hi] minus sorted disjoint `covered` ranges."""
    cursor = lo
    for c_lo, c_hi in covered:
        if c_lo > cursor:
            yield (cursor, min(c_lo - 1, hi))
        cursor = max(cursor, c_hi + 1)
        if cursor > hi:
            return
    if cursor <= hi:
        yield (cursor, hi)


# -- per ledger: combine every bookie's evidence --------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentDamage:
    """Sweep-line result for the missing ranges of one segment."""

    max_missing: int
    under_replicated: tuple[Range, ...]
    worst: tuple[Range, ...]
    missing_histogram: Mapping[int, int]


def sweep(ranges_per_index: Iterable[Sequence[Range]]) -> SegmentDamage:
    """Overlay missing ranges of the bookie indexes of one segment: per entry, how many copies are missing.

    Returns the maximum overlap, the entries with at least one copy missing (merged), the entries at the
    maximum, and an exact histogram {copies missing: entries}. Each index's ranges are ascending and disjoint.
    Cost O(r log r) for r ranges, with a linear fast path when only one index lacks entries (the common case:
    one bookie lost or wiped).
    """
    lists = [r for r in ranges_per_index if r]
    if not lists:
        return SegmentDamage(0, (), (), {})
    if len(lists) == 1:
        merged = tuple(merge_sorted_ranges(lists[0]))
        return SegmentDamage(1, merged, merged, {1: range_count(merged)})
    # events encoded as ints: position * 2 + 1 opens a range, position * 2 closes one (at hi + 1)
    keys: list[int] = []
    for ranges in lists:
        for lo, hi in ranges:
            keys.append(lo * 2 + 1)
            keys.append((hi + 1) * 2)
    keys.sort()
    level = 0
    top = 0
    hist: dict[int, int] = {}
    under: list[Range] = []
    worst: list[Range] = []
    prev = keys[0] >> 1
    for key in keys:
        pos = key >> 1
        if pos != prev:
            if level > 0:
                hist[level] = hist.get(level, 0) + (pos - prev)
                if under and under[-1][1] + 1 == prev:
                    under[-1] = (under[-1][0], pos - 1)
                else:
                    under.append((prev, pos - 1))
                if level > top:
                    top, worst = level, [(prev, pos - 1)]
                elif level == top:
                    if worst[-1][1] + 1 == prev:
                        worst[-1] = (worst[-1][0], pos - 1)
                    else:
                        worst.append((prev, pos - 1))
            prev = pos
        level += 1 if key & 1 else -1
    return SegmentDamage(top, tuple(under), tuple(worst), hist)


def merge_sorted_ranges(ranges: Iterable[Range]) -> list[Range]:
    """Merge ascending disjoint ranges that touch (linear; `merge_ranges` sorts first)."""
    out: list[Range] = []
    for lo, hi in ranges:
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


@dataclass(frozen=True, slots=True)
class DurabilityAssessment:
    """One ledger's durability, exact over all its checked entries."""

    ledger_id: int
    write_quorum: int
    ack_quorum: int
    ensemble_size: int
    entries_checked: int
    min_replicas: int
    category: Category | None
    worst_segment: int | None
    under_replicated: tuple[Range, ...]
    worst_entries: tuple[Range, ...]
    replicas_histogram: Mapping[int, int]
    missing: tuple[tuple[str, MissingRun], ...]
    extras: tuple[BookieEvidence, ...]
    unverified: tuple[BookieEvidence, ...]
    corrupt: tuple[BookieEvidence, ...] = ()
    basis: Mapping[str, Any] = field(default_factory=dict)
    """What the findings rest on (`evidence_basis`): listing (exact) or reads with the sampled fraction."""
    lost: tuple[str, ...] = ()
    """Lost bookies of the ledger (not registered, silent through the re-check): their copies are missing."""
    open_segment: SegmentSpan | None = None
    """The last segment of an open ledger, as far as it was checked (up to the LAC its bookies reported)."""

    @property
    def partial(self) -> bool:
        return bool(self.unverified)

    @property
    def bookies_missing_entries(self) -> tuple[str, ...]:
        """Distinct bookies lacking entries, first seen first: the replicas of an under-replication marker."""
        seen: dict[str, None] = {}
        for bookie, _run in self.missing:
            seen.setdefault(bookie, None)
        return tuple(seen)

    def entries_below(self, replicas: int) -> int:
        """Entries with fewer than `replicas` copies."""
        return sum(n for copies, n in self.replicas_histogram.items() if copies < replicas)


def assess(shape: LedgerShape, evidence: Iterable[BookieEvidence]) -> DurabilityAssessment:
    """Combine all bookies' evidence for one ledger into its worst-entry classification.

    Bookies that had to be asked but have no evidence at all are listed as unverified (NOT_CHECKED): a gap in
    the pipeline must show up as a row, never as a silently healthy ledger.
    """
    by_bookie: dict[str, BookieEvidence] = {}
    for ev in evidence:
        # a retry's answer replaces an earlier failure; an answer is never replaced by a failure
        prior = by_bookie.get(ev.bookie_id)
        if prior is None or not prior.settled:
            by_bookie[ev.bookie_id] = ev
    needed = expected_by_bookie(shape)
    for bookie in needed:
        if bookie not in by_bookie:
            by_bookie[bookie] = failed_evidence(bookie, STATUS_NOT_CHECKED, "no answer recorded")
    spans = checked_segments(shape)
    ensemble_of = {s.index: s.ensemble for s in spans}
    per_segment: dict[int, list[tuple[int, str, MissingRun]]] = {}
    for bookie, ev in by_bookie.items():
        if not ev.settled:
            continue
        for run in ev.missing:
            ensemble = ensemble_of.get(run.segment_index)
            if ensemble is None or run.bookie_index >= len(ensemble) or ensemble[run.bookie_index] != bookie:
                continue  # evidence for metadata this shape does not have; ignored (the job re-evaluates)
            per_segment.setdefault(run.segment_index, []).append((run.bookie_index, bookie, run))
    wq = shape.write_quorum
    top = 0
    worst_segment: int | None = None
    under: list[Range] = []
    worst: list[Range] = []
    hist: dict[int, int] = {}
    missing_rows: list[tuple[str, MissingRun]] = []
    for span in spans:
        rows = sorted(per_segment.get(span.index, []), key=lambda r: r[0])
        if not rows:
            continue
        missing_rows.extend((bookie, run) for _idx, bookie, run in rows)
        damage = sweep(run.ranges for _idx, _bookie, run in rows)
        for level, n in damage.missing_histogram.items():
            copies = max(wq - level, 0)
            hist[copies] = hist.get(copies, 0) + n
        under.extend(damage.under_replicated)
        if damage.max_missing > top:
            top, worst_segment, worst = damage.max_missing, span.index, list(damage.worst)
        elif damage.max_missing == top and top > 0:
            worst.extend(damage.worst)
    min_replicas = max(wq - top, 0)
    category = durability_category(min_replicas, wq, shape.ack_quorum) if top else None
    answered_extra = tuple(ev for ev in by_bookie.values() if ev.answered and ev.extra_count > 0)
    unverified = tuple(ev for ev in by_bookie.values() if not ev.settled)
    corrupt = tuple(ev for ev in by_bookie.values() if ev.answered and ev.corrupt)
    return DurabilityAssessment(
        ledger_id=shape.ledger_id,
        write_quorum=wq,
        ack_quorum=shape.ack_quorum,
        ensemble_size=shape.ensemble_size,
        entries_checked=sum(s.last - s.first + 1 for s in spans),
        min_replicas=min_replicas,
        category=category,
        worst_segment=worst_segment,
        under_replicated=tuple(merge_sorted_ranges(under)),
        worst_entries=tuple(merge_sorted_ranges(worst)),
        replicas_histogram=dict(sorted(hist.items())),
        missing=tuple(missing_rows),
        extras=answered_extra,
        unverified=unverified,
        corrupt=corrupt,
        basis=evidence_basis(by_bookie.values()),
        lost=tuple(b for b, ev in by_bookie.items() if ev.status == STATUS_LOST_BOOKIE),
        open_segment=open_segment(shape),
    )


def evidence_basis(evidence: Iterable[BookieEvidence]) -> dict[str, Any]:
    """`{"evidence": "listing"}` when every bookie listed its entries, else `{"evidence": "reads",
    "sampled_fraction": f}`: the share of the read-verified bookies' expected entries actually read (an
    ENOLEDGER answer proves all of them missing and counts as fully read; None when none answered)."""
    read = expected = 0
    any_reads = False
    for ev in evidence:
        if ev.evidence != "reads":
            continue
        any_reads = True
        if ev.status == STATUS_NO_LEDGER:
            read += ev.entries_expected
            expected += ev.entries_expected
        elif ev.answered:
            read += ev.entries_read
            expected += ev.entries_expected
    if not any_reads:
        return {"evidence": "listing"}
    fraction = round(min(read / expected, 1.0), 6) if expected else None
    return {"evidence": "reads", "sampled_fraction": fraction}


CAUSE_LOST_BOOKIE = "lost_bookie"
"""`detail.cause` of a durability finding counting a lost bookie's copies as missing."""


def open_segment_detail(span: SegmentSpan) -> dict[str, Any]:
    """What a finding about the last segment of an open ledger says about it: `detail.open_segment`."""
    return {"open_segment": {"segment": span.index, "first_entry": span.first, "checked_to": span.last}}


# -- the check --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LedgerEvidence:
    """A ledger's shape with every bookie's evidence: subject of the durability and availability checks."""

    shape: LedgerShape
    evidence: tuple[BookieEvidence, ...] = field(default_factory=tuple)


class DurabilityCheck(Check[LedgerEvidence]):
    """Durability findings (one per ledger, its worst bucket) and `extra_entries` (one per ledger and bookie).

    `max_ranges` bounds the ranges stored per row so one wiped bookie under a million-entry ledger cannot make
    a row of megabytes; counts in `detail` stay exact and `ranges_truncated` says when ranges were cut.
    """

    name: ClassVar[str] = "durability"
    categories: ClassVar[tuple[Category, ...]] = (
        Category.NO_REPLICA,
        Category.BELOW_ACK_QUORUM,
        Category.BELOW_WRITE_QUORUM,
        Category.EXTRA_ENTRIES,
        Category.CORRUPT_ENTRIES,
    )

    def __init__(self, max_ranges: int = 10_000) -> None:
        self.max_ranges = max_ranges

    def evaluate(self, subject: LedgerEvidence) -> list[Finding]:
        return self.findings(assess(subject.shape, subject.evidence))

    def findings(self, a: DurabilityAssessment) -> list[Finding]:
        return [f.with_detail(**a.basis) for f in self._findings(a)]

    @staticmethod
    def _open(a: DurabilityAssessment, ranges: Iterable[Range]) -> dict[str, Any]:
        """`open_segment` detail when any of `ranges` lies in the ledger's checked open segment."""
        span = a.open_segment
        if span is None or not any(lo <= span.last and hi >= span.first for lo, hi in ranges):
            return {}
        return open_segment_detail(span)

    def _findings(self, a: DurabilityAssessment) -> list[Finding]:
        out: list[Finding] = []
        if a.category is not None:
            out.append(self._durability_finding(a))
        for ev in a.corrupt:
            ranges, cut = cap_ranges(ev.corrupt, self.max_ranges)
            out.append(
                Finding(
                    category=Category.CORRUPT_ENTRIES,
                    ledger_id=a.ledger_id,
                    bookie_id=ev.bookie_id,
                    missing_entries=ranges,
                    detail={
                        "corrupt_count": range_count(ev.corrupt),
                        "corrupt_entries": [list(r) for r in ranges],
                        "entries_read": ev.entries_read,
                        "ranges_truncated": cut,
                        **self._open(a, ev.corrupt),
                    },
                )
            )
        for ev in a.extras:
            ranges, cut = cap_ranges(ev.extra, self.max_ranges)
            out.append(
                Finding(
                    category=Category.EXTRA_ENTRIES,
                    ledger_id=a.ledger_id,
                    bookie_id=ev.bookie_id,
                    detail={
                        "extra_count": ev.extra_count,
                        "extra_entries": [list(r) for r in ranges],
                        "ranges_truncated": cut,
                        **self._open(a, ev.extra),
                    },
                )
            )
        return out

    def _durability_finding(self, a: DurabilityAssessment) -> Finding:
        truncated = False
        per_bookie: list[dict[str, Any]] = []
        open_index = a.open_segment.index if a.open_segment is not None else None
        for bookie, run in a.missing:
            ranges, cut = cap_ranges(run.ranges, self.max_ranges)
            truncated |= cut
            per_bookie.append(
                {
                    "bookie": bookie,
                    "segment": run.segment_index,
                    "bookie_index": run.bookie_index,
                    "missing_count": run.count,
                    "missing": [list(r) for r in ranges],
                    **({"cause": CAUSE_LOST_BOOKIE} if bookie in a.lost else {}),
                    **({"open_segment": True} if run.segment_index == open_index else {}),
                }
            )
        under, cut = cap_ranges(a.under_replicated, self.max_ranges)
        truncated |= cut
        worst, cut = cap_ranges(a.worst_entries, self.max_ranges)
        truncated |= cut
        bookies = a.bookies_missing_entries
        detail: dict[str, Any] = {
            "ensemble_size": a.ensemble_size,
            "write_quorum": a.write_quorum,
            "ack_quorum": a.ack_quorum,
            "entries_checked": a.entries_checked,
            "entries_below_write_quorum": a.entries_below(a.write_quorum),
            "entries_below_ack_quorum": a.entries_below(a.ack_quorum),
            "entries_without_replica": a.entries_below(1),
            "replicas_histogram": {str(k): v for k, v in a.replicas_histogram.items()},
            "worst_entries": [list(r) for r in worst],
            "bookies_missing_entries": list(bookies),
            "missing_by_bookie": per_bookie,
            "partial": a.partial,
            "unverified_bookies": [ev.bookie_id for ev in a.unverified],
            "ranges_truncated": truncated,
        }
        lost = [b for b in bookies if b in a.lost]
        if lost:
            detail["cause"] = CAUSE_LOST_BOOKIE
            detail["lost_bookies"] = lost
        if any(run.segment_index == open_index for _b, run in a.missing):
            assert a.open_segment is not None
            detail.update(open_segment_detail(a.open_segment))
        assert a.category is not None
        return Finding(
            category=a.category,
            ledger_id=a.ledger_id,
            segment_index=a.worst_segment,
            bookie_id=bookies[0] if len(bookies) == 1 else None,
            missing_entries=under,
            min_replicas=a.min_replicas,
            detail=detail,
        )
