"""Decommission audit job: fresh snapshot, checker run restricted to the bookies' ledgers, what-if, table row.

    bkaudit decommission-audit --zk H:P --warehouse W --bookie B [--bookie B2 ...] [--json]
    bkaudit decommission-audit --warehouse W --audit-id ID --json      (print a recorded audit)

Exit status of an audit: 0 every bookie is safe to remove, 3 at least one is not (the answer, not an error),
1 the audit could not run. Printing a recorded audit exits 0.

The check is the metadata checker itself (same fan-out, re-reads and findings) with its input narrowed to the
ledgers whose ensembles name a requested bookie, and with its own tables left alone: an ad hoc what-if must
not become "the latest audit" that reports, trends and alerts read. Its findings feed the pure what-if in
`bkaudit.decommission`; the answer is one `decommission_audits` row per bookie (replaced if the same audit id
runs again) and a JSON summary ({"audit_id", "snapshot_id", "safe", "bookies": [...]}) on stdout.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
import pyarrow.compute as pc

from bkaudit import decommission as dc
from bkaudit.audit.base import Finding
from bkaudit.audit.reads import EVIDENCE_READS
from bkaudit.audit.settings import CheckerSettings
from bkaudit.cli_common import Job, JobRun, ZkTarget, emit, run_job, warehouse_of, zk_target
from bkaudit.config import ZkSettings
from bkaudit.errors import BkAuditError
from bkaudit.exitcodes import ExitCode
from bkaudit.job.check_options import CheckOptions
from bkaudit.job.inputs import LedgerSelection, ledger_input
from bkaudit.job.ledger_pass import iter_shapes
from bkaudit.job.sink import MemorySink
from bkaudit.spark.checker import run_check
from bkaudit.spark.snapshot import run_snapshot
from bkaudit.store.zookeeper import close, connect
from bkaudit.tables.location import Warehouse
from bkaudit.tables.read import read_arrow
from bkaudit.tables.settings import resolve_warehouse
from bkaudit.tables.store import validate_snapshot_id, write_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from bkaudit.config import Settings

EXIT_UNSAFE = ExitCode.FINDINGS


def run_audit(spark: SparkSession, settings: Settings, *, warehouse: Warehouse | str, bookies: Sequence[str],
              audit_id: str | None = None, snapshot_id: str | None = None,
              min_copies: int = 1) -> dict[str, Any]:
    """Snapshot (unless `snapshot_id`), restricted check, what-if, `decommission_audits` rows; the summary."""
    require_input(bookies, min_copies)
    warehouse = resolve_warehouse(settings, warehouse)
    started = datetime.now(UTC)
    aid = validate_snapshot_id(audit_id or f"decommission-{started.strftime('%Y%m%dT%H%M%SZ')}")
    sid = snapshot_id or run_snapshot(spark, settings, warehouse=warehouse, snapshot_id=aid).snapshot_id
    options = CheckOptions(warehouse=warehouse, snapshot_id=sid, run_id=aid, publish_underreplicated=False,
                           fail_on="never")
    selection = LedgerSelection.naming(bookies)
    result = run_check(spark, settings, options, selection=selection, sink=MemorySink())
    findings_by_ledger: dict[int, list[Finding]] = {}
    for v in result.violations:
        if v.finding.ledger_id is not None:
            findings_by_ledger.setdefault(int(v.finding.ledger_id), []).append(v.finding)

    selected = ledger_input(warehouse, sid, selection, max_ledgers=None)
    assert selected is not None
    verdicts = []
    for batch in selected.to_batches():
        for row, shape in iter_shapes(batch):
            if shape is None:  # unparseable metadata names no bookie: never selected
                continue
            verdicts.append(dc.judge(shape, bookies, findings_by_ledger.get(shape.ledger_id, ()),
                                     min_copies=min_copies, managed_ledger=row["managed_ledger"]))
    states = _states(settings, bookies)
    results = dc.answers(list(bookies), verdicts, states)
    date = started.strftime("%Y-%m-%d")
    # bookies without listing were verified by reads (LedgerChecker): exact only when every entry was read
    readers = sorted(b.bookie_id for b in result.bookies
                     if b.evidence == EVIDENCE_READS and b.bookie_id not in bookies)
    percentage = float(settings.get(CheckerSettings).verification_percentage)
    table = dc.table_rows(aid, sid, date, results, min_copies=min_copies, check_run_id=result.run_id,
                          audited_at_us=int(time.time() * 1_000_000), verified_by_reads=readers,
                          verification_percentage=percentage)
    write_table(warehouse, "decommission_audits", table, snapshot_id=sid, snapshot_date=date,
                replace={"audit_id": aid})
    return {"audit_id": aid, "snapshot_id": sid, "safe": all(a.safe for a in results),
            "min_copies": min_copies, "bookies": [a.summary() for a in results],
            "evidence": dc.evidence_summary(readers, percentage)}


def require_input(bookies: Sequence[str], min_copies: int) -> None:
    """ValueError unless there are bookies to remove and copies to keep."""
    if not bookies:
        raise ValueError("name at least one bookie (--bookie)")
    if min_copies < 1:
        raise ValueError("--min-copies must be >= 1")


def _states(settings: Settings, bookies: Sequence[str]) -> dict[str, str]:
    """Each bookie's registration now: writable, readonly or absent."""
    cluster = connect(settings.get(ZkSettings))
    try:
        return {b: str(cluster.registry.bookie_state(b)) for b in bookies}
    finally:
        close(cluster)


