"""The protocol's decisions after a lost compare-and-set, as pure functions.

BookKeeper's replication protocol (doc/bookkeeperProtocol) says exactly what a writer or a recovering reader
must do when its metadata CAS fails; keeping these rules free of I/O makes them testable case by case and
keeps the handle code to "write, and on conflict ask the rules".
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from bkaudit.model.ledger import LedgerMetadata, LedgerState, Segment


class Outcome(enum.Enum):
    RETRY = "retry"  # re-apply the change on top of the fresh metadata
    DONE = "done"  # the fresh metadata already is the wanted result
    FAIL = "fail"  # the change must not be made; report the reason


def writer_close(fresh: LedgerMetadata, last_acked: int) -> tuple[Outcome, str]:
    """A writer's close lost the CAS: still OPEN -> retry; IN_RECOVERY -> error; CLOSED -> ok iff same end."""
    if fresh.state is LedgerState.OPEN:
        return Outcome.RETRY, "metadata changed while OPEN"
    if fresh.state is LedgerState.IN_RECOVERY:
        return (
            Outcome.FAIL,
            "ledger is being recovered by another client (IN_RECOVERY); the writer was fenced",
        )
    if fresh.last_entry_id == last_acked:
        return Outcome.DONE, "already CLOSED at the same last entry"
    return Outcome.FAIL, (
        f"ledger was CLOSED by another client at last entry {fresh.last_entry_id}, "
        f"but this writer acknowledged up to {last_acked}"
    )


def writer_ensemble_change(fresh: LedgerMetadata) -> tuple[Outcome, str]:
    """A writer's ensemble change lost the CAS: retry while OPEN, otherwise the ledger is fenced."""
    if fresh.state is LedgerState.OPEN:
        return Outcome.RETRY, "metadata changed while OPEN"
    return Outcome.FAIL, f"ledger is {fresh.state.name}: fenced by a recovering reader"


def recovery_close(fresh: LedgerMetadata, started_from: LedgerMetadata) -> tuple[Outcome, str]:
    """A recoverer's close lost the CAS: a CLOSED result is accepted (recoverers converge on it).

    Still IN_RECOVERY with the segments we started from -> retry; anything else means another actor
    rewrote the ledger under us and recovery must start over.
    """
    if fresh.state is LedgerState.CLOSED:
        return Outcome.DONE, f"closed concurrently at last entry {fresh.last_entry_id}"
    if fresh.state is LedgerState.IN_RECOVERY and fresh.segments == started_from.segments:
        return Outcome.RETRY, "metadata version moved while IN_RECOVERY"
    return Outcome.FAIL, (
        f"metadata changed concurrently during recovery (state {fresh.state.name}, "
        f"{len(fresh.segments)} segments); retry the recovery"
    )


def with_replacements(
    metadata: LedgerMetadata, first_unacked: int, replacements: Mapping[int, str]
) -> LedgerMetadata:
    """Metadata after replacing bookies of the last ensemble from `first_unacked` on (an ensemble change).

    The new segment starts at the first entry not yet acknowledged to the client. If the last segment already
    starts there (no entry of it was acknowledged), it is replaced in place rather than leaving an empty
    segment behind, as BookKeeper does.
    """
    last = metadata.segments[-1]
    if first_unacked < last.first_entry_id:
        raise ValueError(
            f"ensemble change at entry {first_unacked} before the last segment "
            f"(starts at {last.first_entry_id})"
        )
    ensemble = tuple(replacements.get(i, b) for i, b in enumerate(last.ensemble))
    new = Segment(first_entry_id=first_unacked, ensemble=ensemble)
    if last.first_entry_id == first_unacked:
        return metadata.evolve(segments=(*metadata.segments[:-1], new))
    return metadata.evolve(segments=(*metadata.segments, new))
