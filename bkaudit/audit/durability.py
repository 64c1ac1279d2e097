"""Durability contract (BP-34): every entry has WQ copies placed by round-robin striping.

The check works in two halves so that it can be distributed:

1. **Per (ledger, bookie)**, where the bookie's answer arrives (a Spark executor): `compare_bookie`
   (`bkaudit.audit.evidence`) turns the bookie's answer into missing ranges per (segment, bookie index) and
   the entries it holds but should not, against what `bkaudit.audit.expected` says it must hold.
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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from bkaudit.audit.base import Category, Check, EvidenceBasis, Finding, Range, cap_ranges, range_count
from bkaudit.audit.classification import durability_category
from bkaudit.audit.detail_json import basis_json
from bkaudit.audit.details import (
    BookieGap,
    CorruptEntriesDetail,
    DurabilityDetail,
    ExtraEntriesDetail,
    OpenSegmentNote,
)
from bkaudit.audit.evidence import BookieEvidence, MissingRun, failed_evidence
from bkaudit.audit.expected import SegmentSpan, checked_segments, expected_by_bookie, open_segment
from bkaudit.audit.statuses import STATUS_LOST_BOOKIE, STATUS_NO_LEDGER, STATUS_NOT_CHECKED
from bkaudit.model.shape import LedgerShape

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
    rests_on: EvidenceBasis = field(default_factory=EvidenceBasis)
    """What the findings rest on (`basis_of`): listing (exact) or reads with the sampled fraction."""
    lost: tuple[str, ...] = ()
    """Lost bookies of the ledger (not registered, silent through the re-check): their copies are missing."""
    open_segment: SegmentSpan | None = None
    """The last segment of an open ledger, as far as it was checked (up to the LAC its bookies reported)."""

    @property
    def partial(self) -> bool:
        return bool(self.unverified)

    @property
    def basis(self) -> dict[str, Any]:
        """`rests_on` as the detail's JSON keys."""
        return basis_json(self.rests_on)

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
        rests_on=basis_of(by_bookie.values()),
        lost=tuple(b for b, ev in by_bookie.items() if ev.status == STATUS_LOST_BOOKIE),
        open_segment=open_segment(shape),
    )


def basis_of(evidence: Iterable[BookieEvidence]) -> EvidenceBasis:
    """"listing" when every bookie listed its entries, else "reads" with the sampled fraction: the share of
    the read-verified bookies' expected entries actually read (an ENOLEDGER answer proves all of them missing
    and counts as fully read; None when none answered)."""
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
        return EvidenceBasis("listing")
    fraction = round(min(read / expected, 1.0), 6) if expected else None
    return EvidenceBasis("reads", fraction)


def evidence_basis(evidence: Iterable[BookieEvidence]) -> dict[str, Any]:
    """`basis_of` as the detail's JSON keys."""
    return basis_json(basis_of(evidence))


def open_segment_note(span: SegmentSpan) -> OpenSegmentNote:
    """What a finding about the last segment of an open ledger says about it: `detail.open_segment`."""
    return OpenSegmentNote(span.index, span.first, span.last)


# -- the check --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LedgerEvidence:
    """A ledger's shape with every bookie's evidence: subject of the durability and availability checks."""

    shape: LedgerShape
    evidence: tuple[BookieEvidence, ...] = field(default_factory=tuple)


class DurabilityCheck(Check[LedgerEvidence]):
    """Durability findings (one per ledger, its worst bucket) and `extra_entries` (one per ledger and bookie).

    `max_ranges` bounds the ranges stored per row so one wiped bookie under a million-entry ledger cannot make
    a row of megabytes; counts in the detail stay exact and `ranges_truncated` says when ranges were cut.
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
        return [f.with_basis(a.rests_on) for f in self._findings(a)]

    @staticmethod
    def _open(a: DurabilityAssessment, ranges: Iterable[Range]) -> OpenSegmentNote | None:
        """The open segment, when any of `ranges` lies in the ledger's checked open segment."""
        span = a.open_segment
        if span is None or not any(lo <= span.last and hi >= span.first for lo, hi in ranges):
            return None
        return open_segment_note(span)

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
                    facts=CorruptEntriesDetail(
                        range_count(ev.corrupt), ranges, ev.entries_read, cut, self._open(a, ev.corrupt)
                    ),
                )
            )
        for ev in a.extras:
            ranges, cut = cap_ranges(ev.extra, self.max_ranges)
            out.append(
                Finding(
                    category=Category.EXTRA_ENTRIES,
                    ledger_id=a.ledger_id,
                    bookie_id=ev.bookie_id,
                    facts=ExtraEntriesDetail(ev.extra_count, ranges, cut, self._open(a, ev.extra)),
                )
            )
        return out

    def _durability_finding(self, a: DurabilityAssessment) -> Finding:
        truncated = False
        gaps: list[BookieGap] = []
        open_index = a.open_segment.index if a.open_segment is not None else None
        for bookie, run in a.missing:
            ranges, cut = cap_ranges(run.ranges, self.max_ranges)
            truncated |= cut
            gaps.append(
                BookieGap(bookie, run.segment_index, run.bookie_index, run.count, ranges,
                          lost=bookie in a.lost, in_open_segment=run.segment_index == open_index)
            )
        under, cut = cap_ranges(a.under_replicated, self.max_ranges)
        truncated |= cut
        worst, cut = cap_ranges(a.worst_entries, self.max_ranges)
        truncated |= cut
        bookies = a.bookies_missing_entries
        tail = a.open_segment
        in_open = tail is not None and any(run.segment_index == open_index for _b, run in a.missing)
        facts = DurabilityDetail(
            ensemble_size=a.ensemble_size,
            write_quorum=a.write_quorum,
            ack_quorum=a.ack_quorum,
            entries_checked=a.entries_checked,
            entries_below_write_quorum=a.entries_below(a.write_quorum),
            entries_below_ack_quorum=a.entries_below(a.ack_quorum),
            entries_without_replica=a.entries_below(1),
            replicas_histogram=a.replicas_histogram,
            worst_entries=worst,
            bookies_missing_entries=bookies,
            missing_by_bookie=tuple(gaps),
            partial=a.partial,
            unverified_bookies=tuple(ev.bookie_id for ev in a.unverified),
            ranges_truncated=truncated,
            lost_bookies=tuple(b for b in bookies if b in a.lost),
            open_segment=open_segment_note(tail) if in_open and tail is not None else None,
        )
        assert a.category is not None
        return Finding(
            category=a.category,
            ledger_id=a.ledger_id,
            segment_index=a.worst_segment,
            bookie_id=bookies[0] if len(bookies) == 1 else None,
            missing_entries=under,
            min_replicas=a.min_replicas,
            facts=facts,
        )
