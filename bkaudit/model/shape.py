"""A ledger as the checks see it: quorums, state, last entry and ensembles, nothing about its encoding.

One value object for every layer: built from `LedgerMetadata` on the driver (`from_metadata`) or from the
snapshot tables' columns on executors (`of`, the one row → shape conversion), and read by the durability,
placement, metadata and read-evidence checks, the fan-out and the decommission what-if.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from bkaudit.model.ledger import LedgerMetadata, LedgerState, Segment

CLOSED = "CLOSED"
"""The `state` column value of a closed ledger (LedgerState name, as the snapshot tables store it)."""


@dataclass(frozen=True, slots=True)
class LedgerShape:
    """The parts of a ledger's metadata the durability and placement checks read.

    Built from `LedgerMetadata` on the driver or from snapshot table rows on executors; `version` is the znode
    version the shape was read at, used to detect metadata that changed before a violation is written.
    """

    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    closed: bool
    last_entry_id: int
    segments: tuple[Segment, ...]
    version: int | None = None
    open_end: int | None = None
    """For a ledger that is not closed: the last entry of its last segment checked in this run (the
    last-add-confirmed its bookies reported, or the segment's first entry when that may have been written:
    `bkaudit.audit.open_segments`, LedgerChecker.checkLedger). None: the last segment is not checked (its
    end is not known, or nothing was written to it). Always None for a closed ledger."""

    def with_open_end(self, open_end: int | None) -> LedgerShape:
        """This shape with its open segment checked up to `open_end` (None: not checked)."""
        if self.closed or open_end == self.open_end:
            return self
        return replace(self, open_end=open_end)

    @classmethod
    def from_metadata(
        cls, ledger_id: int, metadata: LedgerMetadata, version: int | None = None
    ) -> LedgerShape:
        return cls(
            ledger_id=ledger_id,
            ensemble_size=metadata.ensemble_size,
            write_quorum=metadata.write_quorum,
            ack_quorum=metadata.ack_quorum,
            closed=metadata.state is LedgerState.CLOSED,
            last_entry_id=metadata.last_entry_id,
            segments=tuple(metadata.segments),
            version=version,
        )

    def problems(self) -> list[str]:
        """Why BookKeeper itself would reject this metadata (LedgerMetadataImpl's checks); [] when sound."""
        out: list[str] = []
        e, wq, aq = self.ensemble_size, self.write_quorum, self.ack_quorum
        if not (e >= wq >= aq >= 1):
            out.append(f"quorum sizes break E >= WQ >= AQ >= 1 (E={e} WQ={wq} AQ={aq})")
        if not self.segments:
            out.append("no ensembles")
        previous = -1
        for i, seg in enumerate(self.segments):
            if len(seg.ensemble) != e:
                out.append(f"segment {i} has {len(seg.ensemble)} bookies, ensemble size is {e}")
            if seg.first_entry_id < 0:
                out.append(f"segment {i} starts at negative entry {seg.first_entry_id}")
            if seg.first_entry_id < previous:
                out.append(f"segment {i} starts at {seg.first_entry_id}, before segment {i - 1} ({previous})")
            previous = max(previous, seg.first_entry_id)
        if self.segments and self.segments[0].first_entry_id != 0:
            out.append(f"first segment starts at {self.segments[0].first_entry_id}, not 0")
        return out

    @classmethod
    def of(
        cls,
        *,
        ledger_id: int,
        ensemble_size: int | None,
        write_quorum: int | None,
        ack_quorum: int | None,
        state: str | None,
        last_entry_id: int | None,
        segments: Iterable[tuple[int, int, Iterable[str]]],
        version: int | None = None,
    ) -> LedgerShape:
        """From table columns (`ledgers` + `ledger_segments`): segments as (segment_index, first_entry_id,
        ensemble) in any order; null quorums read as 0 (the metadata check reports them), a null last
        entry as -1 (nothing written)."""
        ordered = sorted(((int(i), int(first), tuple(ens)) for i, first, ens in segments), key=lambda x: x[0])
        return cls(
            ledger_id=int(ledger_id),
            ensemble_size=int(ensemble_size or 0),
            write_quorum=int(write_quorum or 0),
            ack_quorum=int(ack_quorum or 0),
            closed=state == CLOSED,
            last_entry_id=int(last_entry_id if last_entry_id is not None else -1),
            segments=tuple(Segment(first, ens) for _i, first, ens in ordered),
            version=version,
        )
