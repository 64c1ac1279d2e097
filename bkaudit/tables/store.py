"""Delta table writes with delta-rs: stage Parquet files anywhere (executors), commit once (driver).

Why this shape: Maven is unreachable, so Spark has no Delta writer here, and a job must never leave half a
snapshot visible. Executors (or the driver, for small tables) write Parquet files straight into the table
directory with `StagingWriter`; nothing references them yet, so readers cannot see them. The driver then
makes them visible with ONE Delta commit per table (`commit`), which also removes the files of earlier runs
with the same snapshot_id: re-running a snapshot replaces its rows in a single atomic step, never a
delete-then-insert that a reader could observe half done.

Multi-table atomicity: Delta commits are atomic per table only. A snapshot commits its tables in a fixed
order and the `snapshots` row LAST; that row (status 'succeeded') is the visibility marker that
`bkaudit.tables.load` uses to pick the latest snapshot. If a commit fails midway, the tables already
committed by this run are reverted (`revert`: remove what it added, re-add what it removed) before the
failure is recorded. A process killed between two table commits can leave rows of a snapshot with no
'succeeded' row: latest-snapshot reads never see them, and the next run of that snapshot_id replaces them.
Staged files that never got committed are unreferenced garbage that `bkaudit tables vacuum` removes.

Statistics: every staged file carries full Delta stats (`bkaudit.tables.stats`), so readers that prune
files by min/max (delta-rs, DuckDB, polars, Spark) answer filtered questions right. Locations and storage
options come from `bkaudit.tables.location` (local paths and object stores alike); a warehouse is a
`location.Warehouse` (or a plain URI: no storage options) and carries its options to every write.

History: delta-rs's transaction API records every commit as WRITE (mode Append); a commit that replaces
rows says so in `operationParameters.predicate` (e.g. `run_id = 'X'`), `isBlindAppend: false` and
`userMetadata` ("bkaudit replace ..."), which DESCRIBE HISTORY and `DeltaTable.history()` show.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bkaudit.errors import BkAuditError
from bkaudit.tables import location
from bkaudit.tables.catalog import spec
from bkaudit.tables.location import StorageOptions, Warehouse
from bkaudit.tables.replace_match import file_verdict, match_mask, read_file
from bkaudit.tables.schemas import TableSpec, conform
from bkaudit.tables.stats import FileStats, finite_floats, from_add_action

log = logging.getLogger(__name__)

SNAPSHOT_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
COMMIT_KEY = "bkaudit.commit"  # commit-info key carrying a unique token, to find our commit's version
MAX_ROWS_PER_FILE = 1_000_000


class CommitError(BkAuditError):
    """A Delta commit failed; the message names the table."""


def validate_snapshot_id(snapshot_id: str) -> str:
    """Snapshot ids end up in file names and SQL predicates: letters, digits, '.', '_' and '-' only."""
    if not isinstance(snapshot_id, str) or not SNAPSHOT_ID_PATTERN.fullmatch(snapshot_id):
        raise ValueError(f"snapshot id must match {SNAPSHOT_ID_PATTERN.pattern}, got {snapshot_id!r}")
    return snapshot_id


def table_uri(warehouse: Warehouse | str, name: str) -> str:
    """`<warehouse>/<name>`: an absolute local path, or a URI with `s3a://` spelled `s3://`."""
    return Warehouse.of(warehouse).table(name)


def is_delta_table(uri: str, *, options: StorageOptions | None = None) -> bool:
    from deltalake import DeltaTable

    return bool(DeltaTable.is_deltatable(uri, storage_options=location.storage_options(uri, options=options)))


def open_delta(uri: str, version: int | None = None, *, options: StorageOptions | None = None) -> Any:
    """delta-rs's DeltaTable at `uri` (optionally a version), with the store's `options`."""
    from deltalake import DeltaTable

    return DeltaTable(uri, version=version, storage_options=location.storage_options(uri, options=options))


# -- staging -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StagedFile:
    """A Parquet file written into a table directory but not committed yet (JSON-serialisable)."""

    table: str
    path: str  # relative to the table root, as Delta's add action wants it
    size: int
    num_records: int
    partition_values: dict[str, str]
    stats: str
    modification_time: int

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> StagedFile:
        return cls(**json.loads(text))


class StagingWriter:
    """Writes one snapshot's rows of one table as Parquet files under the table directory.

    Rows are cast to the table's file schema (partition columns live in the Delta log, not the files);
    `snapshot_id` is filled in when the rows lack it. Files roll over every `max_rows_per_file` rows. The
    Delta stats (numRecords, min/max and null counts of every indexed column) are computed here because
    delta-rs takes the stats of files it is handed as given (see `bkaudit.tables.stats`).
    """

    def __init__(
        self,
        warehouse: Warehouse | str,
        table: str,
        *,
        snapshot_id: str,
        snapshot_date: str,
        max_rows_per_file: int = MAX_ROWS_PER_FILE,
    ) -> None:
        self.spec: TableSpec = spec(table)
        wh = Warehouse.of(warehouse)
        self.uri, self.options = wh.table(table), wh.options
        self.snapshot_id = validate_snapshot_id(snapshot_id)
        self.partition_values = {c: snapshot_date for c in self.spec.partition_by}
        self.max_rows_per_file = max_rows_per_file
        self.files: list[StagedFile] = []
        self._fs, self._root = location.filesystem(self.uri, options=self.options)
        self._writer: pq.ParquetWriter | None = None
        self._rel = ""
        self._rows = 0
        self._stats = FileStats(self.spec.file_schema)

    def write(self, data: pa.RecordBatch | pa.Table) -> None:
        """Append rows (any column order; missing nullable columns become nulls)."""
        if data.num_rows == 0:
            return
        if "snapshot_id" not in data.schema.names:
            data = data.append_column(
                "snapshot_id", pa.array([self.snapshot_id] * data.num_rows, pa.string())
            )
        table = finite_floats(conform(data, self.spec.file_schema))
        start = 0
        while start < table.num_rows:
            if self._writer is None:
                self._open()
            take = min(table.num_rows - start, self.max_rows_per_file - self._rows)
            chunk = table.slice(start, take)
            assert self._writer is not None
            self._writer.write_table(chunk)
            self._stats.update(chunk)
            self._rows += take
            start += take
            if self._rows >= self.max_rows_per_file:
                self._finish()

    def close(self) -> list[StagedFile]:
        """Finish the open file; returns every file staged by this writer."""
        if self._writer is not None:
            self._finish()
        return list(self.files)

    def abort(self) -> None:
        """Close and delete whatever this writer staged (best effort)."""
        try:
            self.close()
        finally:
            discard(self.uri, self.files, options=self.options)
            self.files.clear()

    # -- internals -------------------------------------------------------------------------------------------
    def _open(self) -> None:
        part = "/".join(f"{k}={v}" for k, v in self.partition_values.items())
        name = f"part-{len(self.files):05d}-{uuid.uuid4()}-{self.snapshot_id}.snappy.parquet"
        self._rel = f"{part}/{name}" if part else name
        location.makedirs(f"{self.uri}/{part}" if part else self.uri)  # object stores: no directory markers
        self._writer = pq.ParquetWriter(
            f"{self._root}/{self._rel}", self.spec.file_schema, filesystem=self._fs, compression="snappy"
        )
        self._rows = 0
        self._stats = FileStats(self.spec.file_schema)

    def _finish(self) -> None:
        assert self._writer is not None
        self._writer.close()
        self._writer = None
        info = self._fs.get_file_info(f"{self._root}/{self._rel}")
        self.files.append(
            StagedFile(
                table=self.spec.name,
                path=self._rel,
                size=int(info.size or 0),
                num_records=self._rows,
                partition_values=dict(self.partition_values),
                stats=self._stats.to_json(),
                modification_time=int(time.time() * 1000),
            )
        )


def stage_table(
    warehouse: Warehouse | str,
    table: str,
    data: pa.Table | pa.RecordBatch,
    *,
    snapshot_id: str,
    snapshot_date: str,
) -> list[StagedFile]:
    """Stage a whole (small) table from the driver; no file for zero rows."""
    writer = StagingWriter(warehouse, table, snapshot_id=snapshot_id, snapshot_date=snapshot_date)
    writer.write(data)
    return writer.close()


def discard(uri: str, files: Iterable[StagedFile], *, options: StorageOptions | None = None) -> None:
    """Delete staged files that will never be committed (best effort: vacuum collects leftovers)."""
    fs, root = location.filesystem(uri, options=options)
    for f in files:
        try:
            fs.delete_file(f"{root}/{f.path}")
        except OSError:
            pass


# -- commit --------------------------------------------------------------------------------------------------
@dataclass
class Commit:
    """What one commit did to one table (enough to revert it)."""

    table: str
    uri: str
    version: int
    added: list[StagedFile] = field(default_factory=list)
    removed: list[dict[str, Any]] = field(default_factory=list)  # add-action rows of files it removed
    options: StorageOptions | None = field(default=None, repr=False)  # the store's, to revert it


def _open_or_create(uri: str, table_spec: TableSpec, options: StorageOptions | None) -> Any:
    from deltalake import DeltaTable

    if not is_delta_table(uri, options=options):
        DeltaTable.create(
            uri,
            schema=table_spec.schema,
            partition_by=list(table_spec.partition_by),
            mode="ignore",
            name=table_spec.name,
            description=table_spec.description or None,
            storage_options=location.storage_options(uri, options=options),
        )
    return open_delta(uri, options=options)


def _predicate(replace: Mapping[str, str]) -> str:
    return " AND ".join(f"{k} = '{v}'" for k, v in replace.items())


def _labels(
    token: str, info: Mapping[str, Any] | None, replace: Mapping[str, str], added: int, removed: int
) -> dict[str, Any]:
    """Commit-info keys that say what a commit did (delta-rs fixes `operation` to WRITE/Append)."""
    meta: dict[str, Any] = {COMMIT_KEY: token, **{k: str(v) for k, v in (info or {}).items()}}
    for key in ("run_id", "snapshot_id"):  # which run a commit belongs to, for history readers
        if key in replace:
            meta.setdefault(key, replace[key])
    if replace:
        predicate = _predicate(replace)
        meta["operationParameters"] = {"predicate": predicate}
        meta["isBlindAppend"] = False
        meta["userMetadata"] = f"bkaudit replace {predicate}: +{added} file(s), -{removed} file(s)"
        meta["bkaudit.operation"] = "replace"
    else:
        meta["userMetadata"] = f"bkaudit append: +{added} file(s)"
        meta["bkaudit.operation"] = "append"
    return meta


def commit(
    warehouse: Warehouse | str,
    table: str,
    files: Sequence[StagedFile],
    *,
    replace: Mapping[str, str] | None = None,
    info: Mapping[str, Any] | None = None,
) -> Commit:
    """Make staged `files` visible in ONE Delta commit, removing rows matching `replace` in the same commit.

    `replace` is an equality filter such as {"snapshot_id": "X"}: files whose rows all match are removed;
    a file that mixes matching and other rows (e.g. after an OPTIMIZE) is rewritten without the matching
    rows. The table is created on first use with its registered schema.
    """
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import AddAction, CommitProperties

    table_spec = spec(table)
    wh = Warehouse.of(warehouse)
    uri, options = wh.table(table), wh.options
    token = str(uuid.uuid4())
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        rewritten: list[StagedFile] = []
        try:
            dt = _open_or_create(uri, table_spec, options)
            removals, rewritten, removed_rows = _replacements(dt, wh, table_spec, replace or {})
            all_added = [*files, *rewritten]
            actions = [_add_action(AddAction, f) for f in all_added] + removals
            if not actions:
                return Commit(table, uri, dt.version(), options=options)
            props = CommitProperties(
                custom_metadata=_labels(token, info, replace or {}, len(all_added), len(removals)),
                max_commit_retries=0,  # only on the version read: see COMMIT_ATTEMPTS
            )
            dt.create_write_transaction(
                actions,
                mode="append",
                schema=table_spec.schema,
                partition_by=list(table_spec.partition_by),
                commit_properties=props,
            )
            break
        except CommitFailedError as exc:
            discard(uri, rewritten, options=options)  # recomputed from the new version on the next attempt
            if attempt == COMMIT_ATTEMPTS:
                raise CommitError(
                    f"committing {len(files)} file(s) to table {table} at {uri}: another writer committed "
                    f"first {attempt} times in a row"
                ) from exc
            log.info("table %s: a concurrent commit landed first (attempt %d); re-reading", table, attempt)
            time.sleep(min(0.05 * attempt, 0.5))
        except BkAuditError:
            raise
        except Exception as exc:
            raise CommitError(
                f"committing {len(files)} file(s) to table {table} at {uri} failed: {exc}"
            ) from exc
    return Commit(table, uri, _version_of(uri, token, options), added=list(all_added), removed=removed_rows,
                  options=options)


COMMIT_ATTEMPTS = 20
"""A commit lands only on the version it was computed from. Otherwise delta-rs rebases it onto a newer
version, and its conflict check lets the removal of a file that a concurrent OPTIMIZE already compacted
pass as a no-op: the rows meant to be replaced survive, twice. On a concurrent commit the replacement is
computed again from the new version and retried, this many times."""


def revert(done: Commit) -> None:
    """Undo a commit of this run: remove the files it added, re-add the files it removed (one commit)."""
    from deltalake._internal import RemoveAction
    from deltalake.transaction import AddAction, CommitProperties

    now = int(time.time() * 1000)
    actions: list[Any] = [
        RemoveAction(f.path, True, now, f.size, dict(f.partition_values)) for f in done.added
    ]
    for row in done.removed:
        actions.append(
            AddAction(
                row["path"],
                row["size"],
                row["partition_values"],
                now,
                True,
                row["stats"],
            )
        )
    if not actions:
        return
    table_spec = spec(done.table)
    note = f"bkaudit revert of v{done.version}: -{len(done.added)} file(s), +{len(done.removed)} file(s)"
    open_delta(done.uri, options=done.options).create_write_transaction(
        actions,
        mode="append",
        schema=table_spec.schema,
        partition_by=list(table_spec.partition_by),
        commit_properties=CommitProperties(
            custom_metadata={
                "userMetadata": note,
                "isBlindAppend": False,
                "bkaudit.operation": "revert",
                "bkaudit.reverts": str(done.version),
            }
        ),
    )


def _add_action(add_action: Any, f: StagedFile) -> Any:
    return add_action(f.path, f.size, dict(f.partition_values), f.modification_time, True, f.stats)


def _version_of(uri: str, token: str, options: StorageOptions | None, search: int = 200) -> int:
    """The version of the commit carrying `token` (concurrent writers may have committed around it).

    Read from the commit files themselves: delta-rs's `history()` numbers entries down from the version it
    loaded, which is off when commits landed between its load and its listing (seen on S3 under load).
    """
    fs, root = location.filesystem(uri, options=options)

    def commit_text(version: int) -> str | None:
        try:
            with fs.open_input_stream(f"{root}/_delta_log/{version:020d}.json") as f:
                return bytes(f.read()).decode("utf-8", "replace")
        except (FileNotFoundError, OSError):
            return None

    latest = int(open_delta(uri, options=options).version())
    while commit_text(latest + 1) is not None:
        latest += 1
    for version in range(latest, max(-1, latest - search), -1):
        text = commit_text(version)
        if text is not None and token in text:
            return version
    return latest


def _replacements(
    dt: Any, wh: Warehouse, table_spec: TableSpec, replace: Mapping[str, str]
) -> tuple[list[Any], list[StagedFile], list[dict[str, Any]]]:
    """(remove actions, rewritten files, removed file rows) for the rows matching `replace`."""
    from deltalake._internal import RemoveAction

    if not replace:
        return [], [], []
    actions = pa.table(dt.get_add_actions(flatten=False)).to_pylist()
    now = int(time.time() * 1000)
    removals: list[Any] = []
    rewritten: list[StagedFile] = []
    removed_rows: list[dict[str, Any]] = []
    uri = wh.table(table_spec.name)
    for row in actions:
        verdict = file_verdict(row, uri, table_spec, replace, options=wh.options)
        if verdict == "keep":
            continue
        parts = {c: (row.get("partition") or {}).get(c) for c in table_spec.partition_by}
        if verdict == "mixed":
            rewritten.extend(_rewrite_without(wh, row["path"], parts, table_spec, replace))
        removals.append(RemoveAction(row["path"], True, now, row["size_bytes"], parts))
        removed_rows.append(
            {
                "path": row["path"],
                "size": row["size_bytes"],
                "partition_values": parts,
                "num_records": row.get("num_records") or 0,
                "stats": from_add_action(row),
            }
        )
    return removals, rewritten, removed_rows


def _rewrite_without(
    wh: Warehouse,
    rel: str,
    parts: Mapping[str, str | None],
    table_spec: TableSpec,
    replace: Mapping[str, str],
) -> list[StagedFile]:
    """A file holding several snapshots: stage a copy without the replaced rows."""
    data = read_file(wh.table(table_spec.name), rel, None, options=wh.options)
    keep = data.filter(pc.invert(match_mask(data, replace)))
    if keep.num_rows == 0:
        return []
    snapshot_ids = pc.unique(keep.column("snapshot_id")).to_pylist()
    date = next(iter(parts.values()), "") or ""
    writer = StagingWriter(
        wh,
        table_spec.name,
        snapshot_id=str(snapshot_ids[0]),
        snapshot_date=date,
    )
    writer.write(keep)
    return writer.close()


def write_table(
    warehouse: Warehouse | str,
    table: str,
    data: pa.Table,
    *,
    snapshot_id: str,
    snapshot_date: str,
    replace: Mapping[str, str] | None = None,
) -> Commit:
    """Stage and commit a small table from the driver (one commit; `replace` defaults to the snapshot_id)."""
    files = stage_table(warehouse, table, data, snapshot_id=snapshot_id, snapshot_date=snapshot_date)
    try:
        return commit(
            warehouse, table, files, replace={"snapshot_id": snapshot_id} if replace is None else replace
        )
    except BaseException:
        discard(table_uri(warehouse, table), files, options=Warehouse.of(warehouse).options)
        raise
