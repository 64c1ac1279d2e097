"""A real Prometheus scrapes a snapshot, a checker run and AutoRecovery, and evaluates bkaudit's rules.

The metrics travel as in production (tests/fixtures/prometheus.py): the batch runs push to a Pushgateway,
AutoRecovery's textfile is served by node_exporter. Ground truth is the metadata this test wrote (one ledger
against the placement policy, one marker past the recovery grace, one unparseable znode) and the switch it
turned (replication disabled); the alerts that must be active follow from those alone.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bkaudit import config
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.zk import paths
from bkaudit.zk import underreplication as ur
from bkaudit.zk.client import close, connect
from bkaudit.zk.ledgers import create_ledger_metadata, init_cluster
from tests.fixtures.prometheus import PrometheusStack
from tests.helpers import unique_path, wait_for

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "monitoring" / "grafana-bkaudit.json"
A, B, C = "127.0.0.2:9", "127.0.0.3:11", "127.0.0.4:13"  # nothing listens or registers there
LOCATIONS = {A: "/r1", B: "/r1", C: "/r2"}
ONE_RACK, STALE, CORRUPT = 1, 2, 3


def _md(ensemble: tuple[str, ...]) -> LedgerMetadata:
    return LedgerMetadata(len(ensemble), 2, 2, LedgerState.CLOSED, -1, 0, DigestType.CRC32C, b"",
                          (Segment(0, ensemble),), ctime=1_700_000_000_000)


@pytest.fixture(scope="module")
def scraped(spark, zk_server, tmp_path_factory, prometheus: PrometheusStack) -> PrometheusStack:
    """The world written, snapshotted and checked, AutoRecovery run once; every metric scraped."""
    from bkaudit.metrics import export_snapshot
    from bkaudit.spark.checker import CheckOptions, run_check
    from bkaudit.spark.settings import SnapshotSettings
    from bkaudit.spark.snapshot import run_snapshot

    root = unique_path("t", "/ledgers")
    zk = connect(zk_server.connect_string)
    try:
        init_cluster(zk, root=root)
        create_ledger_metadata(zk, ONE_RACK, _md((A, B)), root=root)  # both on /r1
        create_ledger_metadata(zk, STALE, _md((A, C)), root=root)
        ur.mark_underreplicated(zk, STALE, [A], root=root, now_ms=int(time.time() * 1000) - 10 * 3600 * 1000)
        zk.create(paths.ledger_path(CORRUPT, root=root), b"\x08\xff not metadata", makepath=True)
        ur.disable_replication(zk, root=root)
    finally:
        close(zk)
    warehouse = str(tmp_path_factory.mktemp("wh"))
    settings = config.load(environ={}, overrides={
        "zk.connect": zk_server.connect_string, "zk.root": root, "snapshot.warehouse": warehouse,
        "snapshot.validate": False, "snapshot.pushgateway_url": prometheus.pushgateway,
        "placement.locations": LOCATIONS, "checker.retry_delay_s": 0.1, "checker.call_timeout_s": 2.0,
    })
    snapshot = run_snapshot(spark, settings, warehouse=warehouse)
    assert export_snapshot(settings.get(SnapshotSettings), snapshot.summary()) is None
    result = run_check(spark, settings, CheckOptions(warehouse=warehouse, snapshot_id=snapshot.snapshot_id,
                                                     pushgateway_url=prometheus.pushgateway))
    assert result.counts["placement_fail"] == 1 and result.counts["metadata_unparseable"] == 1
    env = {**os.environ,
           "BKAUDIT_AUTORECOVERY__METRICS_FILE": str(prometheus.textfile_dir / "autorecovery.prom")}
    done = subprocess.run(
        [sys.executable, "-m", "bkaudit.cli", "autorecovery", "run", "--zk", zk_server.connect_string,
         "--root", root, "--once", "--no-auditor", "--timeout", "5", "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # the marker stays: replication is disabled
    assert [x["reason"] for x in json.loads(done.stdout)["left"]] == ["disabled"]
    wait_for(lambda: prometheus.query("bkaudit_autorecovery_replication_enabled")
             and prometheus.query("bkaudit_checker_last_run_success")
             and prometheus.query("bkaudit_snapshot_last_run_success"), 60, "the pushed and served metrics")
    return prometheus


def one(stack: PrometheusStack, expr: str) -> float:
    (sample,) = stack.query(expr)
    return float(sample["value"][1])


def test_the_metrics_arrive_with_the_values_the_world_implies(scraped: PrometheusStack) -> None:
    assert one(scraped, "auditor_NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY") == 1
    assert one(scraped, "auditor_NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD") == 1
    assert one(scraped, 'bkaudit_checker_violations{category="metadata_unparseable"}') == 1
    assert one(scraped, "bkaudit_checker_last_run_success") == 1
    assert one(scraped, "bkaudit_snapshot_ledgers") == 3
    assert one(scraped, "bkaudit_autorecovery_replication_enabled") == 0
    assert one(scraped, "bkaudit_autorecovery_queue_ledgers") == 1
    # the pushed job label is kept (honor_labels), so the rules and dashboard select by metric alone
    jobs = {s["metric"]["job"] for s in scraped.query("bkaudit_checker_last_run_success")}
    assert jobs == {"bkaudit_checker"}


def test_the_rules_load_evaluate_and_fire_on_what_was_injected(scraped: PrometheusStack) -> None:
    groups = scraped.api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert {g["name"] for g in groups} >= {"bkaudit-durability", "bkaudit-jobs", "bkaudit-autorecovery"}
    assert all(r["health"] == "ok" and not r.get("lastError") for r in rules), [
        (r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]

    def active() -> dict[str, str]:
        return {a["labels"]["alertname"]: a["state"] for a in scraped.api("alerts")["alerts"]}

    expected = {
        "BookKeeperUnderreplicatedPastGracePeriod": "firing",  # the 10-hour-old marker, no `for`
        "BookKeeperPlacementPolicyViolations": "pending",  # `for: 1d`
        "BookKeeperAutoRecoveryDisabled": "pending",  # `for: 1h`
    }
    wait_for(lambda: all(active().get(name) == state for name, state in expected.items()), 30,
             f"alerts {expected}")
    quiet = {"BkauditCheckerRunFailed", "BkauditCheckerStale", "BkauditSnapshotStale",
             "BookKeeperLedgersDataLost"}  # the runs succeeded just now, nothing was recorded lost
    assert not quiet & set(active()), active()


def test_every_dashboard_query_evaluates_on_the_real_server(scraped: PrometheusStack) -> None:
    names = set(scraped.api("label/__name__/values"))
    dashboard = json.loads(DASHBOARD.read_text())
    with_data = 0
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = re.sub(r"\$__(rate_)?interval|\$__range", "5m", target["expr"])
            result: list[dict[str, Any]] = scraped.query(expr)  # Prometheus's own parser and engine
            with_data += bool(result)
    # the headline panels have samples from this world's runs
    assert {"bkaudit_checker_last_run_success", "bkaudit_snapshot_last_success_timestamp_seconds",
            "bkaudit_autorecovery_queue_ledgers",
            "auditor_NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY"} <= names
    assert with_data >= 5, with_data
