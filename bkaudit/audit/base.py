"""What every check shares: categories, severities, the finding value object and the `Check` base class.

BookKeeper's Auditor runs one task class per concern (`AuditorCheckAllLedgersTask`,
`AuditorPlacementPolicyCheckTask`, `AuditorReplicasCheckTask`, ...) on a shared `AuditorTask` base. The
checker mirrors that: one module per concern (durability, placement, progress, availability, metadata), each a
`Check` subclass whose `evaluate` is a pure function from value objects to `Finding`s. The Spark job only
moves rows in and findings out; no domain rule lives there, so every rule is unit-tested without servers.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

if TYPE_CHECKING:
    from bkaudit.audit.details import FindingDetail

Range = tuple[int, int]
"""An inclusive range of entry ids (first, last)."""


class Severity(enum.Enum):
    """How loud a finding is; ordered so `--fail-on warning` also fails on critical."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


class Category(enum.Enum):
    """Violation categories; the values are the `violations.category` column and the `--json` count keys."""

    NO_REPLICA = "no_replica"
    BELOW_ACK_QUORUM = "below_ack_quorum"
    BELOW_WRITE_QUORUM = "below_write_quorum"
    EXTRA_ENTRIES = "extra_entries"
    CORRUPT_ENTRIES = "corrupt_entries"
    PLACEMENT_FAIL = "placement_fail"
    PLACEMENT_SOFT = "placement_soft"
    UNDERREPLICATED_TOO_LONG = "underreplicated_too_long"
    BOOKIE_UNREACHABLE_BUT_REGISTERED = "bookie_unreachable_but_registered"
    LEDGER_UNVERIFIABLE = "ledger_unverifiable"
    METADATA_UNPARSEABLE = "metadata_unparseable"

    @property
    def severity(self) -> Severity:
        return SEVERITY[self]


SEVERITY: Mapping[Category, Severity] = {
    Category.NO_REPLICA: Severity.CRITICAL,
    Category.BELOW_ACK_QUORUM: Severity.CRITICAL,
    Category.METADATA_UNPARSEABLE: Severity.CRITICAL,
    Category.BELOW_WRITE_QUORUM: Severity.WARNING,
    Category.PLACEMENT_FAIL: Severity.WARNING,
    Category.UNDERREPLICATED_TOO_LONG: Severity.WARNING,
    Category.BOOKIE_UNREACHABLE_BUT_REGISTERED: Severity.WARNING,
    Category.LEDGER_UNVERIFIABLE: Severity.WARNING,
    Category.PLACEMENT_SOFT: Severity.INFO,
    Category.EXTRA_ENTRIES: Severity.INFO,
    Category.CORRUPT_ENTRIES: Severity.WARNING,
}
"""The issue's severity table (critical: data is or may be lost; warning: act soon; info: look when idle)."""

DURABILITY_CATEGORIES: tuple[Category, ...] = (
    Category.NO_REPLICA,
    Category.BELOW_ACK_QUORUM,
    Category.BELOW_WRITE_QUORUM,
)
"""Categories that feed the under-replication queue (`--publish-underreplicated`)."""

PLACEMENT_CATEGORIES: tuple[Category, ...] = (Category.PLACEMENT_FAIL, Category.PLACEMENT_SOFT)

RECHECKED_CATEGORIES: frozenset[Category] = frozenset(
    DURABILITY_CATEGORIES
    + PLACEMENT_CATEGORIES
    + (Category.EXTRA_ENTRIES, Category.CORRUPT_ENTRIES, Category.LEDGER_UNVERIFIABLE)
)
"""Ledger findings derived from possibly stale metadata: re-read the znode before writing them (BP-34)."""


@dataclass(frozen=True, slots=True)
class EvidenceBasis:
    """What a ledger's findings rest on: every bookie's exact list of entries ("listing"), or reads
    ("reads", with the share of the read-verified bookies' expected entries actually read; None: none
    answered)."""

    evidence: str = "listing"
    sampled_fraction: float | None = None

    @property
    def by_reads(self) -> bool:
        return self.evidence == "reads"


@dataclass(frozen=True, slots=True)
class ZnodeStamp:
    """The znode version a finding was computed from (the re-read compares it before the row is written)."""

    version: int | None


