"""Write a checker run's report and give its verdict: what `bkaudit report` and jobs/report.py both do.

One place for the result both print (and the Airflow DAG reads from the job's output): the page written, the
run, its new-violation counts, and whether they reach `fail_on` (exit 3, as `bkaudit check --fail-on`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bkaudit.tables.location import Warehouse


@dataclass(frozen=True)
class ReportOutcome:
    summary: dict[str, Any]
    exit_code: int  # 0, 3 when the run's new violations reach fail_on, 1 when a table could not be read
    error: str | None = None
    """One line for stderr when a table could not be read (the page says so too)."""


def write_and_judge(
    *, warehouse: Warehouse | str, run_id: str | None, out_dir: str, fail_on: str
) -> ReportOutcome:
    """Write report-<run_id>.html and index.html into `out_dir`, then judge the run against `fail_on`.

    Raises BkAuditError when there is no such run or `audit_runs` cannot be read (nothing is written then).
    A run whose other tables could not be read (`ReportData.unreadable`) still gets its page, which says
    "could not read" there, and the outcome is exit 1 (bkaudit.exitcodes: it could not do what was asked),
    whatever `fail_on` would say: an unreadable table is never judged clean.
    """
    from bkaudit.audit.classification import exit_code
    from bkaudit.exitcodes import ExitCode
    from bkaudit.report.builder import write
    from bkaudit.report.data import load

    data = load(warehouse, run_id)
    path = write(data, out_dir)
    run = data.run
    counts = {k: int(v or 0) for k, v in dict(run.get("counts") or []).items()}
    code = exit_code(counts, fail_on)
    summary: dict[str, Any] = {"report": str(path), "index": str(path.parent / "index.html"),
                               "run_id": run["run_id"], "snapshot_id": run["snapshot_id"],
                               "status": run["status"], "counts": counts, "fail_on": fail_on,
                               "fail_on_reached": code != 0, "unreadable": dict(data.unreadable)}
    if data.unreadable:
        tables = "; ".join(f"{name} ({why})" for name, why in sorted(data.unreadable.items()))
        error = f"could not read table(s) of run {run['run_id']}: {tables}; the report at {path} says so"
        return ReportOutcome(summary=summary, exit_code=int(ExitCode.ERROR), error=error)
    return ReportOutcome(summary=summary, exit_code=code)


__all__ = ["ReportOutcome", "write_and_judge"]
