"""The "bookkeeper" Spark data source: every ledger metadata znode as one row, read in parallel tasks.

    spark.read.format("bookkeeper").option("zk", "zk1:2181").option("root", "/ledgers").load()

Rows follow `bkaudit.tables.schemas.SOURCE_SCHEMA`: the `ledgers` columns plus a nested `segments` array, so
one pass over ZooKeeper feeds both the `ledgers` and the `ledger_segments` tables.

Protecting ZooKeeper (BookKeeper users' top complaint is audits that expire sessions): the driver plans at
most `max_zk_sessions` partitions (`bkaudit.store.zkscan`), each task opens its own session inside `read()`
(clients never cross a pickle boundary), keeps at most `max_in_flight` reads outstanding and takes a token
from a per-task `RateLimiter` (`reads_per_second_per_task`, 0 = unlimited) for each znode read. Reads go
out as pipelined ZooKeeper multiRead requests of 100 getData ops (`bkaudit.zk.multiread.read_chunks`;
single pipelined reads with `multi_read=false` or on ZooKeeper < 3.6). Transient errors are retried with
jittered backoff; a ledger deleted between listing and reading is simply absent. Decoding never raises: a bad
blob is a row with `parse_error`.

Options (snake_case, as in the [zk] and [snapshot] settings, with their defaults and checks: `ReadOptions`):
zk (required), root, session_timeout_s, connect_timeout_s, auth_digest_secret ("user:password"; named so
Spark redacts it), max_zk_sessions, partitions, reads_per_second_per_task, max_in_flight, batch_size,
attempts, multi_read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from bkaudit.config import ZkSettings, section_from_text
from bkaudit.errors import ConfigError
from bkaudit.spark.settings import SnapshotSettings

NAME = "bookkeeper"
ZK_OPTIONS = {"zk": "connect", "root": "root", "session_timeout_s": "session_timeout_s",
              "connect_timeout_s": "connect_timeout_s", "auth_digest_secret": "auth_digest"}
"""Data source option -> its `[zk]` key (`auth_digest_secret`: so named that Spark redacts it)."""
SNAPSHOT_OPTIONS = ("max_zk_sessions", "partitions", "reads_per_second_per_task", "max_in_flight",
                    "batch_size", "attempts", "multi_read")
"""The `[snapshot]` keys the data source takes as options, under their own names."""


@dataclass(frozen=True)
class ReadOptions:
    """What a reading task needs: the typed `[zk]` and `[snapshot]` settings, so the data source has the
    settings' defaults and checks, not copies (picklable: it travels to every task).

    Spark hands a Python data source its options as strings: `parse` reads them through the sections' own
    validation (`config.section_from_text`); the snapshot job hands its tasks the sections themselves."""

    zk: ZkSettings
    snapshot: SnapshotSettings = dataclasses.field(default_factory=SnapshotSettings)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        lowered = {k.lower(): v for k, v in options.items() if k.lower() not in ("path",)}
        if not lowered.get("zk"):
            raise ValueError('the bookkeeper data source needs .option("zk", "host:port[,host:port]")')
        known = [*ZK_OPTIONS, *SNAPSHOT_OPTIONS]
        unknown = sorted(set(lowered) - set(known))
        if unknown:
            raise ValueError(f"unknown bookkeeper data source option(s) {unknown} (known: {sorted(known)})")
        try:
            zk = section_from_text("zk", ZkSettings,
                                   {key: lowered[opt] for opt, key in ZK_OPTIONS.items() if opt in lowered})
            snapshot = section_from_text("snapshot", SnapshotSettings,
                                         {key: lowered[key] for key in SNAPSHOT_OPTIONS if key in lowered})
        except ConfigError as exc:
            section, _, key = exc.key.partition(".")
            option = next((o for o, k in ZK_OPTIONS.items() if k == key), key) if section == "zk" else key
            raise ValueError(f"bookkeeper data source option {option}: {exc.reason}") from None
        return cls(zk, snapshot)

    def session_settings(self) -> ZkSettings:
        """`[zk]` as this process connects with it: built here, not unpickled, so that its checks run in this
        process and the digest's password is registered with its log redaction (`bkaudit.logs`)."""
        return dataclasses.replace(self.zk)

    @property
    def root(self) -> str:
        return self.zk.root

    @property
    def multi_read(self) -> bool:
        return self.snapshot.multi_read

    @property
    def task_count(self) -> int:
        return self.snapshot.partitions or self.snapshot.max_zk_sessions


