"""What a checker run returns: its counts, its violations and how each bookie fared (typed)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bkaudit.errors import BkAuditError
from bkaudit.job.bookie_stats import BookieCheck
from bkaudit.job.findings import Violation

SUCCEEDED = "succeeded"
FAILED = "failed"


@dataclass
class CheckResult:
    run_id: str
    snapshot_id: str | None
    run_date: str
    status: str = "running"
    error: str | None = None
    ledgers_checked: int = 0
    ledgers_durability_checked: int = 0
    entries_checked: int = 0
    bookies_checked: int = 0
    """Bookies asked in the fan-out (answered or not)."""
    counts: dict[str, int] = field(default_factory=dict)
    under_repair: dict[str, int] = field(default_factory=dict)
    reevaluated: int = 0
    bookkeeper_placement_only: int = 0
    """Ledgers BookKeeper's own placement check would flag that bkaudit passes (e.g. a bookie is down)."""
    deleted_during_run: int = 0
    published: int = 0
    seconds: float = 0.0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    bookies: list[BookieCheck] = field(default_factory=list)
    exit_code: int = 1
    metrics_error: str | None = None
    check_stamps: tuple[str, ...] = ()
    """The Auditor checks this run covered, whose `*ctime` znodes it stamps (`audit.coverage.stamps`)."""

    def summary(self) -> dict[str, Any]:
        """What `--json` prints: exactly the issue's keys."""
        return {
            "run_id": self.run_id,
            "snapshot_id": self.snapshot_id,
            "ledgers_checked": self.ledgers_checked,
            "counts": dict(self.counts),
            "seconds": round(self.seconds, 3),
        }


class CheckFailed(BkAuditError):
    """The run could not complete; its failure is recorded in `audit_runs` (status 'failed')."""

    def __init__(self, message: str, result: CheckResult) -> None:
        super().__init__(message)
        self.result = result


def new_run_id(now: datetime | None = None) -> str:
    """`20261122T051500Z-1a2b3c`: sortable by time, unique across concurrent runs."""
    now = now or datetime.now(UTC)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"
