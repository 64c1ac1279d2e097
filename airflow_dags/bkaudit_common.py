"""What bkaudit's DAGs share: deployment settings, params, deterministic ids, Spark job tasks, assets.

This file runs in the Airflow environment, which has neither bkaudit nor pyspark (see requirements.txt):
every bkaudit step of bk_metadata_checker runs through `spark-submit` (jobs/ entry points);
bk_decommission_audit's answer/drain/remove tasks call the `bkaudit` command of the Spark/bkaudit environment
(Variable bkaudit_bin). Nothing here names a host: where ZooKeeper, the warehouse and Spark are comes
from DAG params, falling back to an Airflow Connection (ZooKeeper) and Variables (docs/airflow.md).

Nothing reads the Variable store when a DAG file is parsed (the scheduler parses it every few seconds, and a
bad Variable must not break the import of both DAGs). Parse-time settings come from the environment only:
    AIRFLOW_VAR_BKAUDIT_TASK_RETRIES      retries per task (default 2, exponential backoff from 1 minute)
    AIRFLOW_VAR_BKAUDIT_CHECKER_SCHEDULE  bk_metadata_checker's schedule (default @daily)
    AIRFLOW_VAR_BKAUDIT_POOL              the pool both DAGs' Spark tasks share (default bkaudit; create it:
                                          `airflow pools set bkaudit 1 "bkaudit Spark jobs"`)
    AIRFLOW_VAR_BKAUDIT_WAREHOUSE         the deployment's warehouse URI: the assets' URIs name it
Task-time Variables (read when a task runs, so they can change without a re-parse; errors fail that task):
    bkaudit_spark_conn_id   Spark connection (default spark_default)
    bkaudit_jobs_dir        directory or URI holding jobs/*.py (default: the repository's jobs/)
    bkaudit_spark_conf      JSON object of extra Spark properties (e.g. spark.archives for a packed venv)
    bkaudit_py_files        comma-separated --py-files (e.g. the bkaudit wheel / dist/bkaudit-pyfiles.zip)
    bkaudit_zk, bkaudit_warehouse, bkaudit_config, bkaudit_report_dir, bkaudit_bin (bk_decommission_audit)
ZooKeeper: the `zk` param, else the Connection `bkaudit_zookeeper` (host/port, or extra {"hosts": "h1:2181,
h2:2181"}, schema = chroot, login/password = digest credentials; from any secrets backend), else the
Variable bkaudit_zk.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, Param
from airflow.sdk.exceptions import AirflowException

# -- deployment settings (parse time: environment only) -------------------------------------------------


def deployment_setting(name: str, default: str) -> str:
    """A parse-time setting from `AIRFLOW_VAR_<NAME>` (never the Variable store: see the module docstring)."""
    value = os.environ.get(f"AIRFLOW_VAR_{name.upper()}")
    return default if value in (None, "") else str(value)


REPO_JOBS = str(Path(__file__).resolve().parent.parent / "jobs")
BASE_SPARK_CONF = {"spark.sql.session.timeZone": "UTC"}
POOL = deployment_setting("bkaudit_pool", "bkaudit")
"""Shared by both DAGs' Spark tasks: an ad hoc decommission audit and the scheduled audit do not load
ZooKeeper and the bookies at the same time (pool size 1), whatever each DAG's max_active_runs."""
ZK_CONN_ID = "bkaudit_zookeeper"

DEFAULT_ARGS: dict[str, Any] = {
    "owner": "bkaudit",
    "retries": int(n) if (n := deployment_setting("bkaudit_task_retries", "2")).isdigit() else 2,
    "retry_delay": timedelta(minutes=1),
    "retry_exponential_backoff": True,  # 1, 2, 4 ... minutes: ZooKeeper/bookies get room to recover
    "max_retry_delay": timedelta(minutes=20),
}

# -- assets --------------------------------------------------------------------------------------------------


def table_asset(table: str) -> Asset:
    """The Delta table `table` of this deployment's warehouse as an Airflow Asset: its URI is the table's own
    location (s3://bucket/prefix/violations, file:///data/bkaudit/violations), so two deployments (or two
    clusters' warehouses) are two assets. Without AIRFLOW_VAR_BKAUDIT_WAREHOUSE: bkaudit://warehouse/<table>."""
    warehouse = deployment_setting("bkaudit_warehouse", "").rstrip("/")
    if not warehouse:
        uri = f"bkaudit://warehouse/{table}"
    elif "://" not in warehouse:
        uri = f"file://{Path(warehouse).resolve()}/{table}"
    else:
        scheme, rest = warehouse.split("://", 1)
        uri = f"{'s3' if scheme == 's3a' else scheme}://{rest}/{table}"  # Airflow knows s3://, not s3a://
    return Asset(name=f"bkaudit_{table}", uri=uri, group="bkaudit",
                 extra={"warehouse": warehouse} if warehouse else {})