class LedgerPartition(InputPartition):
    """The ledger-tree units (dirs relative to the root) one task reads."""

    def __init__(self, units: list[str]) -> None:
        super().__init__(tuple(units))
        self.units = list(units)


class BookKeeperReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        return [LedgerPartition(g) for g in plan_partitions(self.options)] or [LedgerPartition([])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        units = getattr(partition, "units", None) or list(partition.value or ())
        if units:
            yield from read_units(self.options, units)


def plan_partitions(options: ReadOptions) -> list[list[str]]:
    """The ledger-tree units of each task, planned on the driver with one short session: at most
    `max_zk_sessions` groups, so at most that many concurrent sessions."""
    from bkaudit.store.zkscan import pack, plan_units

    units = plan_units(options.session_settings(), options.task_count)
    return [list(g) for g in pack(units, options.task_count)]


def read_units(options: ReadOptions, units: list[str]) -> Iterator[Any]:
    """Arrow RecordBatches (SOURCE_SCHEMA) of every ledger under `units`, on a session of our own.

    With multiRead (the default) a leaf directory's ledgers are read in chunks of `MULTI_READ_BATCH` and
    handled a chunk at a time, from listing to columns (ids, data, stats): no Python object per ledger
    beyond its name and bytes, which is most of what a reading task spends besides decoding."""
    from bkaudit.tables.rows import chunk_batches, ledger_batches
    from bkaudit.zk.client import RateLimiter, close, connect
    from bkaudit.zk.ledgers import iter_ledger_dirs, iter_ledgers, read_many
    from bkaudit.zk.multiread import MULTI_READ_BATCH, read_chunks

    zk = connect(options.session_settings())
    try:
        snap = options.snapshot
        limiter = RateLimiter(snap.reads_per_second_per_task) if snap.reads_per_second_per_task else None
        if snap.multi_read:
            step = max(1, min(MULTI_READ_BATCH, snap.max_in_flight))

            def chunks() -> Iterator[tuple[list[int], list[str]]]:
                for ids, znodes in iter_ledger_dirs(zk, options.root, units):
                    for at in range(0, len(ids), step):
                        yield ids[at : at + step], znodes[at : at + step]

            answered = read_chunks(
                zk,
                chunks(),
                max_in_flight=snap.max_in_flight,
                rate_limiter=limiter,
                attempts=snap.attempts,
            )
            yield from chunk_batches(
                ((ids, a.data, a.stats) for ids, _, a in answered), batch_size=snap.ledgers_per_batch
            )
            return
        ids: dict[str, int] = {}

        def listed() -> Iterator[str]:
            for ledger_id, path in iter_ledgers(zk, options.root, units):
                ids[path] = ledger_id
                yield path

        reads = read_many(
            zk, listed(), max_in_flight=snap.max_in_flight, rate_limiter=limiter, attempts=snap.attempts
        )
        yield from ledger_batches(reads, ids, batch_size=snap.ledgers_per_batch)
    finally:
        close(zk)


class BookKeeperDataSource(DataSource):
    """`spark.read.format("bookkeeper")`: ledger metadata straight from ZooKeeper."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> Any:
        from pyspark.sql.pandas.types import from_arrow_schema

        from bkaudit.tables.schemas import SOURCE_SCHEMA

        return from_arrow_schema(SOURCE_SCHEMA)

    def reader(self, schema: Any) -> DataSourceReader:
        return BookKeeperReader(ReadOptions.parse(dict(self.options)))


def register(spark: Any) -> None:
    """Register the data source with this session (cheap; re-registering replaces the same class)."""
    spark.dataSource.register(BookKeeperDataSource)
