"""Ledger metadata as an immutable value object, independent of how it is encoded.

The attribute names are a public interface: the snapshot tables, the checker, the client and the replication
worker all read them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from bkaudit.model.quorum import validate_quorum


class LedgerState(enum.Enum):
    """LedgerMetadataFormat.State; values are the protobuf enum numbers."""

    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


class DigestType(enum.Enum):
    """Digest of entries; values are LedgerMetadataFormat.DigestType numbers (MAC is HMAC on the wire)."""

    CRC32 = 1
    MAC = 2
    CRC32C = 3
    DUMMY = 4


class FrozenMap(Mapping[str, bytes]):
    """An insertion-ordered, hashable, read-only mapping (custom metadata keeps BookKeeper's order)."""

    __slots__ = ("_items", "_map")

    def __init__(self, items: Mapping[str, bytes] | tuple[tuple[str, bytes], ...] | None = None) -> None:
        pairs = tuple(items.items()) if isinstance(items, Mapping) else tuple(items or ())
        self._items = pairs
        self._map = dict(pairs)

    def __getitem__(self, key: str) -> bytes:
        return self._map[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._map) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenMap({self._map!r})"


@dataclass(frozen=True, slots=True)
class Segment:
    """One ensemble of a ledger: the bookies (by id string) that store entries from `first_entry_id` on."""

    first_entry_id: int
    ensemble: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    """A ledger's metadata as BookKeeper stores it in ZooKeeper (LedgerMetadataFormat)."""

    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    state: LedgerState
    last_entry_id: int
    length: int
    digest_type: DigestType
    password: bytes
    segments: tuple[Segment, ...]
    ctime: int | None = None
    custom_metadata: FrozenMap = field(default_factory=FrozenMap)
    ctoken: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.custom_metadata, FrozenMap):
            object.__setattr__(self, "custom_metadata", FrozenMap(self.custom_metadata))
        if not isinstance(self.segments, tuple):
            object.__setattr__(self, "segments", tuple(self.segments))

    # -- derived views -------------------------------------------------------------------------------------
    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    def validate(self) -> None:
        """Raise QuorumError if the quorum sizes break E >= WQ >= AQ >= 1."""
        validate_quorum(self.ensemble_size, self.write_quorum, self.ack_quorum)

    def segment_last_entry(self, index: int) -> int | None:
        """Last entry id of segment `index`; None for the last segment of a ledger that is not closed.

        A non-last segment ends right before the next one starts; the last segment of a closed ledger ends at
        `last_entry_id` (which may be below its first entry: an empty segment).
        """
        if index + 1 < len(self.segments):
            return self.segments[index + 1].first_entry_id - 1
        return self.last_entry_id if self.is_closed else None

    def segment_ranges(self) -> Iterator[tuple[int, Segment, int | None]]:
        """Yield (segment_index, segment, last_entry_id or None) for every segment."""
        for i, seg in enumerate(self.segments):
            yield i, seg, self.segment_last_entry(i)

    def ensemble_at(self, entry_id: int) -> tuple[str, ...]:
        """The ensemble that stores `entry_id` (the last segment whose first entry is <= entry_id)."""
        chosen = self.segments[0].ensemble
        for seg in self.segments:
            if seg.first_entry_id <= entry_id:
                chosen = seg.ensemble
            else:
                break
        return chosen

    def bookies(self) -> frozenset[str]:
        """Every bookie that appears in any segment."""
        return frozenset(b for seg in self.segments for b in seg.ensemble)

    def evolve(self, **changes: Any) -> LedgerMetadata:
        """A copy with some attributes changed (metadata is immutable; CAS writes a new value)."""
        return replace(self, **changes)
