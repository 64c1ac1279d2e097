"""bk_metadata_checker: the scheduled audit of a BookKeeper cluster.

    snapshot ─► validate ─► check ─► publish_gate ─► publish ─► report
        └──────────────────────►┘

- snapshot  (spark-submit jobs/snapshot_metadata.py): ZooKeeper metadata → Delta tables.
- validate  (spark-submit jobs/validate_snapshot.py): Great Expectations on the committed snapshot.
- check     (spark-submit jobs/metadata_checker.py): bookie fan-out → `violations`, `audit_runs`,
  `bookie_checks`. Runs when the snapshot succeeded even if validation failed (the findings are still
  worth reading), but never on a failed snapshot (trigger rule all_done_min_one_success over both).
- publish_gate (short circuit): `publish` runs only when the `publish` param is on (the gate's answer) AND
  validation passed and check succeeded (the gate's trigger rule); a skipped publish never blocks the report.
- publish   (spark-submit jobs/publish_underreplicated.py --run-id): feeds BookKeeper's UR queue.
- report    (spark-submit jobs/report.py --run-id --fail-on, trigger rule all_done): the HTML page whenever
  check succeeded, then the run's verdict (BkauditReportOperator, from the job's exit status and the
  upstream states): it fails when new violations reach `fail_on`, when validate or publish failed, or
  when there is nothing to report (check failed: nothing is submitted). Airflow colours a run by its
  last task, so the run turns red for any of these, and only after the report exists.

Snapshot and run ids are derived from the Airflow run id (`bk_id`): a retry replaces its own rows.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, task
from airflow.task.trigger_rule import TriggerRule

if str(Path(__file__).resolve().parent) not in sys.path:  # the shared module next to this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from bkaudit_common import (
    COMMON_PARAMS,
    CONFIG,
    DEFAULT_ARGS,
    MACROS,
    REPORT_DIR,
    ROOT,
    RUN_KEY,
    SNAPSHOT_ASSET,
    VIOLATIONS_ASSET,
    WAREHOUSE,
    ZK,
    BkauditReportOperator,
    deployment_setting,
    spark_job,
)

SCHEDULE = deployment_setting("bkaudit_checker_schedule", "@daily")

PARAMS = {
    **COMMON_PARAMS,
    "publish": Param(False, type="boolean", title="publish under-replicated ledgers",
                     description="mark ledgers with durability violations in BookKeeper's under-replication "
                                 "queue (only when validation passed)"),
    "publish_placement": Param(False, type="boolean", title="also publish placement_fail (BP-54)"),
    "fail_on": Param("critical", type="string", enum=["never", "warning", "critical"],
                     title="threshold", description="fail the DAG run (after the report) when new violations "
                                                    "reach this severity"),
    "validation_fail_on": Param("critical", type="string", enum=["never", "warning", "critical"],
                                title="validation threshold",
                                description="expectation severity that fails the validate step"),
    "report_dir": Param("", type="string", title="report directory",
                        description="empty = Variable bkaudit_report_dir, else <warehouse>/reports"),
}

with DAG(
    dag_id="bk_metadata_checker",
    description="Snapshot BookKeeper metadata, validate it, check every ledger, publish, report",
    schedule=SCHEDULE,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # two audits at once would double the load on ZooKeeper and the bookies
    default_args=DEFAULT_ARGS,
    params=PARAMS,
    user_defined_macros=MACROS,
    tags=["bkaudit", "bookkeeper"],
    doc_md=__doc__,
) as dag:
    snapshot = spark_job(
        "snapshot", "snapshot_metadata.py",
        ["--zk", ZK, "--root", ROOT, "--warehouse", WAREHOUSE, "--snapshot-id", RUN_KEY, "--config", CONFIG],
        timeout=timedelta(hours=1), outlets=[SNAPSHOT_ASSET],
    )
    validate = spark_job(
        "validate", "validate_snapshot.py",
        ["--warehouse", WAREHOUSE, "--snapshot-id", RUN_KEY, "--fail-on", "{{ params.validation_fail_on }}",
         "--config", CONFIG],
        timeout=timedelta(minutes=30), retries=0,  # a verdict on fixed data: retrying cannot change it
    )
    check = spark_job(
        "check", "metadata_checker.py",
        ["--zk", ZK, "--root", ROOT, "--warehouse", WAREHOUSE, "--snapshot-id", RUN_KEY, "--run-id", RUN_KEY,
         "--fail-on", "never", "--config", CONFIG],
        timeout=timedelta(hours=3), outlets=[VIOLATIONS_ASSET],
        trigger_rule=TriggerRule.ALL_DONE_MIN_ONE_SUCCESS,
    )

    @task.short_circuit(ignore_downstream_trigger_rules=False)
    def publish_gate(params: dict[str, Any] | None = None) -> bool:
        """The `publish` param; validate's and check's success is already required by the trigger rule."""
        wanted = bool((params or {}).get("publish"))
        print(f"publish param is {'on' if wanted else 'off'}; validation passed and check succeeded")
        return wanted

    publish = spark_job(
        "publish", "publish_underreplicated.py",
        ["--zk", ZK, "--root", ROOT, "--warehouse", WAREHOUSE, "--run-id", RUN_KEY, "--config", CONFIG],
        env={"BKAUDIT_CHECKER__PUBLISH_PLACEMENT": "{{ params.publish_placement | string | lower }}"},
        timeout=timedelta(minutes=30), outlets=[VIOLATIONS_ASSET],
    )

    report = spark_job(
        "report", "report.py",
        ["--warehouse", WAREHOUSE, "--run-id", RUN_KEY, "--out", REPORT_DIR,
         "--fail-on", "{{ params.fail_on }}", "--config", CONFIG],
        operator=BkauditReportOperator, timeout=timedelta(minutes=15), trigger_rule=TriggerRule.ALL_DONE,
        retries=0,  # its failures are verdicts on this run: retrying would only delay the alert
    )

    gate = publish_gate()
    snapshot >> validate >> check
    snapshot >> check
    [validate, check] >> gate >> publish
    [check, publish] >> report
