"""One segment's repair: copy what its replaced indexes stored to their targets, then swap the targets into
the segment's ensemble with a metadata compare-and-set (BookKeeper's ReplicationWorker: replicate the
fragment, then `updateEnsembleInfo` in a retry loop)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bkaudit.autorecovery.copier import CopyTask, FragmentCopier
from bkaudit.autorecovery.fragments import Answer, SegmentRepair
from bkaudit.autorecovery.shared import RepairReport, Shared
from bkaudit.autorecovery.swap import SwapOutcome, replace_bookies
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.model.quorum import write_set


class SegmentMover:
    """One worker's copies and swaps (`name` labels its events)."""

    def __init__(self, shared: Shared, name: str, copier: FragmentCopier) -> None:
        self.shared = shared
        self.name = name
        self.copier = copier

    def copy(
        self,
        ledger_id: int,
        metadata: LedgerMetadata,
        repair: SegmentRepair,
        digest: Any,
        key: bytes,
        answers: Mapping[str, Answer],
        lost: set[str],
        report: RepairReport,
        unreachable: frozenset[str] = frozenset(),
        draining: frozenset[str] = frozenset(),
    ) -> bool:
        """Copy the entries each replaced (or refilled) index of the segment stores to its target; False
        when some were not copied (errors or entries no replica holds, counted in `report`)."""
        sh = self.shared
        # a draining bookie leaves the ensemble but stays a source while it answers
        leaving = {repair.ensemble[i] for i in repair.replaced()} - (draining - lost)
        ok = True
        for fragment in repair.fragments:
            target = repair.target_of(fragment)
            task = CopyTask(
                ledger_id,
                key,
                digest,
                repair.ensemble,
                metadata.ensemble_size,
                metadata.write_quorum,
                fragment.entry_ranges(),
                target,
                excluded=frozenset(leaving | lost | {target}),
                unreachable=unreachable,
                holdings=answers,
                size_hint=_entry_size(metadata),
            )
            sh.events.emit(
                "copy",
                ledger=ledger_id,
                segment=repair.segment_index,
                index=fragment.bookie_index,
                bookie=fragment.bookie,
                target=target,
                reason=fragment.reason.value,
                entries=fragment.entry_count(),
                worker=self.name,
            )
            result = self.copier.copy(task, should_stop=sh.stop.is_set)
            report.copy.merge(result)
            if result.missing:
                ok = False
                for entry_id in result.missing:
                    ws = write_set(entry_id, metadata.ensemble_size, metadata.write_quorum)
                    report.lost_bookies.update(repair.ensemble[i] for i in ws)
            if result.errors:
                ok = False
                first = min(result.errors)
                report.errors.append(
                    f"segment {repair.segment_index} index {fragment.bookie_index}: "
                    f"{len(result.errors)} entries not copied (entry {first}: "
                    f"{result.errors[first]})"
                )
        return ok

    def swap(
        self,
        ledger_id: int,
        metadata: LedgerMetadata,
        known: tuple[LedgerMetadata, int],
        repair: SegmentRepair,
        report: RepairReport,
    ) -> tuple[LedgerMetadata, int] | None:
        """Swap the segment's targets in, first CAS at the version evaluated (like BookKeeper's loop); the new
        (metadata, version), or None when the ledger must be re-evaluated (stop repairing)."""
        sh = self.shared
        replacements = {i: (repair.ensemble[i], t) for i, t in repair.targets.items()}
        result = replace_bookies(
            sh.store,
            ledger_id,
            repair.first_entry_id,
            metadata.segment_last_entry(repair.segment_index),
            replacements,
            known=known,
            still_locked=lambda: sh.cluster.queue.holds_lock(ledger_id),
            on_conflict=lambda n: sh.events.emit("swap_conflict", ledger=ledger_id, attempt=n),
        )
        if result.outcome is SwapOutcome.DONE:
            report.repaired += 1
            sh.events.emit(
                "swapped",
                ledger=ledger_id,
                segment=repair.segment_index,
                replacements={str(i): list(p) for i, p in replacements.items()},
                conflicts=result.conflicts,
                worker=self.name,
            )
            assert result.metadata is not None and result.version is not None
            return result.metadata, result.version
        if result.outcome is SwapOutcome.CHANGED:
            report.changed = True
            sh.events.emit("segment_changed", ledger=ledger_id, segment=repair.segment_index)
        elif result.outcome is SwapOutcome.GONE:
            report.gone = True
        else:
            report.lock_lost = True
        return None


def _entry_size(metadata: LedgerMetadata) -> int:
    """Average stored entry size (payload plus header and digest, roughly), for the byte limiter."""
    entries = metadata.last_entry_id + 1
    if metadata.is_closed and entries > 0 and metadata.length > 0:
        return metadata.length // entries + 40
    return 1024
