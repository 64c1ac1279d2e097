"""The last segment of a ledger that is not closed, checked as BookKeeper's `checkAllLedgers` checks it.

`AuditorCheckAllLedgersTask.checkAllLedgers` opens every ledger, without recovery
(`BookKeeperAdmin.asyncOpenLedgerNoRecovery`). For a ledger that is not closed, `LedgerOpenOp` then reads its
last-add-confirmed (`LedgerHandle.asyncReadLastConfirmed` → `asyncReadExplicitLastConfirmed` →
`PendingReadLacOp`): one READ_LAC to each bookie of the current (last) ensemble; an answer gives the higher of
the explicit LAC body and the LAC carried by the bookie's last entry, ENOENTRY / ENOLEDGER are valid answers
without a LAC, and the LAC is known once the valid answers cover every write set (`RRQuorumCoverageSet`, here
`model.quorum.fencing_covered`); otherwise the open fails and the ledger is not checked.
`LedgerChecker.checkLedger` then checks the last segment from its first entry up to that LAC; when the LAC is
below the first entry (nothing confirmed in it yet), it reads that first entry from its write set and checks
the fragment `[first, first]` only when some bookie answered anything but NoSuchEntry / NoSuchLedger
(`EntryExistsCallback`).

This module is that decision, pure: answers in, the entry the run checks the open segment up to
(`LedgerShape.open_end`) out. Entries past the LAC are still being written: never counted missing. One
deliberate difference: BookKeeper probes the first entry also when the LAC equals it; here an LAC at or
above the first entry is proof enough that the entries up to it were acknowledged, so they are checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import EllipsisType

from bkaudit.audit.availability import REASON_OPEN_SEGMENT_UNKNOWN
from bkaudit.audit.base import Category, Finding
from bkaudit.audit.details import OpenSegmentNote, OpenSegmentUnknownDetail, UnverifiedBookie
from bkaudit.audit.statuses import STATUS_NO_ENTRY, STATUS_NO_LEDGER, STATUS_OK
from bkaudit.errors import FormatError
from bkaudit.formats.entry import LAC_HEADER_SIZE, DigestManager, parse_entry_header
from bkaudit.model.ledger import DigestType
from bkaudit.model.quorum import fencing_covered, write_set
from bkaudit.model.shape import LedgerShape

NO_ENTRY = -1
"""BookKeeper's INVALID_ENTRY_ID: the LAC of a ledger nothing was confirmed in."""
NOTHING_THERE = frozenset({STATUS_NO_ENTRY, STATUS_NO_LEDGER})
"""Answers saying the bookie holds nothing of it (NoSuchEntry / NoSuchLedger)."""


@dataclass(frozen=True, slots=True)
class LacAnswer:
    """One bookie's READ_LAC answer for one ledger: its index in the last ensemble, the status, and (OK only)
    the highest LAC its bodies carry (None: neither body verified, or neither was sent)."""

    bookie_index: int
    status: str
    lac: int | None = None
    error: str | None = None


def lac_of_bodies(
    ledger_id: int, digest_type: str | None, lac_body: bytes | None, last_entry: bytes | None
) -> int | None:
    """The highest LAC in a READ_LAC answer's bodies (PendingReadLacOp.readLacComplete), None without a body.

    Each body is verified with the ledger's digest (`verifyDigestAndReturnLac`,
    `verifyDigestAndReturnLastConfirmed`): CRC32, CRC32C and DUMMY in full; a MAC ledger's password is not in
    the snapshot, so only its ledger id is checked. A body that does not verify raises FormatError: the
    answer is then not a valid one, as BookKeeper's DigestMatchException.
    """
    kind = _digest(digest_type)
    best: int | None = None
    if lac_body:
        if kind is not None and kind is not DigestType.MAC:
            lac = DigestManager(ledger_id, b"", kind).verify_lac(lac_body)
        else:
            lac = _unverified_lac(ledger_id, lac_body)
        best = lac
    if last_entry:
        if kind is not None and kind is not DigestType.MAC:
            lac = DigestManager(ledger_id, b"", kind).verify(last_entry).last_add_confirmed
        else:
            got, _entry, lac, _length = parse_entry_header(last_entry)
            if got != ledger_id:
                raise FormatError(f"last entry of ledger {got}, asked for {ledger_id}", field="ledger_id")
        best = lac if best is None else max(best, lac)
    return best


def _digest(digest_type: str | None) -> DigestType | None:
    try:
        return DigestType[digest_type] if digest_type else None
    except KeyError:
        return None


def _unverified_lac(ledger_id: int, body: bytes) -> int:
    if len(body) < LAC_HEADER_SIZE:
        raise FormatError(f"LAC body of {len(body)} bytes", field="lac")
    got = int.from_bytes(body[:8], "big", signed=True)
    if got != ledger_id:
        raise FormatError(f"LAC body of ledger {got}, asked for {ledger_id}", field="ledger_id")
    return int.from_bytes(body[8:16], "big", signed=True)


