"""Warehouse upkeep and views on real Delta tables: vacuum, retention of old runs, "latest run" SQL.

Runs are written through bkaudit's store (stage + one replace commit per table, `audit_runs` last) with
dates and statuses the test chooses; ground truth is what the test wrote. Re-runs leave replaced files on
disk, which vacuum must delete without changing any answer.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

import bkaudit.tables.checker_schemas as cs
from bkaudit.cli import cli
from bkaudit.tables.read import current_files, read_arrow
from bkaudit.tables.store import StagingWriter, write_table
from bkaudit.tables.views import duckdb_views, spark_views, with_views

TODAY = date(2026, 11, 24)
TOPICS = ("persistent://public/default/orders-with-a-long-topic-name", "persistent://public/default/pay")


def _violations(run_id: str, n: int) -> list[dict[str, Any]]:
    return [
        {
            "ledger_id": i,
            "category": "no_replica" if i % 3 == 0 else "placement_fail",
            "severity": "critical" if i % 3 == 0 else "warning",
            "managed_ledger": TOPICS[i % 2] if i % 5 else None,
            "min_replicas": i % 3,
            "under_repair": i % 4 == 0,
            "detail": "{}",
        }
        for i in range(n)
    ]


def write_run(wh: str, run_id: str, day: date, status: str, rows: list[dict[str, Any]]) -> None:
    start = datetime(day.year, day.month, day.day, 6, tzinfo=UTC)
    keys = {"run_id": run_id, "snapshot_id": f"snap-{run_id}", "run_date": day.isoformat()}
    same = {"snapshot_id": keys["snapshot_id"], "snapshot_date": keys["run_date"]}
    same["replace"] = {"run_id": run_id}
    v = pa.Table.from_pylist([{**keys, "detected_at": start, **r} for r in rows], schema=cs.VIOLATIONS.schema)
    write_table(wh, "violations", v, **same)
    run = {**keys, "status": status, "started_at": start, "finished_at": start + timedelta(minutes=5)}
    write_table(wh, "audit_runs", pa.Table.from_pylist([run], schema=cs.AUDIT_RUNS.schema), **same)


@pytest.fixture
def warehouse(tmp_path: Path) -> dict[str, Any]:
    wh = str(tmp_path / "wh")
    write_run(wh, "old", TODAY - timedelta(days=40), "succeeded", _violations("old", 6))
    write_run(wh, "mid", TODAY - timedelta(days=10), "succeeded", _violations("mid", 9))
    write_run(wh, "mid", TODAY - timedelta(days=10), "succeeded", _violations("mid", 12))  # re-run
    write_run(wh, "new", TODAY - timedelta(days=1), "succeeded", _violations("new", 15))
    write_run(wh, "broken", TODAY, "failed", [])  # latest, but failed: never "latest"
    return {"wh": wh, "latest": "new", "latest_rows": _violations("new", 15)}


def _parquet_on_disk(wh: str, table: str) -> int:
    return len(list((Path(wh) / table).rglob("*.parquet")))


def _answers(wh: str) -> dict[str, Any]:
    data = read_arrow(wh, "violations")
    return dict(Counter(data.column("run_id").to_pylist()))


def test_vacuum_dry_run_then_yes(warehouse: dict[str, Any]) -> None:
    wh = warehouse["wh"]
    before = _answers(wh)
    dead = StagingWriter(wh, "violations", snapshot_id="snap-dead", snapshot_date=TODAY.isoformat())
    keys = {"run_id": "dead", "snapshot_id": "snap-dead"}
    rows = [{**keys, **r} for r in _violations("dead", 3)]
    dead.write(pa.Table.from_pylist(rows, schema=cs.VIOLATIONS.file_schema))
    dead.close()  # staged by a run that died before its commit: referenced by no version
    stale = _parquet_on_disk(wh, "violations") - len(current_files(wh, "violations"))
    assert stale >= 2  # the re-run of "mid" replaced a file; the dead run's file
    runner = CliRunner()
    dry = runner.invoke(cli, ["tables", "vacuum", "--warehouse", wh, "--retention-hours", "0", "--json"])
    assert dry.exit_code == 0, dry.output
    plan = {t["table"]: t for t in json.loads(dry.output)["tables"]}
    assert plan["violations"]["vacuum_files"] == stale and not plan["violations"]["applied"]
    assert _parquet_on_disk(wh, "violations") - len(current_files(wh, "violations")) == stale  # untouched
    done = runner.invoke(cli, ["tables", "vacuum", "--warehouse", wh, "--retention-hours", "0", "--yes"])
    assert done.exit_code == 0, done.output
    assert _parquet_on_disk(wh, "violations") == len(current_files(wh, "violations"))
    assert _answers(wh) == before


def test_vacuum_keeps_recent_files_by_default(warehouse: dict[str, Any]) -> None:
    wh = warehouse["wh"]
    on_disk = _parquet_on_disk(wh, "violations")
    result = CliRunner().invoke(cli, ["tables", "vacuum", "--warehouse", wh, "--yes", "--json"])
    assert result.exit_code == 0, result.output
    assert all(t["vacuum_files"] == 0 for t in json.loads(result.output)["tables"])  # younger than 168 h
    assert _parquet_on_disk(wh, "violations") == on_disk


def test_retention_deletes_old_runs_marker_first(warehouse: dict[str, Any], monkeypatch: Any) -> None:
    from bkaudit.tables import maintenance

    wh = warehouse["wh"]
    plans = maintenance.upkeep(wh, retention_hours=0, keep_run_days=30, today=TODAY)
    assert plans[0].table == "audit_runs"  # the marker goes first
    by = {p.table: p for p in plans}
    assert by["violations"].expired_rows == 6 and by["audit_runs"].expired_rows == 1
    assert _answers(wh)["old"] == 6  # dry run: nothing changed
    maintenance.upkeep(wh, retention_hours=0, keep_run_days=30, today=TODAY, apply=True)
    assert _answers(wh) == {"mid": 12, "new": 15}
    runs = set(read_arrow(wh, "audit_runs").column("run_id").to_pylist())
    assert runs == {"mid", "new", "broken"}
    assert _parquet_on_disk(wh, "violations") == len(current_files(wh, "violations"))


def test_cli_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(cli, ["tables", "vacuum", "--warehouse", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and "no such warehouse directory" in missing.output
    bad = runner.invoke(cli, ["tables", "vacuum", "--warehouse", str(tmp_path), "--retention-hours", "-1"])
    assert bad.exit_code == 2


def _truth_topics(rows: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    out: dict[str, list[int]] = {}
    for r in rows:
        if r["managed_ledger"]:
            c = out.setdefault(r["managed_ledger"], [0, 0])
            c[0] += 1
            c[1] += r["severity"] == "critical"
    return {k: (v[0], v[1]) for k, v in out.items()}


def _check_views(latest: list[Any], topics: list[Any], warehouse: dict[str, Any]) -> None:
    assert [r[0] for r in latest] == [warehouse["latest"]]
    got = {r[0]: (int(r[1]), int(r[2])) for r in topics}
    assert got == _truth_topics(warehouse["latest_rows"])


TOPIC_QUERY = "SELECT managed_ledger, violations, critical FROM topic_violations"


def test_views_with_delta_rs_querybuilder(warehouse: dict[str, Any]) -> None:
    from deltalake import QueryBuilder

    from bkaudit.tables.store import open_delta, table_uri

    qb = QueryBuilder()
    for t in ("audit_runs", "violations"):
        qb = qb.register(t, open_delta(table_uri(warehouse["wh"], t)))
    present = {"audit_runs", "violations"}
    latest = pa.table(qb.execute(with_views("SELECT run_id FROM latest_run", available=present)).read_all())
    topics = pa.table(qb.execute(with_views(TOPIC_QUERY, available=present)).read_all())
    _check_views(
        [tuple(r.values()) for r in latest.to_pylist()], [tuple(r.values()) for r in topics.to_pylist()],
        warehouse,
    )


def test_views_with_duckdb(warehouse: dict[str, Any]) -> None:
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    duckdb_views(con, warehouse["wh"])
    latest = con.execute("SELECT run_id FROM latest_run").fetchall()
    _check_views(latest, con.execute(TOPIC_QUERY).fetchall(), warehouse)


def test_views_with_spark(spark: Any, warehouse: dict[str, Any]) -> None:
    spark_views(spark, warehouse["wh"])
    latest = [tuple(r) for r in spark.sql("SELECT run_id FROM latest_run").collect()]
    topics = [tuple(r) for r in spark.sql(TOPIC_QUERY).collect()]
    _check_views(latest, topics, warehouse)
    assert {t.name for t in spark.catalog.listTables() if t.isTemporary} >= {"latest_run", "topic_violations"}
