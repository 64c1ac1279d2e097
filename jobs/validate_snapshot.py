"""spark-submit entry point: validate a committed snapshot with the Great Expectations suite (DAG step 2).

    spark-submit jobs/validate_snapshot.py --warehouse s3a://bucket/bkaudit --snapshot-id ID \
        [--fail-on never|warning|critical]

The snapshot job already validates its rows before committing them; this step re-runs the same suite
(`bkaudit.tables.validation`) on what was *committed* and gives the scheduler a verdict of its own: the DAG
publishes to the under-replication queue only when this step passed. It also refuses a snapshot whose
`snapshots` row is not 'succeeded' (e.g. committed with `fail_on_critical_validation = false`). Read-only.

Prints {"snapshot_id", "engine", "ledgers", "expectations", "critical_failures", "warnings", "passed"} as
JSON; exits 0 when passed, 3 when expectations at or above --fail-on failed, 1 when it could not run,
2 for invalid settings (docs/cli.md).
"""

from __future__ import annotations

import argparse
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="validate_snapshot", description=__doc__.splitlines()[0])
    parser.add_argument("--warehouse", help="Delta tables directory or URI (default [snapshot] warehouse)")
    parser.add_argument("--snapshot-id", help="snapshot to validate (default: the latest successful one)")
    parser.add_argument("--fail-on", choices=["never", "warning", "critical"], default="critical",
                        help="lowest expectation severity that fails the step (default critical)")
    parser.add_argument("--config", help="settings file (default conf/bkaudit.toml or $BKAUDIT_CONF)")
    args = parser.parse_args(argv)

    from bkaudit.cli_common import Job, ZkTarget, print_json, run_job, warehouse_of

    def show(summary: dict[str, Any]) -> int:
        return print_json(summary, 0 if summary["passed"] else 3)  # 3: findings (docs/cli.md)

    job = Job("bkaudit-validate", lambda run: validate_committed(run, args.snapshot_id, args.fail_on),
              overrides={"snapshot.warehouse": args.warehouse},
              check=lambda settings: warehouse_of(settings, must_exist=False))
    return run_job(job, ZkTarget(config_path=args.config), show, submitted=True)


def validate_committed(run: Any, snapshot_id: str | None, fail_on: str) -> dict[str, Any]:
    """Run the suite on the committed snapshot `snapshot_id` (latest successful when None); `run`: the
    run's cli_common.JobRun (settings, session).

    The engine follows [snapshot] validation_engine as in the snapshot job: up to
    validation_pandas_max_ledgers the rows are read with delta-rs and validated on the driver (no Spark
    context is even started: seconds instead of tens of seconds), beyond that on Spark.
    """
    import pyarrow.compute as pc

    from bkaudit import tables
    from bkaudit.errors import BkAuditError
    from bkaudit.spark.settings import SnapshotSettings
    from bkaudit.spark.validate import choose_engine
    from bkaudit.tables.validation import (
        LEDGER_COLUMNS,
        SEGMENT_COLUMNS,
        pandas_frames,
        spark_frames,
        validate,
    )

    snap = run.settings.get(SnapshotSettings)
    warehouse = run.warehouse
    sid = snapshot_id or tables.latest_snapshot_id(warehouse)
    if sid is None:
        raise BkAuditError(f"no successful snapshot in {warehouse}")
    runs = tables.snapshots(warehouse)
    rows = runs.filter(pc.equal(runs.column("snapshot_id"), sid)).to_pylist()
    ok = [r for r in rows if r["status"] == "succeeded"]
    if not ok:
        states = ", ".join(str(r["status"]) for r in rows) or "no row"
        raise BkAuditError(f"snapshot {sid} did not succeed (status: {states})")
    bookies = tables.read_arrow(warehouse, "bookies", snapshot_id=sid)
    known = [r["bookie_id"] for r in bookies.select(["bookie_id", "state"]).to_pylist()
             if r["state"] != "unknown"]
    count = int(ok[0]["ledgers"] or 0)
    engine = choose_engine(snap, count)
    if engine == "pandas":
        ledgers = tables.read_arrow(warehouse, "ledgers", snapshot_id=sid)
        segments = tables.read_arrow(warehouse, "ledger_segments", snapshot_id=sid)
        frames = pandas_frames(ledgers.select(LEDGER_COLUMNS), segments.select(SEGMENT_COLUMNS))
    else:
        spark = run.session()
        frames = spark_frames(tables.load(spark, warehouse, "ledgers", snapshot_id=sid),
                              tables.load(spark, warehouse, "ledger_segments", snapshot_id=sid))
    report = validate(frames, known, engine=engine, suite_name="bkaudit_committed_snapshot")
    critical, warnings = report.critical_failures, report.warnings
    failing = {"never": [], "warning": critical + warnings, "critical": critical}[fail_on]
    return {"snapshot_id": sid, "engine": engine, "ledgers": count, "expectations": len(report.rows),
            "critical_failures": critical, "warnings": warnings, "passed": not failing}


if __name__ == "__main__":
    from bkaudit.shutdown import exit_process

    exit_process(main())  # not sys.exit: native threads can abort interpreter teardown (bkaudit.shutdown)
