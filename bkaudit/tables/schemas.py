"""Schemas of bkaudit's Delta tables: one Arrow schema per table, the Spark schema derived from it.

Arrow is the source of truth because every writer (executors staging Parquet, the driver writing small
tables, delta-rs committing) speaks Arrow; Spark's `StructType` is derived so the two can never drift.
Every table lives at `<warehouse>/<name>`, is partitioned by `snapshot_date` (the run's UTC date,
'YYYY-MM-DD') and carries the `snapshot_id` of the run that wrote it: a run replaces exactly its own rows.

Other jobs define their tables in the same style (tables/checker_schemas.py); tables/catalog.py lists
every table in one place; docs/tables.md documents each column. Column types are part of the public
interface (data engineers query them): change them only with a
migration note.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

TIMESTAMP = pa.timestamp("us", tz="UTC")  # Delta's `timestamp` (microseconds, UTC-adjusted)
STRING_LIST = pa.list_(pa.string())
STRING_MAP = pa.map_(pa.string(), pa.string())
PARTITION_COLUMN = "snapshot_date"


@dataclass(frozen=True)
class TableSpec:
    """A Delta table: its name (= directory under the warehouse), Arrow schema and partition columns."""

    name: str
    schema: pa.Schema
    partition_by: tuple[str, ...] = (PARTITION_COLUMN,)
    description: str = ""

    def __post_init__(self) -> None:
        missing = [c for c in (*self.partition_by, "snapshot_id") if c not in self.schema.names]
        if missing:
            raise ValueError(f"table {self.name}: schema lacks {missing}")

    @property
    def file_schema(self) -> pa.Schema:
        """The columns stored inside Parquet files (partition values live in the Delta log)."""
        return pa.schema([f for f in self.schema if f.name not in self.partition_by])

    def spark_schema(self) -> StructType:
        """The Spark schema, columns in table order (partition columns included)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(self.schema)


def _key(name: str, type_: pa.DataType) -> pa.Field:
    return pa.field(name, type_, nullable=False)


SNAPSHOT_KEYS = [_key("snapshot_id", pa.string()), _key(PARTITION_COLUMN, pa.string())]

# One nested segment as the data source emits it inside a ledger row (the job explodes it into
# `ledger_segments`); last_entry_id is derived (None for the open last segment).
SEGMENT_STRUCT = pa.struct(
    [
        pa.field("segment_index", pa.int32(), nullable=False),
        pa.field("first_entry_id", pa.int64(), nullable=False),
        pa.field("last_entry_id", pa.int64()),
        pa.field("ensemble", STRING_LIST),
    ]
)

LEDGER_COLUMNS = [
    _key("ledger_id", pa.int64()),
    pa.field("state", pa.string()),
    pa.field("ensemble_size", pa.int32()),
    pa.field("write_quorum", pa.int32()),
    pa.field("ack_quorum", pa.int32()),
    pa.field("last_entry_id", pa.int64()),
    pa.field("length", pa.int64()),
    pa.field("digest_type", pa.string()),
    pa.field("ctime", TIMESTAMP),
    pa.field("custom_metadata", STRING_MAP),
    pa.field("managed_ledger", pa.string()),
    pa.field("segment_count", pa.int32()),
    pa.field("znode_version", pa.int32()),
    pa.field("znode_mzxid", pa.int64()),
    pa.field("znode_ctime", TIMESTAMP),
    pa.field("parse_error", pa.string()),
    pa.field("raw_metadata", pa.string()),
]

# What the "bookkeeper" Spark data source returns: the ledger columns plus the nested segments, so a single
# pass over ZooKeeper feeds both `ledgers` and `ledger_segments`.
SOURCE_SCHEMA = pa.schema([*LEDGER_COLUMNS, pa.field("segments", pa.list_(SEGMENT_STRUCT))])

LEDGERS = TableSpec(
    "ledgers",
    pa.schema([*SNAPSHOT_KEYS, *LEDGER_COLUMNS]),
    description="one row per ledger metadata znode (unparseable ones keep parse_error + raw_metadata)",
)

