"""bk_decommission_audit: may these bookies be removed? With `decommission`, also drain and remove them.

    snapshot ─► audit ─► answer ─► go_ahead ─► drain ─► wait_drained ─► final_snapshot ─► final_audit
                                                                      ─► final_answer ─► remove

- snapshot (spark-submit jobs/snapshot_metadata.py): a fresh snapshot, so the answer is about now.
- audit    (spark-submit jobs/decommission_audit.py): the metadata checker restricted to the ledgers whose
  ensembles name the bookies, then the what-if "remove them all together": one `decommission_audits` row
  per bookie (safe, blocking ledgers with the reason and the entries at risk).
- answer   (`bkaudit decommission-audit --audit-id`): the recorded answer as this run's XCom, e.g.
  {"safe": false, "bookies": [{"bookie_id": "bk3:3181", "safe": false, "blocking": [{"ledger_id": 42,
  "reason": "would_lose_entries", ...}]}]}. "Not safe" is an answer, not a failure: the run stays green.

With {"decommission": true} the run goes on (docs/lifecycle.md):
- go_ahead     stops here (green) for an audit-only run; fails clearly when the audit said "not safe".
- drain        `bkaudit lifecycle drain` each bookie: Draining, read-only; the Auditor moves its ledgers out.
- wait_drained a sensor in reschedule mode (no worker slot held while the Auditor drains, possibly for
               hours): done when every bookie is Drained; fails at once, naming the bad ledgers, when one is
               DrainingFailed.
- final_*      the restricted check again on a fresh snapshot: nothing may reference the bookies any more.
- remove       `bkaudit lifecycle remove --force` (cookie and state together), only if the final answer is
               safe. Forced: the drained bookies usually still run (registered read-only), which a plain
               `remove` refuses, as BookKeeper's decommissionbookie does; they stay read-only until stopped.

Trigger with {"bookies": ["bk3:3181", "bk4:3181"]}; snapshot and audit ids are derived from the Airflow run
id ("dc-manual__…"), so a retry replaces its own rows; lifecycle steps are idempotent on retry.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, PokeReturnValue, task

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
    deployment_setting,
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
    "decommission": Param(False, type="boolean", title="drain and remove",
                          description="if the audit says safe: drain the bookies, wait until Drained, check "
                                      "again, remove their cookies"),
}
DRAIN_POKE_S = float(deployment_setting("bkaudit_drain_poke_s", "120"))  # wait_drained's check interval
DRAIN_TIMEOUT = timedelta(hours=float(deployment_setting("bkaudit_drain_timeout_hours", "72")))
FINAL_KEY = "{{ bk_id(run_id) }}-final"


def bkaudit_argv(p: dict[str, Any], *args: str) -> list[str]:
    """`bkaudit <args> --zk … --root …` for the lifecycle commands (ZooKeeper from the param or Variable)."""
    argv = [runtime_variable("bkaudit_bin", "bkaudit"), *args, "--zk", resolve(p, "zk", "bkaudit_zk"),
            "--root", p.get("zk_root") or "/ledgers"]
    config = p.get("config") or runtime_variable("bkaudit_config")
    return [*argv, "--config", config] if config else argv


def bookie_states(p: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """`bkaudit lifecycle state --json` of every bookie of the run."""
    out = {}
    for bookie in p.get("bookies") or []:
        proc = subprocess.run(bkaudit_argv(p, "lifecycle", "state", bookie, "--json"), capture_output=True,
                              text=True, timeout=300, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"bkaudit lifecycle state {bookie} failed: {proc.stderr[-2000:]}")
        out[bookie] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out

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

    @task.short_circuit
    def go_ahead(verdict: dict[str, Any] | None, params: dict[str, Any] | None = None) -> bool:
        """Audit only: stop here. Decommission: go on if safe, fail with the blocking ledgers if not."""
        from airflow.sdk.exceptions import AirflowFailException

        if not (params or {}).get("decommission"):
            return False
        if not verdict or not verdict.get("safe"):
            blocking = [(b.get("bookie_id"), [x.get("ledger_id") for x in b.get("blocking", [])][:20])
                        for b in (verdict or {}).get("bookies", []) if not b.get("safe")]
            raise AirflowFailException(f"removal is not safe now; blocking ledgers per bookie: {blocking}")
        return True

    @task.bash(execution_timeout=timedelta(minutes=10))
    def drain(params: dict[str, Any] | None = None, run_id: str | None = None) -> str:
        """Active -> Draining for every bookie (a retry finds them Draining already: success)."""
        p = params or {}
        steps = [bkaudit_argv(p, "lifecycle", "drain", b, "--reason", f"airflow {run_id}", "--json")
                 for b in p.get("bookies") or []]
        return " && ".join(" ".join(shlex.quote(a) for a in argv) for argv in steps)

    @task.sensor(poke_interval=DRAIN_POKE_S, timeout=DRAIN_TIMEOUT.total_seconds(), mode="reschedule",
                 execution_timeout=timedelta(minutes=10))
    def wait_drained(params: dict[str, Any] | None = None) -> PokeReturnValue:
        """Drained: done; DrainingFailed: fail now, naming the ledgers that could not be moved."""
        from airflow.sdk.exceptions import AirflowFailException

        states = bookie_states(params or {})
        failed = {b: (d.get("progress") or {}) for b, d in states.items()
                  if d.get("state") == "DrainingFailed"}
        if failed:
            raise AirflowFailException("draining failed: " + "; ".join(
                f"{b}: data loss on ledgers {p.get('data_loss_ledgers')}, repeated failures on "
                f"{p.get('failed_ledgers')}" for b, p in failed.items()))
        left = {b: (d.get("progress") or {}).get("ledgers_left") for b, d in states.items()
                if d.get("state") != "Drained"}
        print(f"still draining (ledgers left): {left}" if left else "all Drained")
        return PokeReturnValue(is_done=not left, xcom_value={b: d.get("state") for b, d in states.items()})

    final_snapshot = spark_job(
        "final_snapshot", "snapshot_metadata.py",
        ["--zk", ZK, "--root", ROOT, "--warehouse", WAREHOUSE, "--snapshot-id", FINAL_KEY,
         "--config", CONFIG],
        timeout=timedelta(hours=1), outlets=[SNAPSHOT_ASSET],
    )
    final_audit = spark_job(
        "final_audit", "decommission_audit.py",
        ["--zk", ZK, "--root", ROOT, "--warehouse", WAREHOUSE, "--snapshot-id", FINAL_KEY,
         "--audit-id", FINAL_KEY,
         "--bookies", "{{ bk_required(params.bookies | join(','), 'param bookies') }}",
         "--min-copies", "{{ params.min_copies }}", "--config", CONFIG],
        timeout=timedelta(hours=2), outlets=[DECOMMISSION_ASSET],
    )

    @task.bash(execution_timeout=timedelta(minutes=10), output_processor=last_json_line)
    def final_answer(params: dict[str, Any] | None = None, run_id: str | None = None) -> str:
        """The final restricted check's answer (XCom)."""
        p = params or {}
        argv = [runtime_variable("bkaudit_bin", "bkaudit"), "decommission-audit",
                "--warehouse", resolve(p, "warehouse", "bkaudit_warehouse"),
                "--audit-id", decommission_id(run_id or "") + "-final", "--json"]
        config = p.get("config") or runtime_variable("bkaudit_config")
        return " ".join(shlex.quote(a) for a in ([*argv, "--config", config] if config else argv))

    @task(execution_timeout=timedelta(minutes=10))
    def remove(verdict: dict[str, Any] | None, params: dict[str, Any] | None = None,
               run_id: str | None = None) -> dict[str, Any]:
        """Delete cookie and state of every bookie, only if the final check found nothing left on them."""
        from airflow.sdk.exceptions import AirflowFailException

        if not verdict or not verdict.get("safe"):
            raise AirflowFailException(f"final check: removal is not safe ({verdict}); nothing removed")
        p = params or {}
        removed = {}
        for bookie in p.get("bookies") or []:
            argv = bkaudit_argv(p, "lifecycle", "remove", bookie, "--force", "--reason", f"airflow {run_id}",
                                "--json")
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
            if proc.returncode != 0:
                raise AirflowFailException(
                    f"removing {bookie} failed: {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
            removed[bookie] = json.loads(proc.stdout.strip().splitlines()[-1])
        return removed

    verdict = answer()
    snapshot >> audit >> verdict
    started = go_ahead(verdict)
    started >> drain() >> wait_drained() >> final_snapshot >> final_audit
    remove(final_answer_task := final_answer())
    final_audit >> final_answer_task
