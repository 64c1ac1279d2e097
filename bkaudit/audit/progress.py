"""Under-replication progress: no ledger should stay marked under-replicated longer than a grace period.

BookKeeper counts such markers in `NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD`, but only inside
the placement-policy task and only when both `auditorPeriodicPlacementPolicyCheckInterval` and
`underreplicatedLedgerRecoveryGracePeriod` are set (both default to 0 = off), and it logs ids instead of rows.
Here every overdue marker is a row with its age, replicas and lock holder. Same semantics otherwise:

* the clock is the marker's `ctime`, which BookKeeper rewrites whenever a new missing replica is merged in,
  so the grace period restarts then (bookkeeper-behavior.md section 0);
* a marker without `ctime` (`storeSystemTimeAsLedgerUnderreplicatedMarkTime=false`) has no age and is not
  judged, as in BookKeeper; the job counts them so they are not silently ignored;
* age is whole elapsed seconds, `(now - ctime) / 1000` truncated as Java does, compared with `>`: 600.9 s is
  not over a 600 s grace period;
* `grace_period_s <= 0` disables the check, as BookKeeper's 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bkaudit.audit.base import Category, Check, Finding
from bkaudit.audit.details import OverdueMarkerDetail


@dataclass(frozen=True, slots=True)
class Marker:
    """An under-replication marker as the snapshot recorded it."""

    ledger_id: int
    replicas: tuple[str, ...] = ()
    ctime_ms: int | None = None
    locked_by: str | None = None


def elapsed_seconds(now_ms: int, since_ms: int) -> int:
    """Whole seconds elapsed, as Java's `(now - since) / 1000` on longs (truncated toward zero)."""
    delta = now_ms - since_ms
    return delta // 1000 if delta >= 0 else -((-delta) // 1000)


class ProgressCheck(Check[Marker]):
    """`underreplicated_too_long` for every marker older than the grace period at `now_ms`."""

    name: ClassVar[str] = "progress"
    categories: ClassVar[tuple[Category, ...]] = (Category.UNDERREPLICATED_TOO_LONG,)

    def __init__(self, grace_period_s: float, now_ms: int) -> None:
        self.grace_period_s = grace_period_s
        self.now_ms = now_ms

    def overdue(self, marker: Marker) -> bool:
        if self.grace_period_s <= 0 or marker.ctime_ms is None:
            return False
        return elapsed_seconds(self.now_ms, marker.ctime_ms) > self.grace_period_s

    def evaluate(self, subject: Marker) -> list[Finding]:
        if not self.overdue(subject):
            return []
        assert subject.ctime_ms is not None
        return [
            Finding(
                category=Category.UNDERREPLICATED_TOO_LONG,
                ledger_id=subject.ledger_id,
                bookie_id=subject.replicas[0] if len(subject.replicas) == 1 else None,
                facts=OverdueMarkerDetail(
                    marked_at_ms=subject.ctime_ms,
                    age_s=round((self.now_ms - subject.ctime_ms) / 1000.0, 3),
                    grace_period_s=self.grace_period_s,
                    replicas=tuple(subject.replicas),
                    locked_by=subject.locked_by,
                ),
            )
        ]
