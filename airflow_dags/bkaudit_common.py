"""What bkaudit's DAGs share: deployment settings, params, deterministic ids, Spark job tasks, assets.

This file runs in the Airflow environment, which has neither bkaudit nor pyspark (see requirements.txt):
every bkaudit step runs through `spark-submit` (jobs/ entry points) or the `bkaudit` command, both from the
Spark/bkaudit environment. Nothing here names a host: where ZooKeeper, the warehouse and Spark are comes
from DAG params, falling back to Airflow Variables (docs/airflow.md lists them).

Deployment settings (read when the DAG file is parsed; Variable, else `AIRFLOW_VAR_<NAME>`, else default):
    bkaudit_spark_conn_id   Spark connection (default spark_default)
    bkaudit_jobs_dir        directory or URI holding jobs/*.py (default: the repository's jobs/)
    bkaudit_spark_conf      JSON object of extra Spark properties (e.g. spark.archives for a packed venv)
    bkaudit_py_files        comma-separated --py-files (e.g. a bkaudit wheel/zip on HDFS)
    bkaudit_task_retries    retries per task (default 2, exponential backoff from 1 minute)
Run-time Variables (read when a task runs, so they can change without a re-parse):
    bkaudit_zk, bkaudit_warehouse, bkaudit_config, bkaudit_report_dir, bkaudit_bin
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import Asset, Param

# -- deployment settings (parse time) ---------------------------------------------------------------------


def deployment_setting(name: str, default: str) -> str:
    """An Airflow Variable read at parse time; `default` when unset or no Variable store is reachable."""
    try:
        from airflow.sdk import Variable

        value = Variable.get(name, default=None)
    except Exception:
        value = None
    if value is None:
        value = os.environ.get(f"AIRFLOW_VAR_{name.upper()}")
    return default if value in (None, "") else str(value)


REPO_JOBS = str(Path(__file__).resolve().parent.parent / "jobs")
SPARK_CONN_ID = deployment_setting("bkaudit_spark_conn_id", "spark_default")
JOBS_DIR = deployment_setting("bkaudit_jobs_dir", REPO_JOBS).rstrip("/")
PY_FILES = deployment_setting("bkaudit_py_files", "") or None
BASE_SPARK_CONF = {"spark.sql.session.timeZone": "UTC"}
SPARK_CONF = {**BASE_SPARK_CONF, **json.loads(deployment_setting("bkaudit_spark_conf", "{}"))}

DEFAULT_ARGS: dict[str, Any] = {
    "owner": "bkaudit",
    "retries": int(deployment_setting("bkaudit_task_retries", "2")),
    "retry_delay": timedelta(minutes=1),
    "retry_exponential_backoff": True,  # 1, 2, 4 ... minutes: ZooKeeper/bookies get room to recover
    "max_retry_delay": timedelta(minutes=20),
}

# -- assets --------------------------------------------------------------------------------------------------
SNAPSHOT_ASSET = Asset(name="bkaudit_snapshots", uri="bkaudit://warehouse/snapshots", group="bkaudit")
VIOLATIONS_ASSET = Asset(name="bkaudit_violations", uri="bkaudit://warehouse/violations", group="bkaudit")
"""Downstream DAGs can run on `schedule=[VIOLATIONS_ASSET]` (written by check, publish and decommission)."""
DECOMMISSION_ASSET = Asset(name="bkaudit_decommission_audits", uri="bkaudit://warehouse/decommission_audits",
                           group="bkaudit")

# -- params --------------------------------------------------------------------------------------------------
COMMON_PARAMS: dict[str, Param] = {
    "zk": Param("", type="string", title="ZooKeeper",
                description="connect string HOST:PORT[,HOST:PORT][/chroot]; empty = Variable bkaudit_zk"),
    "zk_root": Param("/ledgers", type="string", title="ledgers root znode"),
    "warehouse": Param("", type="string", title="warehouse",
                       description="Delta tables directory or URI; empty = Variable bkaudit_warehouse"),
    "config": Param("", type="string", title="bkaudit settings file",
                    description="path of a bkaudit.toml on the Spark driver; empty = Variable bkaudit_config "
                                "or bkaudit's defaults"),
}

# Jinja snippets for templated operator fields (macros below are registered as user_defined_macros)
ZK = "{{ bk_required(params.zk or var.value.get('bkaudit_zk', ''), 'param zk or Variable bkaudit_zk') }}"
WAREHOUSE = ("{{ bk_required(params.warehouse or var.value.get('bkaudit_warehouse', ''), "
             "'param warehouse or Variable bkaudit_warehouse') }}")
ROOT = "{{ params.zk_root }}"
CONFIG = "{{ params.config or var.value.get('bkaudit_config', '') }}"
RUN_KEY = "{{ bk_id(run_id) }}"


# -- macros --------------------------------------------------------------------------------------------------
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def bk_id(airflow_run_id: str, prefix: str = "af") -> str:
    """A bkaudit snapshot/run id derived from the Airflow run id: the same for every try of a run (a retry
    replaces the rows of its earlier try instead of adding a second run) and valid as a snapshot id."""
    text = _ID_UNSAFE.sub("-", airflow_run_id).strip("-.")
    key = f"{prefix}-{text}"
    if len(key) > 100:
        key = f"{key[:80]}-{hashlib.sha256(airflow_run_id.encode()).hexdigest()[:16]}"
    return key


def decommission_id(airflow_run_id: str) -> str:
    """`bk_id` for bk_decommission_audit: "dc-…", so its snapshots are told apart from scheduled audits'."""
    return bk_id(airflow_run_id, prefix="dc")


