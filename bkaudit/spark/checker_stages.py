"""The checker's Spark stages: the ledger pass feeding the bookie fan-out (with BP-34's delayed re-check), and
the per-ledger combine when too many ledgers need it for the driver. Each stage takes its inputs as arguments
and returns what the next phase needs; the work inside the tasks is `bkaudit.job` code.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from bkaudit.audit.statuses import ANSWERED, STATUS_NO_LEDGER
from bkaudit.job.bookie_stats import CALL_LOG_COLUMNS
from bkaudit.job.combine import COMBINE_SCHEMA, combine_answers, combine_partition
from bkaudit.job.fanout import REQUEST_SCHEMA, RESPONSE_SCHEMA, SHAPE_SCHEMA, FanoutConfig
from bkaudit.job.fanout_task import fanout_partition
from bkaudit.job.findings import FINDING_SCHEMA, Located, located_of
from bkaudit.job.inputs import LedgerSelection
from bkaudit.job.ledger_pass import (
    LEDGER_INPUT_SCHEMA,
    LedgerPassPlan,
    ledger_pass_files,
    ledger_pass_partition,
)
from bkaudit.tables import location
from bkaudit.tables import read as table_read
from bkaudit.tables.location import StorageOptions, Warehouse


def ledger_input_frame(
    spark: SparkSession, warehouse: Warehouse | str, snapshot_id: str, selection: LedgerSelection
) -> DataFrame:
    """Every selected ledger row with its ordered segments (LEDGER_INPUT_SCHEMA), joined on Spark (snapshots
    too large for the driver's Arrow join)."""
    segments = table_read.load(spark, warehouse, "ledger_segments", snapshot_id=snapshot_id)
    ledgers = table_read.load(spark, warehouse, "ledgers", snapshot_id=snapshot_id)
    if selection.bookies is not None:
        wanted = F.array(*[F.lit(b) for b in sorted(selection.bookies)])
        ids = segments.where(F.arrays_overlap("ensemble", wanted)).select("ledger_id").distinct()
        segments = segments.join(ids, "ledger_id", "left_semi")
        ledgers = ledgers.join(ids, "ledger_id", "left_semi")
    segs = segments.groupBy("ledger_id").agg(
        F.sort_array(F.collect_list(F.struct("segment_index", "first_entry_id", "ensemble"))).alias(
            "segments"
        )
    )
    cols = [f.name for f in SHAPE_SCHEMA if f.name != "segments"]
    ledgers = ledgers.select(
        *cols, "parse_error", F.length("raw_metadata").cast("int").alias("raw_size"), "digest_type"
    )
    return ledgers.join(segs, "ledger_id", "left").select(*LEDGER_INPUT_SCHEMA.names)


def ledger_pass_stage(
    spark: SparkSession,
    plan: LedgerPassPlan,
    source: Sequence[str] | DataFrame,
    *,
    fanout: FanoutConfig | None = None,
) -> DataFrame:
    """The ledger pass (lazy) over staged input files (one task each) or a Spark frame of ledger input:
    REQUEST rows.

    With `fanout`, each task also asks the bookies for its own requests, as they are produced (RESPONSE rows):
    no shuffle by bookie between the two (`FUSED_FANOUT_MAX_BOOKIES` says when the checker does this).
    """
    if isinstance(source, DataFrame):
        frame, task = source, ledger_pass_partition(plan)
    else:
        frame = spark.range(0, len(source), 1, max(1, len(source)))
        task = ledger_pass_files(plan, list(source))
    if fanout is None:
        return frame.mapInArrow(task, from_arrow_schema(REQUEST_SCHEMA))
    ask = fanout_partition(fanout)
    return frame.mapInArrow(lambda batches: ask(task(batches)), from_arrow_schema(RESPONSE_SCHEMA))


@dataclass
class FanoutOutput:
    """The fan-out's answers: final responses (Spark over the staged files), the call log of every attempt,
    the ledgers whose evidence needs the per-ledger combine, and the bookies that switched to reads."""

    final: DataFrame | None
    calls: pa.Table
    needs_combine: set[int] = field(default_factory=set)
    response_paths: list[str] = field(default_factory=list)
    switched: dict[str, str] = field(default_factory=dict)
    """Bookie → why, for bookies verified by reads from some attempt on (listing stopped answering)."""


Fallback = Callable[[pa.Table], tuple[dict[str, str], pa.Table]]
"""An attempt's failed rows (REQUEST columns and status) → (bookies that switch to reads, with why; the
REQUEST rows verifying their failed listing requests by reads instead)."""


def fanout_stage(
    spark: SparkSession,
    requests: DataFrame | None,
    *,
    fused: Callable[[FanoutConfig], DataFrame] | None = None,
    config: Callable[[int], FanoutConfig],
    retry_attempts: int,
    retry_delay_s: float,
    partitions_per_bookie: int,
    loads: Mapping[str, int],
    staging: str,
    options: StorageOptions | None,
    say: Callable[[str], None],
    fallback: Fallback | None = None,
) -> FanoutOutput:
    """Requests → responses, with BP-34's delayed re-check of failures.

    The answers of each attempt are written to staging files at once (Spark may re-run tasks; the calls are
    read-only and never repeated downstream). A ledger needs the per-ledger combine when an answer differs
    from the expected entries, is ENOLEDGER, or a bookie never answered. `fused`: the first attempt's
    answers straight from the ledger pass's tasks (`ledger_pass_stage(fanout=...)`), instead of `requests`
    repartitioned by bookie; the re-checks always go by bookie. `fallback`: after each attempt with
    failures, which bookies switch to reads (their listing went unanswered while they answer reads); their
    failed listing requests are asked again as reads in the next attempt, one more than `retry_attempts`
    if need be (that attempt then carries only them).
    """
    if requests is None and fused is None:
        raise ValueError("the fan-out needs requests or a fused ledger pass")
    response_type = from_arrow_schema(RESPONSE_SCHEMA)
    pending = requests
    cores = max(1, spark.sparkContext.defaultParallelism)
    # a task serves several bookies from threads: no more tasks than the cores run at once
    partitions = max(1, min(len(loads) * partitions_per_bookie, cores))
    answered = F.col("status").isin(*sorted(ANSWERED))
    logs: list[pa.Table] = []
    interesting: set[int] = set()
    unanswered: set[int] = set()
    given_up: set[int] = set()
    paths: list[str] = []
    final: DataFrame | None = None
    last_failed: DataFrame | None = None
    carried: DataFrame | None = None
    switched: dict[str, str] = {}
    attempt = 0
    while True:
        path = f"{staging}/responses-{attempt}"
        if fused is not None and attempt == 0:
            answers = fused(config(attempt))
        else:
            assert pending is not None
            keyed = _keyed(pending, partitions, partitions_per_bookie, loads)
            answers = keyed.mapInArrow(fanout_partition(config(attempt)), response_type)
        answers.write.mode("overwrite").parquet(location.spark_uri(path))
        paths.append(path)
        table = location.read_parquet(
            path, options=options, columns=[*CALL_LOG_COLUMNS, "answer", "entries_missing", "entries_corrupt"]
        )
        ok = pc.is_in(table.column("status"), pa.array(sorted(ANSWERED)))
        differs = pc.or_(
            pc.equal(table.column("status"), STATUS_NO_LEDGER), pc.is_valid(table.column("answer"))
        )
        for bad in ("entries_missing", "entries_corrupt"):  # reads proved entries missing or corrupt
            proved = pc.fill_null(pc.list_value_length(table.column(bad)), 0)
            differs = pc.or_(differs, pc.greater(proved, 0))
        interesting |= set(table.filter(pc.and_(ok, differs)).column("ledger_id").to_pylist())
        unanswered = set(table.filter(pc.invert(ok)).column("ledger_id").to_pylist())
        logs.append(table.select(list(CALL_LOG_COLUMNS)))
        failed = table.num_rows - (pc.sum(ok).as_py() or 0)
        got = spark.read.schema(response_type).parquet(location.spark_uri(path))
        final = got.where(answered) if final is None else final.unionByName(got.where(answered))
        last_failed = got.where(~answered)
        switch: dict[str, str] = {}
        replacement: pa.Table | None = None
        if fallback is not None and failed:
            not_answered = ~pc.field("status").isin(sorted(ANSWERED))
            rows = location.read_parquet(path, options=options, columns=[*REQUEST_SCHEMA.names, "status"],
                                         filters=not_answered)
            switch, replacement = fallback(rows)
            switched.update(switch)
        if switch:
            say(f"{len(switch)} bookie(s) stopped answering listing while answering reads: verified by reads "
                f"from now on ({', '.join(sorted(switch))})")
            moved = F.col("bookie_id").isin(*sorted(switch)) & F.col("read_entries").isNull()
            kept = last_failed.where(~moved)
            as_reads = spark.createDataFrame(replacement, schema=from_arrow_schema(REQUEST_SCHEMA))
        retry = attempt < retry_attempts and failed > 0
        if not retry and not switch:
            break
        if retry:
            pending = (kept if switch else last_failed).select(*REQUEST_SCHEMA.names)
            if switch:
                pending = pending.unionByName(as_reads)
        else:  # only the switched bookies' requests are asked again, the other failures stand
            carried = kept if carried is None else carried.unionByName(kept)
            given_up |= unanswered
            pending = as_reads
        attempt += 1
        say(f"re-checking {failed} failed (ledger, bookie) calls in {retry_delay_s:g}s")
        time.sleep(retry_delay_s)
    if final is None or last_failed is None:
        empty = pa.table({c: pa.array([], RESPONSE_SCHEMA.field(c).type) for c in CALL_LOG_COLUMNS})
        return FanoutOutput(None, empty, interesting | unanswered, paths, switched)
    if carried is not None:
        last_failed = carried.unionByName(last_failed)
    return FanoutOutput(
        final.unionByName(last_failed), pa.concat_tables(logs), interesting | unanswered | given_up, paths,
        switched,
    )


def _keyed(
    pending: DataFrame, partitions: int, partitions_per_bookie: int, loads: Mapping[str, int]
) -> DataFrame:
    """Requests repartitioned for the fan-out: by bookie (and shard, with several partitions per bookie)."""
    if partitions_per_bookie > 1:
        shard = F.col("ledger_id") % partitions_per_bookie
        return (
            pending.withColumn("_shard", shard)
            .repartition(partitions, "bookie_id", "_shard")
            .drop("_shard")
        )
    return by_bookie(pending, partitions, loads)


def by_bookie(requests: DataFrame, partitions: int, loads: Mapping[str, int]) -> DataFrame:
    """Requests repartitioned so that each bookie's land in one task, tasks balanced by expected load
    (how many ledgers name the bookie; without a count every bookie weighs the same)."""
    slot_of = balance(loads, partitions)
    keys = partition_keys(partitions)
    mapping = F.create_map(
        *itertools.chain.from_iterable((F.lit(b), F.lit(keys[k])) for b, k in slot_of.items())
    )
    slot: Column = F.coalesce(mapping[F.col("bookie_id")], F.lit(keys[0]))
    return requests.withColumn("_slot", slot).repartition(partitions, "_slot").drop("_slot")


def combine_stage(
    spark: SparkSession,
    final: DataFrame,
    ids: Iterable[int],
    ledger_input: DataFrame,
    *,
    max_ranges: int,
    lost: frozenset[str],
    open_ends: Mapping[int, int],
) -> list[Located]:
    """The per-ledger combine on Spark (repartitioned and sorted by ledger), for many ledgers."""
    ids_table = pa.table({"ledger_id": pa.array(sorted(ids), pa.int64())})
    ids_df = F.broadcast(spark.createDataFrame(ids_table))
    rows = final.join(ids_df, "ledger_id", "left_semi")
    shapes = ledger_input.where(F.col("parse_error").isNull())
    shapes = shapes.join(ids_df, "ledger_id", "left_semi").select(*SHAPE_SCHEMA.names)
    joined = rows.join(shapes, "ledger_id").select(*COMBINE_SCHEMA.names)
    partitions = max(2, int(spark.conf.get("spark.sql.shuffle.partitions", "2") or "2"))
    table = (
        joined.repartition(partitions, "ledger_id")
        .sortWithinPartitions("ledger_id", "bookie_id")
        .mapInArrow(combine_partition(max_ranges, lost, open_ends), from_arrow_schema(FINDING_SCHEMA))
        .toArrow()
    )
    return [located_of(r) for r in table.to_pylist()]


def combine_on_driver(
    response_paths: Sequence[str],
    shapes: Mapping[int, Mapping[str, object]],
    ids: Iterable[int],
    *,
    max_ranges: int,
    lost: frozenset[str],
    open_ends: Mapping[int, int],
    options: StorageOptions | None,
) -> list[Located]:
    """The per-ledger combine on the driver: the staged answers of `ids`, read with Arrow."""
    wanted = pa.array(sorted(ids), pa.int64())
    answers = pa.concat_tables(
        location.read_parquet(path, options=options, filters=pc.is_in(pc.field("ledger_id"), wanted))
        .select(RESPONSE_SCHEMA.names)
        .cast(RESPONSE_SCHEMA)
        for path in response_paths
    )
    return combine_answers(answers, shapes, max_ranges=max_ranges, lost=lost, open_ends=open_ends)


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's `hash()` of an int column (Murmur3_x86_32.hashInt, seed 42), as a signed 32-bit int."""

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF

    k1 = (value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF
    k1 = rotl(k1, 15) * 0x1B873593 & 0xFFFFFFFF
    h1 = seed ^ k1
    h1 = (rotl(h1, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def partition_keys(partitions: int) -> list[int]:
    """For each partition k, an int that Spark's `repartition(partitions, col)` sends to partition k.

    Lets the job put chosen bookies into chosen fan-out tasks (balanced by load) instead of leaving it to
    the hash of the bookie id, which on few partitions often stacks most bookies on one task.
    """
    keys: list[int | None] = [None] * partitions
    value = 0
    while any(k is None for k in keys):
        slot = _murmur3_int(value) % partitions
        if keys[slot] is None:
            keys[slot] = value
        value += 1
    return [k for k in keys if k is not None]


def balance(loads: Mapping[str, int], partitions: int) -> dict[str, int]:
    """Bookie → partition, heaviest first onto the least loaded partition (greedy bin packing)."""
    totals = [0] * partitions
    out: dict[str, int] = {}
    for bookie, load in sorted(loads.items(), key=lambda kv: (-kv[1], kv[0])):
        k = min(range(partitions), key=lambda i: totals[i])
        out[bookie] = k
        totals[k] += max(load, 1)
    return out
