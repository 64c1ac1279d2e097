"""Bookie availability (BP-34): failures are retried, persistent ones are reported, nothing is dropped.

BookKeeper's replicas check puts a ledger whose bookie did not answer into "ledgers with unavailable bookies",
logs it at ERROR level and counts it nowhere; the BP-34 plan to re-check such bookies after a delay and to
verify that an unreachable bookie is no longer registered was never built (bookkeeper-behavior.md 1.6). Here:

* the job retries every failed (ledger, bookie) call after `retry_delay_s` (`should_retry` says which);
* a bookie still failing at the transport level while it is registered (writable or read-only) is one
  `bookie_unreachable_but_registered` row: clients will keep choosing it for new ensembles;
* a bookie that is not registered is known to be gone (the Auditor's lost-bookie audit handles it), so it is
  not a bookie finding, but its ledgers are still rows;
* every ledger with at least one unverified bookie is one `ledger_unverifiable` row, with a reason per
  bookie.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from bkaudit.audit.base import Category, Check, Finding
from bkaudit.audit.details import UnreachableBookieDetail, UnverifiableDetail, UnverifiedBookie
from bkaudit.audit.durability import DurabilityAssessment, LedgerEvidence, assess, open_segment_note
from bkaudit.audit.evidence import BookieEvidence
from bkaudit.audit.statuses import (
    ANSWERED,
    BOOKKEEPER_STATUSES,
    STATUS_INVALID_RESPONSE,
    STATUS_NOT_CHECKED,
    STATUS_NOT_REGISTERED,
)

REASON_UNREACHABLE = "bookie_unreachable"
REASON_NOT_REGISTERED = "bookie_not_registered"
REASON_INVALID_RESPONSE = "invalid_response"
REASON_BOOKIE_ERROR = "bookie_error"
REASON_NOT_CHECKED = "not_checked"
REASON_METADATA_CHANGING = "metadata_changing"
REASON_OPEN_SEGMENT_UNKNOWN = "open_segment_unknown"
"""The last segment of an open ledger: its bookies' READ_LAC answers could not establish the LAC (where
BookKeeper's checkAllLedgers cannot open the ledger), so that segment was not checked."""


def should_retry(status: str) -> bool:
    """Whether a failed (ledger, bookie) call is worth the delayed re-check.

    Everything that is not an answer is retried once the delay passed: transport failures obviously, but also
    EIO / ETOOMANYREQUESTS (a busy or briefly sick bookie) and undecodable bytes (a torn response). Only the
    two answers, OK and ENOLEDGER, are final.
    """
    return status not in ANSWERED


def reason_code(status: str) -> str:
    if status == STATUS_NOT_REGISTERED:
        return REASON_NOT_REGISTERED
    if status == STATUS_INVALID_RESPONSE:
        return REASON_INVALID_RESPONSE
    if status == STATUS_NOT_CHECKED:
        return REASON_NOT_CHECKED
    if status in BOOKKEEPER_STATUSES:
        return REASON_BOOKIE_ERROR
    return REASON_UNREACHABLE


def _describe(ev: BookieEvidence) -> str:
    code = reason_code(ev.status)
    what = {
        REASON_UNREACHABLE: "unreachable",
        REASON_NOT_REGISTERED: "not registered",
        REASON_INVALID_RESPONSE: "answered bytes that are not AvailabilityOfEntriesOfLedger",
        REASON_BOOKIE_ERROR: "answered an error",
        REASON_NOT_CHECKED: "was never asked",
    }[code]
    tail = f": {ev.error}" if ev.error else ""
    return f"bookie {ev.bookie_id} {what} ({ev.status}{tail})"


