"""`bkaudit report --warehouse W [--run-id ID] --out DIR`: write the HTML audit report of a checker run.

`--fail-on` lets a scheduler turn a bad run red *after* the report exists (the Airflow DAG's last task):
exit 3 when the run's new violations reach that severity, as `bkaudit check --fail-on` does.
"""

from __future__ import annotations

from typing import Any

import click

from bkaudit.cli_common import ZkTarget, emit, exit_code_for, fail, load_settings, warehouse_of


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
    from bkaudit.errors import BkAuditError
    from bkaudit.report.outcome import write_and_judge
    from bkaudit.tables.settings import resolve_warehouse

    overrides: dict[str, Any] = {"snapshot.warehouse": warehouse} if warehouse else {}
    settings = load_settings(ZkTarget(config_path=config_path), need_zk=False, **overrides)
    warehouse = warehouse_of(settings)
    check_out_dir(out_dir)
    try:
        outcome = write_and_judge(warehouse=resolve_warehouse(settings, warehouse), run_id=run_id,
                                  out_dir=out_dir, fail_on=fail_on)
    except BkAuditError as exc:
        fail(str(exc), exit_code_for(exc))
        return
    except OSError as exc:  # --out became unwritable, or the disk is full
        fail(f"cannot write the report into {out_dir}: {exc.strerror or exc}")
        return
    emit(outcome.summary, as_json, lambda r: f"report of run {r['run_id']}: {r['report']}")
    if outcome.error:
        fail(outcome.error, outcome.exit_code)
    if outcome.exit_code:
        raise SystemExit(outcome.exit_code)


def check_out_dir(out_dir: str) -> None:
    """--out must be a directory this process can write (or create): a usage error otherwise (exit 2)."""
    import os
    from pathlib import Path

    from bkaudit.exitcodes import ExitCode

    path = Path(out_dir)
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing == path and not path.is_dir():
        fail(f"--out {out_dir} is not a directory", ExitCode.USAGE)
    if not existing.is_dir():
        fail(f"--out {out_dir}: {existing} is not a directory", ExitCode.USAGE)
    if not os.access(existing, os.W_OK | os.X_OK):
        fail(f"--out {out_dir}: {existing} is not writable by this user", ExitCode.USAGE)
