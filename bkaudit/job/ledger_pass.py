"""The ledger pass (Spark `mapInArrow` over every ledger with its segments): findings of the ledger's own
metadata, and the requests of the bookie fan-out.

Per ledger: metadata BookKeeper would refuse → `metadata_unparseable`; placement of every segment's ensemble
→ `placement_fail` / `placement_soft`; and one request row per (ledger, bookie) that must hold entries. The
requests flow straight into the fan-out in the same Spark job; findings and counts go to side files that
`read_side_output` collects on the driver.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bkaudit.audit.metadata import MetadataCheck, MetadataRecord
from bkaudit.audit.reads import plan_reads
from bkaudit.job.cluster_view import PlacementInputs
from bkaudit.job.expected import ExpectedDigests
from bkaudit.job.fanout import REQUEST_SCHEMA, SHAPE_SCHEMA
from bkaudit.job.findings import FINDING_SCHEMA, Located, finding_row, located_of
from bkaudit.model.shape import LedgerShape
from bkaudit.tables import location
from bkaudit.tables.location import StorageOptions

SIDE_SCHEMA = pa.schema([pa.field("kind", pa.string()), *FINDING_SCHEMA])
"""What the ledger pass writes next to its output: kind 'finding' (FINDING_SCHEMA columns) or 'stats' (one
per task: ledgers, ledgers with checked entries and entries, as JSON in `detail`)."""

LEDGER_INPUT_SCHEMA = pa.schema(
    [
        *SHAPE_SCHEMA,
        pa.field("parse_error", pa.string()),
        pa.field("raw_size", pa.int32()),
        pa.field("digest_type", pa.string()),
    ]
)


def _requests_batch(
    ledger: list[int],
    bookie: list[str],
    digests: list[bytes | None],
    entries: list[int],
    reads: list[list[int] | None] | None = None,
    types: list[str | None] | None = None,
    sizes: list[int] | None = None,
    lasts: list[int | None] | None = None,
) -> pa.RecordBatch:
    n = len(ledger)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(bookie, pa.string()),
            pa.array(ledger, pa.int64()),
            pa.array(digests, pa.binary()),
            pa.array(entries, pa.int64()),
            pa.array(reads if reads is not None else [None] * n, pa.list_(pa.int64())),
            pa.array(types if types is not None else [None] * n, pa.string()),
            pa.array(sizes if sizes is not None else [None] * n, pa.int64()),
            pa.array(lasts if lasts is not None else [None] * n, pa.int64()),
        ],
        schema=REQUEST_SCHEMA,
    )


def write_side_file(
    directory: str, table: pa.Table, name: str | None = None, *, options: StorageOptions | None
) -> None:
    """Write a task's side output as `part-<partition>.parquet`, replacing an earlier attempt's file.

    The ledger pass is deterministic, so a re-run task writes the same rows under the same name; on a local
    file system the file appears atomically (temp file + rename).
    """
    if name is None:
        try:
            from pyspark import TaskContext

            ctx = TaskContext.get()
            part = f"{ctx.partitionId():05d}" if ctx is not None else "local"
        except ImportError:
            part = "local"
        name = f"part-{part}"
    name = f"{name}.parquet"
    if not location.is_local(directory):
        fs, root = location.filesystem(directory, options=options)
        with fs.open_output_stream(f"{root}/{name}") as out:
            pq.write_table(table, out)
        return
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, os.path.join(directory, name))


_SCALARS = (
    "ledger_id",
    "ensemble_size",
    "write_quorum",
    "ack_quorum",
    "state",
    "last_entry_id",
    "znode_version",
    "znode_mzxid",
    "managed_ledger",
    "parse_error",
    "raw_size",
    "digest_type",
)


def iter_shapes(batch: pa.RecordBatch) -> Iterator[tuple[dict[str, Any], LedgerShape | None]]:
    """(scalar columns of the row, its LedgerShape or None when unparseable) for a LEDGER_INPUT batch.

    Column-wise extraction: nested segment lists are flattened once per batch with Arrow kernels instead of
    converting every row to nested Python dicts (the ledger pass touches every ledger of the cluster).
    """
    cols = {name: batch.column(name).to_pylist() for name in _SCALARS}
    segs = batch.column("segments")
    seg_counts = pc.fill_null(pc.list_value_length(segs), 0).to_pylist()
    flat = pc.list_flatten(segs)
    seg_index = flat.field("segment_index").to_pylist()
    firsts = flat.field("first_entry_id").to_pylist()
    ensembles = flat.field("ensemble")
    ens_counts = pc.fill_null(pc.list_value_length(ensembles), 0).to_pylist()
    names = pc.list_flatten(ensembles).to_pylist()
    ens_start = [0] * (len(ens_counts) + 1)
    for i, c in enumerate(ens_counts):
        ens_start[i + 1] = ens_start[i] + c
    cursor = 0
    for r in range(batch.num_rows):
        row = {name: cols[name][r] for name in _SCALARS}
        k = seg_counts[r]
        if row["parse_error"]:
            cursor += k
            yield row, None
            continue
        items = [
            (seg_index[j], firsts[j], names[ens_start[j] : ens_start[j + 1]])
            for j in range(cursor, cursor + k)
        ]
        cursor += k
        shape = LedgerShape.of(
            ledger_id=row["ledger_id"],
            ensemble_size=row["ensemble_size"],
            write_quorum=row["write_quorum"],
            ack_quorum=row["ack_quorum"],
            state=row["state"],
            last_entry_id=row["last_entry_id"],
            segments=items,
            version=row["znode_version"],
        )
        yield row, shape


@dataclass(frozen=True)
class ReadEvidencePlan:
    """Which bookies are verified by reads in this run, and how (picklable: shipped to the ledger pass)."""

    bookies: frozenset[str] = frozenset()
    percentage: float = 0.0
    seed: str = ""


def ledger_pass_partition(
    plan: LedgerPassPlan, side_name: str | None = None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """One pass over every ledger: LEDGER_INPUT_SCHEMA rows in, REQUEST_SCHEMA rows out.

    Findings and the task's counts go to a side file in `side_dir` (SIDE_SCHEMA), so the requests can flow
    straight into the bookie fan-out in the same Spark job.

    Per ledger: unparseable metadata or metadata BookKeeper would refuse → `metadata_unparseable`; otherwise
    placement of every segment, and one request row per (ledger, bookie) that must hold entries. Ledgers
    that are not closed get requests for every segment, the last one up to `open_ends` (the LAC the run
    established: `LedgerShape.open_end`), unless `check_open_ledgers` is off (then none, as BookKeeper's
    replicas check). A bookie in `reads.bookies` gets the entries to read (LedgerChecker's choice) instead of
    a digest.
    """
    read_plan = plan.reads

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        placement = plan.placement.check(plan.writable)
        metadata = MetadataCheck()
        digests = ExpectedDigests()
        ledgers = durable = entries = 0
        side: list[dict[str, Any]] = []
        for batch in batches:
            findings: list[dict[str, Any]] = []
            req_ledger: list[int] = []
            req_bookie: list[str] = []
            req_digest: list[bytes | None] = []
            req_entries: list[int] = []
            req_reads: list[list[int] | None] = []
            req_types: list[str | None] = []
            req_sizes: list[int] = []
            req_lasts: list[int | None] = []
            for row, shape in iter_shapes(batch):
                ledgers += 1
                version = row["znode_version"]
                if shape is None:
                    record = MetadataRecord(
                        int(row["ledger_id"]),
                        parse_error=row["parse_error"],
                        raw_size=row["raw_size"],
                        version=version,
                    )
                    found = metadata.evaluate(record)
                    problems = True
                else:
                    found = metadata.evaluate(MetadataRecord(shape.ledger_id, shape=shape, version=version))
                    problems = bool(found)
                    if not problems:
                        found = placement.evaluate(shape)
                for f in found:
                    loc = Located(f.stamped(version), version, row["znode_mzxid"],
                                  row["managed_ledger"])
                    findings.append({"kind": "finding", **finding_row(loc)})
                if problems or shape is None or (not shape.closed and not plan.check_open_ledgers):
                    continue
                if not shape.closed:
                    shape = shape.with_open_end(plan.open_ends.get(shape.ledger_id))
                wanted, n = digests.expected_requests(shape)
                if not wanted:
                    continue
                durable += 1
                entries += n
                first = True
                for bookie, want in wanted.items():
                    req_sizes.append(want.size)
                    req_lasts.append(want.last_entry)
                    req_ledger.append(shape.ledger_id)
                    req_bookie.append(bookie)
                    req_entries.append(n if first else 0)
                    req_types.append(row["digest_type"])
                    first = False
                    if bookie in read_plan.bookies:
                        chosen = plan_reads(shape, bookie, read_plan.percentage, seed=read_plan.seed)
                        req_digest.append(None)
                        req_reads.append(list(chosen.entries))
                    else:
                        req_digest.append(want.digest)
                        req_reads.append(None)
            if req_ledger:
                yield _requests_batch(req_ledger, req_bookie, req_digest, req_entries, req_reads, req_types,
                                      req_sizes, req_lasts)
            side.extend(findings)
        stats = {"ledgers": ledgers, "durability_ledgers": durable, "entries": entries,
                 "bookkeeper_placement_only": placement.bookkeeper_only}
        side.append({"kind": "stats", "detail": json.dumps(stats)})
        write_side_file(plan.side_dir, pa.Table.from_pylist(side, schema=SIDE_SCHEMA), side_name,
                        options=plan.storage_options)

    return run



def read_requests(
    failed: pa.Table, shapes: Mapping[int, LedgerShape], *, percentage: float, seed: str
) -> pa.Table:
    """REQUEST rows verifying `failed` (listing requests of bookies that switched to reads during the run) by
    reads instead: each row gets LedgerChecker's entry choice for its (ledger, bookie), as the ledger pass
    gives a bookie in `ReadEvidencePlan.bookies`. Rows of a ledger without a shape are dropped (none: the
    ledger pass made a request only for shapes)."""
    keep: list[dict[str, Any]] = []
    for row in failed.select(REQUEST_SCHEMA.names).to_pylist():
        shape = shapes.get(int(row["ledger_id"]))
        if shape is None:
            continue
        chosen = plan_reads(shape, str(row["bookie_id"]), percentage, seed=seed)
        keep.append({**row, "expected_digest": None, "read_entries": list(chosen.entries)})
    return pa.Table.from_pylist(keep, schema=REQUEST_SCHEMA)


def ledger_pass_files(
    plan: LedgerPassPlan, files: Sequence[str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ledger pass over staged LEDGER_INPUT files: rows of (`id`, an index into `files`) in,
    REQUEST_SCHEMA rows out.

    Each task reads its input files with Arrow, so the ledgers never travel through the JVM before the
    requests are built (the JVM's first scan, aggregation and join of a run cost seconds on a cold session).
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column("id").to_pylist():
                path = files[index]
                name = os.path.basename(path).rsplit(".", 1)[0]
                fs, rel = location.filesystem(path, options=plan.storage_options)
                table = pq.read_table(rel, filesystem=fs)
                inner = ledger_pass_partition(plan, side_name=name)
                yield from inner(iter(table.cast(LEDGER_INPUT_SCHEMA).to_batches(max_chunksize=10_000)))

    return run



def join_segments(ledgers: pa.Table, segments: pa.Table) -> pa.Table:
    """LEDGER_INPUT rows with Arrow kernels: each ledger row gets its segments as an ordered list.

    `ledgers` carries the scalar columns (raw_metadata already reduced to `raw_size`); `segments` has
    ledger_id, segment_index, first_entry_id, ensemble. A ledger without segment rows gets an empty list.
    """
    segs = segments.sort_by([("ledger_id", "ascending"), ("segment_index", "ascending")])
    ids = segs.column("ledger_id").combine_chunks()
    struct_type = LEDGER_INPUT_SCHEMA.field("segments").type.value_type
    if len(ids):
        ree = pc.run_end_encode(ids)
        ends = ree.run_ends.cast(pa.int32()).to_pylist()
        offsets = pa.array([0, *ends], pa.int32())
        values = pa.StructArray.from_arrays(
            [segs.column(f.name).combine_chunks().cast(f.type) for f in struct_type],
            fields=list(struct_type),
        )
        lists = pa.ListArray.from_arrays(offsets, values)
        position = pc.index_in(ledgers.column("ledger_id"), value_set=ree.values)
        column = lists.take(position)
    else:
        column = pa.nulls(ledgers.num_rows, LEDGER_INPUT_SCHEMA.field("segments").type)
    table = ledgers.append_column("segments", column)
    if "digest_type" not in table.column_names:  # inputs from before the reads evidence
        table = table.append_column("digest_type", pa.nulls(table.num_rows, pa.string()))
    return table.select(LEDGER_INPUT_SCHEMA.names).cast(LEDGER_INPUT_SCHEMA)


@dataclass(frozen=True)
class LedgerPassPlan:
    """Everything a ledger-pass task needs (picklable: shipped to the executors in the closure)."""

    placement: PlacementInputs
    writable: frozenset[str]
    check_open_ledgers: bool
    side_dir: str
    storage_options: StorageOptions = field(default_factory=dict, repr=False)
    """The store of `side_dir` and the staged input (the warehouse's): the tasks get them here, not from their
    environment."""
    reads: ReadEvidencePlan = field(default_factory=ReadEvidencePlan)
    open_ends: Mapping[int, int] = field(default_factory=dict)
    """Ledger → the last entry of its open segment checked in this run (`LedgerShape.open_end`)."""


@dataclass(frozen=True)
class LedgerPassOutput:
    """What the ledger pass wrote next to its requests: its findings and counts."""

    located: list[Located]
    ledgers: int = 0
    durability_ledgers: int = 0
    entries: int = 0
    bookkeeper_placement_only: int = 0


def read_side_output(side_dir: str, *, options: StorageOptions | None) -> LedgerPassOutput:
    """Collect the side files of every ledger-pass task (driver)."""
    located: list[Located] = []
    counts = {"ledgers": 0, "durability_ledgers": 0, "entries": 0, "bookkeeper_placement_only": 0}
    if not location.exists(side_dir, options=options):
        return LedgerPassOutput(located)
    for row in location.read_parquet(side_dir, options=options, schema=SIDE_SCHEMA).to_pylist():
        if row["kind"] == "stats":
            stats = json.loads(row["detail"])
            for key in counts:
                counts[key] += int(stats.get(key, 0))
        else:
            located.append(located_of(row))
    return LedgerPassOutput(located, **counts)