def recorded(warehouse: Warehouse | str, audit_id: str) -> dict[str, Any]:
    """The summary of an audit already written to `decommission_audits` (no Spark needed)."""
    data = read_arrow(warehouse, "decommission_audits")
    rows = data.filter(pc.equal(data.column("audit_id"), audit_id)).to_pylist()
    if not rows:
        raise BkAuditError(f"no decommission audit {audit_id!r} in {warehouse}")
    order = rows[0]["requested"] or []
    rows.sort(key=lambda r: order.index(r["bookie_id"]) if r["bookie_id"] in order else len(order))
    fields = ("ledger_id", "reason", "min_copies_after", "entries_at_risk")
    bookies = [{"bookie_id": r["bookie_id"], "safe": r["safe"], "state": r["state"], "ledgers": r["ledgers"],
                "open_ledgers": r["open_ledgers"], "entries": r["entries"],
                "blocking": [{k: b[k] for k in fields} for b in r["blocking"] or []]} for r in rows]
    evidence = dc.evidence_summary(rows[0].get("verified_by_reads") or [],
                                float(rows[0].get("verification_percentage") or 0.0))
    return {"audit_id": audit_id, "snapshot_id": rows[0]["snapshot_id"],
            "safe": all(b["safe"] for b in bookies), "min_copies": rows[0]["min_copies"], "bookies": bookies,
            "evidence": evidence}


def human(summary: dict[str, Any]) -> str:
    lines = [f"decommission audit {summary['audit_id']} (snapshot {summary['snapshot_id']}): "
             + ("SAFE to remove all of them together" if summary["safe"] else "NOT safe")]
    for b in summary["bookies"]:
        verdict = "safe" if b["safe"] else f"BLOCKED by {len(b['blocking'])} ledger(s)"
        lines.append(f"  {b['bookie_id']:<24} {verdict:<28} {b['ledgers']} ledgers, {b['entries']} entries")
        for x in b["blocking"][:10]:
            left = x["min_copies_after"]
            lines.append(f"      ledger {x['ledger_id']}: {x['reason']} (copies left: {left})")
    ev = summary.get("evidence") or {}
    if ev.get("verified_by_reads") and not ev.get("exact"):
        lines.append(f"  note: {', '.join(ev['verified_by_reads'])} cannot list entries; verified by reading "
                     f"{ev['verification_percentage']:g}% of entries between each fragment's first and last "
                     "(entries not read are assumed present)")
    return "\n".join(lines)


