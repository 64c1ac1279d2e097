"""What the report shows, read from the warehouse with delta-rs (no Spark: a report must render in seconds).

One checker run is the subject: `--run-id`, else the most recently finished 'succeeded' row of `audit_runs`
(the checker commits that row last, so a half-written run is never picked). Around it: its `violations` and
`bookie_checks` rows, the `snapshots` row and `validation_results` of the snapshot it checked, the last runs
of `audit_runs` (trend) and the Delta history of `violations` (which table version each run committed).

A table that cannot be read never looks clean or empty: `violations` and `bookie_checks` (every succeeded run
commits both, empty or not) missing, and any table whose directory is there without a readable Delta log,
are listed in `ReportData.unreadable` with the reason; the page says "could not read" where they would be
shown and `bkaudit report` exits 1. `snapshots`, `validation_results` and `bookies` may be absent (a warehouse
the snapshot job never wrote): their sections say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from bkaudit.errors import BkAuditError
from bkaudit.tables.read import TableNotFound, TableUnreadable, open_table, reading, table_state
from bkaudit.tables.store import table_uri

if TYPE_CHECKING:
    from bkaudit.tables.location import Warehouse

SUCCEEDED = "succeeded"
RUN_TABLES = ("violations", "bookie_checks")
"""Committed by every succeeded checker run (empty or not): missing means lost, never "nothing found"."""
HISTORY_RUNS = 30
"""How many runs the trend covers."""


class ReportError(BkAuditError):
    """The warehouse holds nothing to report on (or not the run asked for)."""


@dataclass
class ReportData:
    """Everything the builder needs, as plain Arrow tables and dicts."""

    warehouse: str
    run: dict[str, Any]
    violations: pa.Table
    bookie_checks: pa.Table | None = None
    snapshot: dict[str, Any] | None = None
    validation: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    """Succeeded runs, oldest first, ending with (at most) the reported run."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """Delta commits of `violations`, newest first; `this_run` marks the commit of the reported run."""
    lifecycle: dict[str, str] = field(default_factory=dict)
    """bookie -> lifecycle state in the run's snapshot (bookies with a cookie)."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """table -> why it could not be read; what it would show is "could not read", never clean or empty."""
    absent: set[str] = field(default_factory=set)
    """Optional tables the warehouse does not hold at all (`snapshots`, `validation_results`, `bookies`)."""

    @property
    def run_id(self) -> str:
        return str(self.run["run_id"])


def _rows_where(warehouse: Warehouse | str, name: str, column: str, value: str) -> pa.Table:
    """The rows of `name` with `column == value` (pushed down to the Parquet scan); TableNotFound when nothing
    is at the table's location, TableUnreadable when it cannot be read."""
    import pyarrow.dataset as ds

    from bkaudit.tables.catalog import spec

    dt = open_table(warehouse, name)
    with reading(name, table_uri(warehouse, name)):
        data = dt.to_pyarrow_dataset().to_table(filter=ds.field(column) == value)
        return data.select(spec(name).schema.names)


def pick_run(runs: pa.Table, run_id: str | None) -> dict[str, Any]:
    """The run to report: `run_id` (its succeeded row if it has one), else the latest succeeded run."""
    if run_id is not None:
        rows = runs.filter(pc.equal(runs.column("run_id"), run_id)).to_pylist()
        if not rows:
            raise ReportError(f"no checker run {run_id!r} in audit_runs")
        ok = [r for r in rows if r["status"] == SUCCEEDED]
        chosen: dict[str, Any] = (ok or rows)[0]
        return chosen
    ok = runs.filter(pc.equal(runs.column("status"), SUCCEEDED))
    if ok.num_rows == 0:
        raise ReportError("audit_runs holds no succeeded checker run yet (run `bkaudit check` first)")
    ok = ok.sort_by([("finished_at", "descending"), ("started_at", "descending")])
    latest: dict[str, Any] = ok.slice(0, 1).to_pylist()[0]
    return latest


