"""Decommission audit (read-only): may these bookies be removed without losing an entry? Pure logic.

The question an SRE asks before taking bookies away. Evidence comes from a fresh checker run restricted to
the ledgers those bookies appear in (bkaudit.spark.decommission): what every *other* bookie actually holds.
For each such ledger the answer is a what-if with the checker's own arithmetic (`audit.durability.assess`):
the bookies to remove are treated as holding nothing, every other bookie as holding what it proved it holds.
The requested bookies are evaluated as removed *together* (removing two bookies of one write set at once is
exactly how data is lost), so a ledger that blocks is listed under each requested bookie it names.

A ledger blocks when, after the removal,
- `would_lose_entries`: some entries would have fewer than `min_copies` copies (default 1: none at all);
- `unverifiable`: a bookie that is staying did not answer, so its copies could not be counted;
- `evidence_truncated`: the check kept only part of the missing ranges (`max_ranges_per_row`), so the
  what-if cannot be exact: re-run with a larger limit.
An open ledger's last segment (still being written) is not judged: when its writer loses a bookie it
replaces it with an ensemble change, as BookKeeper does; such ledgers are counted as `open_ledgers`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from bkaudit.audit.base import DURABILITY_CATEGORIES, Category, Finding
from bkaudit.audit.detail_json import basis_json
from bkaudit.audit.details import DurabilityDetail, OpenSegmentUnknownDetail, UnverifiableDetail
from bkaudit.audit.durability import assess
from bkaudit.audit.evidence import BookieEvidence, MissingRun, compare_bookie
from bkaudit.audit.expected import expected_by_bookie
from bkaudit.audit.statuses import STATUS_OK
from bkaudit.model.shape import LedgerShape
from bkaudit.tables.checker_schemas import AUDIT_PARTITION, DECOMMISSION_AUDITS

WOULD_LOSE_ENTRIES = "would_lose_entries"
UNVERIFIABLE = "unverifiable"
EVIDENCE_TRUNCATED = "evidence_truncated"
MAX_RANGES = 100


@dataclass(frozen=True)
class LedgerVerdict:
    """The what-if for one ledger that names a requested bookie."""

    ledger_id: int
    bookies: tuple[str, ...]  # requested bookies in its ensembles
    entries_on: Mapping[str, int]  # entries each requested bookie must hold in the judged segments
    open_tail: bool  # an open ledger whose last (unjudged) segment names a requested bookie
    reason: str | None = None  # None = not blocking
    min_copies_after: int | None = None
    entries_at_risk: int = 0
    ranges: tuple[tuple[int, int], ...] = ()
    managed_ledger: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


def evidence_of_findings(
    findings: Iterable[Finding],
) -> tuple[dict[str, list[MissingRun]], set[str], bool]:
    """From one ledger's findings: missing runs per bookie, unverified bookies, truncated evidence."""
    missing: dict[str, list[MissingRun]] = {}
    unverified: set[str] = set()
    truncated = False
    for f in findings:
        facts = f.facts
        if f.category in DURABILITY_CATEGORIES and isinstance(facts, DurabilityDetail):
            truncated |= facts.ranges_truncated
            for gap in facts.missing_by_bookie:
                run = MissingRun(gap.segment, gap.bookie_index, gap.missing, gap.missing_count)
                missing.setdefault(gap.bookie, []).append(run)
        elif f.category is Category.LEDGER_UNVERIFIABLE:
            if isinstance(facts, UnverifiableDetail | OpenSegmentUnknownDetail):
                unverified.update(b.bookie for b in facts.bookies or ())
            if f.bookie_id:
                unverified.add(str(f.bookie_id))
    return missing, unverified, truncated


def evidence_basis_of_findings(findings: Iterable[Finding]) -> dict[str, Any]:
    """What the check's findings for one ledger rest on: {"evidence": "reads", "sampled_fraction": f} when
    some bookie was verified by reads (no listing), else {} (listing: exact)."""
    for f in findings:
        basis = f.notes.basis
        if basis is not None and basis.by_reads:
            return basis_json(basis)
    return {}


def judge(shape: LedgerShape, removing: Sequence[str], findings: Iterable[Finding] = (), *,
          min_copies: int = 1, managed_ledger: str | None = None) -> LedgerVerdict:
    """The what-if for one ledger: remove `removing` together; `findings`: its findings from the check.

    Findings resting on sampled reads (bookies without listing) prove only the entries actually read missing:
    the verdict is then a lower bound of the damage, and a blocking verdict says so in its detail.
    """
    found = list(findings)
    verdict = _judge(shape, removing, found, min_copies=min_copies, managed_ledger=managed_ledger)
    basis = evidence_basis_of_findings(found)
    if basis and verdict.reason is not None:
        verdict = replace(verdict, detail={**verdict.detail, **basis})
    return verdict


