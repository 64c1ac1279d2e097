"""`bkaudit check`: the metadata checker (Spark job 2) on a local Spark session.

Exit codes (bkaudit.exitcodes, docs/cli.md): 0 when the run completed and nothing counted reached `--fail-on`
(default critical), 3 when something did, 1 when it could not run (no snapshot, ZooKeeper or warehouse
trouble, any failure of the job itself; the failure is recorded in `audit_runs`), 2 for bad arguments or
settings.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import click

from bkaudit.cli_common import Job, JobRun, ZkTarget, emit, require_warehouse, run_job, zk_target
from bkaudit.job.check_options import CheckOptions, click_options, options_from, validate_options

if TYPE_CHECKING:
    from bkaudit.config import Settings
    from bkaudit.job.result import CheckResult


def human_summary(summary: dict[str, Any], result: Any = None) -> str:
    """A person's view of a run: counts per category with severity, worst first."""
    from bkaudit.audit.base import Category, Severity

    lines = [
        f"check {summary['run_id']} of snapshot {summary['snapshot_id']}: "
        f"{summary['ledgers_checked']} ledgers checked in {summary['seconds']:.1f}s"
    ]
    order = sorted(Category, key=lambda c: (-c.severity.rank, c.value))
    for c in order:
        n = summary["counts"].get(c.value, 0)
        if n or c.severity is Severity.CRITICAL:
            lines.append(f"  {c.severity.value:<8} {c.value:<34} {n}")
    if result is not None:
        under = sum(result.under_repair.values())
        if under:
            lines.append(f"  ({under} more finding(s) on ledgers already under repair, not counted)")
        if result.published:
            lines.append(f"  published {result.published} ledger(s) to the under-replication queue")
        if result.metrics_error:
            lines.append(f"  metrics: {result.metrics_error}")
    lines.append(f"details: bkaudit violations --warehouse ... --run-id {summary['run_id']}")
    return "\n".join(lines)


@click.command("check")
@zk_target
@click.option("--warehouse", default=None, help="Delta tables directory or URI ([snapshot] warehouse)")
@click_options
@click.option("--master", default=None, help="Spark master (default [snapshot] master, local[2])")
@click.option("--json", "as_json", is_flag=True, help="print the result as one JSON object")
def check(target: ZkTarget, warehouse: str | None, master: str | None, as_json: bool, **flags: Any) -> None:
    """Check a snapshot against the bookies: durability, placement, progress, availability (BP-34)."""

    def progress(message: str) -> None:
        click.echo(f"... {message}", err=True)

    def show(result: CheckResult) -> int:
        emit(result.summary(), as_json, lambda s: human_summary(s, result))
        return int(result.exit_code)

    job = check_job(warehouse=warehouse, flags=flags, progress=None if as_json else progress)
    sys.exit(run_job(job, target, show, master=master))


def check_job(*, warehouse: str | None, flags: Mapping[str, Any],
              progress: Callable[[str], None] | None = None) -> Job[CheckResult]:
    """The checker as `bkaudit check` and jobs/metadata_checker.py run it (cli_common.run_job); the result's
    exit code is 0 / 3 (docs/cli.md), and run_check records and exports a failed run itself.

    `flags`: the values of the checker's flags (`bkaudit.job.check_options.CHECK_FLAGS`), by field name.
    """

    def options(settings: Settings) -> CheckOptions:
        from bkaudit.spark.settings import SnapshotSettings

        return options_from(flags, warehouse=settings.get(SnapshotSettings).warehouse, progress=progress)

    def check(settings: Settings) -> None:
        from bkaudit.audit.settings import CheckerSettings, PlacementSettings

        settings.get(CheckerSettings)  # fail fast on a bad [checker] or [placement] section
        settings.get(PlacementSettings)
        given = options(settings)
        validate_options(given)
        if not given.fresh:
            require_warehouse(str(given.warehouse))

    def work(run: JobRun) -> CheckResult:
        from bkaudit.spark.checker import run_check

        return run_check(run.session(), run.settings, options(run.settings))

    return Job("bkaudit-check", work, overrides={"snapshot.warehouse": warehouse}, need_zk=True, check=check)
