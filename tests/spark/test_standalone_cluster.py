"""The jobs as data engineers run them: `spark-submit` to a standalone Spark cluster, warehouse on S3 through
Hadoop's S3A, answers equal to `local[2]` on the same cluster state.

- Spark: a standalone master and two workers, each its own JVM (tests/fixtures/spark_standalone.py).
- The jobs are submitted as docs/deployment.md says: `--py-files dist/bkaudit-pyfiles.zip` and the `make
  dist-env` pack as `--archives ...#env` for the executors' Python (the workers' own python3 has neither
  bkaudit nor its dependencies); `--jars` from `make s3a` (hadoop-aws) and, on the cluster, `make delta`, so
  the cluster reads the tables with Delta's own reader while local[2] reads them through delta-rs's file list.
- The store: moto's S3 server on loopback (tests/fixtures/s3.py); the credentials come from the documented
  `[tables] storage_options` of a `--config` file, and must never reach a log or an object in the bucket.
- Bookies: bkaudit bookies on loopback; the test deletes every copy one bookie holds of two ledgers.

Ground truth: the ledgers the test damaged, and the other side's answers for the same cluster state.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bkaudit.bookie.storage import Storage
from bkaudit.client import BookKeeper
from bkaudit.cluster.local import LocalCluster
from bkaudit.tables.read import DELTA_SESSION_CONF
from tests.fixtures import spark_standalone as ss
from tests.fixtures.cluster import running_cluster
from tests.fixtures.s3 import SECRET, S3Server, moto_s3
from tests.helpers import QUICK_JVM

# the module's fixtures (two clusters, twelve spark-submits) count toward its first test's timeout: about four
# minutes alone, and more than the default ten on a 2-core machine busy with the rest of the suite
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
BUCKET = "bkaudit-standalone"
DURABILITY = {"no_replica", "below_ack_quorum", "below_write_quorum"}
# run-specific fields: ids, clocks, durations
VOLATILE = {"snapshot_id", "run_id", "audit_id", "seconds", "started_at", "finished_at", "snapshot_date",
            "run_date", "taken_at", "detected_at", "checked_at", "phases", "created_at", "report", "index"}


@dataclass
class World:
    cluster: LocalCluster
    ledgers: list[int]
    damaged: set[int]  # every copy `victim` held of these is gone
    victim: str
    retiring: str  # the bookie the decommission audit asks about
    config: Path


@pytest.fixture(scope="module")
def artefacts() -> Path:
    """`make dist-env`: the wheel, dist/bkaudit-pyfiles.zip and dist/bkaudit-env.tar.gz, from this tree."""
    proc = subprocess.run(["make", "-s", "dist-env"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return REPO / "dist"


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with moto_s3(BUCKET) as server:
        yield server


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ss.StandaloneSpark]:
    with ss.running_cluster(tmp_path_factory.mktemp("standalone")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def world(zk_server: Any, tmp_path_factory: pytest.TempPathFactory, s3: S3Server) -> Iterator[World]:
    with running_cluster(zk_server, tmp_path_factory, bookies=4, racks=2) as cluster:
        ledgers = []
        with BookKeeper.connect(cluster.zk_settings()) as bk:
            for i in range(8):
                handle = bk.create_ledger(3, 2, 2, custom_metadata={
                    "pulsar/managed-ledger": f"public/default/persistent/t{i % 3}"})
                for j in range(12):
                    handle.add_entry(b"standalone-%d-%d" % (i, j))
                handle.close()
                ledgers.append(handle.ledger_id)
            ensembles = {lid: bk.ledger_metadata(lid).segments[0].ensemble for lid in ledgers}
        victim = cluster.bookies[0].id
        damaged = [lid for lid in ledgers if victim in ensembles[lid]][:2]
        assert len(damaged) == 2
        cluster.stop_bookie(victim)
        with Storage(cluster.bookie(victim).data_dir) as storage:
            for lid in damaged:
                assert storage.delete_entries(lid, range(12)) > 0  # all it held of the ledger
        cluster.start_bookie(victim)
        retiring = next(b.id for b in cluster.bookies if b.id != victim)
        config = tmp_path_factory.mktemp("conf") / "bkaudit.toml"
        config.write_text(f'[zk]\nconnect = "{cluster.zk}"\nroot = "{cluster.root}"\n\n' + s3.toml())
        yield World(cluster, ledgers, set(damaged), victim, retiring, config)


# Short jobs on a busy 2-core machine: JVMs that start fast matter more than peak JIT speed (both sides alike)
QUICK_JVMS = ["--conf", "spark.ui.enabled=false", "--conf", f"spark.driver.extraJavaOptions={QUICK_JVM}",
              "--conf", f"spark.executor.extraJavaOptions={QUICK_JVM}"]
# On the cluster, the snapshot runs in the packed environment (`--archives`: every executor unpacks it, ~20 s
# here), the other jobs with `--py-files` alone on a cluster Python that has the dependencies: the two ways
# docs/deployment.md gives.
PACKED = {"snapshot_metadata.py"}


def _submit(spark_cluster: ss.StandaloneSpark, side: str, script: str, *args: str) -> ss.Submitted:
    """One job, submitted as docs/deployment.md shows for `side` ("standalone" or "local")."""
    if side == "standalone":
        how = ["--jars", ss.jars(ss.S3A_JARS, ss.DELTA_JARS),
               *[f"--conf={key}={value}" for key, value in DELTA_SESSION_CONF.items()]]
        if script in PACKED:
            how += ["--archives", "dist/bkaudit-env.tar.gz#env",
                    "--conf", "spark.pyspark.python=./env/bin/python",
                    "--conf", f"spark.pyspark.driver.python={sys.executable}"]
        else:
            how += ["--conf", f"spark.pyspark.python={sys.executable}"]
        master = None
    else:
        how = ["--jars", ss.jars(ss.S3A_JARS), "--conf", f"spark.pyspark.python={sys.executable}"]
        master = "local[2]"
    shipped = ["--py-files", "dist/bkaudit-pyfiles.zip"]
    return spark_cluster.submit([*how, *QUICK_JVMS, *shipped, f"jobs/{script}", *args], master=master)


def _stable(value: Any) -> Any:
    """A summary without its run-specific fields."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _rows(warehouse: str, table: str, options: dict[str, str]) -> list[str]:
    """The table's rows as sorted JSON lines, run-specific columns left out (read by delta-rs)."""
    from deltalake import DeltaTable

    from bkaudit.tables.location import normalize

    data = DeltaTable(normalize(f"{warehouse}/{table}"), storage_options=options).to_pyarrow_table()
    keep = [c for c in data.column_names if c not in VOLATILE]
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in data.select(keep).to_pylist())


