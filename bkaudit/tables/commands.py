"""`bkaudit violations`: a checker run's violations for a person (or `--json` for a script).

Reads the Delta tables with delta-rs on the driver (no Spark start-up): the run's `audit_runs` row must say
'succeeded' (a failed run has no visible violations), then its `violations` rows, optionally one category.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from bkaudit.cli_common import ZkTarget, emit, exit_code_for, fail, load_settings, warehouse_of
from bkaudit.exitcodes import ExitCode
from bkaudit.tables.settings import resolve_warehouse

if TYPE_CHECKING:
    from bkaudit.tables.location import Warehouse


def _ranges_text(ranges: list[dict[str, int]] | None, limit: int = 4) -> str:
    if not ranges:
        return ""
    parts = [
        f"{r['first']}" if r["first"] == r["last"] else f"{r['first']}-{r['last']}" for r in ranges[:limit]
    ]
    more = f" +{len(ranges) - limit} more" if len(ranges) > limit else ""
    return ",".join(parts) + more


_DURABILITY = ("no_replica", "below_ack_quorum", "below_write_quorum")


def _why(row: dict[str, Any]) -> str:
    from bkaudit.audit import details as x
    from bkaudit.audit.detail_json import facts_of_row

    d = facts_of_row(row["category"], row.get("detail"))
    if isinstance(d, x.DurabilityDetail) or (d is None and row["category"] in _DURABILITY):
        known = d if isinstance(d, x.DurabilityDetail) else None  # None: a row without its detail
        return (
            f"{'?' if known is None else known.entries_below_write_quorum} entries below WQ, missing on "
            f"{', '.join(known.bookies_missing_entries if known else ()) or '?'}"
            + (" (partial)" if known is not None and known.partial else "")
        )
    if isinstance(d, x.PlacementDetail):
        reasons = [r for s in d.segments for r in s.reasons]
        return str(reasons[0] if reasons else d.adherence)
    if isinstance(d, x.ExtraEntriesDetail):
        extra = [{"first": a, "last": b} for a, b in d.extra_entries]
        return f"{d.extra_count} extra entries: {_ranges_text(extra)}"
    if isinstance(d, x.OverdueMarkerDetail):
        return f"marked {d.age_s}s ago (grace {d.grace_period_s}s), replicas {list(d.replicas)}"
    if isinstance(d, x.UnverifiableDetail | x.OpenSegmentUnknownDetail):
        return d.reason
    if isinstance(d, x.MetadataDetail):
        return d.error
    if isinstance(d, x.UnreachableBookieDetail):
        return f"{d.state}, {d.status} after {d.attempts} attempt(s): {d.error}"
    return ""


def _human(data: dict[str, Any]) -> str:
    rows = data["violations"]
    head = f"run {data['run_id']} (snapshot {data['snapshot_id']}): {len(rows)} violation(s)"
    if not rows:
        return head
    lines = [
        head,
        f"{'severity':<8} {'category':<33} {'ledger':>10} {'seg':>3} {'bookie':<22} {'min':>3} "
        f"{'missing':<24} flags  why",
    ]
    for r in rows:
        flags = ("R" if r.get("under_repair") else "-") + ("P" if r.get("published") else "-")
        ledger = "" if r["ledger_id"] is None else r["ledger_id"]
        segment = "" if r["segment_index"] is None else r["segment_index"]
        least = "" if r["min_replicas"] is None else r["min_replicas"]
        lines.append(
            f"{r['severity']:<8} {r['category']:<33} {ledger:>10} "
            f"{segment:>3} {(r['bookie_id'] or '')[:22]:<22} {least:>3} "
            f"{_ranges_text(r.get('missing_entries'))[:24]:<24} {flags:<6} {_why(r)[:120]}"
        )
    lines.append("flags: R = ledger already under repair (not counted as new), P = published to the UR queue")
    return "\n".join(lines)


@click.command("violations")
@click.option("--warehouse", default=None, help="Delta tables directory or URI ([snapshot] warehouse)")
@click.option("--run-id", default=None, help="checker run (default: the latest succeeded run)")
@click.option("--category", default=None, help="only this category (e.g. no_replica, placement_fail)")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None, help="settings file")
@click.option(
    "--json", "as_json", is_flag=True, help="print {run_id, snapshot_id, violations: [...]} as JSON"
)
def violations(
    warehouse: str | None, run_id: str | None, category: str | None, config_path: str | None, as_json: bool
) -> None:
    """Print the violations found by a checker run."""
    from bkaudit.audit.base import Category
    from bkaudit.errors import BkAuditError
    from bkaudit.tables.read import read_violations, select_run

    if category is not None and category not in {c.value for c in Category}:
        fail(f"unknown category {category!r} (one of {', '.join(c.value for c in Category)})", ExitCode.USAGE)
    overrides: dict[str, Any] = {"snapshot.warehouse": warehouse}
    settings = load_settings(ZkTarget(config_path=config_path), need_zk=False, **overrides)
    wh = resolve_warehouse(settings, warehouse_of(settings))
    try:
        run = select_run(wh, run_id)
        rows = read_violations(wh, run["run_id"], category)
    except BkAuditError as exc:
        fail(str(exc), exit_code_for(exc))
        return
    data = {"run_id": run["run_id"], "snapshot_id": run["snapshot_id"], "violations": rows}
    emit(data, as_json, _human)


# -- bkaudit tables: warehouse upkeep and access for data engineers ----------------------------------------
def _warehouse(warehouse: str | None, config_path: str | None) -> tuple[Warehouse, Any]:
    from bkaudit.tables import location

    overrides: dict[str, Any] = {"snapshot.warehouse": warehouse}
    settings = load_settings(ZkTarget(config_path=config_path), need_zk=False, **overrides)
    wh = resolve_warehouse(settings, warehouse_of(settings, must_exist=False))
    if location.is_local(wh.uri) and not location.exists(wh.uri, options=wh.options):
        fail(f"no such warehouse directory: {location.normalize(wh.uri)}")
    return wh, settings


_WAREHOUSE = click.option(
    "--warehouse", default=None, help="Delta tables directory or URI ([snapshot] warehouse)"
)
_CONFIG = click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                       help="settings file")


@click.group("tables")
def tables_group() -> None:
    """Warehouse upkeep (vacuum, retention) and the safe ways to read the tables from other tools."""


@tables_group.command("vacuum")
@_WAREHOUSE
@_CONFIG
@click.option("--retention-hours", type=click.IntRange(min=0), default=None,
              help="delete files unreferenced for longer than this ([tables] retention_hours, default 168)")
@click.option("--keep-run-days", type=click.IntRange(min=0), default=None,
              help="also delete runs whose run/snapshot date is older than this many days "
                   "([tables] keep_run_days; 0 = keep every run)")
@click.option("--yes", is_flag=True, help="do it (default: dry run, print what would be deleted)")
@click.option("--json", "as_json", is_flag=True, help="print the plan as JSON")
def vacuum(warehouse: str | None, config_path: str | None, retention_hours: int | None,
           keep_run_days: int | None, yes: bool, as_json: bool) -> None:
    """Delete old runs (retention) and files no table version needs (vacuum). Dry run unless --yes."""
    from bkaudit.errors import BkAuditError
    from bkaudit.tables.maintenance import upkeep
    from bkaudit.tables.settings import TablesSettings

    wh, settings = _warehouse(warehouse, config_path)
    conf = settings.get(TablesSettings)
    hours = conf.retention_hours if retention_hours is None else retention_hours
    days = conf.keep_run_days if keep_run_days is None else keep_run_days
    try:
        plans = upkeep(wh, retention_hours=hours, keep_run_days=days, apply=yes)
    except BkAuditError as exc:
        fail(str(exc))
        return
    data = {"warehouse": wh.uri, "dry_run": not yes, "retention_hours": hours, "keep_run_days": days,
            "tables": [p.to_dict() for p in plans]}

    def human(d: dict[str, Any]) -> str:
        verb = "would delete" if d["dry_run"] else "deleted"
        lines = [f"{'DRY RUN: ' if d['dry_run'] else ''}{d['warehouse']} (files unreferenced > "
                 f"{hours} h; runs older than {days} day(s))" if days else
                 f"{'DRY RUN: ' if d['dry_run'] else ''}{d['warehouse']} (files unreferenced > {hours} h; "
                 "every run kept)"]
        for t in d["tables"]:
            lines.append(f"  {t['table']:<26} {verb} {t['vacuum_files']:>5} unreferenced file(s)"
                         + (f", {t['expired_rows']} row(s) in {t['expired_files']} file(s) of old runs"
                            if t["expired_files"] else ""))
        if d["dry_run"]:
            lines.append("nothing changed: add --yes to do it")
        return "\n".join(lines)

    emit(data, as_json, human)


@tables_group.command("files")
@click.argument("table")
@_WAREHOUSE
@_CONFIG
@click.option("--version", type=click.IntRange(min=0), default=None, help="a Delta version (time travel)")
def files(table: str, warehouse: str | None, config_path: str | None, version: int | None) -> None:
    """Print the Parquet files of TABLE's current version, one per line (plain Spark/Trino/Hive input).

    Reading the table directory itself also reads files that re-runs replaced: use this list instead.
    """
    from bkaudit.errors import BkAuditError
    from bkaudit.tables.read import current_files

    wh, _ = _warehouse(warehouse, config_path)
    try:
        for path in current_files(wh, table, version=version):
            click.echo(path)
    except BkAuditError as exc:
        fail(str(exc))


@tables_group.command("views")
@click.option("--temporary", is_flag=True, help="CREATE TEMP VIEW (Spark sessions)")
def views(temporary: bool) -> None:
    """Print the CREATE VIEW statements (latest successful run, per-topic summary) for DuckDB/Spark SQL."""
    from bkaudit.tables.views import create_statements

    for statement in create_statements(temporary=temporary):
        click.echo(statement + ";")
