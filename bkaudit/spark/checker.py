"""Spark job 2: the cluster metadata checker (BP-34) over a snapshot, with a bookie fan-out.

Steps of one run (`run_check`; `jobs/metadata_checker.py` and `bkaudit check` both call it):

1. **snapshot**: the given `--snapshot-id`, the latest successful one, or a fresh one (`--fresh`); 2.
**ledger pass** (Spark, `mapInArrow` over every ledger with its segments): metadata BookKeeper would refuse
→
   `metadata_unparseable`; placement of every segment's ensemble → `placement_fail` / `placement_soft`; and
   one request row per (ledger, bookie) that must hold entries;
3. **fan-out** (Spark, `bkaudit.spark.fanout`): requests repartitioned by bookie, one batched GetListOfEntries
   per (ledger, bookie), decoded and compared on the executors; the answers are written to staging files at
   once (Spark may re-run tasks; the calls are read-only and never repeated downstream);
4. **delayed re-check** (BP-34): every (ledger, bookie) that failed is asked again after `retry_delay_s`;
5. **combine** (Spark): per ledger, the bookies' missing ranges → replica counts → `no_replica` /
   `below_ack_quorum` / `below_write_quorum`, `extra_entries`, `ledger_unverifiable`;
6. **re-read before reporting** (driver, rate-limited pipelined ZooKeeper reads): each ledger with a finding
is
   re-read; deleted → dropped; metadata changed → re-evaluated from the new metadata (its bookies asked
   again); marked under-replicated → kept as `under_repair` (not a new violation);
7. **progress and availability** (driver): overdue markers (re-read) → `underreplicated_too_long`; bookies
that
   stayed unreachable while registered → `bookie_unreachable_but_registered`;
8. **publish** (optional) into the under-replication queue, then **write** `violations`, `bookie_checks` and
   finally `audit_runs` (the visibility marker), each one Delta commit replacing this run_id's rows;
9. **metrics** (Prometheus text file and/or push gateway).

A failure at any step reverts what this run committed, deletes its staging files and records one `audit_runs`
row with status 'failed': nothing of a failed run is visible as violations.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from bkaudit.audit.availability import (
    REASON_METADATA_CHANGING,
    STATUS_NOT_REGISTERED,
    BookieAvailabilityCheck,
    BookieReport,
    LedgerAvailabilityCheck,
    is_transport_failure,
    latency_percentiles,
    unverifiable,
)
from bkaudit.audit.base import Category, Finding
from bkaudit.audit.classification import (
    FailOn,
    count_findings,
    count_under_repair,
    exit_code,
)
from bkaudit.audit.durability import (
    BookieEvidence,
    DurabilityCheck,
    LedgerShape,
    assess,
    expected_by_bookie,
    failed_evidence,
)
from bkaudit.audit.metadata import MetadataCheck, MetadataRecord
from bkaudit.audit.progress import Marker, ProgressCheck
from bkaudit.audit.reconcile import MarkerState, Recheck, ZnodeVersion, apply_marker, recheck
from bkaudit.audit.settings import CheckerSettings
from bkaudit.errors import BkAuditError, ConfigError, FormatError
from bkaudit.spark.fanout import (
    ANSWERED,
    EVIDENCE_LISTING,
    EVIDENCE_READS,
    REQUEST_SCHEMA,
    RESPONSE_SCHEMA,
    SHAPE_SCHEMA,
    ExpectedDigests,
    FanoutConfig,
    evidence_of_row,
    fanout_partition,
    probe_listing,
    query_bookie,
    read_and_verify,
    shape_of,
)
from bkaudit.tables import location
from bkaudit.tables.checker_schemas import AUDIT_RUNS, BOOKIE_CHECKS, RANGE_STRUCT, VIOLATIONS

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from pyspark.sql import DataFrame, SparkSession

    from bkaudit.config import Settings, ZkSettings
    from bkaudit.tables.store import Commit

log = logging.getLogger(__name__)

SUCCEEDED = "succeeded"
FAILED = "failed"
DRIVER_COMBINE_MAX = 20_000
DRIVER_INPUT_MAX_LEDGERS = 2_000_000
"""Up to this many ledgers in the snapshot, the driver joins ledgers and segments with Arrow."""
"""Up to this many ledgers needing the per-ledger combine, it runs on the driver (no shuffle)."""
_NON_TRANSPORT = frozenset(
    {
        "OK",
        "ENOLEDGER",
        "ENOENTRY",
        "EBADREQ",
        "EIO",
        "EUA",
        "EBADVERSION",
        "EFENCED",
        "EREADONLY",
        "ETOOMANYREQUESTS",
        "EUNKNOWNLEDGERSTATE",
        "INVALID_RESPONSE",
        "NOT_REGISTERED",
        "NOT_CHECKED",
    }
)
"""Statuses that prove the bookie answered (BookKeeper statuses and our own judgements of an answer)."""

FINDING_SCHEMA = pa.schema(
    [
        pa.field("ledger_id", pa.int64()),
        pa.field("category", pa.string()),
        pa.field("segment_index", pa.int32()),
        pa.field("bookie_id", pa.string()),
        pa.field("missing_entries", pa.list_(RANGE_STRUCT)),
        pa.field("min_replicas", pa.int32()),
        pa.field("detail", pa.string()),
        pa.field("znode_version", pa.int32()),
        pa.field("znode_mzxid", pa.int64()),
        pa.field("managed_ledger", pa.string()),
    ]
)
"""A finding on its way from the executors to the driver (before the re-read)."""


class CheckFailed(BkAuditError):
    """The run could not complete; its failure is recorded in `audit_runs` (status 'failed')."""

    def __init__(self, message: str, result: CheckResult) -> None:
        super().__init__(message)
        self.result = result


# -- findings <-> rows -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Located:
    """A finding with the znode version it was computed from and the ledger's managed ledger (Pulsar)."""

    finding: Finding
    version: int | None = None
    mzxid: int | None = None
    managed_ledger: str | None = None


def finding_row(
    f: Finding, version: int | None = None, mzxid: int | None = None, managed_ledger: str | None = None
) -> dict[str, Any]:
    return {
        "ledger_id": f.ledger_id,
        "category": f.category.value,
        "segment_index": f.segment_index,
        "bookie_id": f.bookie_id,
        "missing_entries": None
        if f.missing_entries is None
        else [{"first": lo, "last": hi} for lo, hi in f.missing_entries],
        "min_replicas": f.min_replicas,
        "detail": json.dumps(dict(f.detail), separators=(",", ":"), default=str),
        "znode_version": version,
        "znode_mzxid": mzxid,
        "managed_ledger": managed_ledger,
    }


def located_of(row: Mapping[str, Any]) -> Located:
    ranges = row.get("missing_entries")
    finding = Finding(
        category=Category(row["category"]),
        ledger_id=row.get("ledger_id"),
        segment_index=row.get("segment_index"),
        bookie_id=row.get("bookie_id"),
        missing_entries=None if ranges is None else tuple((int(r["first"]), int(r["last"])) for r in ranges),
        min_replicas=row.get("min_replicas"),
        detail=json.loads(row["detail"]) if row.get("detail") else {},
    )
    return Located(finding, row.get("znode_version"), row.get("znode_mzxid"), row.get("managed_ledger"))


# -- executor functions (picklable closures) -----------------------------------------------------------------


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
        ],
        schema=REQUEST_SCHEMA,
    )


