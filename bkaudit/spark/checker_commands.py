"""`bkaudit check`: the metadata checker (Spark job 2) on a local Spark session.

Exit codes (bkaudit.exitcodes, docs/cli.md): 0 when the run completed and nothing counted reached `--fail-on`
(default critical), 3 when something did, 1 when it could not run (no snapshot, ZooKeeper or warehouse
trouble, any failure of the job itself; the failure is recorded in `audit_runs`), 2 for bad arguments or
settings.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import click

from bkaudit.cli_common import (
    ZkTarget,
    emit,
    exit_code_for,
    require_warehouse,
    zk_target,
)
from bkaudit.exitcodes import ExitCode
from bkaudit.job.check_options import click_options, options_from, validate_options
from bkaudit.tables.settings import resolve_warehouse


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
    code = run_command(
        target=target,
        warehouse=warehouse,
        flags=flags,
        master=master,
        as_json=as_json,
    )
    sys.exit(code)


def run_command(
    *,
    target: ZkTarget,
    warehouse: str | None,
    flags: Mapping[str, Any],
    master: str | None,
    as_json: bool,
    submitted: bool = False,
) -> int:
    """Shared by the CLI and jobs/metadata_checker.py; returns the exit code (0 / 3 / 1 / 2: docs/cli.md).

    `flags`: the values of the checker's flags (`bkaudit.job.check_options.CHECK_FLAGS`), by field name.
    `submitted`: running under spark-submit, whose session settings (master included) win.
    """
    from bkaudit.errors import BkAuditError

    def err(message: str, code: int = ExitCode.ERROR) -> int:
        click.echo(f"error: {' '.join(message.split())}", err=True)
        return int(code)

    try:
        overrides: dict[str, Any] = {"snapshot.warehouse": warehouse}
        settings = target.settings(**overrides)
        from bkaudit.audit.settings import CheckerSettings, PlacementSettings
        from bkaudit.spark.settings import SnapshotSettings

        snap = settings.get(SnapshotSettings)
        settings.get(CheckerSettings)  # fail fast on a bad [checker] or [placement] section
        settings.get(PlacementSettings)
    except click.ClickException as exc:  # a bad flag or setting (2), or ZooKeeper unreachable (1)
        return err(exc.format_message(), exc.exit_code)
    except BkAuditError as exc:
        return err(str(exc), exit_code_for(exc))
    from bkaudit.spark.checker import CheckFailed, run_check

    def progress(message: str) -> None:
        if not as_json:
            click.echo(f"... {message}", err=True)

    options = options_from(flags, warehouse=snap.warehouse, progress=progress)
    try:
        validate_options(options)
        if not options.fresh:
            require_warehouse(snap.warehouse)
    except click.ClickException as exc:
        return err(exc.format_message(), exc.exit_code)
    except (BkAuditError, ValueError) as exc:
        return err(str(exc), ExitCode.USAGE)
    try:
        from bkaudit.spark.session import get_session

        spark = get_session(None if submitted else master or snap.master, app_name="bkaudit-check",
                            warehouse=resolve_warehouse(settings, snap.warehouse))
        result = run_check(spark, settings, options)
    except CheckFailed as exc:
        return err(str(exc))
    except (BkAuditError, ValueError) as exc:
        return err(str(exc), exit_code_for(exc))
    emit(result.summary(), as_json, lambda s: human_summary(s, result))
    return int(result.exit_code)
