"""Run by the Airflow environment's Python (tests/airflow/test_dags.py): load the DagBag, print it as JSON.

Airflow lives in its own virtual environment (.venv-airflow, no pytest there), so the DAG integrity test
asks this script for the facts and asserts on them from the project's pytest.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def describe(folder: str) -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=folder)
    out: dict[str, Any] = {"import_errors": {k: str(v)[-2000:] for k, v in bag.import_errors.items()},
                           "dags": {}}
    for dag_id, dag in bag.dags.items():
        tasks = {}
        for t in dag.tasks:
            tasks[t.task_id] = {
                "operator": type(t).__name__,
                "upstream": sorted(t.upstream_task_ids),
                "trigger_rule": str(getattr(t.trigger_rule, "value", t.trigger_rule)),
                "retries": t.retries,
                "exponential_backoff": bool(t.retry_exponential_backoff),
                "timeout_s": t.execution_timeout.total_seconds() if t.execution_timeout else None,
                "outlets": [getattr(o, "name", str(o)) for o in (t.outlets or [])],
                "application": getattr(t, "application", None),
                "application_args": getattr(t, "application_args", None),
                "mode": getattr(t, "mode", None),
                "poke_interval": getattr(t, "poke_interval", None),
                "pool": t.pool,
                "env_vars": getattr(t, "env_vars", None),
            }
        out["dags"][dag_id] = {
            "schedule": None if dag.schedule is None else str(dag.schedule),
            "max_active_runs": dag.max_active_runs,
            "assets": sorted({getattr(o, "uri", str(o)) for t in dag.tasks for o in (t.outlets or [])}),
            "params": {k: {"default": dag.params.get_param(k).value, "schema": dag.params.get_param(k).schema}
                       for k in dag.params},
            "tasks": tasks,
            "tags": sorted(dag.tags),
            "sample_id": dag.user_defined_macros["bk_id"]("manual__2026-11-22T05:41:15+00:00"),
        }
    sys.path.insert(0, folder)
    import bkaudit_common

    out["bk_id"] = {rid: bkaudit_common.bk_id(rid) for rid in (
        "manual__2026-11-22T05:41:15.064465+00:00", "scheduled__2026-11-22T00:00:00+00:00", "x" * 300)}
    return out


if __name__ == "__main__":
    print("BKAUDIT-PROBE " + json.dumps(describe(sys.argv[1]), default=str))