def _unmark(world: World, ledgers: set[int]) -> None:
    from bkaudit.zk.underreplication import get_marker, mark_replicated

    zk = world.cluster.zk_client()
    for lid in ledgers:
        marker = get_marker(zk, lid, root=world.cluster.root)
        if marker is not None:
            mark_replicated(zk, lid, version=marker[1].version, root=world.cluster.root)


@dataclass
class Side:
    """One way of running the jobs ("standalone" or "local"), its warehouse, answers and timings."""

    name: str
    spark_cluster: ss.StandaloneSpark
    config: Path
    answers: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)

    @property
    def warehouse(self) -> str:
        return f"s3a://{BUCKET}/{self.name}"

    def run(self, step: str, script: str, *args: str, expect: int = 0) -> Any:
        done = _submit(self.spark_cluster, self.name, script, "--config", str(self.config),
                       "--warehouse", self.warehouse, *args)
        self.outputs += [done.stdout, done.stderr]
        self.seconds[step] = round(done.seconds, 1)
        assert done.code == expect, f"{self.name} {step}: exit {done.code}\n{done.problems()}"
        self.answers[step] = done.last_json()
        return self.answers[step]


@pytest.fixture(scope="module")
def sides(artefacts: Path, spark_cluster: ss.StandaloneSpark, world: World, s3: S3Server,
          tmp_path_factory: pytest.TempPathFactory) -> list[Side]:
    """Every job, on the standalone cluster and on local[2]: snapshot, validation, check, decommission audit,
    publish and the report (the last two start no Spark context; they are submitted all the same, as the
    Airflow DAG does).

    The two sides write to warehouses of their own, so their Spark jobs run at the same time (half the wait on
    a 2-core machine). Publishing marks ledgers in ZooKeeper, which the snapshot reads: the sides publish one
    after the other, after both checks, and the marks are taken back in between, so each side sees the
    cluster as the other did.
    """
    from concurrent.futures import ThreadPoolExecutor

    from bkaudit.zk.underreplication import list_underreplicated

    done = [Side(name, spark_cluster, world.config) for name in ("standalone", "local")]

    def spark_jobs(side: Side) -> None:
        snap = side.run("snapshot", "snapshot_metadata.py")
        side.run("validate", "validate_snapshot.py", "--snapshot-id", snap["snapshot_id"])
        side.run("check", "metadata_checker.py", "--snapshot-id", snap["snapshot_id"], expect=3)
        side.run("decommission", "decommission_audit.py", "--bookies", world.retiring,
                 "--snapshot-id", snap["snapshot_id"])

    with ThreadPoolExecutor(len(done)) as pool:
        for finished in [pool.submit(spark_jobs, side) for side in done]:
            finished.result()  # a side's failure, raised here
    for side in done:
        run_id = side.answers["check"]["run_id"]
        side.run("publish", "publish_underreplicated.py", "--run-id", run_id)
        side.run("report", "report.py", "--run-id", run_id,
                 "--out", str(tmp_path_factory.mktemp(f"report-{side.name}")))
        queue = sorted(list_underreplicated(world.cluster.zk_client(), root=world.cluster.root))
        side.answers["queue"] = queue
        _unmark(world, set(queue))
        side.answers["tables"] = {t: _rows(side.warehouse, t, s3.options)
                                  for t in ("ledgers", "ledger_segments", "bookies", "violations")}
    print(f"\nseconds per spark-submit: {json.dumps({side.name: side.seconds for side in done})}")
    return done


