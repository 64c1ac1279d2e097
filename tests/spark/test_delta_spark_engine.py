"""Delta Lake's own Spark engine (delta-spark 4.4.0, `make delta`) on the tables bkaudit wrote with delta-rs.

What a data engineer does first: `spark.read.format("delta")` (latest, time travel, filtered), DESCRIBE
HISTORY and DETAIL, then table maintenance (OPTIMIZE with Z-ORDER, VACUUM, RESTORE). Delta's engine runs in a
process of its own, started once for the module (tests/spark/delta_engine.py: one SparkContext per process,
and the suite's has no Delta jars). Ground truth: the rows delta-rs reads from the same versions, and the
ledgers this test wrote. After Spark's maintenance, bkaudit's next snapshot and check must work on the
rewritten tables, and delta-rs, polars and DuckDB must read what Spark wrote.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from deltalake import DeltaTable

from bkaudit import config
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.tables.catalog import TABLES
from bkaudit.tables.read import latest_snapshot_id, read_arrow
from bkaudit.tables.store import table_uri
from bkaudit.zk.client import close, connect
from bkaudit.zk.ledgers import create_ledger_metadata, init_cluster
from tests.helpers import load_duckdb_delta, unique_path
from tests.spark.delta_engine import ANSWER, DELTA_JARS, digest_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
A, B, C = "127.0.0.2:9", "127.0.0.3:11", "127.0.0.4:13"  # nothing listens or registers: lost bookies
LOCATIONS = {A: "/r1", B: "/r1", C: "/r2"}
RUN_TABLES = ("ledgers", "ledger_segments", "snapshots", "violations", "audit_runs")


def _md(ensemble: tuple[str, ...], last: int = -1) -> LedgerMetadata:
    return LedgerMetadata(len(ensemble), 2, 2, LedgerState.CLOSED, last, max(last + 1, 0) * 8,
                          DigestType.CRC32C, b"", (Segment(0, ensemble),), ctime=1_700_000_000_000)


class Engine:
    """tests/spark/delta_engine.py, one long-lived process: a call sends a request line, reads the answer."""

    def __init__(self, log: Path) -> None:
        if not list(DELTA_JARS.glob("delta-spark_*.jar")):
            pytest.fail(f"Delta's jars are required in {DELTA_JARS} (make delta fetches them)", pytrace=False)
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "spark" / "delta_engine.py")], cwd=ROOT, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.open("w"),
        )

    def __call__(self, warehouse: str, steps: list[dict[str, Any]]) -> list[Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"warehouse": warehouse, "steps": steps}) + "\n")
        self.proc.stdin.flush()
        while True:  # each step's seconds are in the log
            line = self.proc.stdout.readline()
            assert line, f"the Delta engine exited: {self.log.read_text()[-4000:]}"
            if line.startswith(ANSWER):
                break
        answer = json.loads(line[len(ANSWER):])
        assert "ok" in answer, answer["error"]
        return list(answer["ok"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Iterator[Engine]:
    running = Engine(tmp_path_factory.mktemp("delta-engine") / "engine.log")
    try:
        yield running
    finally:
        running.close()


def rs(warehouse: str, table: str, version: int | None = None) -> dict[str, Any]:
    """delta-rs's rows of a version, digested as the engine digests Spark's."""
    return digest_rows(read_arrow(warehouse, table, version=version).to_pylist())


class World:
    """A ledgers root in ZooKeeper, snapshotted and checked by the suite's Spark (written with delta-rs)."""

    def __init__(self, spark: Any, zk_connect: str, warehouse: str) -> None:
        self.spark, self.zk_connect, self.warehouse = spark, zk_connect, warehouse
        self.root = unique_path("t", "/ledgers")
        self.ledgers: set[int] = set()
        zk = connect(zk_connect)
        try:
            init_cluster(zk, root=self.root)
        finally:
            close(zk)

    def add(self, ledger_id: int, ensemble: tuple[str, ...], last: int = -1) -> None:
        zk = connect(self.zk_connect)
        try:
            create_ledger_metadata(zk, ledger_id, _md(ensemble, last), root=self.root)
        finally:
            close(zk)
        self.ledgers.add(ledger_id)

    def run(self) -> tuple[str, Any]:
        from bkaudit.spark.checker import CheckOptions, run_check
        from bkaudit.spark.snapshot import run_snapshot

        settings = config.load(environ={}, overrides={
            "zk.connect": self.zk_connect, "zk.root": self.root, "snapshot.warehouse": self.warehouse,
            "snapshot.validate": False, "placement.locations": LOCATIONS, "checker.retry_delay_s": 0.1,
            "checker.call_timeout_s": 2.0})
        snapshot = run_snapshot(self.spark, settings, warehouse=self.warehouse)
        result = run_check(self.spark, settings, CheckOptions(warehouse=self.warehouse,
                                                              snapshot_id=snapshot.snapshot_id))
        assert result.status == "succeeded"
        return str(snapshot.snapshot_id), result


