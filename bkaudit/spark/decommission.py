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

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from bkaudit.cli_common import (
    emit,
    exit_code_for,
    fail,
    load_settings,
    require_warehouse,
    require_zk,
    warehouse_of,
    zk_options,
)
from bkaudit.exitcodes import ExitCode
from bkaudit.spark.checker import CheckOptions, _Run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from bkaudit.config import Settings

EXIT_UNSAFE = ExitCode.FINDINGS


class _RestrictedCheck(_Run):
    """The checker on the ledgers naming `removing` only, writing no checker tables and no metrics."""

    def __init__(self, spark: SparkSession, settings: Settings, options: CheckOptions,
                 removing: Sequence[str]) -> None:
        super().__init__(spark, settings, options)
        self.removing = list(removing)
        self.ledger_ids: list[int] = []

    def _load(self, snapshot_id: str) -> dict[str, Any]:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark.sql import functions as F

        frames = super()._load(snapshot_id)
        wanted = F.array(*[F.lit(b) for b in self.removing])
        ids = frames["segments"].where(F.arrays_overlap("ensemble", wanted)).select("ledger_id").distinct()
        self.ledger_ids = sorted(int(r[0]) for r in ids.collect())
        keep = pa.array(self.ledger_ids, pa.int64())
        self.markers_table = self.markers_table.filter(pc.is_in(self.markers_table.column("ledger_id"), keep))
        return {name: df.join(ids, "ledger_id", "left_semi") for name, df in frames.items()}

    def _write(self, rows: list[dict[str, Any]]) -> None:
        """Keep the findings in memory (result.violations); the checker's tables stay untouched."""

    def _write_run_row(self, status: str) -> None:
        """No `audit_runs` row either (see the module docstring)."""

    def _metrics(self, *, success: bool) -> None:
        """No metrics: gauges describe full audits."""

    def _record_check_times(self) -> None:
        """No Auditor check times: a decommission audit covers only some ledgers."""


def run_audit(spark: SparkSession, settings: Settings, *, warehouse: str, bookies: Sequence[str],
              audit_id: str | None = None, snapshot_id: str | None = None,
              min_copies: int = 1) -> dict[str, Any]:
    """Snapshot (unless `snapshot_id`), restricted check, what-if, `decommission_audits` rows; the summary."""
    import pyarrow.compute as pc

    from bkaudit import decommission as dc
    from bkaudit.audit.durability import LedgerShape
    from bkaudit.model.ledger import Segment
    from bkaudit.spark.snapshot import run_snapshot
    from bkaudit.tables.read import read_arrow
    from bkaudit.tables.store import validate_snapshot_id, write_table

    if not bookies:
        raise ValueError("name at least one bookie (--bookie)")
    started = datetime.now(UTC)
    aid = validate_snapshot_id(audit_id or f"decommission-{started.strftime('%Y%m%dT%H%M%SZ')}")
    sid = snapshot_id or run_snapshot(spark, settings, warehouse=warehouse, snapshot_id=aid).snapshot_id
    run = _RestrictedCheck(spark, settings, CheckOptions(warehouse=warehouse, snapshot_id=sid, run_id=aid,
                                                         publish_underreplicated=False, fail_on="never"),
                           bookies)
    result = run.execute()
    rows_by_ledger: dict[int, list[dict[str, Any]]] = {}
    for r in result.violations:
        if r.get("ledger_id") is not None:
            rows_by_ledger.setdefault(int(r["ledger_id"]), []).append(r)

    ids = run.ledger_ids
    ledgers = read_arrow(warehouse, "ledgers", snapshot_id=sid)
    ledgers = ledgers.filter(pc.is_in(ledgers.column("ledger_id"), value_set=_int_array(ids))).to_pylist()
    segments = read_arrow(warehouse, "ledger_segments", snapshot_id=sid)
    segments = segments.filter(pc.is_in(segments.column("ledger_id"), value_set=_int_array(ids))).to_pylist()
    segs: dict[int, list[dict[str, Any]]] = {}
    for s in segments:
        segs.setdefault(int(s["ledger_id"]), []).append(s)
    verdicts = []
    for led in ledgers:
        lid = int(led["ledger_id"])
        ordered = sorted(segs.get(lid, []), key=lambda s: s["segment_index"])
        shape = LedgerShape(lid, int(led["ensemble_size"]), int(led["write_quorum"]), int(led["ack_quorum"]),
                            led["state"] == "CLOSED", int(led["last_entry_id"]),
                            tuple(Segment(int(s["first_entry_id"]), tuple(s["ensemble"])) for s in ordered))
        verdicts.append(dc.judge(shape, bookies, rows_by_ledger.get(lid, ()), min_copies=min_copies,
                                 managed_ledger=led.get("managed_ledger")))
    states = _states(settings, bookies)
    results = dc.answers(list(bookies), verdicts, states)
    date = started.strftime("%Y-%m-%d")
    # bookies without listing were verified by reads (LedgerChecker): exact only when every entry was read
    readers = sorted(b["bookie_id"] for b in result.bookies
                     if b.get("evidence") == "reads" and b["bookie_id"] not in bookies)
    percentage = float(run.conf.verification_percentage)
    table = dc.table_rows(aid, sid, date, results, min_copies=min_copies, check_run_id=result.run_id,
                          audited_at_us=int(time.time() * 1_000_000), verified_by_reads=readers,
                          verification_percentage=percentage)
    write_table(warehouse, "decommission_audits", table, snapshot_id=sid, snapshot_date=date,
                replace={"audit_id": aid})
    return {"audit_id": aid, "snapshot_id": sid, "safe": all(a.safe for a in results),
            "min_copies": min_copies, "bookies": [a.summary() for a in results],
            "evidence": dc.evidence_summary(readers, percentage)}


