"""The per-ledger combine: every bookie's evidence of one ledger → durability, extra-entry and unverifiable
findings. Pure functions; the Spark stage (`combine_partition` over rows sorted by ledger) and the driver
(`combine_rows`, for a few thousand ledgers) run the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from bkaudit.audit.availability import LedgerAvailabilityCheck
from bkaudit.audit.base import Finding
from bkaudit.audit.durability import DurabilityCheck, assess
from bkaudit.audit.evidence import BookieEvidence, lost_evidence
from bkaudit.audit.statuses import is_transport_failure
from bkaudit.job.fanout import RESPONSE_SCHEMA, SHAPE_SCHEMA, evidence_of_row, shape_of
from bkaudit.job.findings import FINDING_SCHEMA, Located, finding_row
from bkaudit.model.shape import LedgerShape

COMBINE_SCHEMA = pa.schema([*SHAPE_SCHEMA, *(f for f in RESPONSE_SCHEMA if f.name not in SHAPE_SCHEMA.names)])
"""A response row with its ledger's shape: the input of the per-ledger combine."""

OUTPUT_ROWS = 2048


def refine_status(shape: LedgerShape, ev: BookieEvidence, lost: Collection[str]) -> BookieEvidence:
    """A lost bookie's failure becomes its copies missing (LOST_BOOKIE): not registered, and it gave no
    answer through the delayed re-check (`bookie_stats.lost_bookies`). BookKeeper's Auditor marks such a
    bookie's ledgers under-replicated (AuditorBookieCheckTask), and LedgerChecker counts its fragments bad
    without asking it. A registered bookie that does not answer stays unverified (it may come back)."""
    if ev.settled or ev.bookie_id not in lost or not is_transport_failure(ev.status):
        return ev
    return lost_evidence(
        shape, ev.bookie_id, f"lost: not registered, no answer through the re-check ({ev.status}: {ev.error})"
    )


def ledger_findings(
    shape: LedgerShape,
    evidence: Iterable[BookieEvidence],
    *,
    max_ranges: int,
    lost: Collection[str],
) -> list[Finding]:
    """Durability, extra entries and unverifiable findings of one ledger from its bookies' evidence."""
    a = assess(shape, [refine_status(shape, ev, lost) for ev in evidence])
    found = DurabilityCheck(max_ranges).findings(a)
    unverified = LedgerAvailabilityCheck().from_assessment(a)
    found += [f.with_basis(a.rests_on) for f in unverified]
    return [f.stamped(shape.version) for f in found]


def _ledger(
    rows: list[dict[str, Any]], max_ranges: int, lost: Collection[str], open_ends: Mapping[int, int]
) -> list[Located]:
    shape = shape_of(rows[0])
    shape = shape.with_open_end(open_ends.get(shape.ledger_id))
    found = ledger_findings(
        shape, (evidence_of_row(shape, r) for r in rows), max_ranges=max_ranges, lost=lost
    )
    head = rows[0]
    return [
        Located(f, head.get("znode_version"), head.get("znode_mzxid"), head.get("managed_ledger"))
        for f in found
    ]


def combine_rows(
    rows: Iterable[dict[str, Any]],
    *,
    max_ranges: int,
    lost: Collection[str],
    open_ends: Mapping[int, int] | None = None,
) -> Iterator[Located]:
    """COMBINE rows, all rows of a ledger next to each other → its findings. `open_ends`: how far the run
    checked each open ledger's last segment (`LedgerShape.open_end`), as the ledger pass did."""
    ends = open_ends or {}
    current: list[dict[str, Any]] = []
    for row in rows:
        if current and row["ledger_id"] != current[0]["ledger_id"]:
            yield from _ledger(current, max_ranges, lost, ends)
            current = []
        current.append(row)
    if current:
        yield from _ledger(current, max_ranges, lost, ends)


def combine_partition(
    max_ranges: int, lost: frozenset[str], open_ends: Mapping[int, int] | None = None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The Spark task: COMBINE rows sorted by ledger → FINDING rows (a ledger's rows in one partition)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        out: list[dict[str, Any]] = []
        rows = (row for batch in batches for row in batch.to_pylist())
        for loc in combine_rows(rows, max_ranges=max_ranges, lost=lost, open_ends=open_ends):
            out.append(finding_row(loc))
            if len(out) >= OUTPUT_ROWS:
                yield pa.RecordBatch.from_pylist(out, schema=FINDING_SCHEMA)
                out = []
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=FINDING_SCHEMA)

    return run


def combine_answers(
    answers: pa.Table,
    shapes: Mapping[int, Mapping[str, Any]],
    *,
    max_ranges: int,
    lost: Collection[str],
    open_ends: Mapping[int, int] | None = None,
) -> list[Located]:
    """The combine on the driver: RESPONSE rows and SHAPE rows by ledger id (ledgers without a shape, i.e.
    unparseable metadata, are skipped: the ledger pass reported them)."""
    rows = [{**shapes[a["ledger_id"]], **a} for a in answers.to_pylist() if a["ledger_id"] in shapes]
    rows.sort(key=lambda r: (r["ledger_id"], r["bookie_id"], r["attempt"]))
    return list(combine_rows(rows, max_ranges=max_ranges, lost=lost, open_ends=open_ends))
