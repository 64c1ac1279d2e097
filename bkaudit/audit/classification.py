"""Classification: replica counts to categories, findings to exact counts, counts to exit codes.

Kept apart from the checks so the job, the CLI, the metrics and the tests share one definition of "how bad"
and one definition of "how many".
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

from bkaudit.audit.base import Category, Finding, Severity
from bkaudit.exitcodes import ExitCode


def durability_category(min_replicas: int, write_quorum: int, ack_quorum: int) -> Category | None:
    """BookKeeper's `reportLedgersWithMissingEntries` buckets, worst first; None when all have WQ copies.

    `least == 0` → no_replica (data loss); `least < AQ` → below_ack_quorum (an acknowledged entry is now less
    durable than the writer was promised); `least < WQ` → below_write_quorum.
    """
    if min_replicas <= 0:
        return Category.NO_REPLICA
    if min_replicas < ack_quorum:
        return Category.BELOW_ACK_QUORUM
    if min_replicas < write_quorum:
        return Category.BELOW_WRITE_QUORUM
    return None


class FailOn(enum.Enum):
    """`--fail-on`: the lowest severity that makes `bkaudit check` exit 3."""

    NEVER = "never"
    WARNING = "warning"
    CRITICAL = "critical"

    def reached_by(self, severity: Severity) -> bool:
        if self is FailOn.NEVER:
            return False
        threshold = Severity.WARNING if self is FailOn.WARNING else Severity.CRITICAL
        return severity.rank >= threshold.rank


EXIT_OK = ExitCode.OK
EXIT_COULD_NOT_RUN = ExitCode.ERROR
EXIT_THRESHOLD_REACHED = ExitCode.FINDINGS  # 2 is usage/config for every command (bkaudit.exitcodes)


def exit_code(counts: Mapping[str, int], fail_on: FailOn | str) -> int:
    """0 when nothing counted reached `fail_on`, 3 when something did (1 and 2: bkaudit.exitcodes).

    `counts` are new violations per category value (findings already under repair are not in them).
    """
    level = FailOn(fail_on) if isinstance(fail_on, str) else fail_on
    for name, n in counts.items():
        if n > 0 and level.reached_by(Category(name).severity):
            return int(EXIT_THRESHOLD_REACHED)
    return int(EXIT_OK)


def empty_counts() -> dict[str, int]:
    """Every category with an explicit zero: "checked, none found" is different from "not measured"."""
    return {c.value: 0 for c in Category}


def count_findings(findings: Iterable[Finding]) -> dict[str, int]:
    """Exact counts of new violations per category over a whole run.

    A ledger has at most one durability finding (its worst bucket, as BookKeeper) and at most one placement
    finding, so these counts equal BookKeeper's gauges without their per-range reset (PR #4822). Findings on
    ledgers already under repair are excluded; see `count_under_repair`.
    """
    counts = empty_counts()
    for f in findings:
        if not f.under_repair:
            counts[f.category.value] += 1
    return counts


def count_under_repair(findings: Iterable[Finding]) -> dict[str, int]:
    """Per category, the findings on ledgers that already carry an under-replication marker."""
    counts: dict[str, int] = {}
    for f in findings:
        if f.under_repair:
            counts[f.category.value] = counts.get(f.category.value, 0) + 1
    return counts
