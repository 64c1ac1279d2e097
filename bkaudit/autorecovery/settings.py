"""`[autorecovery]` settings: the Auditor and ReplicationWorker knobs, with BookKeeper's names and defaults.

Every key that BookKeeper also has keeps its default (converted to seconds) and names the BookKeeper key in a
comment, so an operator moving from BookKeeper's AutoRecovery finds the same behaviour. Tests shorten the
periods through the environment (`BKAUDIT_AUTORECOVERY__OPEN_LEDGER_REREPLICATION_GRACE=1`, ...).
"""

from __future__ import annotations

import dataclasses

from bkaudit.errors import ConfigError

# BookKeeper's ReplicationWorker: the first failure holds the lock grace / 2^5, doubling up to grace
FAILED_LEDGER_BACKOFF_SHIFT = 5


@dataclasses.dataclass(frozen=True)
class AutoRecoverySettings:
    """Auditor (election, lost-bookie audit) and ReplicationWorker settings."""

    # lostBookieRecoveryDelay (s, default 0): only seeds `underreplication/lostBookieRecoveryDelay` when that
    # znode is absent; the running auditor follows the znode (`bkaudit autorecovery` / BookKeeper's shell)
    lost_bookie_recovery_delay_s: int = 0
    # auditorPeriodicBookieCheckInterval (s, default 86400 = a day): the Auditor's bookie check (every bookie
    # named in any ensemble against the registered ones) runs at election and then at this fixed rate;
    # 0 = at election only (BookKeeper: "running once check now anyhow")
    auditor_periodic_bookie_check_interval_s: int = 86400
    # openLedgerRereplicationGracePeriod (30000 ms): how long an OPEN ledger with a lost bookie in its last
    # ensemble is left to its writer before the worker fences, recovers and re-replicates it (name fixed by
    # the issue; seconds)
    open_ledger_rereplication_grace: float = 30.0
    # lockReleaseOfFailedLedgerGracePeriod (300000 ms): after a failed pass the lock is held grace/32,
    # doubling per failure up to grace, so a broken ledger is not retried in a tight loop
    lock_release_of_failed_ledger_grace_s: float = 300.0
    # rereplicationEntryBatchSize (10 in BookKeeper, processed one batch after the other): ours is the number
    # of entries in flight per fragment copy (reads and recovery adds pipelined), so it can be much larger
    rereplication_entry_batch_size: int = 500
    # zkReplicationTaskRateLimit (0 = off): ledgers a worker may take from the queue per second (BP-66)
    zk_replication_task_rate_limit: float = 0.0
    # rwRereplicateBackoffMs (5000 ms): pause after a pass that replicated nothing (e.g. NotEnoughBookies)
    rw_rereplicate_backoff_s: float = 5.0
    # replicationRateByBytes (-1 = off): bytes/s a worker copies, to protect live traffic
    replication_rate_by_bytes: int = -1
    # auditorMaxNumberOfConcurrentOpenLedgerOperations (500): metadata reads in flight during an audit
    max_concurrent_metadata_reads: int = 500
    # markers the auditor publishes per second (BookKeeper throttles publishing since #3541); 0 = unlimited
    publish_rate_limit: float = 1000.0
    # passes whose only problem is entries no surviving replica has before the ledger is recorded as
    # data-lost and left alone (BookKeeper retries forever: #3316, #4872)
    data_loss_max_attempts: int = 3
    # a bookie unregistered for less than this may be restarting: entries only it could still hold are
    # retried, never recorded as lost (a Draining bookie that is down counts as gone at once)
    data_loss_lost_bookie_grace_s: float = 300.0
    # ReplicationWorker threads per process (`--workers` overrides)
    workers: int = 1
    # how often an idle worker re-lists the queue (watches wake it earlier)
    idle_poll_s: float = 1.0
    # Prometheus text file written periodically and at exit (node_exporter textfile collector); "" = none
    metrics_file: str = ""
    metrics_interval_s: float = 15.0

    def __post_init__(self) -> None:
        for key in ("lost_bookie_recovery_delay_s", "auditor_periodic_bookie_check_interval_s"):
            if getattr(self, key) < 0:
                raise ConfigError(f"autorecovery.{key}", "must be >= 0")
        for key in (
            "open_ledger_rereplication_grace",
            "lock_release_of_failed_ledger_grace_s",
            "rw_rereplicate_backoff_s",
            "zk_replication_task_rate_limit",
            "publish_rate_limit",
            "data_loss_lost_bookie_grace_s",
        ):
            if getattr(self, key) < 0:
                raise ConfigError(f"autorecovery.{key}", "must be >= 0")
        for key in (
            "rereplication_entry_batch_size",
            "max_concurrent_metadata_reads",
            "data_loss_max_attempts",
            "workers",
        ):
            if getattr(self, key) < 1:
                raise ConfigError(f"autorecovery.{key}", "must be >= 1")
        if self.replication_rate_by_bytes == 0 or self.replication_rate_by_bytes < -1:
            raise ConfigError("autorecovery.replication_rate_by_bytes", "must be -1 (off) or > 0")
        if self.idle_poll_s <= 0 or self.metrics_interval_s <= 0:
            raise ConfigError("autorecovery.idle_poll_s", "idle_poll_s and metrics_interval_s must be > 0")

    def failed_ledger_backoff_s(self, failures: int) -> float:
        """Lock hold after the `failures`-th consecutive failed pass (BookKeeper's deferLedgerLockRelease)."""
        grace = self.lock_release_of_failed_ledger_grace_s
        base = grace / (1 << FAILED_LEDGER_BACKOFF_SHIFT)
        return float(min(grace, base * (1 << max(0, min(failures - 1, 30)))))
