"""A checker run's input from the snapshot tables: which ledgers (the selection), read with Arrow on the
driver, joined with their segments and staged as files for the ledger-pass tasks.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from bkaudit.job.fanout import SHAPE_SCHEMA
from bkaudit.job.ledger_pass import join_segments
from bkaudit.tables import location
from bkaudit.tables.catalog import spec
from bkaudit.tables.location import StorageOptions, Warehouse
from bkaudit.tables.store import open_delta, table_uri

LEDGER_COLUMNS = [
    *(f.name for f in SHAPE_SCHEMA if f.name != "segments"),
    "parse_error",
    "raw_metadata",
    "digest_type",
]
SEGMENT_COLUMNS = ["ledger_id", "segment_index", "first_entry_id", "ensemble"]
QUORUM_COLUMNS = ("ensemble_size", "write_quorum", "ack_quorum")


@dataclass(frozen=True)
class LedgerSelection:
    """Which ledgers of the snapshot a run checks: all of them, or those whose ensembles name `bookies`."""

    bookies: frozenset[str] | None = None

    @classmethod
    def naming(cls, bookies: Iterable[str]) -> LedgerSelection:
        return cls(frozenset(bookies))

    @property
    def complete(self) -> bool:
        """A run over every ledger: only such a run stands for the Auditor's checks and feeds the gauges."""
        return self.bookies is None

    def ledger_ids(self, segments: pa.Table) -> pa.Array | None:
        """The selected ledger ids among `segments` rows (None: every ledger)."""
        if self.bookies is None:
            return None
        if segments.num_rows == 0:
            return pa.array([], pa.int64())
        names = pc.list_flatten(segments.column("ensemble"))
        rows = pc.list_parent_indices(segments.column("ensemble"))
        hit = pc.is_in(names, pa.array(sorted(self.bookies), pa.string()))
        picked = pc.unique(pc.take(segments.column("ledger_id"), pc.filter(rows, hit)))
        return pc.cast(picked, pa.int64())


ALL = LedgerSelection()


def read_snapshot(
    warehouse: Warehouse | str,
    table: str,
    snapshot_id: str,
    columns: Sequence[str],
    max_rows: int | None = None,
) -> pa.Table | None:
    """One snapshot's rows of a table, read with Arrow from the current Delta version's files.

    Files whose snapshot_id statistics exclude it are skipped; None when the snapshot has more than
    `max_rows` rows (counted from the Delta log before reading anything).
    """
    uri, options = table_uri(warehouse, table), Warehouse.of(warehouse).options
    dt = open_delta(uri, options=options)
    files, rows = [], 0
    for row in pa.table(dt.get_add_actions(flatten=True)).to_pylist():
        low, high = row.get("min.snapshot_id"), row.get("max.snapshot_id")
        if low is not None and high is not None and not low <= snapshot_id <= high:
            continue
        files.append(row["path"])
        rows += int(row.get("num_records") or 0)
    if max_rows is not None and rows > max_rows:
        return None
    fs, paths = location.paths_within(uri, files, options=options)
    if not paths:
        schema = spec(table).schema
        return pa.table({c: pa.array([], schema.field(c).type) for c in columns})
    data = ds.dataset(paths, format="parquet", filesystem=fs)
    return data.to_table(columns=list(columns), filter=pc.field("snapshot_id") == snapshot_id)


def ledger_input(
    warehouse: Warehouse | str, snapshot_id: str, selection: LedgerSelection, max_ledgers: int | None
) -> pa.Table | None:
    """The selected ledgers with their ordered segments (LEDGER_INPUT_SCHEMA), joined on the driver with
    Arrow; None when the snapshot has more than `max_ledgers` ledgers (Spark joins them instead)."""
    ledgers = read_snapshot(warehouse, "ledgers", snapshot_id, LEDGER_COLUMNS, max_ledgers)
    if ledgers is None:
        return None
    segments = read_snapshot(warehouse, "ledger_segments", snapshot_id, SEGMENT_COLUMNS)
    assert segments is not None
    wanted = selection.ledger_ids(segments)
    if wanted is not None:
        ledgers = ledgers.filter(pc.is_in(ledgers.column("ledger_id"), wanted))
        segments = segments.filter(pc.is_in(segments.column("ledger_id"), wanted))
    return join_segments(_sized(ledgers), segments)


def _sized(ledgers: pa.Table) -> pa.Table:
    """`raw_metadata` reduced to `raw_size` (the ledger pass needs only its length)."""
    raw = ledgers.column("raw_metadata")
    return ledgers.drop_columns(["raw_metadata"]).append_column(
        "raw_size", pc.cast(pc.utf8_length(raw), pa.int32())
    )


LEDGERS_PER_TASK = 100_000
"""At most this many ledgers per ledger-pass task. A fan-out task concatenates its partition's requests and
holds them, grouped by bookie, as Python lists: with one task per core that structure grew with the
cluster (500,000 ledgers per task at 1M). The number of tasks grows instead, so this structure does not.
(It was not the whole story: the largest Python worker still peaked near 1 GB at 1M after this change,
during the fan-out; docs/performance.md "Memory".)"""