def _states(settings: Settings, bookies: Sequence[str]) -> dict[str, str]:
    """Each bookie's registration now: writable, readonly or absent."""
    from bkaudit.config import ZkSettings
    from bkaudit.zk import registry
    from bkaudit.zk.client import close, connect

    zk_settings = settings.get(ZkSettings)
    zk = connect(zk_settings)
    try:
        return {b: str(registry.bookie_state(zk, b, zk_settings.root)) for b in bookies}
    finally:
        close(zk)


def _int_array(values: Sequence[int]) -> Any:
    import pyarrow as pa

    return pa.array(values, pa.int64())


def recorded(warehouse: str, audit_id: str) -> dict[str, Any]:
    """The summary of an audit already written to `decommission_audits` (no Spark needed)."""
    import pyarrow.compute as pc

    from bkaudit.errors import BkAuditError
    from bkaudit.tables.read import read_arrow

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
    from bkaudit.decommission import evidence_summary

    evidence = evidence_summary(rows[0].get("verified_by_reads") or [],
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
@zk_options
@click.option("--warehouse", default=None, help="Delta tables directory or URI ([snapshot] warehouse)")
@click.option("--bookie", "bookies", multiple=True, help="bookie id to remove (repeatable; or --bookies a,b)")
@click.option("--bookies", "bookie_list", default=None, help="comma-separated bookie ids")
@click.option("--audit-id", default=None, help="id of this audit; without --bookie: print that audit")
@click.option("--snapshot-id", default=None, help="use this snapshot instead of taking a fresh one")
@click.option("--min-copies", type=click.IntRange(min=1), default=1, show_default=True,
              help="copies every entry must keep after the removal")
@click.option("--master", default=None, help="Spark master (default [snapshot] master, local[2])")
@click.option("--json", "as_json", is_flag=True, help="print the result as one JSON object")
def decommission_audit(zk: str | None, cluster_dir: str | None, root: str | None, config_path: str | None,
                       warehouse: str | None, bookies: tuple[str, ...], bookie_list: str | None,
                       audit_id: str | None, snapshot_id: str | None, min_copies: int, master: str | None,
                       as_json: bool) -> None:
    """Would removing these bookies lose data? Safe or blocked per bookie, with the blocking ledgers."""
    from bkaudit.errors import BkAuditError
    from bkaudit.spark.settings import SnapshotSettings

    wanted = [*bookies, *[b.strip() for b in (bookie_list or "").split(",") if b.strip()]]
    settings = load_settings(zk, cluster_dir, root, config_path, need_zk=bool(wanted),
                             **({"snapshot.warehouse": warehouse} if warehouse else {}))
    snap = settings.get(SnapshotSettings)
    warehouse_of(settings, must_exist=False)
    try:
        if not wanted:
            if not audit_id:
                fail("name the bookies to remove (--bookie) or an earlier --audit-id to show", ExitCode.USAGE)
            require_warehouse(snap.warehouse)
            summary = recorded(snap.warehouse, str(audit_id))
        else:
            require_zk(settings)  # before the JVM
            from bkaudit.spark.session import get_session

            spark = get_session(master or snap.master, app_name="bkaudit-decommission-audit")
            summary = run_audit(spark, settings, warehouse=snap.warehouse, bookies=wanted, audit_id=audit_id,
                                snapshot_id=snapshot_id, min_copies=min_copies)
    except (BkAuditError, ValueError) as exc:
        fail(str(exc), exit_code_for(exc))
        return
    emit(summary, as_json, human)
    if wanted and not summary["safe"]:
        raise SystemExit(EXIT_UNSAFE)


__all__ = ["EXIT_UNSAFE", "decommission_audit", "recorded", "run_audit"]
