"""Benchmark of bkaudit's Delta write path (delta-rs) against Delta Lake's own Spark writer (issue 31).

    .venv/bin/python -m bench.delta_write [--rows N] [--runs R] [--json PATH]

One checker run's `violations` (bkaudit.tables.catalog.spec("violations"): one run_id, one run_date
partition, N synthetic rows keyed by row index, ledger_id = index, categories and severities cycling, a
small JSON `detail`, some nulls) written as a replace of that run into an empty local warehouse:
(a) bkaudit: executors stage Parquet with `StagingWriter` (bkaudit's own Delta stats) in a `mapInArrow`
    that returns the staged-file descriptors, as the snapshot job stages its tables; the driver collects
    them and makes them visible with ONE `store.commit(..., replace={"run_id": ...})` (delta-rs);
(b) Delta Lake's Spark writer (delta-spark 4.4.0, .cache/delta/lib): `df.write.format("delta")`,
    `mode("overwrite")`, `replaceWhere` on the run_id, `partitionBy("run_date")` as the table is.
Fair: the same rows (generated in the executors, cached and counted before the clock starts: `seconds` is
the write alone, from a ready DataFrame to a committed table), the same session (bkaudit's `get_session`,
local[2], 2 partitions, so one file per task on both sides; (b) adds only Delta's jars, extension and catalog
and Delta's local tuning of tests/spark/delta_engine.py), every run in a fresh process, sides alternated,
R runs each (bench/harness.py). After every run this process reads the table back with delta-rs (row count
and sum of ledger_id) and notes its Delta log: files added, whether add actions carry stats, operations.
Left out: object stores (local disk only), concurrent writers, a table that already holds other runs (both
start empty, so (a) also pays delta-rs's CREATE TABLE commit), the driver-side staging that the checker's
DeltaSink uses for its (small) violations, and the JVM start (in `wall_s` only, larger for (b): its jars).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import itertools
import json
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import harness

REPO = Path(__file__).resolve().parent.parent

RUN_ID, SNAPSHOT_ID, RUN_DATE = "bench-run-1", "20261201T000000Z-bench0", "2026-12-01"
DELTA_JARS = REPO / ".cache" / "delta" / "lib"
SIDES = {"a": "(a) bkaudit: StagingWriter in mapInArrow + one delta-rs commit",
         "b": "(b) Delta Lake's Spark writer, overwrite with replaceWhere"}
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
}


def generate(batches: Any) -> Any:
    """mapInArrow: row indexes in, `violations` rows out (deterministic in the index)."""
    import pyarrow as pa

    from bkaudit.audit.base import SEVERITY, Category
    from bkaudit.tables.checker_schemas import VIOLATIONS

    cats = list(Category)
    base = datetime(2026, 12, 1, 6, 0, tzinfo=UTC).timestamp()
    for batch in batches:
        ids = batch.column(0).to_pylist()
        cat = [cats[i % len(cats)] for i in ids]
        q = [(3, 2, 2) if i % 2 else (5, 3, 2) for i in ids]
        yield pa.RecordBatch.from_pydict({
            "run_id": [RUN_ID] * len(ids), "snapshot_id": [SNAPSHOT_ID] * len(ids),
            "run_date": [RUN_DATE] * len(ids), "ledger_id": ids,
            "category": [c.value for c in cat], "severity": [SEVERITY[c].value for c in cat],
            "segment_index": [None if i % 7 == 0 else i % 3 for i in ids],
            "bookie_id": [None if i % 5 == 0 else f"10.0.{i % 3}.{i % 9}:3181" for i in ids],
            "missing_entries": [None if i % 4 else [{"first": i % 99, "last": i % 99 + i % 13}] for i in ids],
            "min_replicas": [i % 3 for i in ids],
            "managed_ledger": [None if i % 10 == 0 else f"public/default/topic-{i % 1000}" for i in ids],
            "detail": [json.dumps({"ledger": i, "entries": i % 1000, "bookies": i % 5}) for i in ids],
            "bookkeeper_verdict": [None if i % 3 else "underreplicated" for i in ids],
            "under_repair": [i % 11 == 0 for i in ids], "published": [i % 2 == 0 for i in ids],
            "detected_at": [datetime.fromtimestamp(base + i / 1000, UTC) for i in ids],
            "ensemble_size": [e for e, _, _ in q], "write_quorum": [w for _, w, _ in q],
            "ack_quorum": [a for _, _, a in q],
            "evidence": ["reads" if i % 6 == 0 else "listing" for i in ids],
            "sampled_fraction": [0.1 if i % 6 == 0 else None for i in ids],
        }, schema=VIOLATIONS.schema)


def write_side(warehouse: str, rows: int, delta_jars: bool) -> dict[str, Any]:
    """One side in a fresh process: a session, the rows cached (untimed), then the timed write."""
    from pyspark import cloudpickle

    from bkaudit.spark.session import get_session
    from bkaudit.tables.catalog import spec

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import bench/ modules

    conf = {"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"}
    if delta_jars:
        conf |= {"spark.jars": ",".join(sorted(glob.glob(str(DELTA_JARS / "*.jar")))), **DELTA_CONF}
    t0 = time.perf_counter()
    spark = get_session("local[2]", app_name="bkaudit-bench-delta-write", conf=conf)
    session_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    df = spark.range(rows, numPartitions=2).mapInArrow(generate, spec("violations").spark_schema()).cache()
    if df.count() != rows:
        raise RuntimeError("the generated DataFrame lost rows")
    generate_s = time.perf_counter() - t0
    wall0, t0 = time.time(), time.perf_counter()
    (_delta_write if delta_jars else _bkaudit_write)(df, warehouse)
    seconds = time.perf_counter() - t0
    spark.stop()
    return {"seconds": seconds, "session_s": session_s, "generate_s": generate_s,
            "table": f"{warehouse}/violations", "window": [wall0, wall0 + seconds]}


def _bkaudit_write(df: Any, warehouse: str) -> None:
    from bkaudit.tables.store import StagedFile, commit

    def stage(batches: Any) -> Any:
        import pyarrow as pa

        from bkaudit.tables.store import StagingWriter

        writer = StagingWriter(warehouse, "violations", snapshot_id=SNAPSHOT_ID, snapshot_date=RUN_DATE)
        try:
            for batch in batches:
                writer.write(batch)
            files = writer.close()
        except BaseException:
            writer.abort()
            raise
        yield pa.RecordBatch.from_pydict({"payload": [f.to_json() for f in files]})

    files = [StagedFile.from_json(r.payload) for r in df.mapInArrow(stage, "payload string").collect()]
    commit(warehouse, "violations", files, replace={"run_id": RUN_ID}, info={"run_id": RUN_ID})


def _delta_write(df: Any, warehouse: str) -> None:
    (df.write.format("delta").mode("overwrite").option("replaceWhere", f"run_id = '{RUN_ID}'")
     .partitionBy("run_date").save(f"{warehouse}/violations"))


def inspect(table: str, rows: int) -> dict[str, Any]:
    """Read the table back with delta-rs (a wrong answer is not a measurement) and summarise its log."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    data = DeltaTable(table).to_pyarrow_dataset().to_table(columns=["ledger_id", "run_id"])
    if data.num_rows != rows or pc.sum(data.column("ledger_id")).as_py() != rows * (rows - 1) // 2:
        raise RuntimeError(f"{table} reads back {data.num_rows} rows, expected {rows} (ledger ids 0..N-1)")
    log: list[dict[str, Any]] = []
    for path in sorted(Path(table, "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        adds = [a["add"] for a in actions if "add" in a]
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        stats = [json.loads(a["stats"]) for a in adds if a.get("stats")]
        log.append({"version": int(path.stem), "operation": info.get("operation"), "files": len(adds),
                    "with_stats": len(stats), "bytes": sum(a["size"] for a in adds),
                    "stats_min_columns": len(stats[0].get("minValues", {})) if stats else 0})
    history = [h.get("operation") for h in DeltaTable(table).history()]
    return {"rows_read": data.num_rows, "log": log, "history": history}


def report(m: dict[str, Any]) -> str:
    res, n, row = m["results"], m["rows"], harness.markdown_row
    inside = {k: harness.spreads(v, "seconds") for k, v in res.items()}
    wall = {k: harness.spreads(v, "wall_s") for k, v in res.items()}
    lines = [f"### Delta write, {n:,} violations rows ({m['when']}, `bench/delta_write.py --rows {n}`)", "",
             harness.machine_line(m["machine_start"], m["machine_end"]),
             f"Spark local[2], local disk. {m['runs']} runs of each side, alternated, each in a fresh "
             "process.",
             "", row(["side", "seconds, write only", "rows/s", "seconds with start-up", "session s",
                      "Delta log (files, stats, operation)"]),
             row(["---", "---:", "---:", "---:", "---:", "---"])]
    for k in res:
        log = "; ".join(f"v{c['version']} {c['operation']}: {c['files']} files, {c['with_stats']} with stats"
                        for c in res[k][0]["check"]["log"])
        lines.append(row([SIDES[k], inside[k].cell(), inside[k].rate_cell(n), wall[k].cell(),
                          harness.spreads(res[k], "session_s").cell(), log]))
    lines += ["", f"Ratio (b)/(a), median/median: **{harness.ratio(inside['b'], inside['a']):.3g}** write "
              f"only, **{harness.ratio(wall['b'], wall['a']):.3g}** with start-up (> 1: bkaudit faster).",
              f"Raw results: `{m['json']}`.", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=harness.DEFAULT_RUNS, help="runs of each side")
    parser.add_argument("--json", help="result file (default bench/results/delta-write-<rows>.json)")
    args = parser.parse_args()
    if not glob.glob(str(DELTA_JARS / "*.jar")):
        parser.error(f"no Delta jars in {DELTA_JARS}: run `make delta`")
    n = args.rows
    m: dict[str, Any] = {"rows": n, "runs": args.runs, "machine_start": harness.machine()}
    work = Path(tempfile.mkdtemp(prefix="bkaudit-bench-delta-"))
    warehouses = itertools.count()

    def before(side: harness.Side) -> harness.Side:  # every run writes into an empty warehouse
        fresh = str(work / f"wh-{next(warehouses)}")
        return dataclasses.replace(side, kwargs={**side.kwargs, "warehouse": fresh})

    def after(name: str, r: dict[str, Any]) -> None:
        r["check"] = inspect(r["table"], n)
        shutil.rmtree(Path(r["table"]).parent, ignore_errors=True)

    sides = [harness.Side(k, "delta_write:write_side", {"warehouse": "", "rows": n, "delta_jars": k == "b"},
                          label) for k, label in SIDES.items()]
    try:
        m["results"] = harness.compare(sides, runs=args.runs, before_run=before, after_run=after)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    m["machine_end"] = harness.machine()
    m["when"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    m["labels"] = SIDES
    default = str(harness.RESULTS / f"delta-write-{n}.json")
    m["json"] = str(harness.write_json(f"delta-write-{n}", m, args.json or default))
    print(report(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