SNAPSHOT_ASSET = table_asset("snapshots")
VIOLATIONS_ASSET = table_asset("violations")
"""Downstream DAGs can run on `schedule=[VIOLATIONS_ASSET]` (written by check, publish and decommission)."""
DECOMMISSION_ASSET = table_asset("decommission_audits")

# -- params --------------------------------------------------------------------------------------------------
COMMON_PARAMS: dict[str, Param] = {
    "zk": Param("", type="string", title="ZooKeeper",
                description="connect string HOST:PORT[,HOST:PORT][/chroot]; empty = Connection "
                            "bkaudit_zookeeper, else Variable bkaudit_zk"),
    "zk_root": Param("/ledgers", type="string", title="ledgers root znode"),
    "warehouse": Param("", type="string", title="warehouse",
                       description="Delta tables directory or URI; empty = Variable bkaudit_warehouse"),
    "config": Param("", type="string", title="bkaudit settings file",
                    description="path of a bkaudit.toml on the Spark driver; empty = Variable bkaudit_config "
                                "or bkaudit's defaults"),
}

# Jinja snippets for templated operator fields (macros below are registered as user_defined_macros)
ZK = "{{ bk_zk(params) }}"
ZK_AUTH = "{{ bk_zk_auth(params) }}"
WAREHOUSE = ("{{ bk_required(params.warehouse or var.value.get('bkaudit_warehouse', ''), "
             "'param warehouse or Variable bkaudit_warehouse') }}")
ROOT = "{{ params.zk_root }}"
CONFIG = "{{ params.config or var.value.get('bkaudit_config', '') }}"
RUN_KEY = "{{ bk_id(run_id) }}"
REPORT_DIR = "{{ bk_report_dir(params) }}"


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


def _zk_connection() -> Any:
    """The Connection bkaudit_zookeeper, or None when it is not defined (any secrets backend)."""
    from airflow.sdk import Connection

    try:
        return Connection.get(ZK_CONN_ID)
    except Exception:  # AirflowNotFoundException and friends: not configured
        return None


def bk_zk(params: dict[str, Any]) -> str:
    """The ZooKeeper connect string: param zk, else the Connection, else the Variable (task/render time)."""
    if params.get("zk"):
        return str(params["zk"])
    conn = _zk_connection()
    if conn is not None and (conn.host or (conn.extra_dejson or {}).get("hosts")):
        hosts = (conn.extra_dejson or {}).get("hosts") or f"{conn.host}:{conn.port or 2181}"
        chroot = (conn.schema or "").strip("/")
        return f"{hosts}/{chroot}" if chroot else str(hosts)
    return bk_required(runtime_variable("bkaudit_zk"),
                       f"param zk, Connection {ZK_CONN_ID} or Variable bkaudit_zk")


def bk_zk_auth(params: dict[str, Any]) -> str:
    """Digest credentials "user:password" from the Connection's login/password ("" without)."""
    if params.get("zk"):
        return ""
    conn = _zk_connection()
    return f"{conn.login}:{conn.password}" if conn is not None and conn.login else ""


def bk_report_dir(params: dict[str, Any]) -> str:
    """Where the report job writes the HTML: param report_dir, else Variable bkaudit_report_dir, else
    <warehouse>/reports (a directory on the Spark driver: in client mode, the Airflow worker)."""
    chosen = params.get("report_dir") or runtime_variable("bkaudit_report_dir")
    if chosen:
        return str(chosen)
    warehouse = bk_required(params.get("warehouse") or runtime_variable("bkaudit_warehouse"),
                            "param warehouse or Variable bkaudit_warehouse")
    return f"{warehouse.rstrip('/')}/reports"


MACROS = {"bk_id": bk_id, "bk_required": bk_required, "bk_zk": bk_zk, "bk_zk_auth": bk_zk_auth,
          "bk_report_dir": bk_report_dir}


