"""`bkaudit snapshot`: the snapshot job on a local Spark session (`bkaudit check` is
`bkaudit.spark.checker_commands`)."""

from __future__ import annotations

from typing import Any

import click

from bkaudit.cli_common import (
    CommandError,
    ZkTarget,
    emit,
    exit_code_for,
    fail,
    require_zk,
    warehouse_of,
    zk_target,
)
from bkaudit.errors import BkAuditError
from bkaudit.exitcodes import ExitCode
from bkaudit.tables.settings import resolve_warehouse


def _human(summary: dict[str, Any]) -> str:
    return (
        f"snapshot {summary['snapshot_id']}: {summary['ledgers']} ledgers "
        f"({summary['unparseable']} unparseable), {summary['bookies']} bookies, "
        f"{summary['underreplicated']} under-replicated, {summary['seconds']:.1f}s"
    )


@click.command("snapshot")
@zk_target
@click.option("--warehouse", default=None, help="Delta tables directory or URI ([snapshot] warehouse)")
@click.option(
    "--snapshot-id",
    default=None,
    help="id of this snapshot (default: UTC time + random suffix); "
    "re-using an id replaces that snapshot's rows",
)
@click.option("--master", default=None, help="Spark master (default [snapshot] master, local[2])")
@click.option("--json", "as_json", is_flag=True, help="print the result as one JSON object")
def snapshot(
    target: ZkTarget, warehouse: str | None,
    snapshot_id: str | None,
    master: str | None,
    as_json: bool,
) -> None:
    """Snapshot ledger, bookie and under-replication metadata from ZooKeeper into Delta tables."""
    from bkaudit.spark.settings import SnapshotSettings

    overrides: dict[str, Any] = {"snapshot.warehouse": warehouse}
    settings = target.settings(probe_zk=False, **overrides)
    try:
        warehouse_of(settings, must_exist=False)  # the snapshot creates it
        summary = snapshot_job(settings, snapshot_id=snapshot_id,
                               master=master or settings.get(SnapshotSettings).master)
    except BkAuditError as exc:
        fail(str(exc), exit_code_for(exc))
        return
    except ValueError as exc:  # a value the settings' checks let through: the operator's input
        fail(str(exc), ExitCode.USAGE)
        return
    emit(summary, as_json, _human)


def snapshot_job(settings: Any, *, snapshot_id: str | None, master: str | None) -> dict[str, Any]:
    """The snapshot as `bkaudit snapshot` and jobs/snapshot_metadata.py run it (`master` None: spark-submit's
    own).

    An invalid id is a usage error before anything runs; ZooKeeper is probed before the JVM starts (a dead one
    fails in seconds, in one line); the run's metric is exported whether it succeeds or fails
    (`[snapshot] metrics_file` / `pushgateway_url`, docs/monitoring.md)."""
    from bkaudit.metrics import export_snapshot_or_warn
    from bkaudit.spark.settings import SnapshotSettings
    from bkaudit.tables.store import validate_snapshot_id

    if snapshot_id is not None:
        try:
            validate_snapshot_id(snapshot_id)
        except ValueError as exc:
            raise CommandError(str(exc), ExitCode.USAGE) from None
    snap = settings.get(SnapshotSettings)
    try:
        require_zk(settings)
        from bkaudit.spark.session import get_session
        from bkaudit.spark.snapshot import run_snapshot

        spark = get_session(master, app_name="bkaudit-snapshot", warehouse=resolve_warehouse(settings))
        summary: dict[str, Any] = run_snapshot(spark, settings, snapshot_id=snapshot_id).summary()
    except (CommandError, BkAuditError) as exc:
        if not (isinstance(exc, CommandError) and exc.exit_code == ExitCode.USAGE):
            export_snapshot_or_warn(snap, None)
        raise
    export_snapshot_or_warn(snap, summary)
    return summary
