"""Prometheus metrics of batch runs: text exposition format, written to a file or pushed to a push gateway.

A batch job has no long-lived endpoint to scrape, so the two usual routes are offered: a text file for the
node_exporter textfile collector (written atomically: temp file + rename, so the collector never reads half a
file) and a PUT to a Prometheus push gateway (`/metrics/job/<job>`, replacing the job's previous group).
Only the standard library is used (urllib), no client library dependency.

Names: where BookKeeper's Auditor has a gauge for the same thing, the checker exports it under BookKeeper's
name with its stats scope prefix (`auditor_NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY`, as BookKeeper's
Prometheus provider names it), so existing dashboards and alerts keep working; everything else is
`bkaudit_checker_*`.
"""

from __future__ import annotations

import math
import os
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from bkaudit.errors import BkAuditError

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# category value -> BookKeeper gauge name (replication/ReplicationStats.java)
BOOKKEEPER_GAUGES: Mapping[str, str] = {
    "no_replica": "NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY",
    "below_ack_quorum": "NUM_LEDGERS_HAVING_LESS_THAN_AQ_REPLICAS_OF_AN_ENTRY",
    "below_write_quorum": "NUM_LEDGERS_HAVING_LESS_THAN_WQ_REPLICAS_OF_AN_ENTRY",
    "placement_fail": "NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY",
    "placement_soft": "NUM_LEDGERS_SOFTLY_ADHERING_TO_PLACEMENT_POLICY",
    "underreplicated_too_long": "NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD",
}


CHECK_PHASES = frozenset({"ledger_pass_and_fanout", "fanout", "combine", "reread"})
"""Phases of a checker run that make up BookKeeper's REPLICAS_CHECK_TIME."""


class MetricsError(BkAuditError):
    """Metrics could not be written or pushed (the run itself is not failed by this)."""


@dataclass(frozen=True)
class Sample:
    """One sample line; `kind` is the family's TYPE (gauge, counter, summary, untyped)."""

    name: str
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)
    help: str = ""
    kind: str = "gauge"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def sanitize(name: str) -> str:
    """A valid metric name: [a-zA-Z_:][a-zA-Z0-9_:]*."""
    out = "".join(c if c.isalnum() or c in "_:" else "_" for c in name)
    return out if out and not out[0].isdigit() else f"_{out}"


def render(samples: Iterable[Sample]) -> str:
    """The text exposition format: samples grouped by family, one HELP/TYPE header per family."""
    families: dict[str, list[Sample]] = {}
    for s in samples:
        families.setdefault(sanitize(s.name), []).append(s)
    lines: list[str] = []
    for name, group in families.items():
        head = group[0]
        if head.help:
            lines.append(f"# HELP {name} {_escape_help(head.help)}")
        lines.append(f"# TYPE {name} {head.kind}")
        for s in group:
            labels = ",".join(f'{sanitize(k)}="{_escape_label(str(v))}"' for k, v in s.labels.items())
            lines.append(
                f"{name}{{{labels}}} {_format_value(s.value)}"
                if labels
                else f"{name} {_format_value(s.value)}"
            )
    return "\n".join(lines) + "\n"


def write_textfile(path: str | os.PathLike[str], text: str) -> None:
    """Write atomically (same-directory temp file + rename) for the node_exporter textfile collector."""
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".bkaudit-metrics-", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        raise MetricsError(f"cannot write metrics file {target}: {exc}") from exc


