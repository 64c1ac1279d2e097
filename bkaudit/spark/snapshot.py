"""Spark job 1: snapshot ZooKeeper's BookKeeper metadata into Delta tables, validated, committed atomically.

Steps (each a function, so jobs/snapshot_metadata.py, `bkaudit snapshot` and tests share them):
1. `stage_ledgers`: every ledger znode is read once, in at most `max_zk_sessions` parallel tasks, by the
   "bookkeeper" data source's reader (`datasource.read_units`); the same task writes the `ledgers` and
   `ledger_segments` Parquet files into the table directories (not yet visible). A task Spark re-runs
   re-reads ZooKeeper (read-only) and writes new files; only the files of the attempt whose result the
   driver collected are ever committed.
2. `read_cluster_state` (driver): bookies, cookies, racks, under-replication markers and locks.
3. validation (Great Expectations) on the staged rows; results staged as `validation_results`.
4. commit: one Delta commit per table, replacing the rows of this snapshot_id, the `snapshots` row last.

A failed run (any exception, or a critical expectation failing with `fail_on_critical_validation`) deletes
its staged files, reverts any table it already committed, and writes one `snapshots` row with status
'failed' and the error (plus its `validation_results` when validation is what failed, for diagnosis): the
only rows a failed run leaves. Latest-snapshot reads only ever pick a 'succeeded' row.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from bkaudit.errors import BkAuditError
from bkaudit.tables.location import Warehouse
from bkaudit.tables.schemas import SNAPSHOT_TABLES
from bkaudit.tables.settings import resolve_warehouse
from bkaudit.tables.store import (
    Commit,
    StagedFile,
    commit,
    discard,
    stage_table,
    table_uri,
    validate_snapshot_id,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from bkaudit.config import Settings, ZkSettings
    from bkaudit.spark.datasource import ReadOptions
    from bkaudit.spark.settings import SnapshotSettings
    from bkaudit.tables.validation import ValidationReport

log = logging.getLogger(__name__)

SUCCEEDED = "succeeded"
FAILED = "failed"
MANIFEST_SCHEMA = "kind string, payload string"


class SnapshotFailed(BkAuditError):
    """The snapshot run failed; `result` holds what was recorded in the `snapshots` table."""

    def __init__(self, message: str, result: SnapshotResult) -> None:
        super().__init__(message)
        self.result = result


class ValidationFailed(BkAuditError):
    """Critical expectations failed and `fail_on_critical_validation` is on."""


@dataclass
class Hooks:
    """Test seams: `before_commit` runs after everything is staged and validated, before any commit."""

    before_commit: Callable[[], None] | None = None


@dataclass
class SnapshotResult:
    snapshot_id: str
    snapshot_date: str
    status: str = "running"
    ledgers: int = 0
    unparseable: int = 0
    segments: int = 0
    bookies: int = 0
    underreplicated: int = 0
    validation_failures: int = 0
    seconds: float = 0.0
    error: str | None = None
    table_versions: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """What `bkaudit snapshot --json` prints."""
        return {
            "snapshot_id": self.snapshot_id,
            "ledgers": self.ledgers,
            "unparseable": self.unparseable,
            "bookies": self.bookies,
            "underreplicated": self.underreplicated,
            "seconds": round(self.seconds, 3),
        }


def new_snapshot_id(now: datetime | None = None) -> str:
    """`20261122T051500Z-1a2b3c`: sortable by time, unique across concurrent runs."""
    now = now or datetime.now(UTC)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


# -- step 1: ledgers -----------------------------------------------------------------------------------------
@dataclass
class StagedLedgers:
    files: list[StagedFile]
    ledgers: int
    unparseable: int
    segments: int
    ensemble_bookies: set[str]


def stage_ledgers(
    spark: SparkSession,
    zk: ZkSettings,
    snap: SnapshotSettings,
    warehouse: Warehouse,
    snapshot_id: str,
    snapshot_date: str,
) -> StagedLedgers:
    """Read every ledger znode (parallel tasks) and stage `ledgers` + `ledger_segments` files.

    Each task reads its share of the tree exactly as the "bookkeeper" data source does (`read_units`:
    same planning, sessions, rate limit and decoding) and writes the Arrow batches straight to Parquet in
    the same Python worker; only a manifest row per file goes back through the JVM. Reading with
    `spark.read.format("bookkeeper")` and staging in a `mapInArrow` would send every row Python -> JVM ->
    Python, converted to Spark's rows and back: about half the step's time at 200,000 ledgers
    (docs/performance.md, "Snapshot job")."""
    from bkaudit.spark.datasource import ReadOptions, plan_partitions

    options = ReadOptions(zk, snap)
    groups = plan_partitions(options) or [[]]
    tasks = spark.range(len(groups), numPartitions=len(groups))
    stager = _stager(options, groups, warehouse, snapshot_id, snapshot_date)
    rows = tasks.mapInArrow(stager, MANIFEST_SCHEMA).collect()
    staged = StagedLedgers([], 0, 0, 0, set())
    for row in rows:
        if row.kind == "file":
            staged.files.append(StagedFile.from_json(row.payload))
        else:
            summary = json.loads(row.payload)
            staged.ledgers += summary["ledgers"]
            staged.unparseable += summary["unparseable"]
            staged.segments += summary["segments"]
            staged.ensemble_bookies.update(summary["bookies"])
    return staged


def _stager(
    options: ReadOptions, groups: list[list[str]], warehouse: Warehouse, snapshot_id: str, snapshot_date: str
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The mapInArrow function: reads the groups whose indexes it is given, writes their rows as staged
    files, yields their manifest."""

    def stage(tasks: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        from bkaudit.tables.rows import explode_segments
        from bkaudit.tables.store import StagingWriter

        ledgers = StagingWriter(warehouse, "ledgers", snapshot_id=snapshot_id, snapshot_date=snapshot_date)
        segments = StagingWriter(
            warehouse, "ledger_segments", snapshot_id=snapshot_id, snapshot_date=snapshot_date
        )
        counts = {"ledgers": 0, "unparseable": 0, "segments": 0}
        bookies: set[str] = set()
        try:
            for batch in _read_tasks(tasks, options, groups):
                ledgers.write(batch)
                seg = explode_segments(batch)
                segments.write(seg)
                counts["ledgers"] += batch.num_rows
                counts["unparseable"] += batch.num_rows - batch.column("parse_error").null_count
                counts["segments"] += seg.num_rows
                bookies.update(pc.unique(pc.list_flatten(seg.column("ensemble"))).to_pylist())
            files = ledgers.close() + segments.close()
        except BaseException:
            ledgers.abort()
            segments.abort()
            raise
        payload = [f.to_json() for f in files] + [json.dumps({**counts, "bookies": sorted(bookies)})]
        kinds = ["file"] * len(files) + ["summary"]
        yield pa.RecordBatch.from_pydict({"kind": kinds, "payload": payload})

    return stage


def _read_tasks(
    tasks: Iterator[pa.RecordBatch], options: ReadOptions, groups: list[list[str]]
) -> Iterator[pa.RecordBatch]:
    """The data source's batches of every group whose index arrives in `tasks`."""
    from bkaudit.spark.datasource import read_units

    for task in tasks:
        for index in task.column(0).to_pylist():
            if groups[index]:
                yield from read_units(options, groups[index])


# -- the job -------------------------------------------------------------------------------------------------
def run_snapshot(
    spark: SparkSession,
    settings: Settings,
    *,
    warehouse: Warehouse | str | None = None,
    snapshot_id: str | None = None,
    hooks: Hooks | None = None,
) -> SnapshotResult:
    """Run one snapshot; returns its result or raises SnapshotFailed (after recording the failure)."""
    from bkaudit.config import ZkSettings
    from bkaudit.spark.settings import SnapshotSettings

    zk = settings.get(ZkSettings)
    snap = settings.get(SnapshotSettings)
    wh = resolve_warehouse(settings, warehouse)
    started = datetime.now(UTC)
    sid = validate_snapshot_id(snapshot_id or new_snapshot_id(started))
    run = _Run(spark, settings, zk, snap, wh, sid, started, hooks or Hooks())
    return run.execute()


class _Run:
    """One execution of the job: tracks staged files and commits so a failure can be undone."""

    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        zk: ZkSettings,
        snap: SnapshotSettings,
        warehouse: Warehouse,
        snapshot_id: str,
        started: datetime,
        hooks: Hooks,
    ) -> None:
        self.spark, self.settings, self.zk, self.snap = spark, settings, zk, snap
        self.warehouse, self.started, self.hooks = warehouse, started, hooks
        self.t0 = time.monotonic()
        self.result = SnapshotResult(snapshot_id, started.strftime("%Y-%m-%d"))
        self.staged: dict[str, list[StagedFile]] = {}
        self.commits: list[Commit] = []
        self.keep_on_failure: set[str] = set()

    @property
    def key(self) -> dict[str, str]:
        return {"snapshot_id": self.result.snapshot_id, "snapshot_date": self.result.snapshot_date}

    def _lap(self, name: str, since: float) -> float:
        now = time.monotonic()
        self.result.timings[name] = round(now - since, 3)
        return now

    def execute(self) -> SnapshotResult:
        if self.snap.validate:
            _preload_great_expectations()
        try:
            self._stage_and_commit()
        except BaseException as exc:
            self._fail(exc)
            raise SnapshotFailed(
                f"snapshot {self.result.snapshot_id} failed: {self.result.error}", self.result
            ) from exc
        return self.result

    def _stage_and_commit(self) -> None:
        t = time.monotonic()
        self._preflight()
        ensemble_bookies = self._stage_ledgers()
        t = self._lap("ledgers", t)
        known = self._stage_cluster_state(ensemble_bookies)
        t = self._lap("cluster_state", t)
        report = self._validate(known) if self.snap.validate else None
        t = self._lap("validation", t)
        if self.hooks.before_commit is not None:
            self.hooks.before_commit()
        if report is not None and report.critical_failures and self.snap.fail_on_critical_validation:
            self._commit("validation_results")  # kept on failure: they explain it
            self.keep_on_failure.add("validation_results")
            raise ValidationFailed(report.describe_failures())
        for table in SNAPSHOT_TABLES:
            self._commit(table)
        self.result.table_versions = {c.table: c.version for c in self.commits}
        self.result.status = SUCCEEDED
        self._write_snapshot_row(replace={"snapshot_id": self.result.snapshot_id})
        self._lap("commit", t)

    def _preflight(self) -> None:
        """Before anything is staged: the root holds a BookKeeper cluster (a wrong root is an error, not an
        empty snapshot), and every table this run commits to can take a commit."""
        from bkaudit.tables.read import require_writable
        from bkaudit.zk.client import close, connect
        from bkaudit.zk.ledgers import require_cluster

        client = connect(self.zk)
        try:
            require_cluster(client, root=self.zk.root)
        finally:
            close(client)
        require_writable(self.warehouse, (*SNAPSHOT_TABLES, "snapshots"))

    def _stage_ledgers(self) -> set[str]:
        """Step 1 (Spark): stage `ledgers` and `ledger_segments`; returns the bookies named in ensembles."""
        res = self.result
        staged = stage_ledgers(
            self.spark, self.zk, self.snap, self.warehouse, res.snapshot_id, res.snapshot_date
        )
        for table in ("ledgers", "ledger_segments"):
            self.staged[table] = [f for f in staged.files if f.table == table]
        res.ledgers, res.unparseable, res.segments = staged.ledgers, staged.unparseable, staged.segments
        return staged.ensemble_bookies

    def _stage_cluster_state(self, ensemble_bookies: set[str]) -> set[str]:
        """Step 2 (driver): stage `bookies` and `underreplicated_ledgers`; returns the known bookie ids."""
        from bkaudit.job.cluster_state import read_cluster_state
        from bkaudit.store.zookeeper import close, connect
        from bkaudit.tables.registry_rows import UNKNOWN, BookieRecord, bookie_table, underreplicated_table
        from bkaudit.zk.client import RateLimiter

        rate = self.snap.reads_per_second_per_task
        cluster = connect(self.zk, max_in_flight=self.snap.max_in_flight)
        try:
            state = read_cluster_state(cluster, rate_limiter=RateLimiter(rate) if rate else None)
        finally:
            close(cluster)
        known = state.known_bookies
        unknown = [BookieRecord(b, UNKNOWN, False) for b in sorted(ensemble_bookies - known)]
        bookies = bookie_table(state.bookies + unknown, state.topology, state.hostnames)
        markers = underreplicated_table(state.markers)
        self.result.bookies, self.result.underreplicated = bookies.num_rows, markers.num_rows
        self.staged["bookies"] = stage_table(self.warehouse, "bookies", bookies, **self.key)
        self.staged["underreplicated_ledgers"] = stage_table(
            self.warehouse, "underreplicated_ledgers", markers, **self.key
        )
        return known

    def _validate(self, known: set[str]) -> ValidationReport:
        """Step 3: the GX suite on the staged rows; results staged as `validation_results`."""
        from bkaudit.spark.validate import validate_staged

        res = self.result
        report = validate_staged(self.spark, self.warehouse, self.staged, known, self.snap, res.ledgers)
        res.validation_failures = report.failures
        self.staged["validation_results"] = stage_table(
            self.warehouse, "validation_results", report.table(), **self.key
        )
        for warning in report.warnings:
            log.warning("snapshot %s: expectation %s failed (warning)", res.snapshot_id, warning)
        return report

    def _commit(self, table: str) -> None:
        """Step 4: one Delta commit for `table`, replacing this snapshot_id's earlier rows."""
        files = self.staged.get(table, [])
        info = {"bkaudit.snapshot_id": self.result.snapshot_id, "bkaudit.job": "snapshot"}
        done = commit(
            self.warehouse, table, files, replace={"snapshot_id": self.result.snapshot_id}, info=info
        )
        self.commits.append(done)
        self.staged.pop(table, None)  # committed: no longer ours to delete on failure

    def _write_snapshot_row(self, *, replace: dict[str, str]) -> None:
        res = self.result
        res.seconds = time.monotonic() - self.t0
        row = {
            "zk": self.zk.connect,
            "root": self.zk.root,
            "started_at": _micros(self.started),
            "finished_at": _micros(datetime.now(UTC)),
            "status": res.status,
            "error": res.error,
            "ledgers": res.ledgers,
            "unparseable": res.unparseable,
            "segments": res.segments,
            "bookies": res.bookies,
            "underreplicated": res.underreplicated,
            "validation_failures": res.validation_failures,
            "seconds": res.seconds,
            "table_versions": list(res.table_versions.items()),
            "config": json.dumps(self.settings.redacted()),
        }
        from bkaudit.tables.schemas import SNAPSHOTS
        from bkaudit.tables.store import write_table

        schema = pa.schema([f for f in SNAPSHOTS.schema if f.name not in ("snapshot_id", "snapshot_date")])
        write_table(
            self.warehouse,
            "snapshots",
            pa.Table.from_pylist([row], schema=schema),
            replace=replace,
            **self.key,
        )

    def _fail(self, exc: BaseException) -> None:
        res = self.result
        res.status = FAILED
        res.error = describe_failure(exc)
        for table, files in self.staged.items():
            discard(table_uri(self.warehouse, table), files, options=self.warehouse.options)
        self.staged.clear()
        for done in reversed(self.commits):
            if done.table in self.keep_on_failure:
                continue
            try:
                from bkaudit.tables.store import revert

                revert(done)
            except Exception as undo:
                log.error("could not revert commit of %s v%s: %s", done.table, done.version, undo)
        res.table_versions = {}
        try:
            # a failed run only replaces earlier *failed* rows of its id: a good earlier run stays visible
            self._write_snapshot_row(replace={"snapshot_id": res.snapshot_id, "status": FAILED})
        except Exception as record:
            log.error("could not record the failed snapshot %s: %s", res.snapshot_id, record)


_PY_ERROR = re.compile(r"\b((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Failed)): ")


def describe_failure(exc: BaseException, limit: int = 1000) -> str:
    """One line for the `snapshots.error` column and the CLI: the root cause, not a Spark stack dump.

    An error raised inside a Spark task or data source reaches the driver wrapped in a Spark exception whose
    text embeds the Python traceback; the last `SomethingError: message` in it is what went wrong.
    """
    text = " ".join(str(exc).split())
    if isinstance(exc, BkAuditError) and "Traceback (most recent call last)" not in text:
        return text[:limit]
    if "Traceback (most recent call last)" in text:
        found = list(_PY_ERROR.finditer(text))
        if found:
            cause = text[found[-1].start() :]
            cause = re.split(r" SQLSTATE: | at org\.apache\.| at java\.| at scala\.", cause)[0]
            return cause[:limit]
    return f"{type(exc).__name__}: {text}"[:limit]


def _micros(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000)


def _preload_great_expectations() -> None:
    """Import GX in the background while Spark reads ZooKeeper: the import alone takes seconds."""

    def load() -> None:
        try:
            import great_expectations  # noqa: F401
        except Exception:
            pass

    threading.Thread(target=load, name="bkaudit-gx-preload", daemon=True).start()
