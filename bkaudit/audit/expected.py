"""What each bookie of a ledger must hold: the checked segments and their round-robin stripings (BP-34).

The contract side of the durability check, apart from how a bookie answered (`bkaudit.audit.evidence`) and
how the answers combine (`bkaudit.audit.durability`): it changes only when what is judged changes (open
ledgers, segment ends), and the fan-out plans its calls with it before any bookie is asked.
"""

from __future__ import annotations

from dataclasses import dataclass

from bkaudit.model.quorum import Striping, entries_of_bookie
from bkaudit.model.shape import LedgerShape


@dataclass(frozen=True, slots=True)
class SegmentSpan:
    """A segment whose entries are known: [first, last] with last >= first."""

    index: int
    first: int
    last: int
    ensemble: tuple[str, ...]


def checked_segments(shape: LedgerShape) -> tuple[SegmentSpan, ...]:
    """Segments whose entries must all be on their write sets: all of a closed ledger; of one still open, all
    but the last, and the last up to `shape.open_end` when the run established it.

    A middle segment ends right before the next one starts; the last segment of a closed ledger ends at
    `last_entry_id`, that of an open ledger at `open_end` (its bookies' last-add-confirmed; entries past it
    may still be in flight). Empty segments (no entries) are left out: nobody must hold anything for them. In
    a closed ledger no segment reaches past `last_entry_id` (BookKeeper's check would expect entries that were
    never written if a later segment started beyond the end; that is a false alarm we do not raise).
    """
    segs = shape.segments
    limit = len(segs) if shape.closed else len(segs) - 1
    out: list[SegmentSpan] = []
    for i in range(max(limit, 0)):
        first = segs[i].first_entry_id
        last = segs[i + 1].first_entry_id - 1 if i + 1 < len(segs) else shape.last_entry_id
        if shape.closed:
            last = min(last, shape.last_entry_id)
        if last >= first:
            out.append(SegmentSpan(i, first, last, segs[i].ensemble))
    tail = open_segment(shape)
    if tail is not None:
        out.append(tail)
    return tuple(out)


def open_segment(shape: LedgerShape) -> SegmentSpan | None:
    """The last segment of a ledger that is not closed, as far as this run checks it (None: not checked)."""
    if shape.closed or not shape.segments or shape.open_end is None:
        return None
    last = shape.segments[-1]
    if shape.open_end < last.first_entry_id:
        return None
    return SegmentSpan(len(shape.segments) - 1, last.first_entry_id, shape.open_end, last.ensemble)


def checked_limit(shape: LedgerShape) -> int | None:
    """Highest entry id whose placement is judged (None = no limit: a closed ledger owns no entry after it).

    For an open ledger the last segment is still being written: entries up to its checked end (`open_end`)
    are judged, later ones (in flight) are not; a bookie holding entries past that is not holding anything
    "extra".
    """
    if shape.closed:
        return None
    if not shape.segments:
        return -1
    tail = open_segment(shape)
    return tail.last if tail is not None else shape.segments[-1].first_entry_id - 1


@dataclass(frozen=True, slots=True)
class Expected:
    """The entries bookie index `bookie_index` of segment `segment_index` must store."""

    segment_index: int
    bookie_index: int
    striping: Striping

    @property
    def count(self) -> int:
        return self.striping.count()


def expected_by_bookie(shape: LedgerShape) -> dict[str, list[Expected]]:
    """Per distinct bookie, the stripings it must hold; bookies that must hold nothing are left out.

    One entry per bookie is one GetListOfEntries call per (ledger, bookie), covering every segment the bookie
    appears in, as BookKeeper's replicas check does.
    """
    out: dict[str, list[Expected]] = {}
    e, wq = shape.ensemble_size, shape.write_quorum
    for span in checked_segments(shape):
        for idx, bookie in enumerate(span.ensemble[:e]):
            striping = entries_of_bookie(idx, span.first, span.last, e, wq)
            if striping.count() > 0:
                out.setdefault(bookie, []).append(Expected(span.index, idx, striping))
    return out
