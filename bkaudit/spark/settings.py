"""[snapshot] settings of the snapshot job (defaults here; conf/bkaudit.toml and docs/config.md mirror them).

Kept free of pyspark imports so `bkaudit.config` can validate a settings file without starting Spark.
"""

from __future__ import annotations

import dataclasses

from bkaudit.config import KEY
from bkaudit.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class SnapshotSettings:
    """How the snapshot job reads ZooKeeper and where it writes."""

    warehouse: str = ""  # directory or URI holding the Delta tables (required to run)
    # ZooKeeper protection (BookKeeper: auditorMaxNumberOfConcurrentOpenLedgerOperations plays this role)
    max_zk_sessions: int = 4  # cap on concurrent ZooKeeper sessions = max ledger-reading Spark tasks
    partitions: int = 0  # ledger-reading tasks; 0 = max_zk_sessions; never more than max_zk_sessions
    # token-bucket cap per task; 0 = unlimited. 20,000: a quarter of what a task reads here unthrottled
    # (~80,000/s at 1M ledgers), and a 100 getData/s probe kept its p99 under 20 ms (docs/performance.md);
    # the default 4 sessions cap a snapshot at 80,000 reads/s on a larger Spark cluster
    reads_per_second_per_task: float = 20_000.0
    max_in_flight: int = 500  # pipelined reads outstanding per session
    multi_read: bool = True  # batch reads as ZooKeeper multiRead (>= 3.6; older servers: automatic fallback)
    attempts: int = 5  # tries per ZooKeeper request on transient errors (jittered exponential backoff)
    # ledgers per Arrow batch handed to Spark; key `batch_size` (not [checker] batch_size, ledgers per call)
    ledgers_per_batch: int = dataclasses.field(default=10_000, metadata={KEY: "batch_size"})
    # validation (Great Expectations)
    validate: bool = True
    fail_on_critical_validation: bool = True  # a failed critical expectation fails the run (nothing visible)
    validation_engine: str = "auto"  # auto | pandas (driver, fast) | spark (distributed, for huge clusters)
    # auto switches to spark above this many ledgers: the checker's driver-side join stops at the same size
    # (DRIVER_INPUT_MAX_LEDGERS), so the driver's memory stops growing there (docs/performance.md "Memory")
    validation_pandas_max_ledgers: int = 2_000_000
    master: str = "local[2]"  # Spark master for `bkaudit snapshot` (spark-submit uses its own)
    # snapshot freshness metrics (bkaudit_snapshot_*), as the checker's: a textfile and/or a push gateway
    metrics_file: str = ""
    pushgateway_url: str = ""
    metrics_job: str = "bkaudit_snapshot"

    def __post_init__(self) -> None:
        if self.max_zk_sessions < 1:
            raise ConfigError("snapshot.max_zk_sessions", "must be >= 1")
        if self.partitions < 0 or self.partitions > self.max_zk_sessions:
            raise ConfigError(
                "snapshot.partitions",
                f"must be between 0 (= max_zk_sessions) and max_zk_sessions={self.max_zk_sessions}, "
                f"got {self.partitions}: more tasks would exceed the ZooKeeper session cap",
            )
        if self.reads_per_second_per_task < 0:
            raise ConfigError("snapshot.reads_per_second_per_task", "must be >= 0 (0 = unlimited)")
        if self.max_in_flight < 1:
            raise ConfigError("snapshot.max_in_flight", "must be >= 1")
        if self.attempts < 1:
            raise ConfigError("snapshot.attempts", "must be >= 1")
        if self.validation_engine not in ("auto", "pandas", "spark"):
            raise ConfigError(
                "snapshot.validation_engine", f"must be auto, pandas or spark, got {self.validation_engine!r}"
            )
        if self.ledgers_per_batch < 1:
            raise ConfigError("snapshot.batch_size", "must be >= 1")