LEDGER_SEGMENTS = TableSpec(
    "ledger_segments",
    pa.schema(
        [
            *SNAPSHOT_KEYS,
            _key("ledger_id", pa.int64()),
            _key("segment_index", pa.int32()),
            _key("first_entry_id", pa.int64()),
            pa.field("last_entry_id", pa.int64()),
            pa.field("ensemble", STRING_LIST),
        ]
    ),
    description="one row per ensemble (segment) of every parseable ledger",
)

ENDPOINT_STRUCT = pa.struct(
    [
        pa.field("id", pa.string()),
        pa.field("host", pa.string()),
        pa.field("port", pa.int32()),
        pa.field("protocol", pa.string()),
        pa.field("auth", STRING_LIST),
        pa.field("extensions", STRING_LIST),
    ]
)

BOOKIES = TableSpec(
    "bookies",
    pa.schema(
        [
            *SNAPSHOT_KEYS,
            _key("bookie_id", pa.string()),
            pa.field("state", pa.string()),
            pa.field("has_cookie", pa.bool_()),
            pa.field("location", pa.string()),
            pa.field("rack", pa.string()),
            pa.field("region", pa.string()),
            pa.field("zone", pa.string()),
            pa.field("hostname", pa.string()),
            pa.field("endpoints", pa.list_(ENDPOINT_STRUCT)),
            pa.field("properties", STRING_MAP),
            pa.field("error", pa.string()),
            pa.field("lifecycle_state", pa.string()),  # Active / Draining / DrainingFailed / Drained
        ]
    ),
    description="registered, read-only, cookie-only and ensemble-only (unknown) bookies with their location",
)

UNDERREPLICATED_LEDGERS = TableSpec(
    "underreplicated_ledgers",
    pa.schema(
        [
            *SNAPSHOT_KEYS,
            _key("ledger_id", pa.int64()),
            pa.field("missing_replicas", STRING_LIST),
            pa.field("marked_at", TIMESTAMP),
            pa.field("locked_by", pa.string()),
            pa.field("parse_error", pa.string()),
        ]
    ),
    description="the under-replication queue: one row per urL marker",
)

VALIDATION_RESULTS = TableSpec(
    "validation_results",
    pa.schema(
        [
            *SNAPSHOT_KEYS,
            _key("expectation", pa.string()),
            pa.field("table_name", pa.string()),
            pa.field("expectation_type", pa.string()),
            pa.field("column", pa.string()),
            pa.field("severity", pa.string()),
            pa.field("success", pa.bool_()),
            pa.field("element_count", pa.int64()),
            pa.field("unexpected_count", pa.int64()),
            pa.field("unexpected_percent", pa.float64()),
            pa.field("partial_unexpected", STRING_LIST),
            pa.field("details", pa.string()),
            pa.field("validated_at", TIMESTAMP),
        ]
    ),
    description="Great Expectations results of the suite run after each snapshot",
)

SNAPSHOTS = TableSpec(
    "snapshots",
    pa.schema(
        [
            *SNAPSHOT_KEYS,
            pa.field("zk", pa.string()),
            pa.field("root", pa.string()),
            pa.field("started_at", TIMESTAMP),
            pa.field("finished_at", TIMESTAMP),
            pa.field("status", pa.string()),
            pa.field("error", pa.string()),
            pa.field("ledgers", pa.int64()),
            pa.field("unparseable", pa.int64()),
            pa.field("segments", pa.int64()),
            pa.field("bookies", pa.int64()),
            pa.field("underreplicated", pa.int64()),
            pa.field("validation_failures", pa.int64()),
            pa.field("seconds", pa.float64()),
            pa.field("table_versions", pa.map_(pa.string(), pa.int64())),
            pa.field("config", pa.string()),
        ]
    ),
    description="one row per run; committed last, so a 'succeeded' row marks a complete snapshot",
)

# The snapshot job's tables in commit order: `snapshots` last, it is the visibility marker.
SNAPSHOT_TABLES = ("ledgers", "ledger_segments", "bookies", "underreplicated_ledgers", "validation_results")


def conform(data: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    """`data` with exactly `schema`'s columns, order and types (missing columns as nulls).

    delta-rs does not check the schema of files it commits, and an all-null column Parquet-typed as INT32
    broke a later Spark read, so every file is cast to the table schema before it is written.
    """
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)
