"""How each bookie fared over a run, from the fan-out's call log: the `bookie_checks` rows and the
`bookie_unreachable_but_registered` findings. Pure (Arrow compute over the log); no Spark, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bkaudit.audit.availability import BookieAvailabilityCheck, BookieReport, latency_percentiles
from bkaudit.audit.reads import EVIDENCE_LISTING
from bkaudit.audit.statuses import ANSWERED, JUDGED
from bkaudit.job.cluster_view import ClusterView
from bkaudit.job.findings import Located

CALL_LOG_COLUMNS = ("ledger_id", "bookie_id", "status", "error", "call_id", "call_ms", "attempt")
"""One row per (ledger, bookie, attempt) asked: what `bookie_stats` reads."""


@dataclass(frozen=True, slots=True)
class BookieCheck:
    """One bookie over the whole run (a `bookie_checks` row without the run's columns)."""

    bookie_id: str
    attempts: int
    reachable: bool
    """Some call in the bookie's last attempt got a BookKeeper answer (even an error status)."""
    state: str
    registered: bool
    target: str | None
    calls: int
    ledgers_listed: int
    errors: int
    error_statuses: Mapping[str, int] = field(default_factory=dict)
    last_error: str | None = None
    ledgers_unverified: int = 0
    latency_ms_p50: float | None = None
    latency_ms_p95: float | None = None
    latency_ms_p99: float | None = None
    latency_ms_max: float | None = None
    evidence: str = EVIDENCE_LISTING
    evidence_reason: str | None = None

    def row(self) -> dict[str, Any]:
        """The bookie's columns of a `bookie_checks` row."""
        return {
            "bookie_id": self.bookie_id,
            "state": self.state,
            "registered": self.registered,
            "reachable": self.reachable,
            "target": self.target,
            "attempts": self.attempts,
            "calls": self.calls,
            "ledgers_listed": self.ledgers_listed,
            "errors": self.errors,
            "error_statuses": list(self.error_statuses.items()),
            "last_error": self.last_error,
            "ledgers_unverified": self.ledgers_unverified,
            "latency_ms_p50": self.latency_ms_p50,
            "latency_ms_p95": self.latency_ms_p95,
            "latency_ms_p99": self.latency_ms_p99,
            "latency_ms_max": self.latency_ms_max,
            "evidence": self.evidence,
            "evidence_reason": self.evidence_reason,
        }


def bookie_stats(
    calls: pa.Table, *, view: ClusterView, evidence: Mapping[str, tuple[str, str]]
) -> list[BookieCheck]:
    """Per bookie asked: calls, answers, errors, latency percentiles, reachability in its last attempt.

    `calls` has CALL_LOG_COLUMNS; `evidence` is each bookie's (mode, why) of this run. Column-wise over the
    log: no per-row Python objects.
    """
    if calls.num_rows == 0:
        return []
    status = calls.column("status")
    ok = pc.is_in(status, pa.array(sorted(ANSWERED)))
    transport = pc.invert(pc.is_in(status, pa.array(sorted(JUDGED))))
    t = calls.append_column("ok", ok).append_column("transport", transport)
    last = {
        r["bookie_id"]: r["attempt_max"]
        for r in t.group_by("bookie_id").aggregate([("attempt", "max")]).to_pylist()
    }
    by_status = t.group_by(["bookie_id", "status"]).aggregate([("ledger_id", "count"), ("error", "max")])
    calls_t = (
        t.filter(pc.is_valid(t.column("call_id")))
        .group_by(["bookie_id", "call_id"])
        .aggregate([("call_ms", "max")])
    )
    lat: dict[str, list[float]] = {}
    for r in calls_t.to_pylist():
        lat.setdefault(r["bookie_id"], []).append(float(r["call_ms_max"] or 0.0))
    reach: dict[str, bool] = {}
    groups = t.group_by(["bookie_id", "attempt", "transport"]).aggregate([("ledger_id", "count")])
    for r in groups.to_pylist():
        if r["attempt"] == last[r["bookie_id"]] and not r["transport"]:
            reach[r["bookie_id"]] = True
    # (ledger, bookie) pairs never answered in any attempt: unverified
    answered_pairs = t.filter(ok).select(["ledger_id", "bookie_id"])
    failed_pairs = t.filter(pc.invert(ok)).select(["ledger_id", "bookie_id"])
    unverified: dict[str, int] = {}
    if failed_pairs.num_rows:
        still = failed_pairs.join(answered_pairs, ["ledger_id", "bookie_id"], join_type="left anti")
        for r in still.group_by("bookie_id").aggregate([("ledger_id", "count_distinct")]).to_pylist():
            unverified[r["bookie_id"]] = int(r["ledger_id_count_distinct"])
    listed: dict[str, int] = {}
    errors: dict[str, int] = {}
    statuses: dict[str, dict[str, int]] = {}
    last_error: dict[str, str | None] = {}
    for r in by_status.to_pylist():
        b, n = r["bookie_id"], int(r["ledger_id_count"])
        if r["status"] in ANSWERED:
            listed[b] = listed.get(b, 0) + n
        else:
            errors[b] = errors.get(b, 0) + n
            statuses.setdefault(b, {})[r["status"]] = n
            last_error[b] = r["error_max"] or last_error.get(b)
    out = []
    for b in sorted(last):
        mode, why = evidence.get(b, (EVIDENCE_LISTING, None))
        values = lat.get(b, [])
        pct = latency_percentiles(values)
        out.append(
            BookieCheck(
                bookie_id=b,
                attempts=int(last[b]) + 1,
                reachable=reach.get(b, False),
                state=view.state(b),
                registered=b in view.registered,
                target=view.targets.get(b),
                calls=len(values),
                ledgers_listed=listed.get(b, 0),
                errors=errors.get(b, 0),
                error_statuses=statuses.get(b, {}),
                last_error=last_error.get(b),
                ledgers_unverified=unverified.get(b, 0),
                latency_ms_p50=pct.get("p50"),
                latency_ms_p95=pct.get("p95"),
                latency_ms_p99=pct.get("p99"),
                latency_ms_max=max(values) if values else None,
                evidence=mode,
                evidence_reason=why,
            )
        )
    return out


def lost_bookies(bookies: Sequence[BookieCheck], *, registered_now: Collection[str]) -> frozenset[str]:
    """Bookies the run counts as lost: no answer in their last attempt (after BP-34's delayed re-check), and
    registered neither when the run began nor after the re-check (`registered_now`). BookKeeper's Auditor
    marks the ledgers of a bookie in no registration under-replicated (AuditorBookieCheckTask): their copies
    count missing (`combine.refine_status`)."""
    now = frozenset(registered_now)
    return frozenset(b.bookie_id for b in bookies if not (b.reachable or b.registered or b.bookie_id in now))


def bookie_findings(bookies: Sequence[BookieCheck], *, state_of: Callable[[str], str]) -> list[Located]:
    """`bookie_unreachable_but_registered` for bookies unreachable in their last attempt and still registered
    now (`state_of` re-reads the registration: writable, readonly or absent)."""
    check = BookieAvailabilityCheck()
    out: list[Located] = []
    for b in bookies:
        if b.reachable:
            continue
        state = state_of(b.bookie_id)
        report = BookieReport(
            bookie_id=b.bookie_id,
            registered=state != "absent",
            reachable=False,
            attempts=b.attempts,
            state=state,
            last_status=max(b.error_statuses, key=lambda s: b.error_statuses[s])
            if b.error_statuses
            else None,
            last_error=b.last_error,
            ledgers_unverified=b.ledgers_unverified,
        )
        out.extend(Located(f) for f in check.evaluate(report))
    return out