def unverifiable(
    ledger_id: int,
    reason: str,
    code: str,
    *,
    bookie_id: str | None = None,
    bookies: Sequence[UnverifiedBookie] | None = None,
    versions: Sequence[int] | None = None,
) -> Finding:
    """A `ledger_unverifiable` finding; `code` is one of the REASON_* values, `reason` says it in words."""
    facts = UnverifiableDetail(
        reason,
        code,
        bookies=None if bookies is None else tuple(bookies),
        versions=None if versions is None else tuple(versions),
    )
    return Finding(
        category=Category.LEDGER_UNVERIFIABLE, ledger_id=ledger_id, bookie_id=bookie_id, facts=facts
    )


class LedgerAvailabilityCheck(Check[LedgerEvidence]):
    """`ledger_unverifiable` for a ledger some of whose bookies gave no usable answer (after retries)."""

    name: ClassVar[str] = "ledger_availability"
    categories: ClassVar[tuple[Category, ...]] = (Category.LEDGER_UNVERIFIABLE,)

    def evaluate(self, subject: LedgerEvidence) -> list[Finding]:
        return self.from_assessment(assess(subject.shape, subject.evidence))

    def from_assessment(self, a: DurabilityAssessment) -> list[Finding]:
        """`from_unverified`, saying `open_segment` when an unverified bookie is in the checked open segment's
        ensemble (that segment is then unverified too)."""
        found = self.from_unverified(a.ledger_id, a.unverified)
        tail = a.open_segment
        if tail is None or not {ev.bookie_id for ev in a.unverified} & set(tail.ensemble):
            return found
        note = open_segment_note(tail)
        return [
            replace(f, facts=replace(f.facts, open_segment=note))
            if isinstance(f.facts, UnverifiableDetail)
            else f
            for f in found
        ]

    def from_unverified(self, ledger_id: int, unverified: Sequence[BookieEvidence]) -> list[Finding]:
        if not unverified:
            return []
        codes = sorted({reason_code(ev.status) for ev in unverified})
        return [
            unverifiable(
                ledger_id,
                "; ".join(_describe(ev) for ev in unverified),
                codes[0] if len(codes) == 1 else "multiple",
                bookie_id=unverified[0].bookie_id if len(unverified) == 1 else None,
                bookies=[
                    UnverifiedBookie(ev.bookie_id, ev.status, ev.error, reason_code(ev.status))
                    for ev in unverified
                ],
            )
        ]


@dataclass(frozen=True, slots=True)
class BookieReport:
    """How one bookie fared over the whole run (after the delayed re-check)."""

    bookie_id: str
    registered: bool
    reachable: bool | None
    """False: every call in the last attempt failed at the transport level; None: it was never asked."""
    attempts: int = 1
    state: str | None = None
    last_status: str | None = None
    last_error: str | None = None
    ledgers_unverified: int = 0


class BookieAvailabilityCheck(Check[BookieReport]):
    """`bookie_unreachable_but_registered`: one row per bookie that stayed unreachable yet registered."""

    name: ClassVar[str] = "bookie_availability"
    categories: ClassVar[tuple[Category, ...]] = (Category.BOOKIE_UNREACHABLE_BUT_REGISTERED,)

    def evaluate(self, subject: BookieReport) -> list[Finding]:
        if subject.reachable is not False or not subject.registered:
            return []
        return [
            Finding(
                category=Category.BOOKIE_UNREACHABLE_BUT_REGISTERED,
                bookie_id=subject.bookie_id,
                facts=UnreachableBookieDetail(
                    subject.state,
                    subject.attempts,
                    subject.last_status,
                    subject.last_error,
                    subject.ledgers_unverified,
                ),
            )
        ]


def latency_percentiles(
    values_ms: Iterable[float], points: Sequence[float] = (50, 95, 99)
) -> dict[str, float]:
    """Nearest-rank percentiles {"p50": ..., ...} of call latencies; empty input gives an empty dict."""
    ordered = sorted(values_ms)
    if not ordered:
        return {}
    out: dict[str, float] = {}
    for p in points:
        rank = max(1, -(-len(ordered) * p // 100))
        out[f"p{int(p) if float(p).is_integer() else p}"] = float(ordered[int(rank) - 1])
    return out
