"""Delta Lake's own Spark engine over bkaudit's tables, in a process of its own (test_delta_spark_engine.py).

The test session's Spark has no Delta jars (bkaudit reads through delta-rs there), and one process holds one
SparkContext, so this script starts a second Spark with Delta's jars (`make delta`) and Delta's SQL extension
and catalog, as a data engineer's session would be configured. It answers requests, one JSON line each on
stdin, with one JSON line each on stdout: each step's answer.

Steps: {"read": table, "version": n?, "where": sql?} -> rows digest; {"sql": statement} -> rows;
{"bkaudit_load": table} -> what bkaudit.tables.read.load returns in this session, and whether it went native.
"""

from __future__ import annotations

import glob
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ANSWER = "bkaudit-delta-engine: "  # marks answer lines: Spark may print to stdout too
DELTA_JARS = ROOT / ".cache" / "delta" / "lib"


def digest_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Order-free digest of rows as pyarrow's to_pylist gives them (the test digests delta-rs's rows so)."""
    lines = sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)
    return {"rows": len(lines), "sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest()}


def session() -> Any:
    from pyspark.sql import SparkSession

    jars = sorted(glob.glob(str(DELTA_JARS / "*.jar")))
    if not jars:
        raise SystemExit(f"no Delta jars in {DELTA_JARS}: run `make delta`")
    return (
        SparkSession.builder.master("local[1]")
        .appName("bkaudit-delta-engine")
        .config("spark.jars", ",".join(jars))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.databricks.delta.snapshotPartitions", "2")  # log replay of small tables: not 50 tasks
        .config("spark.sql.sources.parallelPartitionDiscovery.parallelism", "2")  # VACUUM lists: not 10,000
        .config("spark.databricks.delta.retentionDurationCheck.enabled", "false")  # VACUUM RETAIN 0 HOURS
        .getOrCreate()
    )


def run(spark: Any, steps: list[dict[str, Any]], warehouse: str) -> list[Any]:
    from bkaudit.tables.read import load, native_delta_available
    from bkaudit.tables.store import table_uri

    out: list[Any] = []
    for step in steps:
        started = time.monotonic()
        if "read" in step:
            reader = spark.read.format("delta")
            if step.get("version") is not None:
                reader = reader.option("versionAsOf", step["version"])
            df = reader.load(table_uri(warehouse, step["read"]))
            if step.get("where"):
                df = df.where(step["where"])
            out.append(digest_rows(df.toArrow().to_pylist()))
        elif "sql" in step:
            rows = spark.sql(step["sql"]).collect()
            out.append([json.loads(json.dumps(r.asDict(recursive=True), default=str)) for r in rows])
        elif "bkaudit_load" in step:
            df = load(spark, warehouse, step["bkaudit_load"])
            out.append({"native": native_delta_available(spark), **digest_rows(df.toArrow().to_pylist())})
        else:
            raise SystemExit(f"unknown step {step}")
        print(f"{time.monotonic() - started:7.2f}s {json.dumps(step)[:100]}", file=sys.stderr, flush=True)
    return out


if __name__ == "__main__":
    # one request per stdin line ({"warehouse": ..., "steps": [...]}), one answer per stdout line: the JVM and
    # Delta's warm-up are paid once per test module
    spark = session()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer: Any = {"ok": run(spark, request["steps"], request["warehouse"])}
        except Exception as exc:  # the test shows it; the session stays usable
            answer = {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
        print(ANSWER + json.dumps(answer), flush=True)
    spark.stop()
