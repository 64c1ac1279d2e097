"""How many ledgers one listing call carries: as many as the answer's expected bytes allow, not a fixed count.

A bookie answers GetListOfEntriesOfLedger with BookKeeper's AvailabilityOfEntriesOfLedger encoding: a 64-byte
header and 24 bytes per SequenceGroup, one group per maximal run of consecutive ids
(`formats.availability.encoded_size`). What a healthy bookie holds of a ledger is known from the metadata: per
checked segment one `Striping` (runs of WQ ids every E ids), so its answer has at most the sum of those
stripings' run counts in groups (runs of adjacent segments merge: never more). A 50,000-entry E3/WQ2 ledger
is about 16,700 runs, 400 KB per bookie, so 500 of them in one batch answer would be 200 MB, far above
BookKeeper's 5 MiB frame (nettyMaxFrameSizeBytes).

The estimate is exact for a bookie holding what it should. One with holes answers with up to one more group
per hole, one with extra entries with more too, so a call is planned to half the frame (`call_budget`), and
the bookie never sends more than its frame limit: ledgers that did not fit come back ETOOMANYREQUESTS and the
client asks for them again (bkaudit.bookie.listing, bkaudit.rpc.client).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from bkaudit.formats.availability import encoded_size
from bkaudit.model.quorum import Striping

ITEM_OVERHEAD_BYTES = 32
"""Upper bound of what a batch response adds around one ledger's encoding: the `ledgers` tag and length,
ledgerId (a varint of at most 10 bytes), status, the availability tag and length (26 bytes at most)."""


def answer_bytes(stripings: Iterable[Striping]) -> int:
    """Upper bound of the listing answer (item framing included) of a bookie holding exactly `stripings`."""
    return ITEM_OVERHEAD_BYTES + encoded_size(sum(s.run_count() for s in stripings))


def call_budget(max_frame_bytes: int) -> int:
    """Expected answer bytes planned into one call: half the frame, the rest is room for holes and extras."""
    return max(1, max_frame_bytes // 2)


def plan_calls(sizes: Sequence[int], *, max_bytes: int, max_count: int) -> list[list[int]]:
    """Positions of `sizes` cut into consecutive calls of at most `max_count` positions and `max_bytes` bytes.

    Order is kept and every position lands in exactly one call. A position whose own size exceeds
    `max_bytes` goes alone (its answer may still fit the frame; if not, the bookie says so for that ledger).
    """
    if max_count < 1 or max_bytes < 1:
        raise ValueError(f"max_count and max_bytes must be >= 1, got {max_count} and {max_bytes}")
    calls: list[list[int]] = []
    current: list[int] = []
    used = 0
    for position, size in enumerate(sizes):
        size = max(0, size)
        if current and (len(current) >= max_count or used + size > max_bytes):
            calls.append(current)
            current, used = [], 0
        current.append(position)
        used += size
    if current:
        calls.append(current)
    return calls
