"""`bkaudit snapshot`: the snapshot job on a local Spark session, and the job itself (`snapshot_job`), which
jobs/snapshot_metadata.py runs too (`bkaudit check` is `bkaudit.spark.checker_commands`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from bkaudit.cli_common import Job, JobRun, ZkTarget, emit, run_job, values_are_usage, warehouse_of, zk_target

if TYPE_CHECKING:
    from bkaudit.config import Settings


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

    def show(summary: dict[str, Any]) -> int:
        emit(summary, as_json, _human)
        return 0

    job = snapshot_job(warehouse=warehouse, snapshot_id=snapshot_id)
    sys.exit(run_job(job, target, show, master=master, exit_code=values_are_usage))


def snapshot_job(*, warehouse: str | None, snapshot_id: str | None) -> Job[dict[str, Any]]:
    """The snapshot as `bkaudit snapshot` and jobs/snapshot_metadata.py run it (cli_common.run_job).

    An invalid id or no warehouse is a usage error before anything runs; ZooKeeper is probed before the JVM
    starts (a dead one fails in seconds, in one line); the run's metric is exported whether it succeeds or
    fails after that (`[snapshot] metrics_file` / `pushgateway_url`, docs/monitoring.md)."""

    def check(settings: Settings) -> None:
        from bkaudit.tables.store import validate_snapshot_id

        warehouse_of(settings, must_exist=False)  # the snapshot creates it
        if snapshot_id is not None:
            validate_snapshot_id(snapshot_id)

    def work(run: JobRun) -> dict[str, Any]:
        from bkaudit.spark.snapshot import run_snapshot

        summary: dict[str, Any] = run_snapshot(run.session(), run.settings, snapshot_id=snapshot_id).summary()
        return summary

    def metrics(settings: Settings, summary: dict[str, Any] | None) -> None:
        from bkaudit.metrics import export_snapshot_or_warn
        from bkaudit.spark.settings import SnapshotSettings

        export_snapshot_or_warn(settings.get(SnapshotSettings), summary)

    return Job("bkaudit-snapshot", work, overrides={"snapshot.warehouse": warehouse}, need_zk=True,
               check=check, metrics=metrics)