@dataclass(frozen=True, slots=True)
class RunNotes:
    """What the run adds to a check's finding (the check itself leaves them empty).

    `under_repair`: the ledger already carries an under-replication marker (`marker_*`): reported, but not
    counted as a new violation and not published again. `reevaluated`: its metadata changed during the run
    and it was judged again.
    """

    basis: EvidenceBasis | None = None
    znode: ZnodeStamp | None = None
    reevaluated: bool = False
    under_repair: bool = False
    marker_replicas: tuple[str, ...] = ()
    marker_ctime_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    """One violation as a check sees it, before the job adds run id, timestamps and publication state.

    `missing_entries` are the entry ranges the finding is about (durability: entries below WQ copies);
    `facts` is the category's typed detail (`bkaudit.audit.details`), with everything a person needs to act
    without re-running the check; `notes` what the run added. `detail` is both as the JSON document of the
    `violations.detail` column (`bkaudit.audit.detail_json`, a public interface): for people and files,
    never for decisions.
    """

    category: Category
    ledger_id: int | None = None
    segment_index: int | None = None
    bookie_id: str | None = None
    missing_entries: tuple[Range, ...] | None = None
    min_replicas: int | None = None
    facts: FindingDetail | None = None
    notes: RunNotes = field(default_factory=RunNotes)

    @property
    def severity(self) -> Severity:
        return self.category.severity

    @property
    def under_repair(self) -> bool:
        return self.notes.under_repair

    @property
    def znode_version(self) -> int | None:
        return None if self.notes.znode is None else self.notes.znode.version

    @property
    def detail(self) -> Mapping[str, Any]:
        from bkaudit.audit.detail_json import render

        return render(self)

    def with_basis(self, basis: EvidenceBasis) -> Finding:
        """A copy saying what its evidence rests on (findings are immutable)."""
        return replace(self, notes=replace(self.notes, basis=basis))

    def stamped(self, version: int | None, *, reevaluated: bool = False) -> Finding:
        """A copy saying which znode version it was computed from (`reevaluated`: judged again after the
        metadata changed during the run)."""
        again = self.notes.reevaluated or reevaluated
        notes = replace(self.notes, znode=ZnodeStamp(version), reevaluated=again)
        return replace(self, notes=notes)

    def under_marker(self, replicas: Sequence[str], ctime_ms: int | None) -> Finding:
        """A copy saying that its ledger already carries an under-replication marker."""
        notes = replace(
            self.notes, under_repair=True, marker_replicas=tuple(replicas), marker_ctime_ms=ctime_ms
        )
        return replace(self, notes=notes)


SubjectT = TypeVar("SubjectT")


class Check(ABC, Generic[SubjectT]):
    """A pure check over one subject (a ledger, a marker, a bookie report) producing zero or more findings.

    Subclasses declare the categories they can emit so the job can report an exact zero for every category it
    ran, which BookKeeper's gauges cannot distinguish from "not run".
    """

    name: ClassVar[str]
    categories: ClassVar[tuple[Category, ...]]

    @abstractmethod
    def evaluate(self, subject: SubjectT) -> list[Finding]:
        """Findings for one subject; never raises on bad input (bad input is itself a finding)."""

    def evaluate_all(self, subjects: Iterable[SubjectT]) -> list[Finding]:
        out: list[Finding] = []
        for subject in subjects:
            out.extend(self.evaluate(subject))
        return out


def merge_ranges(ranges: Iterable[Range]) -> list[Range]:
    """Sort and merge overlapping or adjacent inclusive ranges."""
    out: list[Range] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def range_count(ranges: Iterable[Range]) -> int:
    """Number of ids covered by disjoint inclusive ranges."""
    return sum(hi - lo + 1 for lo, hi in ranges)


def cap_ranges(ranges: Sequence[Range], limit: int) -> tuple[tuple[Range, ...], bool]:
    """At most `limit` ranges and whether some were cut (counts stay exact elsewhere; rows stay bounded)."""
    if limit <= 0 or len(ranges) <= limit:
        return tuple(ranges), False
    return tuple(ranges[:limit]), True
