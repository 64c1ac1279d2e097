"""The same filtered questions through every reader a data engineer reaches for, compared with ground truth.

The `violations` table is written through bkaudit's real store (staged Parquet files + one Delta commit per
run), in several files per run, then run-a is re-run (a replace commit), so files of the replaced rows are
still on disk. Ground truth is the rows this test wrote for the runs that are current. Each question is
asked through delta-rs (pyarrow dataset, `to_pyarrow_table(filters=)`, QueryBuilder SQL), polars
(`scan_delta`, `read_delta`), DuckDB (over the delta-rs dataset, and its own `delta_scan`), pyarrow over the
table's current file list,
and plain Spark without Delta jars (bkaudit's `tables.load` and the documented `current_files` path). A
wrong answer here is the bug the statistics module exists to prevent: a filtered read that returns
nothing. The values sit where stats used to fail: booleans, microsecond timestamps (Delta keeps
milliseconds), strings longer than the 32-character stats prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

import bkaudit.tables.checker_schemas as cs
from bkaudit.tables.read import current_files
from bkaudit.tables.store import StagingWriter, commit, open_delta, table_uri
from tests.helpers import load_duckdb_delta

pytestmark = [pytest.mark.spark]

T0 = datetime(2026, 11, 20, 6, 0, 0, 123456, tzinfo=UTC)
TOPIC = "persistent://public/default/a-topic-name-longer-than-the-stats-prefix-{}"
CATEGORIES = ("no_replica", "below_write_quorum", "placement_fail", "extra_entries")
# 1 µs before row 13, the last row of a 7-row file: that file's max lies in the same millisecond as CUT
# (Delta keeps milliseconds in stats), the case where a reader's bound arithmetic decides the answer
CUT = T0 + timedelta(minutes=13, microseconds=13 * 7 - 1)


def _rows(run_id: str, n: int, offset: int) -> list[dict[str, Any]]:
    return [
        {
            "run_id": run_id,
            "snapshot_id": f"snap-{run_id}",
            "run_date": "2026-11-20",
            "ledger_id": offset + i,
            "category": CATEGORIES[(offset + i) % len(CATEGORIES)],
            "severity": "critical" if i % 3 == 0 else "warning",
            "managed_ledger": TOPIC.format((offset + i) % 5) if i % 4 else None,
            "detail": '{"why": "' + "x" * (40 + i) + '"}',
            "ensemble_size": 3,
            "write_quorum": 2 + i % 2,
            "ack_quorum": 2,
            "under_repair": i % 5 == 0,
            "published": i % 2 == 0,
            # minutes apart, each with microseconds, around CUT
            "detected_at": T0 + timedelta(minutes=i, microseconds=i * 7),
        }
        for i in range(n)
    ]


def _write_run(warehouse: str, rows: list[dict[str, Any]]) -> None:
    """Stage in files of 7 rows (several files per run, as executors would), then one replace commit."""
    run_id = rows[0]["run_id"]
    writer = StagingWriter(
        warehouse, "violations", snapshot_id=rows[0]["snapshot_id"], snapshot_date="2026-11-20",
        max_rows_per_file=7,
    )
    schema = cs.VIOLATIONS.schema
    writer.write(pa.Table.from_pylist([{k: r.get(k) for k in schema.names} for r in rows], schema=schema))
    commit(warehouse, "violations", writer.close(), replace={"run_id": run_id}, info={"run_id": run_id})


@dataclass(frozen=True)
class Question:
    name: str
    truth: Callable[[dict[str, Any]], bool]
    arrow: Any  # pyarrow.compute expression
    dnf: list[tuple[str, str, Any]]  # to_pyarrow_table(filters=...)
    sql: str  # WHERE clause for DataFusion / DuckDB / Spark SQL
    polars: Callable[[Any], Any]  # pl -> expression


def _questions() -> list[Question]:
    topic = TOPIC.format(2)
    cut_sql = CUT.strftime("%Y-%m-%d %H:%M:%S.%f")
    return [
        Question("published", lambda r: r["published"] is True, ds.field("published") == True,  # noqa: E712
                 [("published", "=", True)], "published = true", lambda pl: pl.col("published")),
        Question("detected_after", lambda r: r["detected_at"] > CUT, ds.field("detected_at") > CUT,
                 [("detected_at", ">", CUT)], f"detected_at > TIMESTAMP '{cut_sql}+00:00'",
                 lambda pl: pl.col("detected_at") > CUT),
        Question("managed_ledger", lambda r: r["managed_ledger"] == topic,
                 ds.field("managed_ledger") == topic, [("managed_ledger", "=", topic)],
                 f"managed_ledger = '{topic}'",
                 lambda pl: pl.col("managed_ledger") == topic),
        Question("run_id", lambda r: r["run_id"] == "run-a", ds.field("run_id") == "run-a",
                 [("run_id", "=", "run-a")], "run_id = 'run-a'", lambda pl: pl.col("run_id") == "run-a"),
        Question("category", lambda r: r["category"] == "no_replica", ds.field("category") == "no_replica",
                 [("category", "=", "no_replica")], "category = 'no_replica'",
                 lambda pl: pl.col("category") == "no_replica"),
        Question("write_quorum", lambda r: r["write_quorum"] == 3, ds.field("write_quorum") == 3,
                 [("write_quorum", "=", 3)], "write_quorum = 3", lambda pl: pl.col("write_quorum") == 3),
    ]


QUESTIONS = _questions()


def _keys(rows: Any) -> list[tuple[str, int]]:
    return sorted((r["run_id"], r["ledger_id"]) for r in rows)


@pytest.fixture(scope="module")
def table(tmp_path_factory: Any) -> dict[str, Any]:
    wh = str(tmp_path_factory.mktemp("matrix") / "wh")
    _write_run(wh, _rows("run-a", 40, 0))
    _write_run(wh, _rows("run-b", 30, 1000))
    current_a = _rows("run-a", 50, 2000)  # the re-run: different rows replace run-a's
    _write_run(wh, current_a)
    truth = current_a + _rows("run-b", 30, 1000)
    return {"warehouse": wh, "uri": table_uri(wh, "violations"), "truth": truth}


def _expect(table: dict[str, Any], q: Question) -> list[tuple[str, int]]:
    want = _keys(r for r in table["truth"] if q.truth(r))
    assert want, f"question {q.name} has an empty truth: the test data must exercise it"
    return want


def test_stale_files_exist(table: dict[str, Any]) -> None:
    """The re-run left replaced files on disk (what makes naive directory reads wrong)."""
    on_disk = list(Path(table["uri"]).rglob("*.parquet"))
    assert len(on_disk) > len(current_files(table["warehouse"], "violations"))


@pytest.mark.parametrize("q", QUESTIONS, ids=lambda q: q.name)
def test_delta_rs(table: dict[str, Any], q: Question) -> None:
    from deltalake import QueryBuilder

    want = _expect(table, q)
    dt = open_delta(table["uri"])
    assert _keys(dt.to_pyarrow_dataset().to_table(filter=q.arrow).to_pylist()) == want
    assert _keys(dt.to_pyarrow_table(filters=q.dnf).to_pylist()) == want
    got = QueryBuilder().register("violations", dt).execute(
        f"SELECT run_id, ledger_id FROM violations WHERE {q.sql}"
    ).read_all()
    assert _keys(pa.table(got).to_pylist()) == want


@pytest.mark.parametrize("q", QUESTIONS, ids=lambda q: q.name)
def test_polars(table: dict[str, Any], q: Question) -> None:
    pl = pytest.importorskip("polars")
    want = _expect(table, q)
    assert _keys(pl.scan_delta(table["uri"]).filter(q.polars(pl)).collect().to_dicts()) == want
    assert _keys(pl.read_delta(table["uri"]).filter(q.polars(pl)).to_dicts()) == want


@pytest.mark.parametrize("q", QUESTIONS, ids=lambda q: q.name)
def test_duckdb_over_delta_rs_dataset(table: dict[str, Any], q: Question) -> None:
    duckdb = pytest.importorskip("duckdb")
    want = _expect(table, q)
    violations = open_delta(table["uri"]).to_pyarrow_dataset()  # noqa: F841 - DuckDB scans it by name
    con = duckdb.connect()
    rows = con.execute(f"SELECT run_id, ledger_id FROM violations WHERE {q.sql}").fetchall()
    assert sorted(rows) == want


def test_duckdb_delta_scan(table: dict[str, Any]) -> None:
    """DuckDB's own Delta reader (delta-kernel): it prunes on the same stats."""
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    load_duckdb_delta(con)
    for q in QUESTIONS:
        rows = con.execute(
            f"SELECT run_id, ledger_id FROM delta_scan('{table['uri']}') WHERE {q.sql}"
        ).fetchall()
        assert sorted(rows) == _expect(table, q), q.name


