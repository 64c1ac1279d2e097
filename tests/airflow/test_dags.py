"""The Airflow DAGs: integrity (DagBag) and a real `airflow dags test bk_metadata_checker` run.

Airflow has its own virtual environment (.venv-airflow, `make airflow`; see airflow_dags/requirements.txt),
so these tests drive it through subprocesses from the project's pytest: `make test` runs them like any other.
The real run uses Airflow's own `dags test` (SQLite metadata DB in a temporary AIRFLOW_HOME), the Spark
connection pointed at a standalone Spark master with two workers (tests/fixtures/spark_standalone.py), and the
project's `spark-submit` and `bkaudit` first on PATH, against a local cluster; then the Delta tables it wrote
are checked against what the test wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import spark_standalone
from tests.helpers import QUICK_JVM

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "airflow_dags"
AIRFLOW_PY = REPO / ".venv-airflow" / "bin" / "python"
AIRFLOW_BIN = REPO / ".venv-airflow" / "bin" / "airflow"
PROJECT_BIN = Path(sys.executable).parent

pytestmark = [
    pytest.mark.airflow,
    pytest.mark.skipif(not AIRFLOW_PY.exists(), reason="no .venv-airflow: `make airflow` (make test does)"),
]


def airflow_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "BKAUDIT_"))}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PATH": f"{PROJECT_BIN}{os.pathsep}{env.get('PATH', '')}",  # spark-submit and bkaudit of the project
        **extra,
    })
    return env


def probe(home: Path, **extra: str) -> dict[str, Any]:
    command = [str(AIRFLOW_PY), str(Path(__file__).with_name("dag_probe.py")), str(DAGS)]
    proc = subprocess.run(command, env=airflow_env(home, **extra), cwd=home, capture_output=True, text=True,
                          timeout=180, check=False)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("BKAUDIT-PROBE ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("BKAUDIT-PROBE "))
    return result


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return probe(tmp_path_factory.mktemp("airflow-home"))


def test_bad_variables_do_not_break_the_import(tmp_path: Path) -> None:
    # Variables are read when tasks run: a broken one fails those tasks, never the DAG files' import
    bag = probe(tmp_path, AIRFLOW_VAR_BKAUDIT_SPARK_CONF="{not json", AIRFLOW_VAR_BKAUDIT_TASK_RETRIES="many",
                AIRFLOW_VAR_BKAUDIT_ZK="", AIRFLOW_VAR_BKAUDIT_JOBS_DIR="/nowhere")
    assert bag["import_errors"] == {}
    assert set(bag["dags"]) == {"bk_metadata_checker", "bk_decommission_audit"}


def test_assets_name_the_deployments_warehouse(tmp_path: Path) -> None:
    bag = probe(tmp_path, AIRFLOW_VAR_BKAUDIT_WAREHOUSE="s3a://audit-bucket/bkaudit")
    assert "s3://audit-bucket/bkaudit/violations" in bag["dags"]["bk_metadata_checker"]["assets"]
    local = probe(tmp_path, AIRFLOW_VAR_BKAUDIT_WAREHOUSE=str(tmp_path / "wh"))
    assert f"file://{tmp_path / 'wh'}/snapshots" in local["dags"]["bk_decommission_audit"]["assets"]


def test_spark_tasks_share_one_pool_and_take_zookeeper_from_a_connection(dagbag: dict[str, Any]) -> None:
    spark_tasks = [t for d in dagbag["dags"].values() for t in d["tasks"].values()
                   if t["operator"] in ("BkauditSparkSubmitOperator", "BkauditReportOperator")]
    assert len(spark_tasks) >= 7 and {t["pool"] for t in spark_tasks} == {"bkaudit"}
    for t in spark_tasks:
        assert t["env_vars"]["BKAUDIT_ZK__AUTH_DIGEST"] == "{{ bk_zk_auth(params) }}"
        args = t["application_args"]
        if "--zk" in args:
            assert args[args.index("--zk") + 1] == "{{ bk_zk(params) }}"
    assert dagbag["dags"]["bk_decommission_audit"]["max_active_runs"] == 1
    assert dagbag["dags"]["bk_metadata_checker"]["max_active_runs"] == 1


def test_dags_import_without_errors(dagbag: dict[str, Any]) -> None:
    assert dagbag["import_errors"] == {}
    assert set(dagbag["dags"]) == {"bk_metadata_checker", "bk_decommission_audit"}


def test_metadata_checker_structure(dagbag: dict[str, Any]) -> None:
    dag = dagbag["dags"]["bk_metadata_checker"]
    tasks = dag["tasks"]
    upstream = {t: v["upstream"] for t, v in tasks.items()}
    assert upstream == {
        "snapshot": [], "validate": ["snapshot"], "check": ["snapshot", "validate"],
        "publish_gate": ["check", "validate"], "publish": ["publish_gate"], "report": ["check", "publish"],
    }
    assert dag["schedule"] == "@daily"
    for name, script in (("snapshot", "snapshot_metadata.py"), ("validate", "validate_snapshot.py"),
                         ("check", "metadata_checker.py"), ("publish", "publish_underreplicated.py")):
        assert tasks[name]["operator"] == "BkauditSparkSubmitOperator"
        assert tasks[name]["application"].endswith(f"/jobs/{script}")
        assert (REPO / "jobs" / script).is_file()
        assert tasks[name]["timeout_s"] and tasks[name]["exponential_backoff"]
    assert tasks["validate"]["retries"] == 0  # a verdict on fixed data
    assert tasks["snapshot"]["retries"] >= 1 and tasks["check"]["retries"] >= 1
    assert tasks["check"]["trigger_rule"] == "all_done_min_one_success"
    assert tasks["publish_gate"]["operator"] == "_ShortCircuitDecoratedOperator"
    check_args = tasks["check"]["application_args"]
    assert tasks["report"]["trigger_rule"] == "all_done" and tasks["report"]["retries"] == 0
    # the report through the same spark-submit path (no second bkaudit environment), its verdict in Airflow
    assert tasks["report"]["operator"] == "BkauditReportOperator"
    assert tasks["report"]["application"].endswith("/jobs/report.py")
    assert (REPO / "jobs" / "report.py").is_file()
    report_args = tasks["report"]["application_args"]
    assert report_args[report_args.index("--run-id") + 1] == check_args[check_args.index("--run-id") + 1]
    assert report_args[report_args.index("--fail-on") + 1] == "{{ params.fail_on }}"
    assert report_args[report_args.index("--out") + 1] == "{{ bk_report_dir(params) }}"
    assert "bkaudit_violations" in tasks["check"]["outlets"]
    assert "bkaudit_violations" in tasks["publish"]["outlets"]
    # deterministic ids from the Airflow run: snapshot and check agree, retries replace their own rows
    assert check_args[check_args.index("--run-id") + 1] == check_args[check_args.index("--snapshot-id") + 1]
    assert "--run-id" in tasks["publish"]["application_args"]
    params = dag["params"]
    assert {"zk", "zk_root", "warehouse", "config", "publish", "publish_placement", "fail_on",
            "validation_fail_on", "report_dir"} <= set(params)
    assert params["publish"]["default"] is False and params["fail_on"]["default"] == "critical"
    assert params["zk"]["default"] == "" and params["warehouse"]["default"] == ""  # no hard-coded hosts


# What the run's verdict must be, by the upstream states and the report job's exit status (the DAG's docs):
# red after the page when fail_on is reached (job exit 3) or validate/publish failed; nothing to report
# (and red) when check failed; a skipped publish (gate off) is fine.
VERDICT_CASES = [
    # (states, report job exit, red?, words the reason must contain)
    ({"validate": "success", "check": "success", "publish": "success"}, 0, False, []),
    ({"validate": "success", "check": "success", "publish": "skipped"}, 0, False, []),
    ({"validate": "success", "check": "success", "publish": "skipped"}, 3, True,
     ["report written", "fail_on=warning"]),
    ({"validate": "failed", "check": "success", "publish": "upstream_failed"}, 0, True,
     ["report written", "validate (failed)", "publish (upstream_failed)"]),
    ({"validate": "success", "check": "success", "publish": "failed"}, 3, True,
     ["fail_on=warning", "publish (failed)"]),
    ({"validate": "success", "check": "success", "publish": "skipped"}, 1, True,
     ["report job failed (exit 1)"]),
    ({}, 0, False, []),  # a Task SDK that cannot tell the states: the job's own verdict only
]
NOTHING_CASES = [
    ({"validate": "success", "check": "failed", "publish": "upstream_failed"},
     "check did not succeed (failed)"),
    ({"validate": "failed", "check": "upstream_failed"}, "check did not succeed (upstream_failed)"),
    ({"validate": "failed", "check": "success", "publish": "upstream_failed"}, None),
    ({}, None),
]


def test_report_verdict_in_the_airflow_environment(tmp_path: Path) -> None:
    # the verdict code of BkauditReportOperator, run where it runs (Airflow's venv, no bkaudit there)
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import bkaudit_common as c; "
            "v, n = json.loads(sys.argv[2]), json.loads(sys.argv[3]); print('BKAUDIT-PROBE ' + json.dumps("
            "[[c.run_verdict(s, report_exit=e, fail_on='warning') for s, e in v], "
            "[c.nothing_to_report(s) for s in n]]))")
    proc = subprocess.run([str(AIRFLOW_PY), "-c", code, str(DAGS),
                           json.dumps([[s, e] for s, e, _, _ in VERDICT_CASES]),
                           json.dumps([s for s, _ in NOTHING_CASES])],
                          env=airflow_env(tmp_path), cwd=tmp_path, capture_output=True, text=True,
                          timeout=180, check=False)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("BKAUDIT-PROBE ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    verdicts, nothing = json.loads(lines[-1].removeprefix("BKAUDIT-PROBE "))
    for (states, exit_code, red, words), reasons in zip(VERDICT_CASES, verdicts, strict=True):
        assert bool(reasons) is red, (states, exit_code, reasons)
        text = "; ".join(reasons)
        assert all(w in text for w in words), (states, exit_code, text)
    for (states, why), got in zip(NOTHING_CASES, nothing, strict=True):
        assert (got is None) if why is None else (why in got), (states, got)


def test_decommission_audit_structure(dagbag: dict[str, Any]) -> None:
    dag = dagbag["dags"]["bk_decommission_audit"]
    assert dag["schedule"] is None  # manual only
    assert {t: v["upstream"] for t, v in dag["tasks"].items()} == {
        "snapshot": [], "audit": ["snapshot"], "answer": ["audit"], "go_ahead": ["answer"],
        "drain": ["go_ahead"], "wait_drained": ["drain"], "final_snapshot": ["wait_drained"],
        "final_audit": ["final_snapshot"], "final_answer": ["final_audit"], "remove": ["final_answer"]}
    assert dag["tasks"]["wait_drained"]["mode"] == "reschedule"  # no worker slot held while draining
    assert dag["tasks"]["final_audit"]["application"].endswith("/jobs/decommission_audit.py")
    assert dag["params"]["decommission"]["default"] is False  # audit only unless asked
    assert dag["tasks"]["audit"]["application"].endswith("/jobs/decommission_audit.py")
    assert dag["sample_id"] == "dc-manual__2026-11-22T05-41-15-00-00"
    assert dagbag["dags"]["bk_metadata_checker"]["sample_id"] == "af-manual__2026-11-22T05-41-15-00-00"
    assert dag["params"]["bookies"]["schema"]["type"] == "array"
    assert dag["params"]["bookies"]["schema"]["minItems"] == 1


def test_run_ids_are_valid_snapshot_ids(dagbag: dict[str, Any]) -> None:
    from bkaudit.tables.store import validate_snapshot_id

    ids = dagbag["bk_id"]
    for key in ids.values():
        assert validate_snapshot_id(key) == key
        assert len(key) <= 100
    assert len(set(ids.values())) == len(ids)


# -- a real run --------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.spark
def test_dags_test_metadata_checker_writes_the_tables(cluster_factory: Any, tmp_path: Path) -> None:
    with spark_standalone.running_cluster(tmp_path / "spark") as spark:
        _metadata_checker_run(cluster_factory, tmp_path, spark)


def _metadata_checker_run(cluster_factory: Any, tmp_path: Path,
                          spark: spark_standalone.StandaloneSpark) -> None:
    import pyarrow.compute as pc

    from bkaudit.client import BookKeeper
    from bkaudit.demo.workload import write_pinned
    from bkaudit.tables.read import read_arrow

    cluster = cluster_factory(bookies=4, racks=3)  # /rack-1 holds two bookies
    written = []
    with BookKeeper.connect(cluster.zk_settings()) as bk:
        for i in range(20):
            custom = {"pulsar/managed-ledger": f"public/default/persistent/t{i % 3}"} if i % 2 else None
            handle = bk.create_ledger(3, 2, 2, custom_metadata=custom)
            for _ in range(3 + i % 5):
                handle.add_entry(b"airflow")
            handle.close()
            written.append(handle.ledger_id)
    rack1 = [b.id for b in cluster.bookies if b.rack == "/rack-1"]
    misplaced = write_pinned(cluster.zk_settings(), rack1, 4, "public/default/persistent/misplaced")
    written.append(misplaced)

    home, warehouse, reports = tmp_path / "airflow", tmp_path / "warehouse", tmp_path / "reports"
    home.mkdir()
    env = airflow_env(
        home,
        AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": spark.master.rsplit(":", 1)[0],
                                               "port": int(spark.master.rsplit(":", 1)[1])}),
        AIRFLOW_VAR_BKAUDIT_SPARK_CONF=json.dumps({
            "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
            # short jobs: a JVM that starts fast matters more than peak JIT speed
            "spark.driver.extraJavaOptions": QUICK_JVM, "spark.executor.extraJavaOptions": QUICK_JVM}),
        AIRFLOW_VAR_BKAUDIT_TASK_RETRIES="0",
        AIRFLOW_VAR_BKAUDIT_BIN=str(tmp_path / "no-such-bkaudit"),  # the report needs no bkaudit command
        PYSPARK_PYTHON=sys.executable,
    )
    migrate = subprocess.run([str(AIRFLOW_BIN), "db", "migrate"], env=env, cwd=home, capture_output=True,
                             text=True, timeout=300, check=False)
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    pool = subprocess.run([str(AIRFLOW_BIN), "pools", "set", "bkaudit", "1", "bkaudit Spark jobs"], env=env,
                          cwd=home, capture_output=True, text=True, timeout=120, check=False)
    assert pool.returncode == 0, pool.stdout[-2000:] + pool.stderr[-2000:]
    # ZooKeeper from the Connection (as a secrets backend would supply it), not from a param
    hosts, _, chroot = cluster.zk.partition("/")
    host, port = hosts.split(",")[0].rsplit(":", 1)
    env["AIRFLOW_CONN_BKAUDIT_ZOOKEEPER"] = json.dumps({"conn_type": "generic", "host": host,
                                                        "port": int(port), "schema": chroot})
    conf = {"warehouse": str(warehouse), "report_dir": str(reports)}
    proc = subprocess.run([str(AIRFLOW_BIN), "dags", "test", "bk_metadata_checker", "2026-11-22", "-c",
                           json.dumps(conf)], env=env, cwd=home, capture_output=True, text=True, timeout=600,
                          check=False)
    log = proc.stdout + proc.stderr
    (tmp_path / "dags-test.log").write_text(log)
    finished = [x for x in log.splitlines() if "DagRun Finished" in x]
    assert proc.returncode == 0 and finished and "state=success" in finished[-1], log[-6000:]
    for task in ("snapshot", "validate", "check", "publish_gate", "report"):
        assert f"end task task_id={task}" in log
    assert f"Spark-Submit cmd: spark-submit --master {spark.master}" in log

    runs = read_arrow(str(warehouse), "audit_runs").to_pylist()
    assert len(runs) == 1 and runs[0]["status"] == "succeeded"
    run_id = runs[0]["run_id"]
    assert run_id.startswith("af-manual__") and runs[0]["snapshot_id"] == run_id
    snaps = read_arrow(str(warehouse), "snapshots").to_pylist()
    assert [(s["snapshot_id"], s["status"]) for s in snaps] == [(run_id, "succeeded")]
    assert snaps[0]["ledgers"] == len(written)
    ledgers = read_arrow(str(warehouse), "ledgers", snapshot_id=run_id)
    assert sorted(ledgers.column("ledger_id").to_pylist()) == sorted(written)
    violations = read_arrow(str(warehouse), "violations")
    mine = violations.filter(pc.equal(violations.column("run_id"), run_id)).to_pylist()
    assert [(v["category"], v["ledger_id"]) for v in mine] == [("placement_fail", misplaced)]
    assert dict(runs[0]["counts"])["placement_fail"] == 1
    assert not mine[0]["published"]  # publish param off: the gate skipped publishing
    assert read_arrow(str(warehouse), "validation_results", snapshot_id=run_id).num_rows > 0
    # the report: written by jobs/report.py through spark-submit, the verdict green (placement_fail is a
    # warning, below the default fail_on=critical)
    assert any("Spark-Submit cmd:" in x and "/jobs/report.py" in x for x in log.splitlines())
    page = reports / f"report-{run_id}.html"
    assert page.is_file() and (reports / "index.html").is_file()
    assert run_id in page.read_text() and str(misplaced) in page.read_text()

    # the same run judged at fail_on=warning: the page is written again, then the task fails naming the
    # threshold (the run's conf keeps report_dir; the task param only changes fail_on)
    page.unlink()
    (reports / "index.html").unlink()
    judged = subprocess.run([str(AIRFLOW_BIN), "tasks", "test", "bk_metadata_checker", "report", "2026-11-22",
                             "-t", json.dumps({"fail_on": "warning"})], env=env, cwd=home,
                            capture_output=True, text=True, timeout=400, check=False)
    judged_log = judged.stdout + judged.stderr
    (tmp_path / "tasks-test-report.log").write_text(judged_log)
    assert page.is_file() and (reports / "index.html").is_file(), judged_log[-6000:]
    assert "bkaudit: report written; new violations reach fail_on=warning" in judged_log, judged_log[-6000:]
    assert judged.returncode != 0 or "new_state=failed" in judged_log, judged_log[-6000:]
