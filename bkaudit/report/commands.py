"""`bkaudit report --warehouse W [--run-id ID] --out DIR`: write the HTML audit report of a checker run.

`--fail-on` lets a scheduler turn a bad run red *after* the report exists (the Airflow DAG's last task):
exit 3 when the run's new violations reach that severity, as `bkaudit check --fail-on` does.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from bkaudit.cli_common import CommandError, Job, JobRun, ZkTarget, emit, run_job, warehouse_of

if TYPE_CHECKING:
    from bkaudit.config import Settings
    from bkaudit.report.outcome import ReportOutcome


@click.command("report")
@click.option("--warehouse", default=None, help="Delta tables directory or URI ([snapshot] warehouse)")
@click.option("--run-id", default=None, help="checker run to report (default: the latest succeeded run)")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="directory for report-<run_id>.html and index.html")
@click.option("--fail-on", type=click.Choice(["never", "warning", "critical"]), default="never",
              show_default=True, help="exit 3 when the run's new violations reach this severity")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="settings file (default conf/bkaudit.toml or $BKAUDIT_CONF)")
@click.option("--json", "as_json", is_flag=True, help="print the result as one JSON object")
def report(warehouse: str | None, run_id: str | None, out_dir: str, fail_on: str, config_path: str | None,
           as_json: bool) -> None:
    """Write a self-contained HTML report (summary, categories, bookies, topics, trend, worst ledgers)."""

    def show(outcome: ReportOutcome) -> int:
        emit(outcome.summary, as_json, lambda r: f"report of run {r['run_id']}: {r['report']}")
        return verdict(outcome)

    job = report_job(warehouse=warehouse, run_id=run_id, out_dir=out_dir, fail_on=fail_on, check_out=True)
    sys.exit(run_job(job, ZkTarget(config_path=config_path), show))


def report_job(*, warehouse: str | None, run_id: str | None, out_dir: str, fail_on: str,
               check_out: bool) -> Job[ReportOutcome]:
    """The report as `bkaudit report` and jobs/report.py run it (cli_common.run_job): the tables read with
    delta-rs on the driver, no Spark session.

    `check_out`: an --out that is not a writable directory is a usage error (exit 2) before anything is read:
    the CLI's rule. jobs/report.py has always failed on it when writing instead (exit 1, "cannot write the
    report into ..."), and keeps that."""

    def check(settings: Settings) -> None:
        warehouse_of(settings)
        if check_out:
            check_out_dir(out_dir)

    def work(run: JobRun) -> ReportOutcome:
        from bkaudit.report.outcome import write_and_judge

        try:
            return write_and_judge(warehouse=run.warehouse, run_id=run_id, out_dir=out_dir, fail_on=fail_on)
        except OSError as exc:  # --out became unwritable, or the disk is full
            raise CommandError(f"cannot write the report into {out_dir}: {exc.strerror or exc}") from None

    return Job("bkaudit-report", work, overrides={"snapshot.warehouse": warehouse}, check=check)


def verdict(outcome: ReportOutcome) -> int:
    """The report's exit code once its summary is printed: 0, or 3 when the run's new violations reach
    --fail-on; a table that could not be read is an error (one line, exit 1) whatever --fail-on says."""
    if outcome.error:
        raise CommandError(outcome.error, outcome.exit_code)
    return outcome.exit_code


def check_out_dir(out_dir: str) -> None:
    """--out must be a directory this process can write (or create): ValueError otherwise (a job's check:
    exit 2)."""
    import os
    from pathlib import Path

    path = Path(out_dir)
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing == path and not path.is_dir():
        raise ValueError(f"--out {out_dir} is not a directory")
    if not existing.is_dir():
        raise ValueError(f"--out {out_dir}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out_dir}: {existing} is not writable by this user")
