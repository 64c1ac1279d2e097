"""Per (ledger, bookie), on the executor that talked to the bookie: its answer as missing and extra entries.

`compare_bookie` turns the bookie's `AvailabilityOfEntriesOfLedger` into missing ranges per (segment, bookie
index) and the entries it holds but should not (`extra_entries`). Expected entries are `Striping`s from
`bkaudit.audit.expected`, and the difference is group arithmetic in `bkaudit.formats.availability`: no
per-entry loop anywhere. `ENOLEDGER` means "this bookie holds nothing", so every expected entry is missing (as
BookKeeper); a lost bookie holds nothing either (`lost_evidence`); any other failure leaves the bookie
unverified (`failed_evidence`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from bkaudit.audit.base import Range, merge_ranges, range_count
from bkaudit.audit.expected import Expected, checked_limit, expected_by_bookie
from bkaudit.audit.statuses import ANSWERED, SETTLED, STATUS_LOST_BOOKIE, STATUS_NO_LEDGER, STATUS_OK
from bkaudit.model.quorum import Striping
from bkaudit.model.shape import LedgerShape


class EntrySet(Protocol):
    """What the check needs from a decoded `bkaudit.formats.availability.Availability`."""

    @property
    def total(self) -> int: ...

    def runs(self) -> Iterator[tuple[int, int]]: ...

    def missing(self, first: int, last: int, expected: Striping | None = None) -> list[tuple[int, int]]: ...

    def missing_count(self, first: int, last: int, expected: Striping | None = None) -> int: ...

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