@pytest.fixture(scope="module")
def world(spark, zk_server, tmp_path_factory) -> World:
    w = World(spark, zk_server.connect_string, str(tmp_path_factory.mktemp("wh")))
    w.add(1, (A, B))  # one rack: placement_fail
    w.add(2, (A, C), last=4)  # every copy on lost bookies: no_replica
    w.add(3, (B, C))
    w.run()
    w.add(4, (A, B))  # a second snapshot and check: a history to travel in
    w.run()
    return w


@pytest.fixture(scope="module")
def before_maintenance(world: World, engine: Engine) -> dict[str, list[Any]]:
    """One Delta session's answers about the tables as bkaudit left them, per table (one JVM for all)."""
    wh = world.warehouse
    steps: list[dict[str, Any]] = []
    for table in RUN_TABLES:
        uri = table_uri(wh, table)
        steps += [
            {"read": table},
            {"read": table, "version": 0},  # time travel to bkaudit's first commit
            {"read": table, "where": "ledger_id = 4"} if has(table, "ledger_id")
            else {"read": table, "version": 1},
            {"bkaudit_load": table},
            {"sql": f"DESCRIBE HISTORY delta.`{uri}`"},
            {"sql": f"DESCRIBE DETAIL delta.`{uri}`"},
        ]
    answers = engine(wh, steps)
    per = len(answers) // len(RUN_TABLES)
    return {t: answers[i * per:(i + 1) * per] for i, t in enumerate(RUN_TABLES)}


def has(table: str, column: str) -> bool:
    return column in TABLES[table].schema.names


def test_deltas_spark_reader_sees_what_delta_rs_sees(world: World, before_maintenance) -> None:
    wh = world.warehouse
    latest = latest_snapshot_id(wh)
    for table in RUN_TABLES:
        now, first, third, loaded = before_maintenance[table][:4]
        assert now == rs(wh, table), table
        assert first == rs(wh, table, 0), table
        if has(table, "ledger_id"):
            rows = read_arrow(wh, table).to_pylist()
            assert third == digest_rows([r for r in rows if r["ledger_id"] == 4]), table
        else:
            assert third == rs(wh, table, 1), table
        assert loaded.pop("native") is True  # the session has Delta's jars: bkaudit reads natively
        assert loaded == digest_rows(read_arrow(wh, table, snapshot_id=latest).to_pylist()), table


def test_history_and_detail_describe_bkaudits_commits(world: World, before_maintenance) -> None:
    for table in RUN_TABLES:
        dt = DeltaTable(table_uri(world.warehouse, table))
        history, (detail,) = before_maintenance[table][4:]
        assert sorted(h["version"] for h in history) == list(range(dt.version() + 1)), table
        assert {h["operation"] for h in history} == {h["operation"] for h in dt.history()}, table
        assert detail["format"] == "delta" and detail["numFiles"] == len(dt.file_uris()), (table, detail)


