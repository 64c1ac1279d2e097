"""Findings on their way through a run: typed from the checks to the result sink, one Arrow encoding between.

`Located` is a finding with where it was computed from (znode version and mzxid) and the ledger's managed
ledger; the driver keeps it typed until the result sink writes it. Only the executors' findings cross a
process boundary (Spark tasks → driver): `FINDING_SCHEMA` is that one encoding, decoded once by `located_of`.
`Violation` is a finding as a run reports it (published or not); `violation_of_row` reads one back from the
`violations` table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from bkaudit.audit import detail_json
from bkaudit.audit.base import Category, Finding, Range
from bkaudit.audit.details import PlacementDetail
from bkaudit.tables.checker_schemas import RANGE_STRUCT

FINDING_SCHEMA = pa.schema(
    [
        pa.field("ledger_id", pa.int64()),
        pa.field("category", pa.string()),
        pa.field("segment_index", pa.int32()),
        pa.field("bookie_id", pa.string()),
        pa.field("missing_entries", pa.list_(RANGE_STRUCT)),
        pa.field("min_replicas", pa.int32()),
        pa.field("detail", pa.string()),
        pa.field("znode_version", pa.int32()),
        pa.field("znode_mzxid", pa.int64()),
        pa.field("managed_ledger", pa.string()),
    ]
)
"""A finding on its way from the executors to the driver (before the re-read)."""


@dataclass(frozen=True, slots=True)
class Located:
    """A finding with the znode version it was computed from and the ledger's managed ledger (Pulsar)."""

    finding: Finding
    version: int | None = None
    mzxid: int | None = None
    managed_ledger: str | None = None

    def with_finding(self, finding: Finding) -> Located:
        return replace(self, finding=finding)


def ranges_json(ranges: Sequence[Range] | None) -> list[dict[str, int]] | None:
    return None if ranges is None else [{"first": lo, "last": hi} for lo, hi in ranges]


def finding_row(loc: Located) -> dict[str, Any]:
    """The FINDING_SCHEMA row of a located finding."""
    f = loc.finding
    return {
        "ledger_id": f.ledger_id,
        "category": f.category.value,
        "segment_index": f.segment_index,
        "bookie_id": f.bookie_id,
        "missing_entries": ranges_json(f.missing_entries),
        "min_replicas": f.min_replicas,
        "detail": detail_json.text(f),
        "znode_version": loc.version,
        "znode_mzxid": loc.mzxid,
        "managed_ledger": loc.managed_ledger,
    }


def finding_of_row(row: Mapping[str, Any]) -> Finding:
    """A Finding from a FINDING_SCHEMA or `violations` row (detail as JSON text)."""
    ranges = row.get("missing_entries")
    category = Category(row["category"])
    facts, notes = detail_json.parse_text(category, row.get("detail"))
    return Finding(
        category=category,
        ledger_id=row.get("ledger_id"),
        segment_index=row.get("segment_index"),
        bookie_id=row.get("bookie_id"),
        missing_entries=None if ranges is None else tuple((int(r["first"]), int(r["last"])) for r in ranges),
        min_replicas=row.get("min_replicas"),
        facts=facts,
        notes=notes,
    )


def located_of(row: Mapping[str, Any]) -> Located:
    return Located(
        finding_of_row(row), row.get("znode_version"), row.get("znode_mzxid"), row.get("managed_ledger")
    )


@dataclass(frozen=True, slots=True)
class Violation:
    """A finding as a run reports it: the `violations` row without the run's columns.

    The finding's own fields are read on `finding`. The properties are columns the finding has only by
    computing them: `bookkeeper_verdict` (placement facts alone carry one), `evidence` and `sampled_fraction`
    (from the run's evidence basis, None without one).
    """

    finding: Finding
    managed_ledger: str | None = None
    published: bool = False

    @property
    def bookkeeper_verdict(self) -> str | None:
        facts = self.finding.facts
        return facts.bookkeeper_verdict if isinstance(facts, PlacementDetail) else None

    @property
    def evidence(self) -> str | None:
        basis = self.finding.notes.basis
        return None if basis is None else basis.evidence

    @property
    def sampled_fraction(self) -> float | None:
        basis = self.finding.notes.basis
        return None if basis is None else basis.sampled_fraction

    def row(self) -> dict[str, Any]:
        """The finding's columns of a `violations` row (the run's columns are the sink's)."""
        f = self.finding
        return {
            "ledger_id": f.ledger_id,
            "category": f.category.value,
            "severity": f.severity.value,
            "segment_index": f.segment_index,
            "bookie_id": f.bookie_id,
            "missing_entries": ranges_json(f.missing_entries),
            "min_replicas": f.min_replicas,
            "managed_ledger": self.managed_ledger,
            "detail": detail_json.text(f),
            "bookkeeper_verdict": self.bookkeeper_verdict,
            "under_repair": f.under_repair,
            "published": self.published,
            "evidence": self.evidence,
            "sampled_fraction": self.sampled_fraction,
        }


def violations_of(found: Sequence[Located]) -> list[Violation]:
    """The run's violations in report order (category, ledger, bookie)."""
    out = [Violation(x.finding, x.managed_ledger) for x in found]
    out.sort(key=lambda v: _report_order(v.finding))
    return out


def _report_order(f: Finding) -> tuple[str, int, str]:
    return f.category.value, f.ledger_id if f.ledger_id is not None else -1, f.bookie_id or ""


def violation_of_row(row: Mapping[str, Any]) -> Violation:
    """A Violation read back from a `violations` row."""
    return Violation(finding_of_row(row), row.get("managed_ledger"), bool(row.get("published")))
