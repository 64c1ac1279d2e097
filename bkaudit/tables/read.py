"""Reading bkaudit's Delta tables as Spark DataFrames, with or without Delta's Spark jars.

Where Delta Lake's jars are on the classpath (a production cluster) Spark reads the tables natively. Here
Maven is unreachable, so the file list of the requested table version comes from delta-rs and Spark reads
exactly those Parquet files with the registered schema: the same snapshot Delta would show (valid because
the tables use neither deletion vectors nor column mapping). Files that cannot hold the requested
snapshot_id are skipped using the min/max stats in the Delta log.

"Latest" means the most recently finished snapshot whose `snapshots` row says 'succeeded': that row is
committed last, so a run that failed or was killed midway is never picked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from bkaudit.errors import BkAuditError
from bkaudit.tables import location
from bkaudit.tables.catalog import spec
from bkaudit.tables.location import StorageOptions, Warehouse
from bkaudit.tables.store import is_delta_table, open_delta, table_uri, validate_snapshot_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SUCCEEDED = "succeeded"
FAILED = "failed"


class TableUnreadable(BkAuditError):
    """A table that cannot be read: missing where it should be, a directory without its Delta log, a corrupt
    log, a data file gone. Readers say "could not read" with the reason, never show it as empty."""

    def __init__(self, table: str, uri: str, reason: str) -> None:
        super().__init__(f"could not read table {table!r} at {uri}: {reason}")
        self.table = table
        self.uri = uri
        self.reason = reason


class TableNotFound(TableUnreadable):
    """No Delta table at the expected location (has a snapshot ever run against this warehouse?)."""


class NoSnapshot(BkAuditError):
    """The warehouse holds no successful snapshot (or not the one asked for)."""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_S3_ERROR = re.compile(r"<Code>([^<]+)</Code>\s*<Message>([^<]*)</Message>")


def first_line(exc: BaseException) -> str:
    """An error in one line: its first line (delta-rs appends a native backtrace when RUST_BACKTRACE is set)
    and, from the cause chain object_store prints below it (lines marked ↳), what the store answered: the S3
    error code and message, else the deepest cause ("403 Forbidden", "Connection refused")."""
    lines = [_ANSI.sub("", line).strip() for line in str(exc).splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return type(exc).__name__
    answered = _S3_ERROR.search(" ".join(lines[1:]))
    if answered:
        return f"{lines[0]}: {answered.group(1)}: {answered.group(2)}"
    causes = [line.lstrip("↳ ").strip() for line in lines[1:] if line.startswith("↳")]
    return f"{lines[0]}: {causes[-1]}" if causes else lines[0]


@contextmanager
def reading(table: str, uri: str) -> Iterator[None]:
    """Failures of delta-rs / Arrow while reading `table` become TableUnreadable (one line, exit 1)."""
    try:
        yield
    except BkAuditError:
        raise
    except Exception as exc:  # DeltaError (corrupt log), OSError (a file gone), ArrowInvalid (corrupt file)
        raise TableUnreadable(table, uri, first_line(exc)) from exc


def require_writable(warehouse: Warehouse | str, tables: Iterable[str]) -> None:
    """TableUnreadable for the first of `tables` a job could not commit to: something at its location but no
    Delta log, or a log delta-rs cannot read. Jobs ask before they stage anything, so a warehouse with a
    broken table fails the run before any of its tables took a commit (no orphan rows)."""
    options = Warehouse.of(warehouse).options
    for table in tables:
        uri = table_uri(warehouse, table)
        state = table_state(warehouse, table)
        if state == "broken" and _holds_data(uri, options):  # a log gone under committed files: rows vanish
            raise TableUnreadable(table, uri, "data files without their Delta log (_delta_log)")
        if state == "present":
            with reading(table, uri):
                open_delta(uri, options=options).version()


def _holds_data(uri: str, options: StorageOptions) -> bool:
    """Any Parquet file under `uri` (a failed first run leaves only an empty directory behind)."""
    import pyarrow.fs as pafs

    fs, path = location.filesystem(uri, options=options)
    with reading("?", uri):
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return any(i.type == pafs.FileType.File and i.path.endswith(".parquet") for i in infos)


def table_state(warehouse: Warehouse | str, table: str) -> str:
    """"present" (a Delta table), "absent" (nothing at its location) or "broken" (something there, but no
    Delta log: e.g. `_delta_log` deleted)."""
    uri, options = table_uri(warehouse, table), Warehouse.of(warehouse).options
    with reading(table, uri):
        if is_delta_table(uri, options=options):
            return "present"
        return "broken" if location.exists(uri, options=options) else "absent"


def open_table(warehouse: Warehouse | str, table: str, version: int | None = None) -> Any:
    """delta-rs's DeltaTable of `table`: TableNotFound when nothing is at its location, TableUnreadable when
    its Delta log is missing or cannot be read."""
    uri = table_uri(warehouse, table)
    state = table_state(warehouse, table)
    if state == "absent":
        raise TableNotFound(table, uri, "no such Delta table")
    if state == "broken":
        raise TableUnreadable(table, uri, "no Delta log (_delta_log is missing or empty)")
    with reading(table, uri):
        return open_delta(uri, version, options=Warehouse.of(warehouse).options)


def _delta_table(warehouse: Warehouse | str, table: str, version: int | None = None) -> Any:
    return open_table(warehouse, table, version)


def table_exists(warehouse: Warehouse | str, table: str) -> bool:
    return is_delta_table(table_uri(warehouse, table), options=Warehouse.of(warehouse).options)


def snapshots(warehouse: Warehouse | str) -> pa.Table:
    """The `snapshots` table (one row per run) as Arrow, newest first; empty if none ran yet (nothing at its
    location); TableUnreadable when it is there but cannot be read."""
    if table_state(warehouse, "snapshots") == "absent":
        return spec("snapshots").schema.empty_table()
    dt = _delta_table(warehouse, "snapshots")
    with reading("snapshots", table_uri(warehouse, "snapshots")):
        data = dt.to_pyarrow_table()
    return data.sort_by([("finished_at", "descending"), ("started_at", "descending")])


def latest_snapshot_id(warehouse: Warehouse | str) -> str | None:
    """The most recently finished successful snapshot, or None."""
    runs = snapshots(warehouse)
    ok = runs.filter(pc.equal(runs.column("status"), SUCCEEDED))
    return str(ok.column("snapshot_id")[0].as_py()) if ok.num_rows else None


def snapshot_versions(warehouse: Warehouse | str, snapshot_id: str) -> dict[str, int]:
    """The Delta version of each table that the successful run of `snapshot_id` committed (time travel)."""
    runs = snapshots(warehouse)
    mask = pc.and_(
        pc.equal(runs.column("snapshot_id"), snapshot_id), pc.equal(runs.column("status"), SUCCEEDED)
    )
    rows = runs.filter(mask).to_pylist()
    if not rows:
        raise NoSnapshot(f"no successful snapshot {snapshot_id!r} in {warehouse}")
    return dict(rows[0]["table_versions"] or [])


def read_arrow(
    warehouse: Warehouse | str, table: str, *, snapshot_id: str | None = None, version: int | None = None
) -> pa.Table:
    """A table (or one snapshot of it) as Arrow on the driver, via delta-rs: for small tables and tests."""
    dt = _delta_table(warehouse, table, version)
    with reading(table, table_uri(warehouse, table)):
        data = dt.to_pyarrow_table()
    if snapshot_id is not None:
        data = data.filter(pc.equal(data.column("snapshot_id"), snapshot_id))
    return data.select(spec(table).schema.names)


# What Delta Lake's Spark reader needs besides its jars: since Delta 4, `spark.read.format("delta")` refuses a
# session without its SQL extension and catalog (DELTA_CONFIGURE_SPARK_SESSION_WITH_EXTENSION_AND_CATALOG)
DELTA_SESSION_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
DELTA_CLASS = "org.apache.spark.sql.delta.DeltaLog"


def delta_configured(spark: SparkSession) -> bool:
    """The session names Delta's extension and catalog (whether or not its jars are there)."""
    conf = spark.sparkContext.getConf()
    return all(value in (conf.get(key) or "") for key, value in DELTA_SESSION_CONF.items())


