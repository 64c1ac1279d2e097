"""What a checker run reads before asking any bookie: the snapshot it checks (`resolve_snapshot`) and the
selected ledgers of it with the snapshot's small tables (`load_inputs` -> `RunInputs`), joined on the driver
with Arrow up to DRIVER_INPUT_MAX_LEDGERS and on Spark beyond."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from bkaudit.errors import BkAuditError
from bkaudit.job.fanout import shape_of
from bkaudit.job.inputs import (
    INDEX_ENTRIES_PER_PAGE,
    LedgerSelection,
    ledger_input,
    ledger_pass_tasks,
    listing_pages,
    shape_rows,
    shapes_of,
    stage_ledger_input,
)
from bkaudit.job.ledger_pass import LEDGER_INPUT_SCHEMA
from bkaudit.job.read_evidence import PROBE_SCAN_LEDGERS
from bkaudit.model.shape import CLOSED, LedgerShape
from bkaudit.spark.checker_run import RunContext
from bkaudit.spark.snapshot import run_snapshot
from bkaudit.tables.read import latest_snapshot_id, read_arrow, snapshot_versions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from bkaudit.tables.location import Warehouse

DRIVER_INPUT_MAX_LEDGERS = 2_000_000
"""Up to this many ledgers in the snapshot, the driver joins ledgers and segments with Arrow."""


def resolve_snapshot(spark: SparkSession, ctx: RunContext) -> str:
    """The snapshot to check: the given one (must have succeeded), a fresh one, or the latest successful."""
    options = ctx.options
    if options.fresh:
        ctx.say("taking a fresh snapshot")
        return str(run_snapshot(spark, ctx.settings, warehouse=options.warehouse).snapshot_id)
    if options.snapshot_id:
        snapshot_versions(options.warehouse, options.snapshot_id)  # NoSnapshot unless it succeeded
        return options.snapshot_id
    latest = latest_snapshot_id(options.warehouse)
    if latest is None:
        raise BkAuditError(
            f"no successful snapshot in {options.warehouse}: run `bkaudit snapshot` first or pass --fresh"
        )
    return latest


@dataclass(frozen=True)
class RunInputs:
    """The selected ledgers of the snapshot (staged for the ledger pass, or as a Spark frame), and the
    snapshot's small tables (bookies; markers of the selected ledgers)."""

    snapshot_id: str
    bookies: pa.Table
    markers: pa.Table
    table: pa.Table | None
    """The ledger input joined on the driver (None: too large, joined on Spark)."""
    files: list[str] | None
    frame: Callable[[], DataFrame]
    """The ledger input as a Spark frame (lazy; used when `files` is None, and by the Spark combine)."""

    def closed_sample(self) -> list[pa.RecordBatch]:
        """Closed ledgers with entries, in a stable order, at most `PROBE_SCAN_LEDGERS`: what each bookie's
        evidence probe picks its ledgers from (`read_evidence.probe_targets`)."""
        if self.table is not None:  # only the sample's rows are copied, not every closed ledger's
            rows = pc.indices_nonzero(_closed_with_entries(self.table))
            order = pc.sort_indices(pc.take(self.table.column("ledger_id"), rows))[:PROBE_SCAN_LEDGERS]
            head: pa.Table = self.table.take(pc.take(rows, order))
            return list(head.to_batches(max_chunksize=10_000))
        from pyspark.sql import functions as F  # optional pyspark (see checker._check)

        frame = self.frame().where((F.col("state") == CLOSED) & (F.col("last_entry_id") >= 0))
        sample: pa.Table = frame.orderBy("ledger_id").limit(PROBE_SCAN_LEDGERS).toArrow()
        return list(sample.to_batches(max_chunksize=10_000))

    def listing_pages(self) -> dict[str, int]:
        """Per bookie, the index pages listing its ledgers reads on a Java bookie (`inputs.listing_pages`)."""
        if self.table is not None:
            return listing_pages(self.table)
        from pyspark.sql import functions as F  # optional pyspark (see checker._check)

        pages = F.floor(F.greatest(F.coalesce(F.col("last_entry_id"), F.lit(-1)), F.lit(0))
                        / INDEX_ENTRIES_PER_PAGE) + 1
        bookies = F.explode(F.flatten(F.col("segments.ensemble"))).alias("bookie")
        pairs = self.frame().select("ledger_id", pages.alias("pages"), bookies).distinct()
        rows = pairs.groupBy("bookie").agg(F.sum("pages").alias("pages")).collect()
        return {str(r["bookie"]): int(r["pages"]) for r in rows}

    def open_ledgers(self) -> pa.Table:
        """The ledger input rows of ledgers that are not closed (LEDGER_INPUT_SCHEMA)."""
        if self.table is not None:
            state = self.table.column("state")
            return self.table.filter(pc.invert(pc.fill_null(pc.equal(state, CLOSED), False)))
        from pyspark.sql import functions as F  # optional pyspark (see checker._check)

        frame = self.frame().where(F.col("state").isNull() | (F.col("state") != CLOSED))
        return frame.toArrow().cast(LEDGER_INPUT_SCHEMA)

    def shapes(self, ledger_ids: Sequence[int], warehouse: Warehouse) -> dict[int, LedgerShape]:
        """The shapes of a few ledgers of the input, by id (from the driver's table, else the snapshot)."""
        wanted = pa.array(sorted(set(ledger_ids)), pa.int64())
        rows = shape_rows(self.table, wanted) if self.table is not None else shapes_of(
            warehouse, self.snapshot_id, ledger_ids)
        return {i: shape_of(r) for i, r in rows.items()}


def _closed_with_entries(table: pa.Table) -> pa.ChunkedArray:
    closed = pc.fill_null(pc.equal(table.column("state"), CLOSED), False)
    return pc.and_(closed, pc.fill_null(pc.greater_equal(table.column("last_entry_id"), 0), False))


def load_inputs(
    spark: SparkSession, ctx: RunContext, snapshot_id: str, selection: LedgerSelection
) -> RunInputs:
    from bkaudit.spark.checker_stages import ledger_input_frame  # optional pyspark (see checker._check)

    wh = ctx.warehouse
    bookies = read_arrow(wh, "bookies", snapshot_id=snapshot_id)
    markers = read_arrow(wh, "underreplicated_ledgers", snapshot_id=snapshot_id)
    table = ledger_input(wh, snapshot_id, selection, DRIVER_INPUT_MAX_LEDGERS)
    files = None
    if table is not None:
        cores = max(1, spark.sparkContext.defaultParallelism)
        files = stage_ledger_input(
            table, f"{ctx.staging}/ledger-input", ledger_pass_tasks(table.num_rows, cores=cores),
            options=wh.options,
        )
        if not selection.complete:
            markers = markers.filter(pc.is_in(markers.column("ledger_id"), table.column("ledger_id")))
    elif not selection.complete:
        ids = ledger_input_frame(spark, wh, snapshot_id, selection).select("ledger_id").toArrow()
        markers = markers.filter(pc.is_in(markers.column("ledger_id"), ids.column("ledger_id")))

    def frame() -> DataFrame:
        return ledger_input_frame(spark, wh, snapshot_id, selection)

    return RunInputs(snapshot_id, bookies, markers, table, files, frame)
