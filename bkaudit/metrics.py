"""Prometheus metrics of batch runs through prometheus_client: a text file or a push gateway.

A batch job has no long-lived endpoint to scrape, so the two usual routes are offered: a text file for the
node_exporter textfile collector (prometheus_client's write_to_textfile: temp file + rename, so the collector
never reads half a file) and a push to a Prometheus push gateway (PUT: replaces the job's previous group).

Names: where BookKeeper exports the same thing, bkaudit uses BookKeeper's name with its stats scope prefix
(`auditor_NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY`, as BookKeeper's Prometheus provider names it), and
BookKeeper's unit (its OpStats summaries are in milliseconds), so existing dashboards and alerts keep working.
BookKeeper's counters are exported as gauges: prometheus_client appends `_total` to a counter's name, which
would break those queries (rate() works on either type). Everything of bkaudit's own is `bkaudit_*`, typed,
in seconds, with bounded labels (category, severity, phase, bookie, quantile; never a run id).
deploy/monitoring/ holds a Grafana dashboard and alert rules over these names (tested against `names()`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from bkaudit.exposition import Families, MetricsError, export

__all__ = [  # Families, MetricsError, export: re-exported from bkaudit.exposition for the jobs' callers
    "CheckerRunMetrics",
    "Families",
    "MetricsError",
    "SnapshotRunMetrics",
    "export",
    "export_snapshot",
    "names",
]

# category value -> BookKeeper gauge name (replication/ReplicationStats.java)
BOOKKEEPER_GAUGES: Mapping[str, str] = {
    "no_replica": "NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY",
    "below_ack_quorum": "NUM_LEDGERS_HAVING_LESS_THAN_AQ_REPLICAS_OF_AN_ENTRY",
    "below_write_quorum": "NUM_LEDGERS_HAVING_LESS_THAN_WQ_REPLICAS_OF_AN_ENTRY",
    "placement_fail": "NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY",
    "placement_soft": "NUM_LEDGERS_SOFTLY_ADHERING_TO_PLACEMENT_POLICY",
    "underreplicated_too_long": "NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD",
}


CHECK_PHASES = frozenset({"ledger_pass_and_fanout", "combine", "reread"})
"""Phases of a checker run that make up BookKeeper's REPLICAS_CHECK_TIME."""


class BookieCallStats(Protocol):
    """What the per-bookie gauges read of one bookie's run (`bkaudit.job.bookie_stats.BookieCheck`)."""

    @property
    def bookie_id(self) -> str: ...
    @property
    def calls(self) -> int: ...
    @property
    def errors(self) -> int: ...
    @property
    def reachable(self) -> bool: ...
    @property
    def latency_ms_p50(self) -> float | None: ...
    @property
    def latency_ms_p95(self) -> float | None: ...
    @property
    def latency_ms_p99(self) -> float | None: ...
    @property
    def latency_ms_max(self) -> float | None: ...


@dataclass(frozen=True)
class BookieCalls:
    """A plain BookieCallStats (tests, the metric catalogue)."""

    bookie_id: str
    calls: int = 0
    errors: int = 0
    reachable: bool = False
    latency_ms_p50: float | None = None
    latency_ms_p95: float | None = None
    latency_ms_p99: float | None = None
    latency_ms_max: float | None = None


@dataclass
class CheckerRunMetrics:
    """What one checker run reports; `samples()` turns it into Prometheus samples."""

    run_id: str
    snapshot_id: str
    success: bool
    counts: Mapping[str, int]
    under_repair: Mapping[str, int]
    ledgers_total: int = 0
    ledgers_checked: int = 0
    entries_checked: int = 0
    published: int = 0
    reevaluated: int = 0
    seconds: float = 0.0
    phase_seconds: Mapping[str, float] = field(default_factory=dict)
    finished_at_s: float = 0.0
    bookies: Iterable[BookieCallStats] = ()

    def families(self, scope: str = "auditor") -> Families:
        from bkaudit.audit.base import Category

        prefix = f"{scope}_" if scope else ""
        out = Families()
        for category, gauge in BOOKKEEPER_GAUGES.items():
            out.gauge(
                prefix + gauge,
                f"BookKeeper gauge: ledgers with new {category} violations in the last run",
                self.counts.get(category, 0),
            )
        # BookKeeper's OpStats of the replicas check: a summary in milliseconds, as BookKeeper exports it.
        # Placement is judged in the same Spark pass as the requests are built, so it has no time of its own.
        checking = [v for k, v in self.phase_seconds.items() if k in CHECK_PHASES]
        replicas_ms = 1000.0 * (sum(checking) if checking else self.seconds)
        out.summary(
            f"{prefix}REPLICAS_CHECK_TIME",
            "BookKeeper OpStats REPLICAS_CHECK_TIME (milliseconds)",
            count=1,
            total=replicas_ms,
            labels={"success": "true" if self.success else "false"},
        )
        for c in Category:
            out.gauge(
                "bkaudit_checker_violations",
                "new violations per category in the last run (exact)",
                self.counts.get(c.value, 0),
                {"category": c.value, "severity": c.severity.value},
            )
        for c in Category:
            out.gauge(
                "bkaudit_checker_under_repair",
                "violations on ledgers already marked under-replicated (not counted as new)",
                self.under_repair.get(c.value, 0),
                {"category": c.value},
            )
        plain = [
            ("bkaudit_checker_ledgers_total", self.ledgers_total, "ledgers in the checked snapshot"),
            ("bkaudit_checker_ledgers_checked", self.ledgers_checked, "ledgers whose durability was checked"),
            ("bkaudit_checker_entries_checked", self.entries_checked, "entries whose placement was verified"),
            (
                "bkaudit_checker_published",
                self.published,
                "under-replication markers written by the last run",
            ),
            ("bkaudit_checker_reevaluated", self.reevaluated, "ledgers re-evaluated after a metadata change"),
            ("bkaudit_checker_run_seconds", self.seconds, "wall time of the last run (seconds)"),
            ("bkaudit_checker_last_run_success", 1 if self.success else 0, "1 when the last run succeeded"),
            ("bkaudit_checker_last_run_timestamp_seconds", self.finished_at_s, "when the last run finished"),
        ]
        for name, value, text in plain:
            out.gauge(name, text, value)
        if self.success:
            out.gauge(
                "bkaudit_checker_last_success_timestamp_seconds",
                "when the last successful run finished",
                self.finished_at_s,
            )
        for phase, secs in self.phase_seconds.items():
            out.gauge(
                "bkaudit_checker_phase_seconds",
                "wall time per phase of the last run (seconds)",
                secs,
                {"phase": phase},
            )
        for b in self.bookies:
            bookie = {"bookie": b.bookie_id}
            out.gauge(
                "bkaudit_checker_bookie_calls",
                "GetListOfEntries batch calls per bookie in the last run",
                b.calls,
                bookie,
            )
            out.gauge(
                "bkaudit_checker_bookie_errors",
                "(ledger, bookie) answers that were errors in the last run",
                b.errors,
                bookie,
            )
            out.gauge(
                "bkaudit_checker_bookie_reachable",
                "1 when the bookie answered in the last attempt",
                1 if b.reachable else 0,
                bookie,
            )
            for quantile, latency in (
                ("0.5", b.latency_ms_p50),
                ("0.95", b.latency_ms_p95),
                ("0.99", b.latency_ms_p99),
                ("1", b.latency_ms_max),
            ):
                if latency is not None:
                    out.gauge(
                        "bkaudit_checker_bookie_latency_seconds",
                        "batch call latency quantiles per bookie in the last run (seconds)",
                        latency / 1000.0,
                        {**bookie, "quantile": quantile},
                    )
        return out