def load(
    warehouse: Warehouse | str, run_id: str | None = None, *, history_runs: int = HISTORY_RUNS
) -> ReportData:
    """Read one run and its context from `warehouse`; ReportError when there is no such run, TableUnreadable
    when `audit_runs` cannot be read. Other tables that cannot be read are listed in `unreadable`."""
    from bkaudit.tables.catalog import spec

    if table_state(warehouse, "audit_runs") == "absent":
        raise ReportError(f"no audit_runs table in {warehouse} (run `bkaudit check --warehouse {warehouse}` "
                          "first)")
    runs_dt = open_table(warehouse, "audit_runs")
    with reading("audit_runs", table_uri(warehouse, "audit_runs")):
        runs = runs_dt.to_pyarrow_table().select(spec("audit_runs").schema.names)
    run = pick_run(runs, run_id)
    rid = str(run["run_id"])
    unreadable: dict[str, str] = {}
    absent: set[str] = set()

    def rows(name: str, column: str, value: str) -> pa.Table | None:
        try:
            return _rows_where(warehouse, name, column, value)
        except TableUnreadable as exc:
            if isinstance(exc, TableNotFound) and name not in RUN_TABLES:
                absent.add(name)
            else:
                unreadable[name] = exc.reason
            return None

    violations = rows("violations", "run_id", rid)
    if violations is None:
        violations = spec("violations").schema.empty_table()
    data = ReportData(warehouse=str(warehouse), run=run, violations=violations, unreadable=unreadable,
                      absent=absent, bookie_checks=rows("bookie_checks", "run_id", rid))
    snap = rows("snapshots", "snapshot_id", str(run["snapshot_id"]))
    if snap is not None and snap.num_rows:
        snapshot_rows = snap.to_pylist()
        data.snapshot = next((r for r in snapshot_rows if r["status"] == SUCCEEDED), snapshot_rows[0])
    results = rows("validation_results", "snapshot_id", str(run["snapshot_id"]))
    if results is not None:
        data.validation = sorted(results.to_pylist(), key=lambda r: (r["success"], r["expectation"]))
    bookies = rows("bookies", "snapshot_id", str(run["snapshot_id"]))
    if bookies is not None and "lifecycle_state" in bookies.column_names:
        data.lifecycle = {r["bookie_id"]: r["lifecycle_state"] for r in bookies.to_pylist()
                          if r.get("lifecycle_state")}
    data.runs = _trend_runs(runs, run, history_runs)
    if "violations" not in unreadable:
        try:
            data.history = _violations_history(warehouse, rid)
        except TableUnreadable as exc:
            unreadable["violations"] = exc.reason
    return data


def _trend_runs(runs: pa.Table, run: dict[str, Any], limit: int) -> list[dict[str, Any]]:
    """Succeeded runs up to (and including) the reported one, oldest first, at most `limit`."""
    ok = runs.filter(pc.equal(runs.column("status"), SUCCEEDED)).sort_by([("started_at", "ascending")])
    rows = [r for r in ok.to_pylist() if r["started_at"] is None or run["started_at"] is None
            or r["started_at"] <= run["started_at"]]
    if not any(r["run_id"] == run["run_id"] for r in rows):
        rows.append(run)
    return rows[-limit:]


def _violations_history(
    warehouse: Warehouse | str, run_id: str, limit: int = 20, search: int = 500
) -> list[dict[str, Any]]:
    """The last commits of `violations` (version, time, operation, run, bkaudit's commit info).

    The reported run's own commit (its `run_id` commit info, reverts excluded) is marked `this_run`;
    when later runs pushed it out of the last `limit` commits it is appended, so the version to time-travel
    to is always on the page.
    """
    dt = open_table(warehouse, "violations")
    with reading("violations", table_uri(warehouse, "violations")):
        commits = dt.history(search)
    out = []
    for i, entry in enumerate(commits):
        info = {k: v for k, v in entry.items() if str(k).startswith("bkaudit.") and k != "bkaudit.commit"}
        mine = entry.get("run_id") == run_id and info.get("bkaudit.operation") != "revert"
        if i >= limit and not mine:
            continue
        out.append({"version": entry.get("version"), "timestamp": entry.get("timestamp"),
                    "operation": entry.get("operation"), "run_id": entry.get("run_id"),
                    "note": entry.get("userMetadata"), "info": info, "this_run": mine})
        if i >= limit:
            break
    return out