def _judge(shape: LedgerShape, removing: Sequence[str], findings: Sequence[Finding], *,
           min_copies: int, managed_ledger: str | None) -> LedgerVerdict:
    gone = set(removing)
    named = tuple(sorted({b for seg in shape.segments for b in seg.ensemble if b in gone}))
    expected = expected_by_bookie(shape)
    entries_on = {b: sum(e.count for e in expected.get(b, ())) for b in named}
    last = shape.segments[-1] if shape.segments else None
    open_tail = (not shape.closed) and last is not None and any(b in gone for b in last.ensemble)
    missing, unverified, truncated = evidence_of_findings(findings)
    base = LedgerVerdict(shape.ledger_id, named, entries_on, open_tail, managed_ledger=managed_ledger)
    staying_unverified = sorted(unverified - gone)
    if staying_unverified:
        return replace(base, reason=UNVERIFIABLE, detail={"unverified_bookies": staying_unverified})
    if truncated:
        return replace(base, reason=EVIDENCE_TRUNCATED)
    evidence = []
    for bookie in expected:
        if bookie in gone:
            evidence.append(compare_bookie(shape, bookie, None, expected[bookie]))
        else:
            evidence.append(BookieEvidence(bookie, STATUS_OK, tuple(missing.get(bookie, ()))))
    a = assess(shape, evidence)
    if not a.entries_checked:
        return replace(base, min_copies_after=shape.write_quorum)
    at_risk = a.entries_below(min_copies)
    if at_risk:
        worst = a.worst_entries[:MAX_RANGES]
        histogram = {str(k): v for k, v in a.replicas_histogram.items()}
        return replace(base, reason=WOULD_LOSE_ENTRIES, min_copies_after=a.min_replicas,
                       entries_at_risk=at_risk, ranges=tuple(worst), detail={"replicas_histogram": histogram})
    return replace(base, min_copies_after=a.min_replicas)


@dataclass
class BookieAnswer:
    """The answer for one requested bookie."""

    bookie_id: str
    state: str | None
    ledgers: int = 0
    open_ledgers: int = 0
    entries: int = 0
    blocking: list[LedgerVerdict] = field(default_factory=list)

    @property
    def safe(self) -> bool:
        return not self.blocking

    def summary(self) -> dict[str, Any]:
        return {"bookie_id": self.bookie_id, "safe": self.safe, "state": self.state, "ledgers": self.ledgers,
                "open_ledgers": self.open_ledgers, "entries": self.entries,
                "blocking": [blocking_summary(v) for v in self.blocking]}


def blocking_summary(v: LedgerVerdict) -> dict[str, Any]:
    return {"ledger_id": v.ledger_id, "reason": v.reason, "min_copies_after": v.min_copies_after,
            "entries_at_risk": v.entries_at_risk}


def answers(requested: Sequence[str], verdicts: Iterable[LedgerVerdict],
            states: Mapping[str, str] | None = None) -> list[BookieAnswer]:
    """Per requested bookie (in the order asked): its ledgers, and those that block its removal."""
    out = {b: BookieAnswer(b, (states or {}).get(b)) for b in requested}
    for v in verdicts:
        for b in v.bookies:
            ans = out[b]
            ans.ledgers += 1
            ans.open_ledgers += 1 if v.open_tail else 0
            ans.entries += v.entries_on.get(b, 0)
            if v.reason is not None:
                ans.blocking.append(v)
    return list(out.values())


def evidence_summary(verified_by_reads: Sequence[str], percentage: float) -> dict[str, Any]:
    """What the audit's evidence rests on: exact unless a staying bookie was sampled by reads below 100%."""
    readers = sorted(verified_by_reads)
    return {"verified_by_reads": readers, "verification_percentage": percentage,
            "exact": not readers or percentage >= 100}


def table_rows(audit_id: str, snapshot_id: str, audit_date: str, results: Sequence[BookieAnswer], *,
               min_copies: int, check_run_id: str | None, audited_at_us: int,
               verified_by_reads: Sequence[str] = (), verification_percentage: float = 0.0) -> pa.Table:
    """The `decommission_audits` rows of one audit."""
    requested = [a.bookie_id for a in results]
    rows = []
    for a in results:
        rows.append({
            "audit_id": audit_id, "snapshot_id": snapshot_id, AUDIT_PARTITION: audit_date,
            "bookie_id": a.bookie_id, "requested": requested, "state": a.state, "safe": a.safe,
            "ledgers": a.ledgers, "open_ledgers": a.open_ledgers, "entries": a.entries,
            "blocking_count": len(a.blocking),
            "blocking": [{**blocking_summary(v), "ranges": [{"first": x, "last": y} for x, y in v.ranges],
                          "managed_ledger": v.managed_ledger, "detail": json.dumps(dict(v.detail))}
                         for v in a.blocking],
            "min_copies": min_copies, "check_run_id": check_run_id, "audited_at": audited_at_us,
            "verified_by_reads": sorted(verified_by_reads),
            "verification_percentage": verification_percentage,
        })
    return pa.Table.from_pylist(rows, schema=DECOMMISSION_AUDITS.schema)
