"""bk_decommission_audit: may these bookies be removed? (manual; read-only first half of decommissioning)

    snapshot ─► audit ─► answer

- snapshot (spark-submit jobs/snapshot_metadata.py): a fresh snapshot, so the answer is about now.
- audit    (spark-submit jobs/decommission_audit.py): the metadata checker restricted to the ledgers whose
  ensembles name the bookies, then the what-if "remove them all together": one `decommission_audits` row
  per bookie (safe, blocking ledgers with the reason and the entries at risk).
- answer   (`bkaudit decommission-audit --audit-id`): the recorded answer as this run's XCom, e.g.
  {"safe": false, "bookies": [{"bookie_id": "bk3:3181", "safe": false, "blocking": [{"ledger_id": 42,
  "reason": "would_lose_entries", ...}]}]}. "Not safe" is an answer, not a failure: the run stays green.

Trigger with {"bookies": ["bk3:3181", "bk4:3181"]}; snapshot and audit ids are derived from the Airflow run
id ("dc-manual__…"), so a retry replaces its own rows.
"""

from __future__ import annotations

import shlex
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, task

if str(Path(__file__).resolve().parent) not in sys.path:  # the shared module next to this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from bkaudit_common import (
    COMMON_PARAMS,
    CONFIG,
    DECOMMISSION_ASSET,
    DEFAULT_ARGS,
    MACROS,
    ROOT,
    RUN_KEY,
    SNAPSHOT_ASSET,
    WAREHOUSE,
    ZK,
    decommission_id,
    last_json_line,
    resolve,
    runtime_variable,
    spark_job,
)

PARAMS = {
    **COMMON_PARAMS,
    "bookies": Param([], type="array", items={"type": "string"}, minItems=1, title="bookies to remove",
                     description="bookie ids (host:port), evaluated as removed together"),
    "min_copies": Param(1, type="integer", minimum=1, title="copies to keep",
                        description="copies every entry must keep after the removal"),
}

with DAG(
    dag_id="bk_decommission_audit",
    description="Would removing these bookies lose data? Safe or blocked per bookie, with blocking ledgers",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # one what-if at a time; its Spark tasks also share the bkaudit pool with the audits
    default_args=DEFAULT_ARGS,
    params=PARAMS,
    user_defined_macros={**MACROS, "bk_id": decommission_id},  # ids "dc-…": told apart from audits
    tags=["bkaudit", "bookkeeper", "decommission"],
    doc_md=__doc__,
) as dag:
    snapshot = spark_job(
        "snapshot", "snapshot_metadata.py",
        ["--zk", ZK, "--root", ROOT, "--warehouse", WAREHOUSE, "--snapshot-id", RUN_KEY, "--config", CONFIG],
        timeout=timedelta(hours=1), outlets=[SNAPSHOT_ASSET],
    )
    audit = spark_job(
        "audit", "decommission_audit.py",
        ["--zk", ZK, "--root", ROOT, "--warehouse", WAREHOUSE, "--snapshot-id", RUN_KEY,
         "--audit-id", RUN_KEY, "--bookies", "{{ bk_required(params.bookies | join(','), 'param bookies') }}",
         "--min-copies", "{{ params.min_copies }}", "--config", CONFIG],
        timeout=timedelta(hours=2), outlets=[DECOMMISSION_ASSET],
    )

    @task.bash(execution_timeout=timedelta(minutes=10), output_processor=last_json_line)
    def answer(params: dict[str, Any] | None = None, run_id: str | None = None) -> str:
        """The recorded answer of this run's audit, printed as JSON (becomes the XCom return value)."""
        p = params or {}
        argv = [runtime_variable("bkaudit_bin", "bkaudit"), "decommission-audit",
                "--warehouse", resolve(p, "warehouse", "bkaudit_warehouse"),
                "--audit-id", decommission_id(run_id or ""), "--json"]
        config = p.get("config") or runtime_variable("bkaudit_config")
        if config:
            argv += ["--config", config]
        return " ".join(shlex.quote(a) for a in argv)

    snapshot >> audit >> answer()
