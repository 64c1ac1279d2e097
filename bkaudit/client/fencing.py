"""Fencing: stop the old writer before recovery reads the end of the ledger.

`ReadLastConfirmedOp.initiateWithFencing` in BookKeeper: read entry -1 with the FENCE flag and the master key
from every bookie of the last ensemble. Each answer is a valid entry (its piggy-backed LAC is a candidate), a
valid "has nothing" (ENOENTRY / ENOLEDGER), or unknown (any other error, a bad digest, no reply). Fencing is
done once at least one valid answer arrived and every write set has fewer than AQ unknown bookies
(`fencing_covered`): the old writer can then never gather AQ acknowledgements again, and no acknowledged
entry can hide from the read-forward. `FenceTracker` is that rule without I/O; `fence` drives it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from bkaudit.client.reader import MISSING
from bkaudit.errors import RecoveryError
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.model.quorum import fencing_covered, write_set


@dataclass(frozen=True)
class FenceResult:
    max_lac: int  # highest piggy-backed LAC among valid answers (-1 if none had entries)
    responded: tuple[int, ...]  # ensemble indexes that gave a valid answer (and are therefore fenced)


class FenceTracker:
    """Classifies fence-read answers of one ensemble and decides when fencing is complete or impossible."""

    def __init__(self, ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
        self.ensemble_size = ensemble_size
        self.write_quorum = write_quorum
        self.ack_quorum = ack_quorum
        self.valid: set[int] = set()
        self.unknown: dict[int, str] = {}
        self.max_lac = -1

    def entry(self, index: int, last_add_confirmed: int) -> None:
        """Bookie `index` returned a valid last entry carrying `last_add_confirmed`."""
        self.valid.add(index)
        self.max_lac = max(self.max_lac, last_add_confirmed)

    def nothing(self, index: int) -> None:
        """Bookie `index` has no entry of the ledger (ENOENTRY / ENOLEDGER) - still fenced."""
        self.valid.add(index)

    def failed(self, index: int, reason: str) -> None:
        """Bookie `index` answered with an error or a corrupt entry: it may not be fenced."""
        self.unknown[index] = reason

    @property
    def answered(self) -> int:
        return len(self.valid) + len(self.unknown)

    @property
    def complete(self) -> bool:
        return bool(self.valid) and fencing_covered(
            self.valid, self.ensemble_size, self.write_quorum, self.ack_quorum
        )

    @property
    def impossible(self) -> bool:
        """Every bookie answered and coverage still fails: recovery cannot go on safely."""
        return self.answered >= self.ensemble_size and not self.complete

    def uncovered_write_sets(self) -> list[tuple[int, ...]]:
        """Write sets (as ensemble indexes) with >= AQ bookies that did not give a valid answer."""
        out = []
        for i in range(self.ensemble_size):
            ws = write_set(i, self.ensemble_size, self.write_quorum)
            if sum(1 for b in ws if b not in self.valid) >= self.ack_quorum:
                out.append(ws)
        return out


def fence(
    pool: Any, digest: Any, ledger_id: int, metadata: LedgerMetadata, master_key: bytes, timeout: float
) -> FenceResult:
    """Fence the last ensemble of `metadata`; RecoveryError naming the uncovered write sets if impossible."""
    ensemble = metadata.segments[-1].ensemble
    tracker = FenceTracker(metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum)
    cond = threading.Condition()

    def record(index: int, fut: Any) -> None:
        exc = fut.exception()
        with cond:
            if exc is None:
                try:
                    entry = digest.verify(fut.result())
                except Exception as bad:
                    tracker.failed(index, f"bad entry: {bad}")
                else:
                    tracker.entry(index, int(entry.last_add_confirmed))
            elif getattr(exc, "status", None) in MISSING:
                tracker.nothing(index)
            else:
                tracker.failed(index, str(exc))
            cond.notify_all()

    for index, bookie in enumerate(ensemble):
        try:
            fut = pool.get(bookie).read_entry(
                ledger_id, -1, fence=True, master_key=master_key, high_priority=True
            )
        except Exception as exc:
            with cond:
                tracker.failed(index, str(exc))
            continue
        fut.add_done_callback(lambda f, i=index: record(i, f))

    deadline = time.monotonic() + timeout
    with cond:
        while not tracker.complete and not tracker.impossible:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            cond.wait(left)
        if tracker.complete:
            return FenceResult(tracker.max_lac, tuple(sorted(tracker.valid)))
        missing = [", ".join(ensemble[i] for i in ws) for ws in tracker.uncovered_write_sets()]
        errors = "; ".join(f"{ensemble[i]}: {why}" for i, why in sorted(tracker.unknown.items()))
        silent = [
            ensemble[i] for i in range(len(ensemble)) if i not in tracker.valid and i not in tracker.unknown
        ]
    reason = "fencing could not cover every write quorum"
    if silent:
        reason += f" (no reply within {timeout:g}s from {', '.join(silent)})"
    raise RecoveryError(
        f"{reason}: E={metadata.ensemble_size} WQ={metadata.write_quorum} AQ={metadata.ack_quorum}; "
        f"write sets lacking {metadata.write_quorum - metadata.ack_quorum + 1} responder(s): "
        f"[{'], ['.join(missing)}]"
        + (f"; errors: {errors}" if errors else ""),
        ledger_id=ledger_id,
    )
