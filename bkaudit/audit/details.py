"""What each category of finding says, typed: one frozen dataclass per category's detail.

Decisions (what goes to the under-replication queue, whether a bookie may be removed, the row's columns) read
these fields, so a renamed or misspelled field is a type error, not a silently empty `.get()`. The JSON of the
`violations.detail` column (a public interface, docs/tables.md) is rendered from them, and parsed back into
them, in one place: `bkaudit.audit.detail_json`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bkaudit.audit.base import Range

CAUSE_LOST_BOOKIE = "lost_bookie"
"""`detail.cause` of a durability finding counting a lost bookie's copies as missing."""


@dataclass(frozen=True, slots=True)
class OpenSegmentNote:
    """The last segment of an open ledger as far as it was checked (`checked_to` None: not checked at all)."""

    segment: int
    first_entry: int
    checked_to: int | None


@dataclass(frozen=True, slots=True)
class BookieGap:
    """Entries of one (segment, bookie index) a bookie lacks: one item of `missing_by_bookie`."""

    bookie: str
    segment: int
    bookie_index: int
    missing_count: int
    missing: tuple[Range, ...]
    lost: bool = False
    """The bookie is lost (not registered, silent): its copies count missing (`cause: lost_bookie`)."""
    in_open_segment: bool = False


@dataclass(frozen=True, slots=True)
class DurabilityDetail:
    """no_replica / below_ack_quorum / below_write_quorum: one ledger's worst entries, with exact counts."""

    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    entries_checked: int
    entries_below_write_quorum: int
    entries_below_ack_quorum: int
    entries_without_replica: int
    replicas_histogram: Mapping[int, int]
    worst_entries: tuple[Range, ...]
    bookies_missing_entries: tuple[str, ...]
    """Distinct bookies lacking entries, first seen first: the replicas of an under-replication marker."""
    missing_by_bookie: tuple[BookieGap, ...]
    partial: bool
    unverified_bookies: tuple[str, ...]
    ranges_truncated: bool
    lost_bookies: tuple[str, ...] = ()
    open_segment: OpenSegmentNote | None = None


@dataclass(frozen=True, slots=True)
class ExtraEntriesDetail:
    """extra_entries: entries a bookie holds that no write set gives it."""

    extra_count: int
    extra_entries: tuple[Range, ...]
    ranges_truncated: bool
    open_segment: OpenSegmentNote | None = None


@dataclass(frozen=True, slots=True)
class CorruptEntriesDetail:
    """corrupt_entries: entries read back whose digest or ids did not verify."""

    corrupt_count: int
    corrupt_entries: tuple[Range, ...]
    entries_read: int
    ranges_truncated: bool
    open_segment: OpenSegmentNote | None = None


@dataclass(frozen=True, slots=True)
class PlacementSegment:
    """One segment that is not strictly placed."""

    segment: int
    ensemble: tuple[str, ...]
    adherence: str
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PlacementDetail:
    """placement_fail / placement_soft: the worst adherence, the segments behind it, the locations."""

    policy: str
    adherence: str
    write_quorum: int
    ack_quorum: int
    segments: tuple[PlacementSegment, ...]
    locations: Mapping[str, str | None]
    bookkeeper_verdict: str | None = None
    """What BookKeeper's own placementPolicyCheck would say, when it differs in what it checks."""


@dataclass(frozen=True, slots=True)
class OverdueMarkerDetail:
    """underreplicated_too_long: a marker older than the grace period."""

    marked_at_ms: int
    age_s: float
    grace_period_s: float
    replicas: tuple[str, ...]
    locked_by: str | None


@dataclass(frozen=True, slots=True)
class UnreachableBookieDetail:
    """bookie_unreachable_but_registered: how a registered bookie failed through the run."""

    state: str | None
    attempts: int
    status: str | None
    error: str | None
    ledgers_unverified: int


@dataclass(frozen=True, slots=True)
class UnverifiedBookie:
    """A bookie a ledger could not be verified on (`reason_code` None: not given, as for an open segment)."""

    bookie: str
    status: str | None
    error: str | None
    reason_code: str | None = None


@dataclass(frozen=True, slots=True)
class UnverifiableDetail:
    """ledger_unverifiable: why (`reason` in words, `reason_code` one of the REASON_* values) and on which
    bookies."""

    reason: str
    reason_code: str
    bookies: tuple[UnverifiedBookie, ...] | None = None
    versions: tuple[int, ...] | None = None
    open_segment: OpenSegmentNote | None = None


@dataclass(frozen=True, slots=True)
class OpenSegmentUnknownDetail:
    """ledger_unverifiable for an open ledger whose last segment could not be checked (its LAC unknown)."""

    reason: str
    reason_code: str
    open_segment: OpenSegmentNote
    bookies: tuple[UnverifiedBookie, ...]


@dataclass(frozen=True, slots=True)
class MetadataDetail:
    """metadata_unparseable: the decoder's error (`parsed` False, with the blob's size) or the problems of
    metadata that decoded but contradicts itself (`parsed` True)."""

    error: str
    parsed: bool
    raw_bytes: int | None = None
    problems: tuple[str, ...] = ()


FindingDetail = (
    DurabilityDetail
    | ExtraEntriesDetail
    | CorruptEntriesDetail
    | PlacementDetail
    | OverdueMarkerDetail
    | UnreachableBookieDetail
    | UnverifiableDetail
    | OpenSegmentUnknownDetail
    | MetadataDetail
)
"""A finding's category-specific detail."""