def native_delta_available(spark: SparkSession) -> bool:
    """True when Delta Lake's own reader can serve this session: its classes are loadable (jars on the
    classpath) and the session is configured for it. Jars alone are not enough since Delta 4; bkaudit then
    reads through delta-rs's file list, as without the jars."""
    return jvm_class(spark, DELTA_CLASS) is not None and delta_configured(spark)


def jvm_class(spark: SparkSession, name: str) -> Any:
    """The session's Java class `name` (through the context class loader, which sees spark.jars), or None
    when it cannot be loaded or the context is stopped."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        return None
    try:
        return jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(name)
    except Exception:  # py4j's Py4JJavaError wrapping ClassNotFoundException / NoClassDefFoundError
        return None


def load(
    spark: SparkSession,
    warehouse: Warehouse | str,
    table: str,
    *,
    snapshot_id: str | None = None,
    version: int | None = None,
    latest: bool = True,
    native: bool | None = None,
) -> DataFrame:
    """A bkaudit table as a Spark DataFrame.

    - `snapshot_id`: only that snapshot's rows.
    - `version`: the table as of that Delta version (time travel); with no snapshot_id, all its rows.
    - otherwise, with `latest` (the default), the rows of the latest successful snapshot; `latest=False`
      returns every row of the current version.
    - `native`: force (True) or forbid (False) Delta's own Spark reader; None detects it.
    Raises TableNotFound / NoSnapshot with a message saying what is missing.
    """
    table_spec = spec(table)
    if snapshot_id is None and version is None and latest:
        snapshot_id = latest_snapshot_id(warehouse)
        if snapshot_id is None:
            raise NoSnapshot(f"no successful snapshot in {warehouse} (run `bkaudit snapshot` first)")
    if snapshot_id is not None:
        validate_snapshot_id(snapshot_id)
    use_native = native_delta_available(spark) if native is None else native
    if use_native:
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        df = reader.load(location.spark_uri(table_uri(warehouse, table)))
    else:
        df = _load_files(spark, warehouse, table, snapshot_id=snapshot_id, version=version)
    if snapshot_id is not None:
        df = df.where(df["snapshot_id"] == snapshot_id)
    return df.select(*table_spec.schema.names)


def _load_files(
    spark: SparkSession,
    warehouse: Warehouse | str,
    table: str,
    *,
    snapshot_id: str | None,
    version: int | None,
) -> DataFrame:
    """Spark over exactly the Parquet files of one Delta version (no Delta jars needed)."""
    table_spec = spec(table)
    schema = table_spec.spark_schema()
    uri = table_uri(warehouse, table)
    files = _files(_delta_table(warehouse, table, version), uri, snapshot_id)
    if not files:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).option("basePath", location.spark_uri(uri)).parquet(*files)


def current_files(warehouse: Warehouse | str, table: str, *, version: int | None = None) -> list[str]:
    """The Parquet files of the table's current (or given) version, as Spark can open them.

    The safe way to read a bkaudit table with plain Spark (no Delta jars): `spark.read.parquet` on the
    table directory also reads files that re-runs replaced and vacuum has not deleted yet.
    """
    uri = table_uri(warehouse, table)
    dt = _delta_table(warehouse, table, version)
    with reading(table, uri):
        return _files(dt, uri, None)


def _files(dt: Any, uri: str, snapshot_id: str | None) -> list[str]:
    """Absolute file paths of the version's add actions; stats prune files that cannot hold `snapshot_id`."""
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    keep = []
    for row in actions:
        low, high = row.get("min.snapshot_id"), row.get("max.snapshot_id")
        if (
            snapshot_id is not None
            and low is not None
            and high is not None
            and not low <= snapshot_id <= high
        ):
            continue
        keep.append(location.spark_uri(location.resolve(uri, row["path"])))
    return keep