@click.command("decommission-audit")
@zk_target
@click.option("--warehouse", default=None, help="Delta tables directory or URI ([snapshot] warehouse)")
@click.option("--bookie", "bookies", multiple=True, help="bookie id to remove (repeatable; or --bookies a,b)")
@click.option("--bookies", "bookie_list", default=None, help="comma-separated bookie ids")
@click.option("--audit-id", default=None, help="id of this audit; without --bookie: print that audit")
@click.option("--snapshot-id", default=None, help="use this snapshot instead of taking a fresh one")
@click.option("--min-copies", type=click.IntRange(min=1), default=1, show_default=True,
              help="copies every entry must keep after the removal")
@click.option("--master", default=None, help="Spark master (default [snapshot] master, local[2])")
@click.option("--json", "as_json", is_flag=True, help="print the result as one JSON object")
def decommission_audit(target: ZkTarget, warehouse: str | None, bookies: tuple[str, ...],
                       bookie_list: str | None, audit_id: str | None, snapshot_id: str | None,
                       min_copies: int, master: str | None, as_json: bool) -> None:
    """Would removing these bookies lose data? Safe or blocked per bookie, with the blocking ledgers."""
    wanted = [*bookies, *[b.strip() for b in (bookie_list or "").split(",") if b.strip()]]

    def show(summary: dict[str, Any]) -> int:
        emit(summary, as_json, human)
        return int(EXIT_UNSAFE) if wanted and not summary["safe"] else 0

    job = (audit_job(warehouse=warehouse, bookies=wanted, audit_id=audit_id, snapshot_id=snapshot_id,
                     min_copies=min_copies) if wanted
           else recorded_job(warehouse=warehouse, audit_id=audit_id))
    sys.exit(run_job(job, target, show, master=master))


def audit_job(*, warehouse: str | None, bookies: Sequence[str], audit_id: str | None, snapshot_id: str | None,
              min_copies: int) -> Job[dict[str, Any]]:
    """The audit as `bkaudit decommission-audit --bookie ...` and jobs/decommission_audit.py run it
    (cli_common.run_job): ZooKeeper probed before the JVM, then run_audit; its summary is the result."""

    def work(run: JobRun) -> dict[str, Any]:
        # before the JVM, and exit 1 as jobs/decommission_audit.py always had it (the CLI never gets here
        # with either: --min-copies is an IntRange, and no --bookie is recorded_job)
        require_input(bookies, min_copies)
        return run_audit(run.session(), run.settings, warehouse=run.warehouse, bookies=bookies,
                         audit_id=audit_id, snapshot_id=snapshot_id, min_copies=min_copies)

    def check(settings: Settings) -> None:
        warehouse_of(settings, must_exist=False)  # the audit's snapshot creates it

    return Job("bkaudit-decommission-audit", work, overrides={"snapshot.warehouse": warehouse}, need_zk=True,
               check=check)


def recorded_job(*, warehouse: str | None, audit_id: str | None) -> Job[dict[str, Any]]:
    """`bkaudit decommission-audit --audit-id ID` without bookies: the audit recorded under ID (no Spark,
    no ZooKeeper)."""

    def check(settings: Settings) -> None:
        warehouse_of(settings, must_exist=False)
        if not audit_id:
            raise click.UsageError("name the bookies to remove (--bookie) or an earlier --audit-id to show")
        warehouse_of(settings)  # it must exist to hold the audit

    return Job("bkaudit-decommission-audit", lambda run: recorded(run.warehouse, str(audit_id)),
               overrides={"snapshot.warehouse": warehouse}, check=check)


__all__ = ["EXIT_UNSAFE", "audit_job", "decommission_audit", "recorded", "recorded_job", "require_input",
           "run_audit"]