# -- tasks ---------------------------------------------------------------------------------------------------
class BkauditSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit of a jobs/ script whose deployment Variables are read when the task runs.

    A bad Variable (e.g. bkaudit_spark_conf that is not JSON) fails this task with a message naming it,
    instead of breaking the import of the DAG files.
    """

    def __init__(self, *, script: str, **kwargs: Any) -> None:
        super().__init__(application=f"{REPO_JOBS}/{script}", **kwargs)
        self.script = script

    def execute(self, context: Any) -> Any:
        jobs_dir = runtime_variable("bkaudit_jobs_dir", REPO_JOBS).rstrip("/")
        self.application = f"{jobs_dir}/{self.script}"
        raw = runtime_variable("bkaudit_spark_conf", "{}")
        try:
            extra = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"bkaudit: Variable bkaudit_spark_conf is not JSON: {exc}") from None
        if not isinstance(extra, dict):
            raise ValueError("bkaudit: Variable bkaudit_spark_conf must be a JSON object of Spark properties")
        self.conf = {**BASE_SPARK_CONF, **{str(k): str(v) for k, v in extra.items()}, **(self.conf or {})}
        self.py_files = runtime_variable("bkaudit_py_files") or self.py_files
        self._conn_id = runtime_variable("bkaudit_spark_conn_id", "spark_default")
        self._hook = None  # built from the values above
        return super().execute(context)


class BkauditReportOperator(BkauditSparkSubmitOperator):
    """jobs/report.py through spark-submit, then the DAG run's verdict (the last task of bk_metadata_checker).

    Only the verdict is here, and it needs nothing of bkaudit: the states of the judged upstream tasks and the
    job's exit status (3 = the run's new violations reach fail_on, after the page is written). Nothing is
    submitted when `check` did not succeed (there is no run to report). The job's JSON line becomes the XCom
    when spark-submit relays the driver's output (client mode).
    """

    judged = ("validate", "check", "publish")

    def execute(self, context: Any) -> Any:
        ti = context["ti"]
        states = task_states(ti, list(self.judged))
        nothing = nothing_to_report(states)
        if nothing:
            raise AirflowException(nothing)
        exit_code, job_error = 0, None
        try:
            super().execute(context)
        except AirflowException as exc:  # the provider's "Cannot execute: ... Error code is: N."
            found = re.search(r"Error code is: (\d+)", str(exc))
            exit_code, job_error = (int(found.group(1)) if found else 1), exc
            self.log.info("bkaudit: jobs/report.py ended with exit status %d", exit_code)
        fail_on = str((context.get("params") or {}).get("fail_on", "critical"))
        reasons = run_verdict(states, report_exit=exit_code, fail_on=fail_on)
        if reasons:
            raise AirflowException(f"bkaudit: {'; '.join(reasons)}") from job_error
        return report_summary(getattr(self._hook, "_last_submit_log_lines", None) or ())


def nothing_to_report(states: dict[str, str]) -> str | None:
    """Why the report task must fail without submitting anything: the check did not succeed (None: it did).
    Without states (an older Task SDK) the job runs and says itself when there is no such run."""
    check = states.get("check", "success")
    return None if check == "success" else f"bkaudit: no report: the check did not succeed ({check})"


def run_verdict(states: dict[str, str], *, report_exit: int, fail_on: str) -> list[str]:
    """Why the DAG run fails after the report job ended with `report_exit` ([]: it passes).

    3 is the job's "new violations reach fail_on" (the page exists); any other non-zero: the job failed.
    A validate or publish that failed (or never ran because its upstream failed) fails the run too.
    """
    reasons = []
    if report_exit == 3:
        reasons.append(f"report written; new violations reach fail_on={fail_on}")
    elif report_exit:
        reasons.append(f"the report job failed (exit {report_exit})")
    failed = [f"{t} ({s})" for t, s in states.items() if s in ("failed", "upstream_failed")]
    if failed:
        reasons.append(f"{'report written; ' if not report_exit else ''}the run fails because "
                       f"{', '.join(failed)}")
    return reasons


def spark_job(task_id: str, script: str, args: list[str], *, timeout: timedelta,
              env: dict[str, str] | None = None, operator: type[BkauditSparkSubmitOperator] | None = None,
              **kwargs: Any) -> Any:
    """A spark-submit of jobs/<script> with `args` (logged in full by the provider), in the shared pool."""
    return (operator or BkauditSparkSubmitOperator)(
        task_id=task_id,
        script=script,
        application_args=args,
        name=f"bkaudit-{task_id}-{RUN_KEY}",
        env_vars={"BKAUDIT_ZK__AUTH_DIGEST": ZK_AUTH, **(env or {})},
        execution_timeout=timeout,
        pool=POOL,
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


def report_summary(lines: Any) -> dict[str, Any] | None:
    """The report job's JSON object among the last lines spark-submit printed (Spark's shutdown log follows
    it), or None (cluster mode: the driver's output stays on the cluster)."""
    for line in reversed(list(lines)):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and "report" in found:
            return found
    return None


def task_states(ti: Any, task_ids: list[str]) -> dict[str, str]:
    """The states of `task_ids` in this DAG run ({} when this Task SDK cannot say)."""
    try:
        states = ti.get_task_states(dag_id=ti.dag_id, task_ids=task_ids, run_ids=[ti.run_id])
    except Exception:  # an older Task SDK: no verdict beyond the report's own
        return {}
    mine = states.get(ti.run_id, {})
    return {t: str(mine[t]) for t in task_ids if mine.get(t) is not None}
