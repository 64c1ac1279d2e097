"""`bkaudit snapshot`: the snapshot job on a local Spark session (`bkaudit check` is
`bkaudit.spark.checker_commands`)."""

from __future__ import annotations

from typing import Any

import click

from bkaudit.cli_common import (
    CommandError,
    emit,
    exit_code_for,
    fail,
    load_settings,
    require_zk,
    warehouse_of,
    zk_options,
)
from bkaudit.exitcodes import ExitCode


def _human(summary: dict[str, Any]) -> str:
    return (
        f"snapshot {summary['snapshot_id']}: {summary['ledgers']} ledgers "
        f"({summary['unparseable']} unparseable), {summary['bookies']} bookies, "
        f"{summary['underreplicated']} under-replicated, {summary['seconds']:.1f}s"
    )


@click.command("snapshot")
@zk_options
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
    zk: str | None,
    cluster_dir: str | None,
    root: str | None,
    config_path: str | None,
    warehouse: str | None,
    snapshot_id: str | None,
    master: str | None,
    as_json: bool,
) -> None:
    """Snapshot ledger, bookie and under-replication metadata from ZooKeeper into Delta tables."""
    from bkaudit.errors import BkAuditError
    from bkaudit.metrics import export_snapshot_or_warn
    from bkaudit.spark.settings import SnapshotSettings

    overrides: dict[str, Any] = {"snapshot.warehouse": warehouse}
    settings = load_settings(zk, cluster_dir, root, config_path, probe_zk=False, **overrides)
    try:
        snap = settings.get(SnapshotSettings)
        warehouse_of(settings, must_exist=False)  # the snapshot creates it
        require_zk(settings)  # before the JVM: an unreachable ZooKeeper fails in seconds, in one line
        from bkaudit.spark.session import get_session
        from bkaudit.spark.snapshot import run_snapshot

        spark = get_session(master or snap.master, app_name="bkaudit-snapshot", warehouse=snap.warehouse)
        result = run_snapshot(spark, settings, snapshot_id=snapshot_id)
    except CommandError as exc:  # a dead ZooKeeper is a failed run, which the metric says; a usage error not
        if exc.exit_code != ExitCode.USAGE:
            export_snapshot_or_warn(settings.get(SnapshotSettings), None)
        raise
    except BkAuditError as exc:
        export_snapshot_or_warn(settings.get(SnapshotSettings), None)
        fail(str(exc), exit_code_for(exc))
        return
    except ValueError as exc:  # e.g. an invalid --snapshot-id
        fail(str(exc), ExitCode.USAGE)
        return
    emit(result.summary(), as_json, _human)
    export_snapshot_or_warn(snap, result.summary())