def test_the_jobs_on_a_standalone_cluster_answer_as_on_local(sides: list[Side], world: World) -> None:
    for side in sides:
        assert side.answers["snapshot"]["ledgers"] == len(world.ledgers), side.name
        violations = [json.loads(r) for r in side.answers["tables"]["violations"]]
        lost = {v["ledger_id"] for v in violations if v["category"] in DURABILITY}
        assert lost == world.damaged, (side.name, violations)  # exactly the injected damage
        assert set(side.answers["queue"]) == world.damaged, side.name
        report = side.answers["report"]
        assert report["unreadable"] == {} and Path(report["report"]).is_file(), side.name
        assert report["counts"] == side.answers["check"]["counts"], side.name
    standalone, local = sides
    for key in ("snapshot", "validate", "check", "decommission", "publish", "report", "queue", "tables"):
        assert _stable(standalone.answers[key]) == _stable(local.answers[key]), key


def test_credentials_stay_out_of_logs_and_tables(sides: list[Side], spark_cluster: ss.StandaloneSpark,
                                                 s3: S3Server) -> None:
    # in the settings file only: not in the jobs' output, the master's, workers' and executors' logs, nor in
    # any object of the bucket (tables' Parquet and Delta logs, staging)
    logs = [p.read_text(errors="replace") for p in spark_cluster.logs.parent.rglob("*") if p.is_file()
            and p.suffix not in (".jar", ".gz", ".zip", ".py", ".so") and p.stat().st_size < 2e7]
    assert len(logs) > 3
    assert not [o for side in sides for o in side.outputs + logs if SECRET in o]
    objects = _objects(s3)
    assert len(objects) > 20
    assert not [path for path, data in objects if SECRET.encode() in data]


