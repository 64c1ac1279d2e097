"""Warehouse upkeep: retention of old runs and vacuum of files no Delta version needs, dry-run by default.

Two steps per table, marker tables (`audit_runs`, `snapshots`) first:

1. retention (only with `keep_run_days` > 0): delete the rows whose partition date (`run_date` /
   `snapshot_date`) is older than the cut-off. The predicate is on the partition column, so delta-rs removes
   whole files in one DELETE commit per table and rewrites nothing. Marker rows go first, so a reader never
   finds a 'succeeded' run whose rows are already gone; the run simply stops being listed.
2. vacuum: delta-rs's `vacuum` (full mode: it lists the storage, not only the log's tombstones) deletes
   files that no version younger than `retention_hours` references: files replaced by re-runs, removed by
   retention, or staged by a run that died before committing.
   Time travel to versions older than the retention stops working, and a reader still scanning an old
   version longer than the retention can fail, which is why the default is Delta's 7 days.

Nothing is changed without `apply=True` (`bkaudit tables vacuum --yes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from bkaudit.tables import location
from bkaudit.tables.location import StorageOptions, Warehouse
from bkaudit.tables.read import reading
from bkaudit.tables.store import is_delta_table, open_delta

MARKER_TABLES = ("audit_runs", "snapshots")


@dataclass
class TablePlan:
    """What upkeep does (or would do) to one table."""

    table: str
    partition: str | None
    expired_files: int = 0
    expired_rows: int = 0
    vacuum_files: list[str] = field(default_factory=list)
    applied: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "partition": self.partition,
            "expired_files": self.expired_files,
            "expired_rows": self.expired_rows,
            "vacuum_files": len(self.vacuum_files),
            "applied": self.applied,
        }


def warehouse_tables(warehouse: Warehouse | str) -> list[str]:
    """The Delta tables directly under `warehouse`, marker tables first (the order upkeep runs in)."""
    wh = Warehouse.of(warehouse)
    fs, root = location.filesystem(wh.uri, options=wh.options)
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=False))
    except FileNotFoundError:
        return []
    names = [
        i.base_name
        for i in infos
        if i.type == pafs.FileType.Directory and not i.base_name.startswith(("_", "."))
    ]
    found = [n for n in names if is_delta_table(wh.table(n), options=wh.options)]
    return sorted(found, key=lambda n: (n not in MARKER_TABLES, MARKER_TABLES.index(n) if n in MARKER_TABLES
                                        else 0, n))


def upkeep(
    warehouse: Warehouse | str,
    *,
    retention_hours: int,
    keep_run_days: int = 0,
    today: date | None = None,
    apply: bool = False,
) -> list[TablePlan]:
    """Plan (and with `apply`, do) retention then vacuum on every table of the warehouse."""
    from deltalake.transaction import CommitProperties

    cutoff = ((today or date.today()) - timedelta(days=keep_run_days)).isoformat() if keep_run_days else None
    plans = []
    wh = Warehouse.of(warehouse)
    for name in warehouse_tables(wh):
        uri = wh.table(name)
        with reading(name, uri):  # a corrupt log: "could not read table ...", one line
            dt = open_delta(uri, options=wh.options)
            parts = list(dt.metadata().partition_columns)
        plan = TablePlan(name, parts[0] if parts else None)
        if cutoff is not None and plan.partition is not None:
            for row in pa.table(dt.get_add_actions(flatten=False)).to_pylist():
                if str((row.get("partition") or {}).get(plan.partition) or "") < cutoff:
                    plan.expired_files += 1
                    plan.expired_rows += int(row.get("num_records") or 0)
            if apply and plan.expired_files:
                note = f"bkaudit retention: {plan.partition} < {cutoff} (keep_run_days={keep_run_days})"
                dt.delete(
                    predicate=f"{plan.partition} < '{cutoff}'",
                    commit_properties=CommitProperties(
                        custom_metadata={"userMetadata": note, "bkaudit.operation": "retention"}
                    ),
                )
                dt = open_delta(uri, options=wh.options)
        vacuum_args: dict[str, Any] = {
            "retention_hours": retention_hours,
            "enforce_retention_duration": False,
            "full": True,  # list the storage: also staged files of runs that died before committing
        }
        # delta-rs also names tombstones whose files an earlier vacuum already deleted: count what exists
        plan.vacuum_files = _existing(uri, dt.vacuum(dry_run=True, **vacuum_args), wh.options)
        if apply and plan.vacuum_files:
            props = CommitProperties(custom_metadata={"bkaudit.operation": "vacuum"})
            dt.vacuum(dry_run=False, commit_properties=props, **vacuum_args)
        plan.applied = apply
        plans.append(plan)
    return plans


def _existing(uri: str, paths: list[str], options: StorageOptions) -> list[str]:
    fs, root = location.filesystem(uri, options=options)
    if not paths:
        return []
    infos = fs.get_file_info([f"{root}/{p}" for p in paths])
    return [p for p, i in zip(paths, infos, strict=True) if i.type == pafs.FileType.File]