@dataclass
class SnapshotRunMetrics:
    """What one snapshot run reports: freshness of the audit's input, for alerting on a stale warehouse."""

    success: bool
    finished_at_s: float
    seconds: float = 0.0
    ledgers: int = 0
    unparseable: int = 0
    bookies: int = 0
    underreplicated: int = 0

    def families(self) -> Families:
        out = Families()
        out.gauge(
            "bkaudit_snapshot_last_run_success",
            "1 when the last snapshot run succeeded",
            1 if self.success else 0,
        )
        out.gauge(
            "bkaudit_snapshot_last_run_timestamp_seconds",
            "when the last snapshot run finished",
            self.finished_at_s,
        )
        if self.success:
            out.gauge(
                "bkaudit_snapshot_last_success_timestamp_seconds",
                "when the last successful snapshot was committed (freshness of the audit's input)",
                self.finished_at_s,
            )
            out.gauge(
                "bkaudit_snapshot_run_seconds", "wall time of the last snapshot run (seconds)", self.seconds
            )
            out.gauge("bkaudit_snapshot_ledgers", "ledgers in the last snapshot", self.ledgers)
            out.gauge(
                "bkaudit_snapshot_unparseable_ledgers",
                "ledgers whose metadata did not parse",
                self.unparseable,
            )
            out.gauge("bkaudit_snapshot_bookies", "bookies in the last snapshot", self.bookies)
            out.gauge(
                "bkaudit_snapshot_underreplicated_ledgers",
                "ledgers marked under-replicated in ZooKeeper at the last snapshot",
                self.underreplicated,
            )
        return out


def names() -> set[str]:
    """Every metric name bkaudit can export, as Prometheus sees it (for docs, dashboards and alert tests)."""
    from bkaudit.autorecovery.metrics import exported_names

    full = CheckerRunMetrics(
        run_id="r",
        snapshot_id="s",
        success=True,
        counts={},
        under_repair={},
        phase_seconds={"combine": 1.0},
        bookies=[BookieCalls("b", latency_ms_p50=1.0)],
    ).families("auditor")
    snap = SnapshotRunMetrics(success=True, finished_at_s=1.0).families()
    out: set[str] = set()
    for family in [*full, *snap]:
        out.update(sample.name for sample in family.samples)
    return out | exported_names()


def export_snapshot(snap: Any, summary: Mapping[str, Any] | None) -> str | None:
    """Export a snapshot run's metrics per [snapshot] metrics_file / pushgateway_url (None = it failed).

    Returns the error text when exporting failed (logged by the caller; metrics never fail a run).
    """
    import time

    if not (snap.metrics_file or snap.pushgateway_url):
        return None
    s = summary or {}
    m = SnapshotRunMetrics(
        success=summary is not None,
        finished_at_s=time.time(),
        seconds=float(s.get("seconds") or 0),
        ledgers=int(s.get("ledgers") or 0),
        unparseable=int(s.get("unparseable") or 0),
        bookies=int(s.get("bookies") or 0),
        underreplicated=int(s.get("underreplicated") or 0),
    )
    try:
        export(
            m.families(),
            metrics_file=snap.metrics_file,
            pushgateway_url=snap.pushgateway_url,
            job=snap.metrics_job,
        )
    except MetricsError as exc:
        return str(exc)
    return None


def export_snapshot_or_warn(snap: Any, summary: Mapping[str, Any] | None) -> None:
    """export_snapshot for `bkaudit snapshot` and jobs/snapshot_metadata.py alike: a failed export is one
    `warning: metrics:` line on stderr, never the run's failure."""
    import sys

    problem = export_snapshot(snap, summary)
    if problem:
        print(f"warning: metrics: {problem}", file=sys.stderr)