def bk_required(value: Any, what: str) -> str:
    """Fail the task at render time, naming the missing setting, instead of running a job without it."""
    if value in (None, ""):
        raise ValueError(f"bkaudit: no value for {what}")
    return str(value)


MACROS = {"bk_id": bk_id, "bk_required": bk_required}


# -- tasks ---------------------------------------------------------------------------------------------------
def spark_job(task_id: str, script: str, args: list[str], *, timeout: timedelta,
              env: dict[str, str] | None = None, **kwargs: Any) -> Any:
    """A SparkSubmitOperator running jobs/<script> with `args` (logged in full by the provider)."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    return SparkSubmitOperator(
        task_id=task_id,
        application=f"{JOBS_DIR}/{script}",
        application_args=args,
        conn_id=SPARK_CONN_ID,
        conf=dict(SPARK_CONF),
        py_files=PY_FILES,
        name=f"bkaudit-{task_id}-{RUN_KEY}",
        env_vars=env,
        execution_timeout=timeout,
        **kwargs,
    )


def runtime_variable(name: str, default: str = "") -> str:
    """An Airflow Variable inside a running task."""
    from airflow.sdk import Variable

    value = Variable.get(name, default=None)
    return default if value in (None, "") else str(value)


def resolve(params: dict[str, Any], key: str, variable: str) -> str:
    """A param, else its Variable; ValueError naming both when neither is set."""
    return bk_required(params.get(key) or runtime_variable(variable), f"param {key} or Variable {variable}")


def last_json_line(output: str) -> Any:
    """XCom of a bash task: its last stdout line parsed as JSON (bkaudit's --json output), else None."""
    lines = output.strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None


def task_states(ti: Any, task_ids: list[str]) -> dict[str, str]:
    """The states of `task_ids` in this DAG run ({} when this Task SDK cannot say)."""
    try:
        states = ti.get_task_states(dag_id=ti.dag_id, task_ids=task_ids, run_ids=[ti.run_id])
    except Exception:  # an older Task SDK: no verdict beyond the report's own
        return {}
    mine = states.get(ti.run_id, {})
    return {t: str(mine[t]) for t in task_ids if mine.get(t) is not None}