@pytest.mark.parametrize("q", QUESTIONS, ids=lambda q: q.name)
def test_pyarrow_over_current_files(table: dict[str, Any], q: Question) -> None:
    want = _expect(table, q)
    files = current_files(table["warehouse"], "violations")
    data = ds.dataset(files, format="parquet", partitioning="hive", partition_base_dir=table["uri"])
    assert _keys(data.to_table(filter=q.arrow).to_pylist()) == want


def test_plain_spark(spark: Any, table: dict[str, Any]) -> None:
    """No Delta jars: bkaudit's loader and the documented current-files path; the naive read is wrong."""
    from bkaudit import tables

    wh = table["warehouse"]
    df = tables.load(spark, wh, "violations", latest=False, native=False)
    df.createOrReplaceTempView("violations")
    files = current_files(wh, "violations")
    reader = spark.read.schema(cs.VIOLATIONS.spark_schema()).option("basePath", table["uri"])
    documented = reader.parquet(*files)
    documented.createOrReplaceTempView("violations_files")
    for q in QUESTIONS:
        want = _expect(table, q)
        for view in ("violations", "violations_files"):
            rows = spark.sql(f"SELECT run_id, ledger_id FROM {view} WHERE {q.sql}").collect()
            assert _keys(r.asDict() for r in rows) == want, (view, q.name)
    naive = spark.read.parquet(table["uri"]).count()
    assert naive > len(table["truth"])  # replaced files still on disk: why docs/tables.md says never do this
