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
from typing import Any, ClassVar, Generic, TypeVar

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
class Finding:
    """One violation as a check sees it, before the job adds run id, timestamps and publication state.

    `missing_entries` are the entry ranges the finding is about (durability: entries below WQ copies);
    `detail` is a JSON-able mapping with everything a person needs to act without re-running the check.
    `detail["under_repair"] = True` marks a ledger that already carries an under-replication marker: reported,
    but not counted as a new violation and not published again.
    """

    category: Category
    ledger_id: int | None = None
    segment_index: int | None = None
    bookie_id: str | None = None
    missing_entries: tuple[Range, ...] | None = None
    min_replicas: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def severity(self) -> Severity:
        return self.category.severity

    @property
    def under_repair(self) -> bool:
        return bool(self.detail.get("under_repair", False))

    def with_detail(self, **values: Any) -> Finding:
        """A copy with `values` merged into `detail` (findings are immutable)."""
        merged = dict(self.detail)
        merged.update(values)
        return replace(self, detail=merged)


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