def push(
    gateway_url: str,
    job: str,
    text: str,
    *,
    grouping: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
) -> None:
    """PUT the text to `<gateway>/metrics/job/<job>[/<label>/<value>...]` (replaces that group's metrics)."""
    path = "/metrics/job/" + urllib.parse.quote(job, safe="")
    for key, value in (grouping or {}).items():
        path += f"/{urllib.parse.quote(key, safe='')}/{urllib.parse.quote(value, safe='')}"
    url = gateway_url.rstrip("/") + path
    request = urllib.request.Request(
        url, data=text.encode("utf-8"), method="PUT", headers={"Content-Type": CONTENT_TYPE}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status = response.status
    except OSError as exc:
        raise MetricsError(f"cannot push metrics to {url}: {exc}") from exc
    if status >= 300:
        raise MetricsError(f"push gateway {url} answered HTTP {status}")


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
    bookies: Iterable[Mapping[str, object]] = ()

    def samples(self, scope: str = "auditor") -> list[Sample]:
        from bkaudit.audit.base import Category

        prefix = f"{scope}_" if scope else ""
        out: list[Sample] = []
        for category, gauge in BOOKKEEPER_GAUGES.items():
            out.append(
                Sample(
                    prefix + gauge,
                    self.counts.get(category, 0),
                    help=f"BookKeeper gauge: ledgers with new {category} violations in the last run",
                )
            )
        # BookKeeper's OpStats of the replicas check as a summary's _sum/_count (ms, like BookKeeper).
        # Placement is judged in the same Spark pass as the requests are built, so it has no time of its own.
        checking = [v for k, v in self.phase_seconds.items() if k in CHECK_PHASES]
        replicas_ms = 1000.0 * (sum(checking) if checking else self.seconds)
        for name, value in (("REPLICAS_CHECK_TIME", replicas_ms),):
            ok = {"success": "true" if self.success else "false"}
            out.append(
                Sample(
                    f"{prefix}{name}_sum", value, ok, help=f"BookKeeper OpStats {name} (ms)", kind="untyped"
                )
            )
            out.append(Sample(f"{prefix}{name}_count", 1, ok, kind="untyped"))
        for c in Category:
            labels = {"category": c.value, "severity": c.severity.value}
            out.append(
                Sample(
                    "bkaudit_checker_violations",
                    self.counts.get(c.value, 0),
                    labels,
                    help="new violations per category in the last run (exact)",
                )
            )
        for c in Category:
            out.append(
                Sample(
                    "bkaudit_checker_under_repair",
                    self.under_repair.get(c.value, 0),
                    {"category": c.value},
                    help="violations on ledgers already marked under-replicated (not counted as new)",
                )
            )
        plain = [
            ("bkaudit_checker_ledgers_total", self.ledgers_total, "ledgers in the checked snapshot"),
            ("bkaudit_checker_ledgers_checked", self.ledgers_checked, "ledgers whose durability was checked"),
            ("bkaudit_checker_entries_checked", self.entries_checked, "entries whose placement was verified"),
            ("bkaudit_checker_published", self.published, "under-replication markers written by the run"),
            ("bkaudit_checker_reevaluated", self.reevaluated, "ledgers re-evaluated after a metadata change"),
            ("bkaudit_checker_run_seconds", self.seconds, "wall time of the last run"),
            ("bkaudit_checker_last_run_success", 1 if self.success else 0, "1 when the last run succeeded"),
            ("bkaudit_checker_last_run_timestamp_seconds", self.finished_at_s, "when the last run finished"),
        ]
        for name, value, text in plain:
            out.append(
                Sample(name, value, {"run_id": self.run_id} if name.endswith("success") else {}, help=text)
            )
        for phase, secs in self.phase_seconds.items():
            out.append(
                Sample(
                    "bkaudit_checker_phase_seconds",
                    secs,
                    {"phase": phase},
                    help="wall time per phase of the last run",
                )
            )
        for b in self.bookies:
            bookie = str(b.get("bookie_id"))
            out.append(
                Sample(
                    "bkaudit_checker_bookie_calls",
                    float(str(b.get("calls") or 0)),
                    {"bookie": bookie},
                    help="GetListOfEntries batch calls per bookie",
                )
            )
            out.append(
                Sample(
                    "bkaudit_checker_bookie_errors",
                    float(str(b.get("errors") or 0)),
                    {"bookie": bookie},
                    help="(ledger, bookie) answers that were errors",
                )
            )
            reach = b.get("reachable")
            out.append(
                Sample(
                    "bkaudit_checker_bookie_reachable",
                    1 if reach else 0,
                    {"bookie": bookie},
                    help="1 when the bookie answered in the last attempt",
                )
            )
            p99 = b.get("latency_ms_p99")
            if p99 is not None:
                out.append(
                    Sample(
                        "bkaudit_checker_bookie_latency_ms_p99",
                        float(str(p99)),
                        {"bookie": bookie},
                        help="99th percentile latency of batch calls (ms)",
                    )
                )
        return out
