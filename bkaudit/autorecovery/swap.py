"""Replacing bookies in one segment's ensemble with a metadata CAS (BookKeeper's MetadataUpdateLoop).

The copy is done before the swap, so the metadata never names a bookie that lacks its entries. The swap is a
loop: read, check the segment is still what was copied (same first entry, same end, the old bookies still at
their indexes, the new ones not already in it), write with the version read; on BadVersion re-read and try
again. Anything else changed (another actor replaced the bookie, the segment was rewritten) means the copy may
no longer fit: the caller re-evaluates the ledger instead of forcing the write.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from bkaudit.errors import MetadataConflict, NoSuchLedger
from bkaudit.model.ledger import LedgerMetadata, Segment

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 50


class SwapOutcome(enum.Enum):
    DONE = "done"
    CHANGED = "changed"  # the segment no longer matches what was copied: re-evaluate
    GONE = "gone"  # the ledger was deleted
    LOCK_LOST = "lock_lost"  # our lock vanished (session expired): another worker may own the ledger


@dataclass(frozen=True)
class SwapResult:
    outcome: SwapOutcome
    metadata: LedgerMetadata | None = None
    version: int | None = None
    conflicts: int = 0  # CAS retries (concurrent metadata writes)


def swapped(
    metadata: LedgerMetadata,
    first_entry_id: int,
    last_entry_id: int | None,
    replacements: Mapping[int, tuple[str, str]],
) -> LedgerMetadata | None:
    """`metadata` with index -> (old, new) applied to the segment starting at `first_entry_id`, or None if
    that segment changed (pure: the precondition of the compare-and-set)."""
    for i, segment in enumerate(metadata.segments):
        if segment.first_entry_id != first_entry_id:
            continue
        if metadata.segment_last_entry(i) != last_entry_id:
            return None
        ensemble = list(segment.ensemble)
        for index, (old, new) in replacements.items():
            if index >= len(ensemble) or ensemble[index] != old or new in ensemble:
                return None
            ensemble[index] = new
        segments = list(metadata.segments)
        segments[i] = Segment(first_entry_id, tuple(ensemble))
        return metadata.evolve(segments=tuple(segments))
    return None


def replace_bookies(
    store: object,
    ledger_id: int,
    first_entry_id: int,
    last_entry_id: int | None,
    replacements: Mapping[int, tuple[str, str]],
    *,
    known: tuple[LedgerMetadata, int] | None = None,
    still_locked: Callable[[], bool] | None = None,
    on_conflict: Callable[[int], None] | None = None,
) -> SwapResult:
    """Swap bookies in one segment with CAS retries. `store` is a client MetadataStore (read / write).

    `known` is the (metadata, version) the caller evaluated: the first attempt writes on top of it without a
    read (a stale version only costs one conflict); every retry re-reads.
    """
    conflicts = 0
    for _ in range(MAX_ATTEMPTS):
        if known is not None:
            (metadata, version), known = known, None
        else:
            try:
                metadata, version = store.read(ledger_id)  # type: ignore[attr-defined]
            except NoSuchLedger:
                return SwapResult(SwapOutcome.GONE, conflicts=conflicts)
        proposed = swapped(metadata, first_entry_id, last_entry_id, replacements)
        if proposed is None:
            return SwapResult(SwapOutcome.CHANGED, metadata, version, conflicts)
        if still_locked is not None and not still_locked():
            return SwapResult(SwapOutcome.LOCK_LOST, metadata, version, conflicts)
        try:
            new_version = store.write(ledger_id, proposed, version)  # type: ignore[attr-defined]
        except MetadataConflict:
            conflicts += 1
            if on_conflict is not None:
                on_conflict(conflicts)
            log.info(
                "ledger %s: metadata changed during the ensemble swap; re-reading (%d)", ledger_id, conflicts
            )
            continue
        except NoSuchLedger:
            return SwapResult(SwapOutcome.GONE, conflicts=conflicts)
        return SwapResult(SwapOutcome.DONE, proposed, int(new_version), conflicts)
    return SwapResult(SwapOutcome.CHANGED, conflicts=conflicts)
