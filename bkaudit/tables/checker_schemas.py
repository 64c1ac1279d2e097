"""Schemas of the metadata checker's Delta tables: `violations`, `audit_runs`, `bookie_checks`, and the
decommission audit's `decommission_audits` (built from a checker run).

Same conventions as `bkaudit.tables.schemas` (Arrow is the source of truth, Spark's schema is derived):
every table lives at `<warehouse>/<name>`, is partitioned by `run_date` (the run's UTC date,
'YYYY-MM-DD') and carries the `run_id` of the run that wrote it plus the `snapshot_id` it checked. A run
replaces exactly its own rows (commit with `replace={"run_id": ...}`), and `audit_runs` is committed last:
its 'succeeded' row is the visibility marker readers use, as the `snapshots` row is for the snapshot job.

docs/tables.md documents every column. Column names and types are a public interface.
"""

from __future__ import annotations

import pyarrow as pa

from bkaudit.tables.schemas import STRING_LIST, TIMESTAMP, TableSpec

RUN_PARTITION = "run_date"

RANGE_STRUCT = pa.struct(
    [pa.field("first", pa.int64(), nullable=False), pa.field("last", pa.int64(), nullable=False)]
)
"""An inclusive range of entry ids."""


def _key(name: str, type_: pa.DataType) -> pa.Field:
    return pa.field(name, type_, nullable=False)


RUN_KEYS = [_key("run_id", pa.string()), _key("snapshot_id", pa.string()), _key(RUN_PARTITION, pa.string())]

VIOLATIONS = TableSpec(
    "violations",
    pa.schema(
        [
            *RUN_KEYS,
            pa.field("ledger_id", pa.int64()),
            _key("category", pa.string()),
            _key("severity", pa.string()),
            pa.field("segment_index", pa.int32()),
            pa.field("bookie_id", pa.string()),
            pa.field("missing_entries", pa.list_(RANGE_STRUCT)),
            pa.field("min_replicas", pa.int32()),
            pa.field("managed_ledger", pa.string()),
            pa.field("detail", pa.string()),
            # placement findings: what BookKeeper's own Auditor would say (docs/placement.md)
            pa.field("bookkeeper_verdict", pa.string()),
            pa.field("under_repair", pa.bool_()),
            pa.field("published", pa.bool_()),
            pa.field("detected_at", TIMESTAMP),
            # the ledger's quorum (BookKeeper's ensembleSize, writeQuorumSize, ackQuorumSize); null for
            # findings about a bookie or an unparseable znode
            pa.field("ensemble_size", pa.int32()),
            pa.field("write_quorum", pa.int32()),
            pa.field("ack_quorum", pa.int32()),
            # what a ledger finding rests on: "listing" (exact) or "reads" (sampled, a lower bound)
            pa.field("evidence", pa.string()),
            pa.field("sampled_fraction", pa.float64()),
        ]
    ),
    partition_by=(RUN_PARTITION,),
    description="one row per violation found by a metadata checker run (bkaudit check)",
)

AUDIT_RUNS = TableSpec(
    "audit_runs",
    pa.schema(
        [
            *RUN_KEYS,
            pa.field("status", pa.string()),
            pa.field("error", pa.string()),
            pa.field("started_at", TIMESTAMP),
            pa.field("finished_at", TIMESTAMP),
            pa.field("seconds", pa.float64()),
            pa.field("zk", pa.string()),
            pa.field("root", pa.string()),
            pa.field("config", pa.string()),
            pa.field("ledgers_checked", pa.int64()),
            pa.field("ledgers_durability_checked", pa.int64()),
            pa.field("entries_checked", pa.int64()),
            pa.field("bookies_checked", pa.int64()),
            pa.field("counts", pa.map_(pa.string(), pa.int64())),
            pa.field("under_repair", pa.map_(pa.string(), pa.int64())),
            pa.field("reevaluated", pa.int64()),
            pa.field("deleted_during_run", pa.int64()),
            pa.field("published", pa.int64()),
            pa.field("phase_seconds", pa.map_(pa.string(), pa.float64())),
        ]
    ),
    partition_by=(RUN_PARTITION,),
    description="one row per checker run; committed last, so a 'succeeded' row marks a complete run",
)

BOOKIE_CHECKS = TableSpec(
    "bookie_checks",
    pa.schema(
        [
            *RUN_KEYS,
            _key("bookie_id", pa.string()),
            pa.field("state", pa.string()),
            pa.field("registered", pa.bool_()),
            pa.field("reachable", pa.bool_()),
            pa.field("target", pa.string()),
            pa.field("attempts", pa.int32()),
            pa.field("calls", pa.int64()),
            pa.field("ledgers_listed", pa.int64()),
            pa.field("errors", pa.int64()),
            pa.field("error_statuses", pa.map_(pa.string(), pa.int64())),
            pa.field("last_error", pa.string()),
            pa.field("ledgers_unverified", pa.int64()),
            pa.field("latency_ms_p50", pa.float64()),
            pa.field("latency_ms_p95", pa.float64()),
            pa.field("latency_ms_p99", pa.float64()),
            pa.field("latency_ms_max", pa.float64()),
            # "listing" or "reads" (no listing on this bookie this run) and why
            pa.field("evidence", pa.string()),
            pa.field("evidence_reason", pa.string()),
        ]
    ),
    partition_by=(RUN_PARTITION,),
    description="one row per bookie the checker had to ask: calls, answers, errors, latency",
)

AUDIT_PARTITION = "audit_date"

# `bkaudit decommission-audit` (bkaudit.decommission): one row per bookie per audit
BLOCKING_STRUCT = pa.struct([
    pa.field("ledger_id", pa.int64(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("min_copies_after", pa.int32()),
    pa.field("entries_at_risk", pa.int64()),
    pa.field("ranges", pa.list_(RANGE_STRUCT)),
    pa.field("managed_ledger", pa.string()),
    pa.field("detail", pa.string()),
])

DECOMMISSION_AUDITS = TableSpec(
    "decommission_audits",
    pa.schema([
        pa.field("audit_id", pa.string(), nullable=False),
        pa.field("snapshot_id", pa.string(), nullable=False),
        pa.field(AUDIT_PARTITION, pa.string(), nullable=False),
        pa.field("bookie_id", pa.string(), nullable=False),
        pa.field("requested", STRING_LIST),
        pa.field("state", pa.string()),
        pa.field("safe", pa.bool_()),
        pa.field("ledgers", pa.int64()),
        pa.field("open_ledgers", pa.int64()),
        pa.field("entries", pa.int64()),
        pa.field("blocking_count", pa.int64()),
        pa.field("blocking", pa.list_(BLOCKING_STRUCT)),
        pa.field("min_copies", pa.int32()),
        pa.field("check_run_id", pa.string()),
        pa.field("audited_at", TIMESTAMP),
        # bookies without listing, verified by LedgerChecker-style reads, and the share of entries read
        pa.field("verified_by_reads", STRING_LIST),
        pa.field("verification_percentage", pa.float64()),
    ]),
    partition_by=(AUDIT_PARTITION,),
    description="one row per bookie per decommission audit: safe to remove, and the ledgers blocking it",
)

CHECKER_TABLES = ("violations", "bookie_checks")
"""Committed in this order, then `audit_runs` last (the visibility marker)."""

__all__ = [
    "AUDIT_PARTITION",
    "AUDIT_RUNS",
    "BLOCKING_STRUCT",
    "BOOKIE_CHECKS",
    "CHECKER_TABLES",
    "DECOMMISSION_AUDITS",
    "RANGE_STRUCT",
    "STRING_LIST",
    "VIOLATIONS",
]