def write_side_file(directory: str, table: pa.Table, name: str | None = None) -> None:
    """Write a task's side output as `part-<partition>.parquet`, replacing an earlier attempt's file.

    The ledger pass is deterministic, so a re-run task writes the same rows under the same name; on a local
    file system the file appears atomically (temp file + rename).
    """
    import uuid

    import pyarrow.parquet as pq

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
        fs, root = location.filesystem(directory)
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
    import pyarrow.compute as pc

    from bkaudit.model.ledger import Segment

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
            (seg_index[j], firsts[j], tuple(names[ens_start[j] : ens_start[j + 1]]))
            for j in range(cursor, cursor + k)
        ]
        cursor += k
        if any(items[i][0] > items[i + 1][0] for i in range(len(items) - 1)):
            items.sort()
        last = row["last_entry_id"]
        shape = LedgerShape(
            ledger_id=int(row["ledger_id"]),
            ensemble_size=int(row["ensemble_size"] or 0),
            write_quorum=int(row["write_quorum"] or 0),
            ack_quorum=int(row["ack_quorum"] or 0),
            closed=row["state"] == "CLOSED",
            last_entry_id=int(last if last is not None else -1),
            segments=tuple(Segment(int(first), ens) for _i, first, ens in items),
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
    policy: Any,
    topology: Any,
    policy_name: str,
    check_open_ledgers: bool,
    side_dir: str,
    side_name: str | None = None,
    writable: frozenset[str] | None = None,
    reads: ReadEvidencePlan | None = None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """One pass over every ledger: LEDGER_INPUT_SCHEMA rows in, REQUEST_SCHEMA rows out.

    Findings and the task's counts go to a side file in `side_dir` (SIDE_SCHEMA), so the requests can flow
    straight into the bookie fan-out in the same Spark job.

    Per ledger: unparseable metadata or metadata BookKeeper would refuse → `metadata_unparseable`; otherwise
    placement of every segment, and one request row per (ledger, bookie) that must hold entries. Open
    ledgers get requests for their closed segments unless `check_open_ledgers` is off (BookKeeper skips them).
    A bookie in `reads.bookies` gets the entries to read (LedgerChecker's choice) instead of a digest.
    """
    read_plan = reads or ReadEvidencePlan()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from bkaudit.audit.placement import PlacementCheck
        from bkaudit.audit.reads import plan_reads

        placement = PlacementCheck(policy, topology, policy_name, writable=writable)
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
                    f = f.with_detail(znode_version=version)
                    findings.append(
                        {
                            "kind": "finding",
                            **finding_row(f, version, row["znode_mzxid"], row["managed_ledger"]),
                        }
                    )
                if problems or shape is None or (not shape.closed and not check_open_ledgers):
                    continue
                wanted, n = digests.expected_requests(shape)
                if not wanted:
                    continue
                durable += 1
                entries += n
                first = True
                for bookie, (expected, size) in wanted.items():
                    req_sizes.append(size)
                    req_ledger.append(shape.ledger_id)
                    req_bookie.append(bookie)
                    req_entries.append(n if first else 0)
                    req_types.append(row["digest_type"])
                    first = False
                    if bookie in read_plan.bookies:
                        plan = plan_reads(shape, bookie, read_plan.percentage, seed=read_plan.seed)
                        req_digest.append(None)
                        req_reads.append(list(plan.entries))
                    else:
                        req_digest.append(expected)
                        req_reads.append(None)
            if req_ledger:
                yield _requests_batch(req_ledger, req_bookie, req_digest, req_entries, req_reads, req_types,
                                      req_sizes)
            side.extend(findings)
        stats = {"ledgers": ledgers, "durability_ledgers": durable, "entries": entries,
                 "bookkeeper_placement_only": placement.bookkeeper_only}
        side.append({"kind": "stats", "detail": json.dumps(stats)})
        write_side_file(side_dir, pa.Table.from_pylist(side, schema=SIDE_SCHEMA), side_name)

    return run


def refine_status(ev: BookieEvidence, registered: frozenset[str] | set[str]) -> BookieEvidence:
    """A transport failure of a bookie that is not registered is reported as such (the Auditor knows it)."""
    if ev.answered or ev.bookie_id in registered:
        return ev
    if is_transport_failure(ev.status):
        return failed_evidence(
            ev.bookie_id,
            STATUS_NOT_REGISTERED,
            f"not registered in ZooKeeper; call failed with {ev.status}: {ev.error}",
        )
    return ev


def ledger_findings(
    shape: LedgerShape,
    evidence: Iterable[BookieEvidence],
    *,
    max_ranges: int,
    registered: frozenset[str] | set[str],
) -> list[Finding]:
    """Durability, extra entries and unverifiable findings of one ledger from its bookies' evidence."""
    a = assess(shape, [refine_status(ev, registered) for ev in evidence])
    found = DurabilityCheck(max_ranges).findings(a)
    unverified = LedgerAvailabilityCheck().from_unverified(shape.ledger_id, a.unverified)
    found += [f.with_detail(**a.basis) for f in unverified]
    return [f.with_detail(znode_version=shape.version) for f in found]


COMBINE_SCHEMA = pa.schema([*SHAPE_SCHEMA, *(f for f in RESPONSE_SCHEMA if f.name not in SHAPE_SCHEMA.names)])
"""A response row with its ledger's shape: the input of the per-ledger combine."""


def combine_partition(
    max_ranges: int, registered: frozenset[str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """COMBINE rows sorted by ledger → FINDING rows (every row of a ledger must be in one partition).

    Answers that differed from the expected encoding are decoded here and compared with group arithmetic.
    """

    def flush(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        shape = shape_of(rows[0])
        found = ledger_findings(
            shape, (evidence_of_row(shape, r) for r in rows), max_ranges=max_ranges, registered=registered
        )
        head = rows[0]
        return [
            finding_row(f, head.get("znode_version"), head.get("znode_mzxid"), head.get("managed_ledger"))
            for f in found
        ]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        current: list[dict[str, Any]] = []
        out: list[dict[str, Any]] = []
        for batch in batches:
            for row in batch.to_pylist():
                if current and row["ledger_id"] != current[0]["ledger_id"]:
                    out.extend(flush(current))
                    current = []
                current.append(row)
            if len(out) >= 2048:
                yield pa.RecordBatch.from_pylist(out, schema=FINDING_SCHEMA)
                out = []
        if current:
            out.extend(flush(current))
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=FINDING_SCHEMA)

    return run


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


def ledger_pass_files(
    policy: Any,
    topology: Any,
    policy_name: str,
    check_open_ledgers: bool,
    side_dir: str,
    files: Sequence[str],
    writable: frozenset[str] | None = None,
    reads: ReadEvidencePlan | None = None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ledger pass over staged LEDGER_INPUT files: rows of (`id`, an index into `files`) in,
    REQUEST_SCHEMA rows out.

    Each task reads its input files with Arrow, so the ledgers never travel through the JVM before the
    requests are built (the JVM's first scan, aggregation and join of a run cost seconds on a cold session).
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        for batch in batches:
            for index in batch.column("id").to_pylist():
                path = files[index]
                name = os.path.basename(path).rsplit(".", 1)[0]
                fs, rel = location.filesystem(path)
                table = pq.read_table(rel, filesystem=fs)
                inner = ledger_pass_partition(
                    policy, topology, policy_name, check_open_ledgers, side_dir,
                    side_name=name, writable=writable, reads=reads,
                )
                yield from inner(iter(table.cast(LEDGER_INPUT_SCHEMA).to_batches(max_chunksize=10_000)))

    return run


def join_segments(ledgers: pa.Table, segments: pa.Table) -> pa.Table:
    """LEDGER_INPUT rows with Arrow kernels: each ledger row gets its segments as an ordered list.

    `ledgers` carries the scalar columns (raw_metadata already reduced to `raw_size`); `segments` has
    ledger_id, segment_index, first_entry_id, ensemble. A ledger without segment rows gets an empty list.
    """
    import pyarrow.compute as pc

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


# -- options and result --------------------------------------------------------------------------------------


@dataclass
class CheckOptions:
    """Per-run choices (CLI flags / job arguments); None = take the `[checker]` setting."""

    warehouse: str
    snapshot_id: str | None = None
    fresh: bool = False
    run_id: str | None = None
    publish_underreplicated: bool | None = None
    publish_placement: bool | None = None
    fail_on: str | None = None
    metrics_file: str | None = None
    pushgateway_url: str | None = None
    now_ms: int | None = None
    progress: Callable[[str], None] | None = None


@dataclass
class CheckResult:
    run_id: str
    snapshot_id: str | None
    run_date: str
    status: str = "running"
    error: str | None = None
    ledgers_checked: int = 0
    ledgers_durability_checked: int = 0
    entries_checked: int = 0
    bookies_checked: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    under_repair: dict[str, int] = field(default_factory=dict)
    reevaluated: int = 0
    # ledgers BookKeeper's own placement check would flag that bkaudit passes (e.g. a bookie is down)
    bookkeeper_placement_only: int = 0
    deleted_during_run: int = 0
    published: int = 0
    seconds: float = 0.0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    violations: list[dict[str, Any]] = field(default_factory=list)
    bookies: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int = 1
    metrics_error: str | None = None

    def summary(self) -> dict[str, Any]:
        """What `--json` prints: exactly the issue's keys."""
        return {
            "run_id": self.run_id,
            "snapshot_id": self.snapshot_id,
            "ledgers_checked": self.ledgers_checked,
            "counts": dict(self.counts),
            "seconds": round(self.seconds, 3),
        }


def new_run_id(now: datetime | None = None) -> str:
    """`20261122T051500Z-1a2b3c`: sortable by time, unique across concurrent runs."""
    now = now or datetime.now(UTC)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def run_check(spark: SparkSession, settings: Settings, options: CheckOptions) -> CheckResult:
    """Run the checker once; returns the result (exit_code set) or raises CheckFailed after recording it."""
    return CheckerRun(spark, settings, options).execute()


# -- the run -------------------------------------------------------------------------------------------------


class CheckerRun:
    """One execution of the checker; subclasses may narrow its input or keep its output (decommission)."""

    def __init__(self, spark: SparkSession, settings: Settings, options: CheckOptions) -> None:
        from bkaudit.config import ZkSettings
        from bkaudit.tables.store import validate_snapshot_id

        self.spark = spark
        self.settings = settings
        self.options = options
        self.conf: CheckerSettings = settings.get(CheckerSettings)
        self.zk_settings: ZkSettings = settings.get(ZkSettings)
        self.root = self.zk_settings.root
        self.started = datetime.now(UTC)
        self.t0 = time.monotonic()
        self.now_ms = options.now_ms if options.now_ms is not None else int(time.time() * 1000)
        run_id = validate_snapshot_id(options.run_id or new_run_id(self.started))
        self.result = CheckResult(run_id, options.snapshot_id, self.started.strftime("%Y-%m-%d"))
        self.fail_on = FailOn(options.fail_on or self.conf.fail_on)
        self.publish = (
            self.conf.publish_underreplicated
            if options.publish_underreplicated is None
            else options.publish_underreplicated
        )
        self.publish_placement = (
            self.conf.publish_placement if options.publish_placement is None else options.publish_placement
        )
        self.staging = _staging_dir(options.warehouse, run_id)
        self.commits: list[Commit] = []
        self.zk: KazooClient | None = None
        self.registered: dict[str, str] = {}
        self.targets: dict[str, str] = {}
        self.batch_listing: frozenset[str] = frozenset()  # bookies that advertised op 1000
        self.layout = "hierarchical"
        self.response_paths: list[str] = []

    # -- helpers ---------------------------------------------------------------------------------------------
    def _say(self, message: str) -> None:
        log.info("check %s: %s", self.result.run_id, message)
        if self.options.progress is not None:
            self.options.progress(message)

    def _lap(self, phase: str, since: float) -> float:
        now = time.monotonic()
        self.result.phase_seconds[phase] = round(self.result.phase_seconds.get(phase, 0.0) + now - since, 3)
        return now

    # -- driver flow -----------------------------------------------------------------------------------------
    def execute(self) -> CheckResult:
        try:
            self._execute()
        except BaseException as exc:
            self._fail(exc)
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise CheckFailed(f"check {self.result.run_id} failed: {exc}", self.result) from exc
        finally:
            self._cleanup()
        return self.result

    def _execute(self) -> None:
        from bkaudit.zk.client import connect
        from bkaudit.zk.ledgers import read_layout

        t = time.monotonic()
        snapshot_id = self._resolve_snapshot()
        self.result.snapshot_id = snapshot_id
        t = self._lap("snapshot", t)
        self.zk = connect(self.zk_settings)
        self.layout = read_layout(self.zk, root=self.root)
        frames = self._load(snapshot_id)
        self._cluster_view()
        t = self._lap("load", t)

        self._say("ledger pass and fan-out: metadata, placement, then every bookie asked for its entries")
        final, calls = self._fanout(self._ledger_pass(frames))
        located = self._ledger_pass_results()
        t = self._lap("ledger_pass_and_fanout", t)
        if self.result.bookkeeper_placement_only:
            self._say(f"{self.result.bookkeeper_placement_only} ledgers pass our placement check but would "
                      "fail BookKeeper's (it counts only writable bookies: docs/placement.md)")
        located += self._combine(final, frames)
        self._bookie_stats(calls)
        self.result.bookies_checked = len(self.result.bookies)  # bookies asked (answered or not)
        t = self._lap("combine", t)

        self._say(f"re-reading {len({x.finding.ledger_id for x in located})} ledgers before reporting")
        findings = self._reread(located)
        t = self._lap("reread", t)
        findings += self._progress()
        findings += self._bookie_findings(findings)
        t = self._lap("progress", t)

        rows = self._violation_rows(findings)
        if self.publish:
            self._say("publishing under-replicated ledgers")
            self._publish(rows)
            t = self._lap("publish", t)
        self.result.violations = rows
        all_findings = [f for f, _ in findings]
        self.result.counts = count_findings(all_findings)
        self.result.under_repair = count_under_repair(all_findings)
        self.result.published = sum(1 for r in rows if r["published"])
        self.result.seconds = time.monotonic() - self.t0
        self._say("writing tables")
        self._write(rows)
        self._lap("write", t)
        self.result.status = SUCCEEDED
        self.result.exit_code = exit_code(self.result.counts, self.fail_on)
        self.result.seconds = time.monotonic() - self.t0
        self._record_check_times()
        self._metrics(success=True)

    def _record_check_times(self) -> None:
        """Stand in for the Auditor's periodic checks in ZooKeeper: a full run did checkAllLedgers (entries
        on their bookies), placementPolicyCheck (placement, overdue markers) and replicasCheck (each bookie's
        listing), so it stamps their `*ctime` znodes as the Java Auditor does when one completes (binary
        protobuf, epoch ms). A Java auditor elected later then schedules its next run from them, and
        `bookkeeper shell` tooling sees when the checks last ran. A failed write is logged, not fatal."""
        if not self.conf.write_check_ctimes or self.zk is None:
            return
        from bkaudit.zk import underreplication as ur
        from bkaudit.zk.client import acls
        from bkaudit.zk.paths import CHECK_CTIME_NODES

        now_ms = int(time.time() * 1000)
        try:
            for kind in CHECK_CTIME_NODES:
                ur.write_check_ctime(self.zk, kind, now_ms, root=self.root, acl=acls(self.zk_settings))
        except Exception as exc:
            log.warning("could not record the check times in ZooKeeper: %s", exc)

    def _resolve_snapshot(self) -> str:
        from bkaudit.tables.read import latest_snapshot_id

        if self.options.fresh:
            from bkaudit.spark.snapshot import run_snapshot

            self._say("taking a fresh snapshot")
            snap = run_snapshot(self.spark, self.settings, warehouse=self.options.warehouse)
            return str(snap.snapshot_id)
        if self.options.snapshot_id:
            from bkaudit.tables.read import snapshot_versions

            snapshot_versions(self.options.warehouse, self.options.snapshot_id)  # NoSnapshot unless succeeded
            return self.options.snapshot_id
        latest = latest_snapshot_id(self.options.warehouse)
        if latest is None:
            raise BkAuditError(
                f"no successful snapshot in {self.options.warehouse}: run `bkaudit snapshot` "
                "first or pass --fresh"
            )
        return latest

    def _load(self, snapshot_id: str) -> dict[str, Any]:
        """Spark frames of the big tables; the small ones (bookies, markers) as Arrow via delta-rs."""
        from bkaudit import tables
        from bkaudit.tables.read import read_arrow

        wh = self.options.warehouse
        self.bookies_table = read_arrow(wh, "bookies", snapshot_id=snapshot_id)
        self.markers_table = read_arrow(wh, "underreplicated_ledgers", snapshot_id=snapshot_id)
        return {
            "ledgers": tables.load(self.spark, wh, "ledgers", snapshot_id=snapshot_id),
            "segments": tables.load(self.spark, wh, "ledger_segments", snapshot_id=snapshot_id),
        }

    def _cluster_view(self) -> None:
        """Registered bookies (now) and where every known bookie listens (resolved once, on the driver).

        The snapshot's `bookies` table lists registered, read-only, cookie-only and ensemble-only bookies,
        so every ensemble member is resolved here; executors get a static map and need no ZooKeeper session.
        """
        from bkaudit.rpc.pool import BookieClientPool
        from bkaudit.zk import registry

        assert self.zk is not None
        for b in registry.list_writable(self.zk, self.root):
            self.registered[b] = "writable"
        for b in registry.list_readonly(self.zk, self.root):
            self.registered[b] = "readonly"
        known = set(self.bookies_table.column("bookie_id").to_pylist()) | set(self.registered)
        pool = BookieClientPool(zk=self.zk, root=self.root)
        addresses = {b: pool.lookup(b) for b in sorted(known)}
        self.targets = {b: a.target for b, a in addresses.items()}
        self.batch_listing = frozenset(b for b, a in addresses.items() if a.batch_listing)

    def _ledger_input(self, frames: Mapping[str, DataFrame]) -> DataFrame:
        """Every ledger row with its ordered segments (LEDGER_INPUT_SCHEMA)."""
        from pyspark.sql import functions as F

        segs = (
            frames["segments"]
            .groupBy("ledger_id")
            .agg(
                F.sort_array(F.collect_list(F.struct("segment_index", "first_entry_id", "ensemble"))).alias(
                    "segments"
                )
            )
        )
        cols = [f.name for f in SHAPE_SCHEMA if f.name != "segments"]
        ledgers = frames["ledgers"].select(
            *cols, "parse_error", F.length("raw_metadata").cast("int").alias("raw_size"), "digest_type"
        )
        return ledgers.join(segs, "ledger_id", "left").select(*LEDGER_INPUT_SCHEMA.names)

    def _placement_setup(self) -> tuple[Any, Any, str]:
        from bkaudit.model.placement import PlacementSettings, policy_from_settings, topology_from_settings
        from bkaudit.zk.registry import read_racks

        assert self.zk is not None
        ps = self.settings.get(PlacementSettings)
        try:
            racks = read_racks(self.zk)
        except FormatError as exc:  # bad rack JSON must not stop the audit: judge on the configured map
            log.warning("rack configuration /bookies unreadable (%s); using [placement] locations", exc)
            racks = {}
        topology = (
            topology_from_settings(ps) if ps.locations or not racks else topology_from_settings(ps, racks)
        )
        return policy_from_settings(ps), topology, ps.policy

    def _ledger_pass(self, frames: Mapping[str, DataFrame]) -> DataFrame:
        """The ledger pass over every ledger (lazy): its requests feed the fan-out in the same Spark job.

        Input: for snapshots of up to DRIVER_INPUT_MAX_LEDGERS ledgers the driver joins ledgers and segments
        with Arrow (a fraction of a second per 100,000) and stages the result as one file per task; the
        tasks read their file themselves. Larger snapshots, and subclasses that narrow `_load`'s frames (the
        decommission audit), join on Spark.
        """
        from pyspark.sql.pandas.types import from_arrow_schema

        policy, topology, name = self._placement_setup()
        self.side_dir = f"{self.staging}/ledger-pass"
        request_type = from_arrow_schema(REQUEST_SCHEMA)
        files = self._stage_ledger_input()
        reads = self._read_evidence_plan()
        if files is not None:
            fn = ledger_pass_files(
                policy, topology, name, self.conf.check_open_ledgers, self.side_dir, files, self._writable(),
                reads,
            )
            units = self.spark.range(0, len(files), 1, len(files))  # one unit per task
            return units.mapInArrow(fn, request_type)
        fn = ledger_pass_partition(
            policy, topology, name, self.conf.check_open_ledgers, self.side_dir, writable=self._writable(),
            reads=reads,
        )
        return self._ledger_input(frames).mapInArrow(fn, request_type)

    def _writable(self) -> frozenset[str]:
        """Bookies writable now: the only ones BookKeeper's rack-aware Auditor counts (bookkeeper_verdict)."""
        return frozenset(b for b, state in self.registered.items() if state == "writable")

    def _read_evidence_plan(self) -> ReadEvidencePlan:
        """Per bookie and per run: listing or reads (`[checker] listing_unsupported`, else a probe).

        Probed: the bookies the staged input names in ensembles (every known bookie without staged input),
        in parallel, one listing request and one read each, bounded by `listing_probe_timeout_s`.
        """
        from bkaudit.rpc.pool import BookieClientPool
        from bkaudit.rpc.tls import TlsConfig

        staged = getattr(self, "input_table", None)
        if staged is not None:
            import pyarrow.compute as pc

            segments = pc.list_flatten(staged.column("segments"))
            names = pc.list_flatten(pc.struct_field(segments, "ensemble"))
            candidates = sorted(set(pc.unique(names).to_pylist()) - {None})
        else:
            candidates = sorted(self.targets)
        configured = set(self.conf.listing_unsupported)
        self.evidence: dict[str, tuple[str, str]] = {
            b: (EVIDENCE_READS, "configured in [checker] listing_unsupported") for b in configured
        }
        to_probe = [b for b in candidates if b not in configured]
        if to_probe:
            timeout = min(self.conf.listing_probe_timeout_s, self.conf.call_timeout_s)
            pool = BookieClientPool(
                static=self.targets,
                tls=TlsConfig.from_settings(self.settings),
                request_timeout_s=timeout,
                connect_timeout_s=timeout,
            )

            def one(bookie: str) -> tuple[str, tuple[str, str]]:
                try:
                    return bookie, probe_listing(pool.get(bookie), timeout_s=timeout)
                except Exception as exc:  # a bookie we cannot even build a client for: the fan-out says so
                    return bookie, (EVIDENCE_LISTING, f"not probed: {exc}")

            try:
                with ThreadPoolExecutor(max_workers=min(16, len(to_probe))) as ex:
                    self.evidence.update(ex.map(one, to_probe))
            finally:
                pool.close()
        bookies = frozenset(b for b, (mode, _why) in self.evidence.items() if mode == EVIDENCE_READS)
        if bookies:
            pct = self.conf.verification_percentage
            self._say(
                f"{len(bookies)} bookie(s) without listing, verified by reads ({pct:g}% between first and "
                f"last): {', '.join(sorted(bookies))}"
            )
        return ReadEvidencePlan(bookies, self.conf.verification_percentage, seed=self.result.run_id)

    def _stage_ledger_input(self) -> list[str] | None:
        """Join the snapshot's ledgers and segments on the driver and stage them; None = use Spark."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        if type(self)._load is not CheckerRun._load:
            return None  # a subclass narrowed the frames: honour them
        sid = self.result.snapshot_id
        assert sid is not None
        wh = self.options.warehouse
        scalar = [f.name for f in SHAPE_SCHEMA if f.name != "segments"]
        columns = [*scalar, "parse_error", "raw_metadata", "digest_type"]
        ledgers = _read_snapshot(wh, "ledgers", sid, columns, DRIVER_INPUT_MAX_LEDGERS)
        if ledgers is None:
            return None
        raw = ledgers.column("raw_metadata")
        ledgers = ledgers.drop_columns(["raw_metadata"]).append_column(
            "raw_size", pc.cast(pc.utf8_length(raw), pa.int32())
        )
        segments = _read_snapshot(
            wh, "ledger_segments", sid, ["ledger_id", "segment_index", "first_entry_id", "ensemble"], None
        )
        assert segments is not None
        table = join_segments(ledgers, segments)
        self.input_table = table  # kept: the driver-side combine takes its shapes from here
        cores = max(1, self.spark.sparkContext.defaultParallelism)
        parts = max(1, min(cores, table.num_rows // 1000 + 1))
        directory = f"{self.staging}/ledger-input"
        location.makedirs(directory)
        paths = []
        step = -(-table.num_rows // parts) if table.num_rows else 1
        for k in range(parts):
            path = f"{directory}/part-{k:05d}.parquet"
            chunk = table.slice(k * step, step)
            fs, rel = location.filesystem(path)
            pq.write_table(chunk, rel, filesystem=fs)
            paths.append(path)
        return paths

    def _ledger_pass_results(self) -> list[Located]:
        """Findings and counts the ledger pass wrote next to its requests."""
        import pyarrow.parquet as pq

        located: list[Located] = []
        if not _exists(self.side_dir):
            return located
        for row in pq.read_table(self.side_dir, schema=SIDE_SCHEMA).to_pylist():
            if row["kind"] == "stats":
                stats = json.loads(row["detail"])
                self.result.ledgers_checked += int(stats["ledgers"])
                self.result.ledgers_durability_checked += int(stats["durability_ledgers"])
                self.result.entries_checked += int(stats["entries"])
                self.result.bookkeeper_placement_only += int(stats.get("bookkeeper_placement_only", 0))
            else:
                located.append(located_of(row))
        return located

    # -- fan-out ---------------------------------------------------------------------------------------------
    def _fanout_config(self, attempt: int) -> FanoutConfig:
        from bkaudit.rpc.settings import RpcSettings

        rpc = self.settings.get(RpcSettings)
        from bkaudit.rpc.tls import TlsConfig

        tls = TlsConfig.from_settings(self.settings)
        return FanoutConfig(
            targets=dict(self.targets),
            batch_listing=self.batch_listing,
            batch_size=self.conf.batch_size,
            max_in_flight=self.conf.max_in_flight_per_bookie,
            call_timeout_s=self.conf.call_timeout_s,
            connect_timeout_s=min(rpc.connect_timeout_s, self.conf.call_timeout_s),
            failure_threshold=self.conf.bookie_failure_threshold,
            attempt=attempt,
            read_max_in_flight=self.conf.read_max_in_flight_per_bookie,
            tls=tls,
            max_frame_bytes=rpc.max_frame_bytes,
        )

    def _fanout(self, requests: DataFrame) -> tuple[DataFrame | None, pa.Table]:
        """Requests → responses, with BP-34's delayed re-check of failures.

        Returns the final responses (Spark over staged files; None when there was nothing to ask) and, as
        Arrow on the driver, the call log of every attempt (no answer bytes) for `bookie_checks`. Also notes
        which ledgers need the per-ledger combine: an answer that differs from the expected entries, an
        ENOLEDGER, or a bookie that never answered.
        """
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema

        response_type = from_arrow_schema(RESPONSE_SCHEMA)
        pending = requests
        # a task serves several bookies from threads: no more tasks than the cores run at once
        cores = max(1, self.spark.sparkContext.defaultParallelism)
        partitions = max(1, min(len(self.targets) * self.conf.partitions_per_bookie, cores))
        answered = F.col("status").isin(*ANSWERED)
        log_columns = ["ledger_id", "bookie_id", "status", "error", "call_id", "call_ms", "attempt"]
        logs: list[pa.Table] = []
        interesting: set[int] = set()
        unanswered: set[int] = set()
        final: DataFrame | None = None
        last_failed: DataFrame | None = None
        failed = -1
        for attempt in range(self.conf.retry_attempts + 1):
            if attempt:
                if failed == 0:
                    break
                self._say(
                    f"re-checking {failed} failed (ledger, bookie) calls in {self.conf.retry_delay_s:g}s"
                )
                time.sleep(self.conf.retry_delay_s)
            fn = fanout_partition(self._fanout_config(attempt))
            if self.conf.partitions_per_bookie > 1:
                shard = F.col("ledger_id") % self.conf.partitions_per_bookie
                keyed = pending.withColumn("_shard", shard).repartition(partitions, "bookie_id", "_shard")
                keyed = keyed.drop("_shard")
            else:
                keyed = self._by_bookie(pending, partitions)
            path = f"{self.staging}/responses-{attempt}"
            keyed.mapInArrow(fn, response_type).write.mode("overwrite").parquet(path)
            self.response_paths.append(path)
            extra = ["answer", "entries_missing", "entries_corrupt"]
            table = pq.read_table(path, columns=[*log_columns, *extra])
            ok = pc.is_in(table.column("status"), pa.array(list(ANSWERED)))
            differs = pc.or_(
                pc.equal(table.column("status"), "ENOLEDGER"), pc.is_valid(table.column("answer"))
            )
            for bad in ("entries_missing", "entries_corrupt"):  # reads proved entries missing or corrupt
                proved = pc.fill_null(pc.list_value_length(table.column(bad)), 0)
                differs = pc.or_(differs, pc.greater(proved, 0))
            interesting |= set(table.filter(pc.and_(ok, differs)).column("ledger_id").to_pylist())
            unanswered = set(table.filter(pc.invert(ok)).column("ledger_id").to_pylist())
            logs.append(table.select(log_columns))
            failed = table.num_rows - (pc.sum(ok).as_py() or 0)
            got = self.spark.read.schema(response_type).parquet(path)
            final = got.where(answered) if final is None else final.unionByName(got.where(answered))
            last_failed = got.where(~answered)
            pending = last_failed.select(*REQUEST_SCHEMA.names)
        self.interesting = interesting | unanswered
        if final is None or last_failed is None:
            return None, pa.table({c: pa.array([], RESPONSE_SCHEMA.field(c).type) for c in log_columns})
        return final.unionByName(last_failed), pa.concat_tables(logs)

    def _by_bookie(self, requests: DataFrame, partitions: int) -> DataFrame:
        """Requests repartitioned so that each bookie's land in one task, tasks balanced by expected load.

        The load of a bookie is how many ledgers name it (counted on the driver's staged input when there
        is one); without it every bookie weighs the same.
        """
        import itertools

        from pyspark.sql import functions as F

        loads: dict[str, int] = dict.fromkeys(self.targets, 1)
        staged = getattr(self, "input_table", None)
        if staged is not None and staged.num_rows:
            import pyarrow.compute as pc

            segments = pc.list_flatten(staged.column("segments"))
            names = pc.list_flatten(pc.struct_field(segments, "ensemble"))
            for item in pc.value_counts(names).to_pylist():
                loads[item["values"]] = int(item["counts"])
        slot_of = balance(loads, partitions)
        keys = partition_keys(partitions)
        mapping = F.create_map(
            *itertools.chain.from_iterable((F.lit(b), F.lit(keys[k])) for b, k in slot_of.items())
        )
        slot = F.coalesce(mapping[F.col("bookie_id")], F.lit(keys[0]))
        return requests.withColumn("_slot", slot).repartition(partitions, "_slot").drop("_slot")

    def _combine(self, final: DataFrame | None, frames: Mapping[str, DataFrame]) -> list[Located]:
        """Per ledger with anything to report, combine its bookies' evidence.

        On Spark (repartitioned and sorted by ledger) when many ledgers need it, e.g. after a bookie was
        wiped; for a few thousand the same function runs on the driver over the staged answers, which saves
        a shuffle of the whole ledger input for a handful of rows.
        """
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema

        ids = getattr(self, "interesting", set())
        if final is None or not ids:
            return []
        self._say(f"combining answers of {len(ids)} ledgers")
        if len(ids) <= DRIVER_COMBINE_MAX:
            return self._combine_here(ids)
        ids_table = pa.table({"ledger_id": pa.array(sorted(ids), pa.int64())})
        ids_df = F.broadcast(self.spark.createDataFrame(ids_table))
        rows = final.join(ids_df, "ledger_id", "left_semi")
        shapes = self._ledger_input(frames).where(F.col("parse_error").isNull())
        shapes = shapes.join(ids_df, "ledger_id", "left_semi").select(*SHAPE_SCHEMA.names)
        joined = rows.join(shapes, "ledger_id").select(*COMBINE_SCHEMA.names)
        partitions = max(2, int(self.spark.conf.get("spark.sql.shuffle.partitions", "2")))
        fn = combine_partition(self.conf.max_ranges_per_row, frozenset(self.registered))
        table = (
            joined.repartition(partitions, "ledger_id")
            .sortWithinPartitions("ledger_id", "bookie_id")
            .mapInArrow(fn, from_arrow_schema(FINDING_SCHEMA))
            .toArrow()
        )
        return [located_of(r) for r in table.to_pylist()]

    def _combine_here(self, ids: set[int]) -> list[Located]:
        """`combine_partition` on the driver: staged answers and snapshot shapes of `ids` read with Arrow."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from bkaudit.tables.read import read_arrow

        wanted = pa.array(sorted(ids), pa.int64())
        answers = pa.concat_tables(
            pq.read_table(path, filters=pc.is_in(pc.field("ledger_id"), wanted))
            .select(RESPONSE_SCHEMA.names)
            .cast(RESPONSE_SCHEMA)
            for path in self.response_paths
        )
        shapes: dict[int, dict[str, Any]] = {}
        staged = getattr(self, "input_table", None)
        if staged is not None:
            picked = staged.filter(pc.is_in(staged.column("ledger_id"), wanted)).select(SHAPE_SCHEMA.names)
            shapes = {r["ledger_id"]: r for r in picked.to_pylist()}
        else:
            sid = self.result.snapshot_id
            ledgers = read_arrow(self.options.warehouse, "ledgers", snapshot_id=sid)
            ledgers = ledgers.filter(pc.is_in(ledgers.column("ledger_id"), wanted))
            segments = read_arrow(self.options.warehouse, "ledger_segments", snapshot_id=sid)
            segments = segments.filter(pc.is_in(segments.column("ledger_id"), wanted))
            by_ledger: dict[int, list[dict[str, Any]]] = {}
            for seg in segments.select(
                ["ledger_id", "segment_index", "first_entry_id", "ensemble"]
            ).to_pylist():
                by_ledger.setdefault(seg.pop("ledger_id"), []).append(seg)
            for row in ledgers.select([f.name for f in SHAPE_SCHEMA if f.name != "segments"]).to_pylist():
                row["segments"] = sorted(
                    by_ledger.get(row["ledger_id"], []), key=lambda x: x["segment_index"]
                )
                shapes[row["ledger_id"]] = row
        rows = [{**shapes[a["ledger_id"]], **a} for a in answers.to_pylist() if a["ledger_id"] in shapes]
        rows.sort(key=lambda r: (r["ledger_id"], r["bookie_id"], r["attempt"]))
        fn = combine_partition(self.conf.max_ranges_per_row, frozenset(self.registered))
        batch = pa.RecordBatch.from_pylist(rows, schema=COMBINE_SCHEMA)
        out = [located_of(r) for b in fn(iter([batch])) for r in b.to_pylist()]
        return out

    def _bookie_stats(self, calls: pa.Table) -> None:
        """Per bookie: calls, answers, errors, latency percentiles, reachability in its last attempt.

        Column-wise over the call log (one row per (ledger, bookie, attempt)): no per-row Python objects.
        """
        import pyarrow.compute as pc

        if calls.num_rows == 0:
            self.result.bookies = []
            return
        status = calls.column("status")
        ok = pc.is_in(status, pa.array(list(ANSWERED)))
        transport = pc.invert(pc.is_in(status, pa.array(sorted(_NON_TRANSPORT))))
        t = calls.append_column("ok", ok).append_column("transport", transport)
        last = {
            r["bookie_id"]: r["attempt_max"]
            for r in t.group_by("bookie_id").aggregate([("attempt", "max")]).to_pylist()
        }
        by_status = t.group_by(["bookie_id", "status"]).aggregate([("ledger_id", "count"), ("error", "max")])
        calls_t = (
            t.filter(pc.is_valid(t.column("call_id")))
            .group_by(["bookie_id", "call_id"])
            .aggregate([("call_ms", "max")])
        )
        lat: dict[str, list[float]] = {}
        for r in calls_t.to_pylist():
            lat.setdefault(r["bookie_id"], []).append(float(r["call_ms_max"] or 0.0))
        # reachable: some call in the bookie's last attempt got a BookKeeper answer
        reach: dict[str, bool] = {}
        groups = t.group_by(["bookie_id", "attempt", "transport"]).aggregate([("ledger_id", "count")])
        for r in groups.to_pylist():
            if r["attempt"] == last[r["bookie_id"]] and not r["transport"]:
                reach[r["bookie_id"]] = True
        # (ledger, bookie) pairs never answered in any attempt: unverified
        answered_pairs = t.filter(ok).select(["ledger_id", "bookie_id"])
        failed_pairs = t.filter(pc.invert(ok)).select(["ledger_id", "bookie_id"])
        unverified: dict[str, int] = {}
        if failed_pairs.num_rows:
            still = failed_pairs.join(answered_pairs, ["ledger_id", "bookie_id"], join_type="left anti")
            for r in still.group_by("bookie_id").aggregate([("ledger_id", "count_distinct")]).to_pylist():
                unverified[r["bookie_id"]] = int(r["ledger_id_count_distinct"])
        info: dict[str, dict[str, Any]] = {}
        for r in by_status.to_pylist():
            b = r["bookie_id"]
            row = info.setdefault(
                b,
                {
                    "bookie_id": b,
                    "ledgers_listed": 0,
                    "errors": 0,
                    "error_statuses": {},
                    "last_error": None,
                    "attempts": int(last[b]) + 1,
                },
            )
            n = int(r["ledger_id_count"])
            if r["status"] in ANSWERED:
                row["ledgers_listed"] += n
            else:
                row["errors"] += n
                row["error_statuses"][r["status"]] = n
                row["last_error"] = r["error_max"] or row["last_error"]
        out = []
        evidence = getattr(self, "evidence", {})
        for b, row in sorted(info.items()):
            mode, why = evidence.get(b, (EVIDENCE_LISTING, None))
            values = lat.get(b, [])
            pct = latency_percentiles(values)
            row.update(
                {
                    "reachable": reach.get(b, False),
                    "state": self.registered.get(b, "absent"),
                    "registered": b in self.registered,
                    "target": self.targets.get(b),
                    "calls": len(values),
                    "ledgers_unverified": unverified.get(b, 0),
                    "latency_ms_p50": pct.get("p50"),
                    "latency_ms_p95": pct.get("p95"),
                    "latency_ms_p99": pct.get("p99"),
                    "latency_ms_max": max(values) if values else None,
                    "evidence": mode,
                    "evidence_reason": why,
                }
            )
            out.append(row)
        self.result.bookies = out

    # -- re-read before reporting ----------------------------------------------------------------------------
    def _reread(self, located: list[Located]) -> list[tuple[Finding, Located]]:
        """BP-34's rule: re-read each ledger's znode and marker before its findings are written."""
        by_ledger: dict[int, list[Located]] = {}
        others: list[Located] = []
        for x in located:
            if x.finding.ledger_id is None:
                others.append(x)
            else:
                by_ledger.setdefault(int(x.finding.ledger_id), []).append(x)
        current = self._read_znodes(sorted(by_ledger))
        markers = self._read_markers(sorted(by_ledger))
        out: list[tuple[Finding, Located]] = [(x.finding, x) for x in others]
        changed: dict[int, tuple[bytes, ZnodeVersion, Located]] = {}
        for ledger_id, items in by_ledger.items():
            seen_version = items[0].version
            seen = None if seen_version is None else ZnodeVersion(int(seen_version), items[0].mzxid)
            now = current.get(ledger_id)
            verdict = recheck(seen, None if now is None else now[1])
            if verdict is Recheck.DELETED:
                self.result.deleted_during_run += 1
                continue
            if verdict is Recheck.CHANGED:
                assert now is not None
                changed[ledger_id] = (now[0], now[1], items[0])
                continue
            for x in items:
                out.extend((f, x) for f in apply_marker([x.finding], markers.get(ledger_id)))
        if changed:
            self._say(f"metadata changed for {len(changed)} ledgers: re-evaluating them")
            redone = self._reevaluate(changed)
            fresh_markers = self._read_markers(
                sorted({int(f.ledger_id) for f, _ in redone if f.ledger_id is not None})
            )
            for f, x in redone:
                marker = fresh_markers.get(int(f.ledger_id)) if f.ledger_id is not None else None
                out.extend((g, x) for g in apply_marker([f], marker))
        return out

    def _read_znodes(self, ledger_ids: Sequence[int]) -> dict[int, tuple[bytes, ZnodeVersion]]:
        from bkaudit.zk import paths
        from bkaudit.zk.client import rate_limiter
        from bkaudit.zk.ledgers import read_many

        assert self.zk is not None
        by_path = {paths.ledger_path(i, root=self.root, layout=self.layout): i for i in ledger_ids}
        out: dict[int, tuple[bytes, ZnodeVersion]] = {}
        limiter = rate_limiter(self.conf.zk_reads_per_s) if self.conf.zk_reads_per_s else None
        for path, data, stat in read_many(self.zk, list(by_path), rate_limiter=limiter):
            if stat is not None and data is not None:
                out[by_path[path]] = (data, ZnodeVersion(int(stat.version), int(stat.mzxid)))
        return out

    def _read_markers(self, ledger_ids: Sequence[int]) -> dict[int, MarkerState]:
        from bkaudit.formats.records import parse_underreplicated_marker
        from bkaudit.zk import paths
        from bkaudit.zk.client import rate_limiter
        from bkaudit.zk.ledgers import read_many

        assert self.zk is not None
        by_path = {paths.underreplicated_ledger_path(i, root=self.root): i for i in ledger_ids}
        limiter = rate_limiter(self.conf.zk_reads_per_s) if self.conf.zk_reads_per_s else None
        out: dict[int, MarkerState] = {}
        for path, data, stat in read_many(self.zk, list(by_path), rate_limiter=limiter):
            if stat is None or data is None:
                continue
            try:
                m = parse_underreplicated_marker(data)
                out[by_path[path]] = MarkerState(tuple(m.replicas), m.ctime)
            except FormatError:
                out[by_path[path]] = MarkerState((), None)  # a corrupt marker is still a marker
        return out

    def _reevaluate(
        self, changed: dict[int, tuple[bytes, ZnodeVersion, Located]]
    ) -> list[tuple[Finding, Located]]:
        """Check ledgers again from their current metadata (their bookies asked again), until it is stable."""
        from bkaudit.formats.ledger_metadata import parse

        results: list[tuple[Finding, Located]] = []
        todo = dict(changed)
        for _round in range(self.conf.max_reevaluations):
            if not todo:
                break
            self.result.reevaluated += len(todo)
            shapes: dict[int, tuple[LedgerShape, ZnodeVersion, Located]] = {}
            digests: dict[int, tuple[str, bytes]] = {}
            fresh: dict[int, list[Finding]] = {}
            for ledger_id, (data, ver, loc) in todo.items():
                try:
                    md = parse(data)
                except FormatError as exc:
                    f = MetadataCheck().evaluate(
                        MetadataRecord(
                            ledger_id, parse_error=str(exc), raw_size=len(data), version=ver.version
                        )
                    )
                    fresh[ledger_id] = f
                    continue
                shape = LedgerShape.from_metadata(ledger_id, md, version=ver.version)
                found = MetadataCheck().evaluate(MetadataRecord(ledger_id, shape=shape, version=ver.version))
                if found:
                    fresh[ledger_id] = found
                    continue
                shapes[ledger_id] = (shape, ver, loc)
                digests[ledger_id] = (md.digest_type.name, md.password)
                fresh[ledger_id] = self._placement_check().evaluate(shape)
            evidence = self._ask_bookies([s for s, _v, _l in shapes.values()], digests)
            for ledger_id, (shape, _ver, _loc) in shapes.items():
                fresh[ledger_id] += ledger_findings(
                    shape,
                    evidence.get(ledger_id, []),
                    max_ranges=self.conf.max_ranges_per_row,
                    registered=set(self.registered),
                )
            # stable only if the znode did not move again while we were asking
            again = self._read_znodes(sorted(todo))
            next_todo: dict[int, tuple[bytes, ZnodeVersion, Located]] = {}
            for ledger_id, (_data, ver, loc) in todo.items():
                now = again.get(ledger_id)
                verdict = recheck(ver, None if now is None else now[1])
                if verdict is Recheck.DELETED:
                    self.result.deleted_during_run += 1
                    continue
                if verdict is Recheck.CHANGED:
                    assert now is not None
                    next_todo[ledger_id] = (now[0], now[1], loc)
                    continue
                new_loc = Located(loc.finding, ver.version, ver.mzxid, loc.managed_ledger)
                for f in fresh.get(ledger_id, []):
                    results.append((f.with_detail(znode_version=ver.version, reevaluated=True), new_loc))
            todo = next_todo
        for ledger_id, (_data, ver, loc) in todo.items():
            f = unverifiable(
                ledger_id,
                f"metadata changed {self.conf.max_reevaluations} times while it was being checked",
                REASON_METADATA_CHANGING,
                znode_version=ver.version,
            )
            results.append((f, Located(f, ver.version, ver.mzxid, loc.managed_ledger)))
        return results

    def _placement_check(self) -> Any:
        from bkaudit.audit.placement import PlacementCheck

        if getattr(self, "_placement", None) is None:
            policy, topology, name = self._placement_setup()
            self._placement = PlacementCheck(policy, topology, name, writable=self._writable())
        return self._placement

    def _ask_bookies(
        self, shapes: Sequence[LedgerShape], digests: Mapping[int, tuple[str, bytes]] | None = None
    ) -> dict[int, list[BookieEvidence]]:
        """Driver-side fan-out for a few re-evaluated ledgers (batching and judgement as on executors).

        Bookies without listing are verified by reads, as in the fan-out; `digests` gives each ledger's
        digest type and password from its current metadata (so MAC entries are verified in full here).
        """
        from bkaudit.audit.reads import plan_reads, read_evidence
        from bkaudit.rpc.pool import BookieClientPool

        readers = {b for b, (mode, _why) in getattr(self, "evidence", {}).items() if mode == EVIDENCE_READS}
        creds = digests or {}

        by_bookie: dict[str, list[LedgerShape]] = {}
        for s in shapes:
            for bookie in expected_by_bookie(s):
                by_bookie.setdefault(bookie, []).append(s)
        out: dict[int, list[BookieEvidence]] = {}
        if not by_bookie:
            return out
        pool = BookieClientPool(zk=self.zk, root=self.root, request_timeout_s=self.conf.call_timeout_s)

        def one(bookie: str, items: list[LedgerShape]) -> list[tuple[int, BookieEvidence]]:
            client = pool.get(bookie)
            if bookie in readers:
                pct, seed = self.conf.verification_percentage, self.result.run_id
                plans = [list(plan_reads(s, bookie, pct, seed=seed).entries) for s in items]
                return [
                    (items[p].ledger_id, read_evidence(items[p], bookie, summary))
                    for p, summary, _c in read_and_verify(
                        client,
                        bookie,
                        [s.ledger_id for s in items],
                        plans,
                        [creds.get(s.ledger_id, (None, None))[0] for s in items],
                        passwords=[creds.get(s.ledger_id, (None, None))[1] for s in items],
                        max_in_flight=self.conf.read_max_in_flight_per_bookie,
                        failure_threshold=self.conf.bookie_failure_threshold,
                    )
                ]
            return [
                (s.ledger_id, ev)
                for s, ev, _c in query_bookie(
                    client,
                    bookie,
                    items,
                    batch_size=self.conf.batch_size,
                    max_in_flight=self.conf.max_in_flight_per_bookie,
                    failure_threshold=self.conf.bookie_failure_threshold,
                )
            ]

        try:
            with ThreadPoolExecutor(max_workers=min(16, len(by_bookie))) as ex:
                for pairs in ex.map(lambda kv: one(*kv), by_bookie.items()):
                    for ledger_id, ev in pairs:
                        out.setdefault(ledger_id, []).append(ev)
        finally:
            pool.close()
        return out

    # -- progress and availability ---------------------------------------------------------------------------
    def _progress(self) -> list[tuple[Finding, Located]]:
        """Markers of the snapshot older than the grace period, confirmed on the live marker."""
        from bkaudit.zk.underreplication import get_marker

        if self.conf.grace_period_s <= 0:
            return []
        check = ProgressCheck(self.conf.grace_period_s, self.now_ms)
        assert self.zk is not None
        out: list[tuple[Finding, Located]] = []
        for r in self.markers_table.to_pylist():
            if r.get("parse_error") or r.get("marked_at") is None:
                continue
            ctime_ms = int(r["marked_at"].timestamp() * 1000)
            if not check.overdue(Marker(int(r["ledger_id"]), (), ctime_ms)):
                continue
            ledger_id = int(r["ledger_id"])
            try:
                live = get_marker(self.zk, ledger_id, root=self.root)
            except FormatError:
                live = None
            if live is None:
                continue  # resolved since the snapshot: nothing overdue to report
            marker, _stat = live
            m = Marker(ledger_id, tuple(marker.replicas), marker.ctime, r.get("locked_by"))
            for f in check.evaluate(m):
                out.append((f, Located(f)))
        return out

    def _bookie_findings(self, findings: list[tuple[Finding, Located]]) -> list[tuple[Finding, Located]]:
        from bkaudit.zk import registry

        assert self.zk is not None
        check = BookieAvailabilityCheck()
        out: list[tuple[Finding, Located]] = []
        for b in self.result.bookies:
            if b["reachable"]:
                continue
            state = registry.bookie_state(self.zk, b["bookie_id"], self.root)  # re-read: still registered?
            report = BookieReport(
                bookie_id=b["bookie_id"],
                registered=state != "absent",
                reachable=False,
                attempts=int(b["attempts"]),
                state=state,
                last_status=max(b["error_statuses"], key=b["error_statuses"].get)
                if b["error_statuses"]
                else None,
                last_error=b["last_error"],
                ledgers_unverified=int(b.get("ledgers_unverified") or 0),
            )
            for f in check.evaluate(report):
                out.append((f, Located(f)))
        return out

    # -- output ----------------------------------------------------------------------------------------------
    def _violation_rows(self, findings: list[tuple[Finding, Located]]) -> list[dict[str, Any]]:
        detected = datetime.now(UTC)
        rows = []
        for f, loc in findings:
            rows.append(
                {
                    "run_id": self.result.run_id,
                    "snapshot_id": self.result.snapshot_id,
                    "run_date": self.result.run_date,
                    "ledger_id": f.ledger_id,
                    "category": f.category.value,
                    "severity": f.severity.value,
                    "segment_index": f.segment_index,
                    "bookie_id": f.bookie_id,
                    "missing_entries": None
                    if f.missing_entries is None
                    else [{"first": lo, "last": hi} for lo, hi in f.missing_entries],
                    "min_replicas": f.min_replicas,
                    "managed_ledger": loc.managed_ledger,
                    "detail": json.dumps(dict(f.detail), separators=(",", ":"), default=str),
                    "bookkeeper_verdict": f.detail.get("bookkeeper_verdict"),
                    "under_repair": f.under_repair,
                    "published": False,
                    "detected_at": detected,
                    "evidence": f.detail.get("evidence"),
                    "sampled_fraction": f.detail.get("sampled_fraction"),
                }
            )
        rows.sort(
            key=lambda r: (
                r["category"],
                r["ledger_id"] if r["ledger_id"] is not None else -1,
                r["bookie_id"] or "",
            )
        )
        return rows

    def _publish(self, rows: list[dict[str, Any]]) -> None:
        from bkaudit.spark.publish import publish_rows

        assert self.zk is not None
        publish_rows(
            self.zk,
            rows,
            root=self.root,
            publish_placement=self.publish_placement,
            rate_per_s=self.conf.publish_rate_per_s,
            layout=self.layout,
        )

    def _write(self, rows: list[dict[str, Any]]) -> None:
        from bkaudit.tables.store import commit, discard, stage_table, table_uri

        assert self.result.snapshot_id is not None
        key = {"snapshot_id": self.result.snapshot_id, "snapshot_date": self.result.run_date}
        replace = {"run_id": self.result.run_id}
        add_quorums(rows, self.options.warehouse, self.result.snapshot_id)
        violations = pa.Table.from_pylist(rows, schema=VIOLATIONS.schema)
        bookies = pa.Table.from_pylist(
            [
                {
                    **b,
                    "run_id": self.result.run_id,
                    "snapshot_id": self.result.snapshot_id,
                    "run_date": self.result.run_date,
                    "error_statuses": list(b["error_statuses"].items()),
                }
                for b in self.result.bookies
            ],
            schema=BOOKIE_CHECKS.schema,
        )
        for table, data in (("violations", violations), ("bookie_checks", bookies)):
            files = stage_table(self.options.warehouse, table, data, **key)
            try:
                self.commits.append(
                    commit(
                        self.options.warehouse,
                        table,
                        files,
                        replace=replace,
                        info={"run_id": self.result.run_id},
                    )
                )
            except BaseException:
                discard(table_uri(self.options.warehouse, table), files)
                raise
        self._write_run_row(SUCCEEDED)

    def _run_row(self, status: str) -> dict[str, Any]:
        r = self.result
        return {
            "run_id": r.run_id,
            "snapshot_id": r.snapshot_id or "none",
            "run_date": r.run_date,
            "status": status,
            "error": r.error,
            "started_at": self.started,
            "finished_at": datetime.now(UTC),
            "seconds": round(time.monotonic() - self.t0, 3),
            "zk": self.zk_settings.connect,
            "root": self.root,
            "config": json.dumps(self._config(), sort_keys=True, default=str),
            "ledgers_checked": r.ledgers_checked,
            "ledgers_durability_checked": r.ledgers_durability_checked,
            "entries_checked": r.entries_checked,
            "bookies_checked": r.bookies_checked,
            "counts": list(r.counts.items()),
            "under_repair": list(r.under_repair.items()),
            "reevaluated": r.reevaluated,
            "deleted_during_run": r.deleted_during_run,
            "published": r.published,
            "phase_seconds": list(r.phase_seconds.items()),
        }

    def _config(self) -> dict[str, Any]:
        raw = self.settings.raw()
        zk = dict(raw.get("zk", {}))
        if zk.get("auth_digest"):
            zk["auth_digest"] = "***"
        raw["zk"] = zk
        import dataclasses

        return {
            "checker": dataclasses.asdict(self.conf),
            "settings": raw,
            "fail_on": self.fail_on.value,
            "publish_underreplicated": self.publish,
            "publish_placement": self.publish_placement,
            "fresh": self.options.fresh,
        }

    def _write_run_row(self, status: str) -> None:
        """The `audit_runs` row, committed last. A succeeded run replaces every row of its id; a failed one
        only earlier failed rows, so a failed re-run never hides the rows of an earlier successful run (its
        own commits were reverted, so those rows are what the tables hold)."""
        from bkaudit.tables.store import write_table

        replace = {"run_id": self.result.run_id}
        if status == FAILED:
            replace["status"] = FAILED

        table = pa.Table.from_pylist([self._run_row(status)], schema=AUDIT_RUNS.schema)
        self.commits.append(
            write_table(
                self.options.warehouse,
                "audit_runs",
                table,
                snapshot_id=self.result.snapshot_id or "none",
                snapshot_date=self.result.run_date,
                replace=replace,
            )
        )

    def _fail(self, exc: BaseException) -> None:
        from bkaudit.tables.store import revert

        self.result.status = FAILED
        self.result.exit_code = 1
        self.result.error = f"{type(exc).__name__}: {exc}"
        self.result.seconds = time.monotonic() - self.t0
        log.error("check %s failed: %s", self.result.run_id, self.result.error)
        for done in reversed(self.commits):
            try:
                revert(done)
            except Exception as rexc:  # keep going: the failed run row below still says what happened
                log.error("could not revert %s v%s: %s", done.table, done.version, rexc)
        self.commits = []
        try:
            self._write_run_row(FAILED)
        except Exception as wexc:
            log.error("could not record the failed run: %s", wexc)
        self._metrics(success=False)

    def _metrics(self, *, success: bool) -> None:
        from bkaudit.metrics import CheckerRunMetrics, MetricsError, export

        path = self.options.metrics_file if self.options.metrics_file is not None else self.conf.metrics_file
        url = (
            self.options.pushgateway_url
            if self.options.pushgateway_url is not None
            else self.conf.pushgateway_url
        )
        if not path and not url:
            return
        m = CheckerRunMetrics(
            run_id=self.result.run_id,
            snapshot_id=self.result.snapshot_id or "",
            success=success,
            counts=self.result.counts,
            under_repair=self.result.under_repair,
            ledgers_total=self.result.ledgers_checked,
            ledgers_checked=self.result.ledgers_durability_checked,
            entries_checked=self.result.entries_checked,
            published=self.result.published,
            reevaluated=self.result.reevaluated,
            seconds=self.result.seconds,
            phase_seconds=self.result.phase_seconds,
            finished_at_s=time.time(),
            bookies=self.result.bookies,
        )
        try:
            export(m.families(self.conf.metrics_scope), metrics_file=path or "", pushgateway_url=url or "",
                   job=self.conf.metrics_job)
        except MetricsError as exc:  # metrics never fail an audit; the error is recorded and logged
            self.result.metrics_error = str(exc)
            log.warning("%s", exc)

    def _cleanup(self) -> None:
        if self.zk is not None:
            from bkaudit.zk.client import close

            try:
                close(self.zk)
            except Exception:
                pass
            self.zk = None
        _remove_dir(self.staging)


_Run = CheckerRun  # the name other jobs subclassed first


def _read_snapshot(
    warehouse: str, table: str, snapshot_id: str, columns: list[str], max_rows: int | None
) -> pa.Table | None:
    """One snapshot's rows of a table, read with Arrow from the current Delta version's files.

    Files whose snapshot_id statistics exclude it are skipped; None when the snapshot has more than
    `max_rows` rows (counted from the Delta log before reading anything).
    """
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from bkaudit.tables.store import open_delta, table_uri

    uri = table_uri(warehouse, table)
    dt = open_delta(uri)
    files, rows = [], 0
    for row in pa.table(dt.get_add_actions(flatten=True)).to_pylist():
        low, high = row.get("min.snapshot_id"), row.get("max.snapshot_id")
        if low is not None and high is not None and not low <= snapshot_id <= high:
            continue
        files.append(row["path"])
        rows += int(row.get("num_records") or 0)
    if max_rows is not None and rows > max_rows:
        return None
    fs, paths = location.paths_within(uri, files)
    if not paths:
        from bkaudit.tables.schemas import spec

        schema = spec(table).schema
        return pa.table({c: pa.array([], schema.field(c).type) for c in columns})
    data = ds.dataset(paths, format="parquet", filesystem=fs)
    return data.to_table(columns=columns, filter=pc.field("snapshot_id") == snapshot_id)


QUORUM_COLUMNS = ("ensemble_size", "write_quorum", "ack_quorum")


def add_quorums(rows: list[dict[str, Any]], warehouse: str, snapshot_id: str) -> None:
    """Give each violation row its ledger's quorum columns (in place), from the snapshot's `ledgers` rows.

    A ledger's ensemble size and quorums never change after creation, so the snapshot's values are the
    ledger's; rows without a ledger (bookie findings) or without parseable metadata keep nulls.
    """
    import pyarrow.compute as pc

    wanted = sorted({r["ledger_id"] for r in rows if r.get("ledger_id") is not None})
    if not wanted:
        return
    ledgers = _read_snapshot(warehouse, "ledgers", snapshot_id, ["ledger_id", *QUORUM_COLUMNS], None)
    assert ledgers is not None
    ledgers = ledgers.filter(pc.is_in(ledgers.column("ledger_id"), pa.array(wanted, pa.int64())))
    shapes = {r.pop("ledger_id"): r for r in ledgers.to_pylist()}
    for row in rows:
        for column, value in shapes.get(row.get("ledger_id"), {}).items():
            row.setdefault(column, value)


def _exists(path: str) -> bool:
    return location.exists(path)


def _staging_dir(warehouse: str, run_id: str) -> str:
    return location.join(warehouse, "_checker_staging", run_id)


def _remove_dir(path: str) -> None:
    """Delete a run's staging directory, and the staging root when no other run uses it."""
    if not location.is_local(path):
        location.remove_tree(path)
        return
    shutil.rmtree(path, ignore_errors=True)
    try:
        os.rmdir(os.path.dirname(path))  # only succeeds when empty (no concurrent run)
    except OSError:
        pass


def validate_options(options: CheckOptions) -> None:
    if not options.warehouse:
        raise ConfigError("--warehouse", "a warehouse (Delta tables directory) is required")
    if options.fresh and options.snapshot_id:
        raise ConfigError("--fresh", "use either --snapshot-id or --fresh, not both")
    if options.fail_on is not None:
        try:
            FailOn(options.fail_on)
        except ValueError:
            raise ConfigError("--fail-on", "must be one of never, warning, critical") from None