def test_spark_maintenance_then_bkaudits_next_run_and_every_reader(world: World, engine: Engine) -> None:
    wh = world.warehouse
    before_second_check = DeltaTable(table_uri(wh, "violations")).version() - 1
    uri = {t: table_uri(wh, t) for t in RUN_TABLES}
    steps: list[dict[str, Any]] = [
        {"sql": f"OPTIMIZE delta.`{uri['ledgers']}` ZORDER BY (ledger_id)"},
        {"sql": f"OPTIMIZE delta.`{uri['violations']}`"},
        {"sql": f"RESTORE TABLE delta.`{uri['violations']}` TO VERSION AS OF {before_second_check}"},
        {"sql": f"VACUUM delta.`{uri['ledger_segments']}` RETAIN 0 HOURS"},
    ]
    steps += [{"read": t} for t in RUN_TABLES]
    answers = engine(wh, steps)
    after_spark = dict(zip(RUN_TABLES, answers[len(answers) - len(RUN_TABLES):], strict=True))
    for table in RUN_TABLES:  # delta-rs, polars and DuckDB read what Delta's Spark engine rewrote
        assert rs(wh, table) == after_spark[table], table
        assert pl.read_delta(uri[table]).height == after_spark[table]["rows"], table
        con = duckdb.connect()
        load_duckdb_delta(con)
        count = con.execute(f"SELECT count(*) FROM delta_scan('{uri[table]}')").fetchone()
        assert count is not None and count[0] == after_spark[table]["rows"], table
    operations = [h["operation"] for h in DeltaTable(uri["ledgers"]).history()]
    assert "OPTIMIZE" in operations

    # bkaudit's next run on the rewritten tables: a new ledger, found; latest readers see only this run
    world.add(5, (A, B))
    time.sleep(1)
    snapshot_id, result = world.run()
    assert latest_snapshot_id(wh) == snapshot_id
    ledgers = read_arrow(wh, "ledgers", snapshot_id=snapshot_id).column("ledger_id").to_pylist()
    assert sorted(ledgers) == sorted(world.ledgers)
    violations = read_arrow(wh, "violations").to_pylist()
    mine = {(v["ledger_id"], v["category"]) for v in violations if v["run_id"] == result.run_id}
    assert {(1, "placement_fail"), (4, "placement_fail"), (5, "placement_fail")} <= mine
    assert (2, "no_replica") in mine


def test_a_spark_optimize_racing_bkaudits_commit_loses_and_duplicates_nothing(
    tmp_path, monkeypatch, engine: Engine
) -> None:
    from bkaudit.tables import store
    from tests.tables.test_tables_commit_concurrency import commit_run, rows

    wh = str(tmp_path)
    for run, ledgers in (("r1", range(0, 5)), ("r2", range(5, 10)), ("r3", range(20, 23))):
        commit_run(wh, rows(run, ledgers), run)  # three small files: something for OPTIMIZE to compact
    uri = table_uri(wh, "violations")
    real, raced = store._replacements, []

    def spark_optimizes_now(dt: Any, *args: Any) -> Any:
        out = real(dt, *args)
        if not raced:  # Delta's Spark engine commits between bkaudit's read and its commit
            raced.append(engine(wh, [{"sql": f"OPTIMIZE delta.`{uri}`"}]))
        return out

    monkeypatch.setattr(store, "_replacements", spark_optimizes_now)
    done = commit_run(wh, rows("r1", range(30, 34)), "r1")  # the re-run of r1

    history = DeltaTable(uri).history()
    assert [h["operation"] for h in history if h["version"] == done.version - 1] == ["OPTIMIZE"]  # Spark's
    table = read_arrow(wh, "violations")
    pairs = sorted(zip(table.column("run_id").to_pylist(), table.column("ledger_id").to_pylist(),
                       strict=True))
    assert pairs == [("r1", i) for i in range(30, 34)] + [("r2", i) for i in range(5, 10)] + [
        ("r3", i) for i in (20, 21, 22)]
    assert engine(wh, [{"read": "violations"}]) == [digest_rows(table.to_pylist())]  # and Spark agrees