# -- checker runs (`bkaudit violations`, the admin API) ----------------------------------------------------
def select_run(warehouse: Warehouse | str, run_id: str | None) -> dict[str, Any]:
    """The `audit_runs` row of `run_id`, or of the latest succeeded run."""
    if table_state(warehouse, "audit_runs") == "absent":
        raise BkAuditError(f"no checker run in {warehouse} (run `bkaudit check` first)")
    runs = read_arrow(warehouse, "audit_runs")
    runs = runs.filter(pc.equal(runs.column("status"), "succeeded"))
    if run_id is not None:
        runs = runs.filter(pc.equal(runs.column("run_id"), run_id))
        if runs.num_rows == 0:
            raise BkAuditError(f"no succeeded checker run {run_id!r} in {warehouse}")
    elif runs.num_rows == 0:
        raise BkAuditError(f"no succeeded checker run in {warehouse}")
    rows: list[dict[str, Any]] = runs.to_pylist()
    return max(rows, key=lambda r: (r["finished_at"], r["run_id"]))


def read_violations(
    warehouse: Warehouse | str, run_id: str, category: str | None = None
) -> list[dict[str, Any]]:
    """The violations of one run (detail parsed), worst severity first."""
    data = read_arrow(warehouse, "violations")
    data = data.filter(pc.equal(data.column("run_id"), run_id))
    if category:
        data = data.filter(pc.equal(data.column("category"), category))
    rank = {"critical": 0, "warning": 1, "info": 2}
    rows: list[dict[str, Any]] = data.to_pylist()
    for r in rows:
        try:
            r["detail"] = json.loads(r["detail"]) if r.get("detail") else {}
        except ValueError:
            pass
    rows.sort(
        key=lambda r: (
            rank.get(r["severity"], 3),
            r["category"],
            -1 if r["ledger_id"] is None else r["ledger_id"],
            r["bookie_id"] or "",
        )
    )
    return rows