def ledger_pass_tasks(ledgers: int, *, cores: int) -> int:
    """How many ledger-pass tasks (staged input files) for `ledgers`: one per thousand ledgers up to one per
    core, and always enough that none has more than LEDGERS_PER_TASK."""
    return max(1, min(cores, ledgers // 1000 + 1), -(-ledgers // LEDGERS_PER_TASK))


def stage_ledger_input(
    table: pa.Table, directory: str, parts: int, *, options: StorageOptions | None
) -> list[str]:
    """Write the ledger input as `parts` files (one per ledger-pass task), in the store of `options`."""
    location.makedirs(directory)
    paths = []
    step = -(-table.num_rows // parts) if table.num_rows else 1
    for k in range(parts):
        path = f"{directory}/part-{k:05d}.parquet"
        fs, rel = location.filesystem(path, options=options)
        pq.write_table(table.slice(k * step, step), rel, filesystem=fs)
        paths.append(path)
    return paths


def ensemble_loads(table: pa.Table) -> dict[str, int]:
    """How many ledgers name each bookie in their ensembles (the fan-out's expected load per bookie)."""
    if not table.num_rows:
        return {}
    names = pc.list_flatten(pc.struct_field(pc.list_flatten(table.column("segments")), "ensemble"))
    return {item["values"]: int(item["counts"]) for item in pc.value_counts(names).to_pylist()}


INDEX_ENTRIES_PER_PAGE = 1024
"""Entries per index page of a Java bookie on Interleaved/SortedLedgerStorage (pageSize 8 KiB / 8 bytes per
offset: IndexInMemPageMgr's entriesPerPage at BookKeeper's default pageSize)."""


def listing_pages(table: pa.Table) -> dict[str, int]:
    """Per bookie, the index pages a listing of every ledger naming it reads on a Java bookie: its listing
    walks the ledger's index file from entry 0 (IndexInMemPageMgr.PageEntriesIterableImpl), one page per
    1,024 entries up to the last. Counted from the ledger's last entry (an upper bound for a bookie that
    stores fewer), once per ledger however many segments name the bookie; an open ledger counts one page."""
    if not table.num_rows:
        return {}
    segments = table.column("segments").combine_chunks()
    flat = pc.list_flatten(segments)
    ensembles = pc.struct_field(flat, "ensemble")
    names = pc.list_flatten(ensembles)
    ledger_of_name = pc.take(pc.list_parent_indices(segments), pc.list_parent_indices(ensembles))
    last = pc.fill_null(table.column("last_entry_id").combine_chunks(), -1)
    pages = pc.add(pc.divide(pc.max_element_wise(last, 0), INDEX_ENTRIES_PER_PAGE), 1)
    pairs = pa.table({"ledger": ledger_of_name, "bookie": names}).group_by(["ledger", "bookie"]).aggregate([])
    per_pair = pa.table({"bookie": pairs.column("bookie"), "pages": pc.take(pages, pairs.column("ledger"))})
    summed = per_pair.group_by("bookie").aggregate([("pages", "sum")])
    return dict(zip(summed.column("bookie").to_pylist(), summed.column("pages_sum").to_pylist(), strict=True))


def quorums_of(
    warehouse: Warehouse | str, snapshot_id: str, ledger_ids: Iterable[int]
) -> dict[int, dict[str, int]]:
    """Each ledger's quorum columns from the snapshot's `ledgers` rows (they never change after creation)."""
    wanted = sorted(set(ledger_ids))
    if not wanted:
        return {}
    ledgers = read_snapshot(warehouse, "ledgers", snapshot_id, ["ledger_id", *QUORUM_COLUMNS])
    assert ledgers is not None
    ledgers = ledgers.filter(pc.is_in(ledgers.column("ledger_id"), pa.array(wanted, pa.int64())))
    return {r.pop("ledger_id"): r for r in ledgers.to_pylist()}


def staging_dir(warehouse: Warehouse | str, run_id: str) -> str:
    return location.join(Warehouse.of(warehouse).uri, "_checker_staging", run_id)


def remove_staging(path: str, *, options: StorageOptions | None) -> None:
    """Delete a run's staging directory, and the staging root when no other run uses it."""
    if not location.is_local(path):
        location.remove_tree(path, options=options)
        return
    shutil.rmtree(path, ignore_errors=True)
    try:
        os.rmdir(os.path.dirname(path))  # only succeeds when empty (no concurrent run)
    except OSError:
        pass


def shapes_of(
    warehouse: Warehouse | str, snapshot_id: str, ledger_ids: Iterable[int]
) -> dict[int, dict[str, object]]:
    """SHAPE_SCHEMA rows of a few ledgers, by id (read with Arrow, joined like the ledger input)."""
    wanted = pa.array(sorted(set(ledger_ids)), pa.int64())
    ledgers = read_snapshot(warehouse, "ledgers", snapshot_id, LEDGER_COLUMNS)
    segments = read_snapshot(warehouse, "ledger_segments", snapshot_id, SEGMENT_COLUMNS)
    assert ledgers is not None and segments is not None
    ledgers = ledgers.filter(pc.is_in(ledgers.column("ledger_id"), wanted))
    segments = segments.filter(pc.is_in(segments.column("ledger_id"), wanted))
    return shape_rows(join_segments(_sized(ledgers), segments), wanted)


def shape_rows(table: pa.Table, wanted: pa.Array) -> dict[int, dict[str, object]]:
    """SHAPE_SCHEMA rows of the ledger input's rows with ids in `wanted`, by id."""
    picked = table.filter(pc.is_in(table.column("ledger_id"), wanted)).select(SHAPE_SCHEMA.names)
    return {int(r["ledger_id"]): r for r in picked.to_pylist()}
