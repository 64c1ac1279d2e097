"""AutoRecovery counters under BookKeeper's names (replication/ReplicationStats.java), plus rates.

BookKeeper's Prometheus provider exports `<scope>_<NAME>`; the scopes are `replication_worker` and `auditor`
(with an extra `replication_` prefix when AutoRecovery runs inside a bookie), so existing dashboards keep
working. Op-stats (latencies) are summaries (`_sum` / `_count`) in milliseconds, as BookKeeper's are; its
counters keep their exact names as gauges (bkaudit.metrics: a prometheus_client counter would gain `_total`).
bkaudit's additions (data-lost ledgers, progress gauges, entries/s, bytes/s) are `bkaudit_autorecovery_*`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from bkaudit.exposition import Families

WORKER_SCOPE = "replication_worker"
AUDITOR_SCOPE = "auditor"

# replication_worker counters
NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED = "NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED"
NUM_ENTRIES_UNABLE_TO_READ_FOR_REPLICATION = "NUM_ENTRIES_UNABLE_TO_READ_FOR_REPLICATION"
NUM_ENTRIES_READ = "NUM_ENTRIES_READ"
NUM_BYTES_READ = "NUM_BYTES_READ"
NUM_ENTRIES_WRITTEN = "NUM_ENTRIES_WRITTEN"
NUM_BYTES_WRITTEN = "NUM_BYTES_WRITTEN"
NUM_DEFER_LEDGER_LOCK_RELEASE_OF_FAILED_LEDGER = "NUM_DEFER_LEDGER_LOCK_RELEASE_OF_FAILED_LEDGER"
REREPLICATE_OP = "rereplicate"  # op-stats: latency of every attempt
READ_DATA_LATENCY = "READ_DATA_LATENCY"
WRITE_DATA_LATENCY = "WRITE_DATA_LATENCY"
# auditor counters
ELECTION_ATTEMPTS = "election_attempts"
NUM_BOOKIE_AUDITS_DELAYED = "NUM_BOOKIE_AUDITS_DELAYED"
NUM_DELAYED_BOOKIE_AUDITS_CANCELLED = "NUM_DELAYED_BOOKIE_AUDITS_CANCELLED"
NUM_SKIPPING_CHECK_TASK_TIMES = "NUM_SKIPPING_CHECK_TASK_TIMES"  # bookie checks skipped for a delayed audit
NUM_UNDER_REPLICATED_LEDGERS = "NUM_UNDER_REPLICATED_LEDGERS"  # op-stats: ledgers published per audit
AUDIT_BOOKIES_TIME = "AUDIT_BOOKIES_TIME"
BOOKIE_TO_LEDGERS_MAP_CREATION_TIME = "BOOKIE_TO_LEDGERS_MAP_CREATION_TIME"
URL_PUBLISH_TIME_FOR_LOST_BOOKIE = "URL_PUBLISH_TIME_FOR_LOST_BOOKIE"
# bkaudit additions (no BookKeeper equivalent)
LEDGERS_DATA_LOST = "ledgers_data_lost"
LEDGERS_FAILED = "ledgers_failed"
LEDGERS_DEFERRED_OPEN = "ledgers_deferred_open"
LEDGERS_FENCED = "ledgers_fenced"
LEDGERS_DELETED = "ledgers_deleted"
MARKERS_PUBLISHED = "markers_published"

_WORKER = {
    NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED,
    NUM_ENTRIES_UNABLE_TO_READ_FOR_REPLICATION,
    NUM_ENTRIES_READ,
    NUM_BYTES_READ,
    NUM_ENTRIES_WRITTEN,
    NUM_BYTES_WRITTEN,
    NUM_DEFER_LEDGER_LOCK_RELEASE_OF_FAILED_LEDGER,
    REREPLICATE_OP,
    READ_DATA_LATENCY,
    WRITE_DATA_LATENCY,
}
_AUDITOR = {
    ELECTION_ATTEMPTS,
    NUM_BOOKIE_AUDITS_DELAYED,
    NUM_DELAYED_BOOKIE_AUDITS_CANCELLED,
    NUM_SKIPPING_CHECK_TASK_TIMES,
    NUM_UNDER_REPLICATED_LEDGERS,
    AUDIT_BOOKIES_TIME,
    BOOKIE_TO_LEDGERS_MAP_CREATION_TIME,
    URL_PUBLISH_TIME_FOR_LOST_BOOKIE,
}


class AutoRecoveryMetrics:
    """Thread-safe counters and op-stats shared by the auditor and every worker thread of one process."""

    def __init__(self, *, embedded: bool = False) -> None:
        self.embedded = embedded
        self.started = time.monotonic()
        self._counters: dict[str, float] = {}
        self._ops: dict[str, tuple[float, int]] = {}
        self._gauges: dict[str, float] = {}
        self._lock = threading.Lock()

    def inc(self, name: str, n: float = 1) -> None:
        with self._lock:
            self._counters[name] = self._counters.get(name, 0) + n

    def observe_ms(self, name: str, millis: float) -> None:
        """One op-stats observation (latency in ms, or a size for NUM_UNDER_REPLICATED_LEDGERS)."""
        with self._lock:
            total, count = self._ops.get(name, (0.0, 0))
            self._ops[name] = (total + millis, count + 1)

    def get(self, name: str) -> float:
        with self._lock:
            return self._counters.get(name, 0)

    def elapsed_s(self) -> float:
        return max(1e-9, time.monotonic() - self.started)

    def rates(self) -> dict[str, float]:
        """Entries and bytes written per second, and ledgers replicated per minute, since the start."""
        secs = self.elapsed_s()
        return {
            "entries_per_s": self.get(NUM_ENTRIES_WRITTEN) / secs,
            "bytes_per_s": self.get(NUM_BYTES_WRITTEN) / secs,
            "ledgers_per_min": 60.0 * self.get(NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED) / secs,
        }

    def snapshot(self) -> dict[str, float]:
        """Counter values by their bare names, op-stats as `<name>_count` / `<name>_sum_ms` (JSON summary)."""
        with self._lock:
            out: dict[str, float] = dict(sorted(self._counters.items()))
            for name, (total, count) in sorted(self._ops.items()):
                out[f"{name}_count"] = count
                out[f"{name}_sum_ms"] = round(total, 3)
        return out

    def set_gauge(self, name: str, value: float) -> None:
        """A progress gauge (`bkaudit_autorecovery_<name>`), e.g. the queue size at the last look."""
        with self._lock:
            self._gauges[name] = value

    def families(self) -> Families:
        prefix = "replication_" if self.embedded else ""
        with self._lock:
            counters = dict(self._counters)
            ops = dict(self._ops)
            gauges = dict(self._gauges)
        out = Families()
        for name, value in sorted(counters.items()):
            if name in _WORKER | _AUDITOR:
                out.gauge(_full_name(prefix, name), _help(name), value)
            else:
                out.counter(_full_name(prefix, name), _help(name), value)
        for name, (total, count) in sorted(ops.items()):
            unit = "" if name == NUM_UNDER_REPLICATED_LEDGERS else " (milliseconds)"
            out.summary(_full_name(prefix, name), f"BookKeeper OpStats {name}{unit}", count=count,
                        total=total)
        for name, value in sorted(gauges.items()):
            out.gauge(f"bkaudit_autorecovery_{name}", PROGRESS.get(name, f"bkaudit: {name}"), value)
        for name, value in self.rates().items():
            out.gauge(f"bkaudit_autorecovery_{name}", f"{name} since the process started", value)
        out.gauge("bkaudit_autorecovery_uptime_seconds", "seconds since this AutoRecovery process started",
                  self.elapsed_s())
        return out

    def render(self) -> str:
        return self.families().render()

    def write(self, path: str) -> None:
        """Atomically replace the Prometheus text file at `path`."""
        self.families().write_textfile(path)


def _full_name(prefix: str, name: str) -> str:
    if name in _WORKER:
        return f"{prefix}{WORKER_SCOPE}_{name}"
    if name in _AUDITOR:
        return f"{prefix}{AUDITOR_SCOPE}_{name}"
    return f"bkaudit_autorecovery_{name}"


def _help(name: str) -> str:
    return "BookKeeper ReplicationStats counter" if name in _WORKER | _AUDITOR else f"bkaudit: {name}"


PROGRESS = {
    "queue_ledgers": "ledgers marked under-replicated in ZooKeeper at the last look (the repair backlog)",
    "replication_enabled": "1 when auto-replication is enabled in ZooKeeper",
}
"""Progress gauges the service sets before each metrics write."""


def exported_names() -> set[str]:
    """Every AutoRecovery metric name as Prometheus sees it (standalone and embedded in a bookie)."""
    m = AutoRecoveryMetrics()
    extra = (LEDGERS_DATA_LOST, LEDGERS_FAILED, LEDGERS_DEFERRED_OPEN, LEDGERS_FENCED, LEDGERS_DELETED,
             MARKERS_PUBLISHED)
    ops = (REREPLICATE_OP, READ_DATA_LATENCY, WRITE_DATA_LATENCY, NUM_UNDER_REPLICATED_LEDGERS,
           AUDIT_BOOKIES_TIME, BOOKIE_TO_LEDGERS_MAP_CREATION_TIME, URL_PUBLISH_TIME_FOR_LOST_BOOKIE)
    for name in (*_WORKER, *_AUDITOR, *extra):
        if name not in ops:
            m.inc(name, 0)
    for name in ops:
        m.observe_ms(name, 0)
    for name in PROGRESS:
        m.set_gauge(name, 0)
    out = {s.name for family in m.families() for s in family.samples}
    m.embedded = True
    return out | {s.name for family in m.families() for s in family.samples}


def names() -> Iterable[str]:
    """Every BookKeeper-named metric this module can export (for docs and tests)."""
    return sorted(_WORKER | _AUDITOR)