def last_add_confirmed(shape: LedgerShape, answers: Iterable[LacAnswer]) -> int | None:
    """The ledger's LAC from its last ensemble's READ_LAC answers, None when they cannot establish it.

    Valid answers: OK with a verified body (or none), ENOENTRY, ENOLEDGER. They must cover every write set of
    the ensemble (fewer than AQ bookies unknown in each) and at least one must be valid; the LAC is then the
    highest one they carry (NO_ENTRY when none carries one).
    """
    valid = [a for a in answers if (a.status == STATUS_OK and a.error is None) or a.status in NOTHING_THERE]
    if not valid:
        return None
    if not fencing_covered(
        {a.bookie_index for a in valid}, shape.ensemble_size, shape.write_quorum, shape.ack_quorum
    ):
        return None
    return max((a.lac for a in valid if a.lac is not None), default=NO_ENTRY)


def first_entry_readers(shape: LedgerShape) -> tuple[str, ...]:
    """The write set of the open segment's first entry: whom LedgerChecker asks whether it was written."""
    last = shape.segments[-1]
    return tuple(last.ensemble[i] for i in write_set(last.first_entry_id, shape.ensemble_size,
                                                      shape.write_quorum))


def first_entry_may_exist(statuses: Iterable[str]) -> bool:
    """EntryExistsCallback: the entry may have been written unless every bookie said NoSuchEntry / Ledger
    (a bookie that fails or does not answer cannot say it was never written)."""
    return any(s not in NOTHING_THERE for s in statuses)


@dataclass(frozen=True, slots=True)
class OpenSegment:
    """How far this run checks the last segment of one ledger that is not closed."""

    ledger_id: int
    segment_index: int
    first_entry: int
    lac: int | None
    """The LAC its bookies reported; None when their answers could not establish it."""
    end: int | None
    """`LedgerShape.open_end`: the last entry checked; None when nothing is checked there."""
    why: str
    answers: tuple[tuple[str, str, str | None], ...] = ()
    """(bookie, status, error) of the READ_LAC answers: what an unverifiable row shows."""

    @property
    def known(self) -> bool:
        return self.lac is not None


def needs_first_entry(shape: LedgerShape, lac: int | None) -> bool:
    """Whether LedgerChecker would read the first entry: the LAC is known and below the segment's start."""
    return lac is not None and not shape.closed and bool(shape.segments) and (
        lac < shape.segments[-1].first_entry_id
    )


def decide_open_segment(
    shape: LedgerShape,
    answers: Sequence[LacAnswer],
    *,
    bookies: Sequence[str],
    first_entry_statuses: Sequence[str] | None = None,
) -> OpenSegment:
    """The decision for one open ledger: its LAC from `answers` (`bookies[i]` answered `answers[i]`) and,
    when that is below the segment's first entry, what its write set said about that entry."""
    segment = shape.segments[-1]
    first = segment.first_entry_id
    shown = tuple((bookies[k], a.status, a.error) for k, a in enumerate(answers))
    index = len(shape.segments) - 1
    lac = last_add_confirmed(shape, answers)
    if lac is None:
        return OpenSegment(shape.ledger_id, index, first, None, None,
                           "its bookies' READ_LAC answers do not cover every write set", shown)
    if lac >= first:
        return OpenSegment(shape.ledger_id, index, first, lac, lac, f"checked up to the LAC {lac}", shown)
    statuses = list(first_entry_statuses or ())
    if first_entry_may_exist(statuses):
        why = f"LAC {lac} below the first entry {first}, which may have been written: checked alone"
        return OpenSegment(shape.ledger_id, index, first, lac, first, why, shown)
    why = f"LAC {lac} below the first entry {first}, which its write set says was never written"
    return OpenSegment(shape.ledger_id, index, first, lac, None, why, shown)


def open_segment_finding(seg: OpenSegment, *, znode_version: int | EllipsisType | None = ...) -> Finding:
    """`ledger_unverifiable` for an open ledger whose last segment could not be checked (LAC unknown); when
    `znode_version` is given (even None), stamped with the version it was judged at."""
    f = Finding(
        category=Category.LEDGER_UNVERIFIABLE,
        ledger_id=seg.ledger_id,
        facts=OpenSegmentUnknownDetail(
            f"the last segment (from entry {seg.first_entry}) of this open ledger was not checked: {seg.why}",
            REASON_OPEN_SEGMENT_UNKNOWN,
            OpenSegmentNote(seg.segment_index, seg.first_entry, None),
            tuple(UnverifiedBookie(b, st, err) for b, st, err in seg.answers),
        ),
    )
    return f if isinstance(znode_version, EllipsisType) else f.stamped(znode_version)
