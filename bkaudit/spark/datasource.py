"""The "bookkeeper" Spark data source: every ledger metadata znode as one row, read in parallel tasks.

    spark.read.format("bookkeeper").option("zk", "zk1:2181").option("root", "/ledgers").load()

Rows follow `bkaudit.tables.schemas.SOURCE_SCHEMA`: the `ledgers` columns plus a nested `segments` array, so
one pass over ZooKeeper feeds both the `ledgers` and the `ledger_segments` tables.

Protecting ZooKeeper (BookKeeper users' top complaint is audits that expire sessions): the driver plans at
most `max_zk_sessions` partitions (`bkaudit.job.zkscan`), each task opens its own session inside `read()`
(clients never cross a pickle boundary), keeps at most `max_in_flight` reads outstanding and takes a token
from a per-task `RateLimiter` (`reads_per_second_per_task`, 0 = unlimited) for each znode read. Reads go
out as pipelined ZooKeeper multiRead requests of 100 getData ops (`bkaudit.zk.multiread.read_chunks`;
single pipelined reads with `multi_read=false` or on ZooKeeper < 3.6). Transient errors are retried with
jittered backoff; a ledger deleted between listing and reading is simply absent. Decoding never raises: a bad
blob is a row with `parse_error`.

Options (snake_case, as in the [snapshot] settings): zk (required), root, session_timeout_s,
connect_timeout_s, auth_digest_secret ("user:password"; named so Spark redacts it), max_zk_sessions,
partitions, reads_per_second_per_task, max_in_flight, batch_size, attempts, multi_read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

NAME = "bookkeeper"


@dataclass(frozen=True)
class ReadOptions:
    """Validated data source options (picklable: it travels to every task)."""

    zk: str
    root: str = "/ledgers"
    session_timeout_s: float = 30.0
    connect_timeout_s: float = 15.0
    auth_digest_secret: str = ""
    max_zk_sessions: int = 4
    partitions: int = 0  # 0 = max_zk_sessions
    reads_per_second_per_task: float = 20_000.0  # SnapshotSettings' default (docs/performance.md)
    max_in_flight: int = 500
    batch_size: int = 10_000
    attempts: int = 5
    multi_read: bool = True  # batch reads as ZooKeeper multiRead (>= 3.6); False = one getData per znode

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        lowered = {k.lower(): v for k, v in options.items() if k.lower() not in ("path",)}
        if not lowered.get("zk"):
            raise ValueError('the bookkeeper data source needs .option("zk", "host:port[,host:port]")')
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(lowered) - set(known))
        if unknown:
            raise ValueError(f"unknown bookkeeper data source option(s) {unknown} (known: {sorted(known)})")
        kwargs: dict[str, Any] = {}
        for key, raw in lowered.items():
            kind = known[key].type
            try:
                kwargs[key] = _convert(str(kind), raw)
            except ValueError:
                raise ValueError(f"bookkeeper data source option {key}={raw!r}: expected {kind}") from None
        opts = cls(**kwargs)
        opts.check()
        return opts

    def check(self) -> None:
        from bkaudit.zk.paths import validate_root

        validate_root(self.root)
        if self.max_zk_sessions < 1:
            raise ValueError("max_zk_sessions must be >= 1")
        if self.partitions < 0 or self.partitions > self.max_zk_sessions:
            raise ValueError(
                f"partitions={self.partitions} would open more than max_zk_sessions={self.max_zk_sessions} "
                "concurrent ZooKeeper sessions (use 0 for max_zk_sessions)"
            )
        if self.max_in_flight < 1 or self.batch_size < 1 or self.attempts < 1:
            raise ValueError("max_in_flight, batch_size and attempts must be >= 1")
        if self.reads_per_second_per_task < 0:
            raise ValueError("reads_per_second_per_task must be >= 0 (0 = unlimited)")

    @property
    def task_count(self) -> int:
        return self.partitions or self.max_zk_sessions

    def zk_settings(self) -> Any:
        from bkaudit.config import ZkSettings

        return ZkSettings(
            connect=self.zk,
            root=self.root,
            session_timeout_s=self.session_timeout_s,
            connect_timeout_s=self.connect_timeout_s,
            auth_digest=self.auth_digest_secret,
        )


def _convert(kind: str, raw: Any) -> Any:
    if kind == "bool":
        text = str(raw).strip().lower()
        if text not in ("true", "false", "1", "0"):
            raise ValueError(raw)
        return text in ("true", "1")
    return int(raw) if kind == "int" else float(raw) if kind == "float" else str(raw)


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
    from bkaudit.job.zkscan import pack, plan_units

    units = plan_units(options.zk_settings(), options.task_count)
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

    zk = connect(options.zk_settings())
    try:
        limiter = (
            RateLimiter(options.reads_per_second_per_task) if options.reads_per_second_per_task else None
        )
        if options.multi_read:
            step = max(1, min(MULTI_READ_BATCH, options.max_in_flight))

            def chunks() -> Iterator[tuple[list[int], list[str]]]:
                for ids, znodes in iter_ledger_dirs(zk, options.root, units):
                    for at in range(0, len(ids), step):
                        yield ids[at : at + step], znodes[at : at + step]

            answered = read_chunks(
                zk,
                chunks(),
                max_in_flight=options.max_in_flight,
                rate_limiter=limiter,
                attempts=options.attempts,
            )
            yield from chunk_batches(
                ((ids, a.data, a.stats) for ids, _, a in answered), batch_size=options.batch_size
            )
            return
        ids: dict[str, int] = {}

        def listed() -> Iterator[str]:
            for ledger_id, path in iter_ledgers(zk, options.root, units):
                ids[path] = ledger_id
                yield path

        reads = read_many(
            zk, listed(), max_in_flight=options.max_in_flight, rate_limiter=limiter, attempts=options.attempts
        )
        yield from ledger_batches(reads, ids, batch_size=options.batch_size)
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


def options_from_settings(zk: Any, snapshot: Any) -> dict[str, str]:
    """Data source options from ZkSettings and SnapshotSettings."""
    return {
        "zk": zk.connect,
        "root": zk.root,
        "session_timeout_s": str(zk.session_timeout_s),
        "connect_timeout_s": str(zk.connect_timeout_s),
        "auth_digest_secret": zk.auth_digest,
        "max_zk_sessions": str(snapshot.max_zk_sessions),
        "partitions": str(snapshot.partitions),
        "reads_per_second_per_task": str(snapshot.reads_per_second_per_task),
        "max_in_flight": str(snapshot.max_in_flight),
        "batch_size": str(snapshot.batch_size),
        "attempts": str(snapshot.attempts),
        "multi_read": str(snapshot.multi_read).lower(),
    }
