"""A bookie's circuit breaker within one fan-out task.

A bookie that stops answering (SIGSTOP, a dead host whose connections hang) costs one call deadline per call.
After `threshold` transport failures in a row the task stops calling it: what is left is CIRCUIT_OPEN, and
the job's delayed re-check (BP-34) gives it a fresh chance. One breaker spans every call the task makes to
the bookie (listing calls, entry reads, every chunk of the task's input), so a frozen bookie costs a few
deadlines per task, however many requests the task holds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bkaudit.audit.statuses import is_transport_failure

log = logging.getLogger(__name__)


@dataclass
class Breaker:
    bookie_id: str
    threshold: int
    consecutive: int = 0
    reason: str | None = None
    """Why it opened (the failure that tripped it); None while closed."""

    @property
    def open(self) -> bool:
        return self.reason is not None

    def answered(self) -> None:
        """The bookie answered (an error status is an answer too): the run of failures is over."""
        self.consecutive = 0

    def failed(self, status: str, exc: BaseException, *, doing: str) -> None:
        """A call failed with `status`; only transport failures count towards opening."""
        if not is_transport_failure(status):
            self.answered()
            return
        self.consecutive += 1
        if self.consecutive >= self.threshold and self.reason is None:
            self.reason = f"{status}: {exc}"
            log.warning("bookie %s: %d transport failures in a row %s (%s); skipping it for now",
                        self.bookie_id, self.consecutive, doing, exc)

    def skipped(self, what: str) -> str:
        """The error recorded for work not done because the breaker is open."""
        return f"not {what} after {self.threshold} consecutive transport failures ({self.reason})"