def _objects(s3: S3Server) -> list[tuple[str, bytes]]:
    """Every object in the bucket with its bytes (8 requests at a time: moto serves each on a thread)."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.fs as pafs

    fs = s3.filesystem()
    paths = [i.path for i in fs.get_file_info(pafs.FileSelector(s3.bucket, recursive=True))
             if i.type == pafs.FileType.File]

    def fetch(path: str) -> tuple[str, bytes]:
        with fs.open_input_stream(path) as f:
            return path, f.read()

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(fetch, paths))


READ_TABLES = ("ledgers", "ledger_segments", "snapshots", "violations", "audit_runs")


def test_every_reader_reads_the_s3a_tables(sides: list[Side], s3: S3Server) -> None:
    """delta-rs, polars and DuckDB read the same rows from s3a://. Spark's two readers are the jobs' own: the
    check reads `ledgers` and `ledger_segments` through `tables.load`, with Delta's reader on the cluster (its
    jars and session configuration) and through delta-rs's file list on local[2] (no Delta jars), and both
    sides' findings are equal (test_the_jobs_on_a_standalone_cluster_answer_as_on_local)."""
    import duckdb
    import polars as pl
    from deltalake import DeltaTable

    from bkaudit.tables.location import normalize
    from tests.spark.delta_engine import digest_rows

    for side in sides:
        for table in READ_TABLES:
            uri = normalize(f"{side.warehouse}/{table}")
            dt = DeltaTable(uri, storage_options=s3.options)
            by_delta_rs = dt.to_pyarrow_table()
            assert by_delta_rs.num_rows > 0, (side.name, table)
            # polars and DuckDB over the scalar columns (neither has Delta's map type as such)
            scalar = [f.name for f in by_delta_rs.schema
                      if not (f.type.num_fields or "list" in str(f.type) or "map" in str(f.type))]
            want = digest_rows(by_delta_rs.select(scalar).to_pylist())
            by_polars = pl.read_delta(uri, storage_options=s3.options).select(scalar)
            assert digest_rows(by_polars.to_arrow().to_pylist()) == want, (side.name, table)
            dataset = dt.to_pyarrow_dataset()  # noqa: F841 - DuckDB scans it by name
            cols = ", ".join(f'"{c}"' for c in scalar)
            by_duckdb = duckdb.connect().execute(f"SELECT {cols} FROM dataset").fetch_arrow_table()
            assert digest_rows(by_duckdb.to_pylist()) == want, (side.name, table)


def _one_error_line(done: ss.Submitted) -> str:
    errors = [x for x in (done.stdout + done.stderr).splitlines() if x.startswith("error:")]
    assert len(errors) == 1, done.problems()
    assert "Traceback" not in done.stdout + done.stderr and " at org." not in errors[0]
    return errors[0]


def test_a_missing_jar_or_a_dead_store_is_one_line_and_exit_1(spark_cluster: ss.StandaloneSpark, world: World,
                                                              s3: S3Server, tmp_path: Path) -> None:
    wh = f"s3a://{BUCKET}/refused"
    python = ["--conf", f"spark.pyspark.python={sys.executable}"]
    # no hadoop-aws on the classpath: one line naming this Spark's Hadoop and the jar that fits
    done = spark_cluster.submit([*python, "jobs/snapshot_metadata.py", "--config", str(world.config),
                                 "--warehouse", wh], master="local[2]")
    assert done.code == 1
    line = _one_error_line(done)
    assert "hadoop-aws is not on the classpath of Hadoop 3.5.0" in line
    assert "org.apache.hadoop:hadoop-aws:3.5.0" in line
    # a store nobody answers on, and one that refuses the credentials (moto checking signatures, no keys)
    with moto_s3(BUCKET, authenticate=True) as strict:
        for name, endpoint in (("dead", "http://127.0.0.1:9"), ("refused", strict.endpoint)):
            bad = tmp_path / f"{name}.toml"
            bad.write_text(world.config.read_text().replace(s3.endpoint, endpoint))
            done = spark_cluster.submit(["--jars", ss.jars(ss.S3A_JARS), *python, "jobs/snapshot_metadata.py",
                                         "--config", str(bad), "--warehouse", wh], master="local[2]")
            assert done.code == 1, (name, done.problems())
            line = _one_error_line(done)
            assert SECRET not in done.stdout + done.stderr
            assert {"dead": "Connection refused", "refused": "InvalidAccessKeyId"}[name] in line, line
    # the first refusal came before anything was staged in the good store: no table, no staging
    assert not [path for path, _ in _objects(s3) if path.startswith(f"{BUCKET}/refused/")]
