"""A real `airflow dags test bk_decommission_audit` with decommission=true on a local cluster: the audit says
safe, the bookie is drained by a running Auditor (`bkaudit autorecovery run`), the reschedule-mode sensor
sees it Drained, the final restricted check passes and the cookie is removed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.test_dags import AIRFLOW_BIN, AIRFLOW_PY, airflow_env
from tests.helpers import QUICK_JVM

pytestmark = [
    pytest.mark.airflow, pytest.mark.slow, pytest.mark.spark,
    pytest.mark.skipif(not AIRFLOW_PY.exists(), reason="no .venv-airflow: `make airflow` (make test does)"),
]


@pytest.mark.timeout(1800)  # four spark-submit jobs and a drain on a shared 2-core machine
def test_dags_test_decommissions_a_bookie(cluster_factory: Any, tmp_path: Path) -> None:
    from bkaudit.client import BookKeeper
    from bkaudit.store import ZkStore
    from bkaudit.zk import lifecycle as store
    from bkaudit.zk import registry
    from tests.autorecovery.support import start_run, stop, write_ledgers

    cluster = cluster_factory(bookies=4, racks=4)
    zk = cluster.zk_client()
    with BookKeeper.connect(cluster.zk_settings()) as bk:
        truth = write_ledgers(bk, 12, 10)
        holders = {b for lid in truth for b in bk.ledger_metadata(lid).bookies()}
    leaving = sorted(holders)[0]
    cs = ZkStore(zk, root=cluster.root)
    assert cs.index.ledgers_of([leaving])[leaving]

    home, warehouse = tmp_path / "airflow", tmp_path / "warehouse"
    home.mkdir()
    env = airflow_env(
        home,
        AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": "local[2]"}),
        AIRFLOW_VAR_BKAUDIT_SPARK_CONF=json.dumps({
            "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
            "spark.driver.extraJavaOptions": QUICK_JVM, "spark.executor.extraJavaOptions": QUICK_JVM}),
        AIRFLOW_VAR_BKAUDIT_TASK_RETRIES="0",
        AIRFLOW_VAR_BKAUDIT_DRAIN_POKE_S="2",
        PYSPARK_PYTHON=sys.executable,
    )
    migrate = subprocess.run([str(AIRFLOW_BIN), "db", "migrate"], env=env, cwd=home, capture_output=True,
                             text=True, timeout=300, check=False)
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    ar = start_run(cluster, tmp_path, "ar", "--workers", "2", BKAUDIT_LIFECYCLE__DRAIN_CHECK_INTERVAL_S="1")
    try:
        conf = {"zk": cluster.zk, "warehouse": str(warehouse), "bookies": [leaving], "decommission": True}
        proc = subprocess.run([str(AIRFLOW_BIN), "dags", "test", "bk_decommission_audit", "2026-11-23", "-c",
                               json.dumps(conf)], env=env, cwd=home, capture_output=True, text=True,
                              timeout=1700, check=False)
    finally:
        stop(ar)
    log = proc.stdout + proc.stderr
    (tmp_path / "dags-test.log").write_text(log)
    finished = [x for x in log.splitlines() if "DagRun Finished" in x]
    assert proc.returncode == 0 and finished and "state=success" in finished[-1], log[-8000:]
    for task in ("answer", "go_ahead", "drain", "wait_drained", "final_audit", "final_answer", "remove"):
        assert f"end task task_id={task}" in log, task
    # ground truth from ZooKeeper: gone from every ledger, cookie and state removed, history complete
    assert cs.index.ledgers_of([leaving])[leaving] == {}
    assert registry.read_cookie(zk, leaving, cluster.root) is None
    states = [h.state.value for h in store.history(zk, leaving, root=cluster.root)]
    assert states == ["Draining", "Drained", "Removed"]
