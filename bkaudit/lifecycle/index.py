"""Which ledgers reference which bookies (any segment), with their sizes: one pipelined metadata pass."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from typing import TYPE_CHECKING

from bkaudit.zk import ledgers

if TYPE_CHECKING:
    from kazoo.client import KazooClient


def ledgers_of(
    zk: KazooClient,
    bookies: Collection[str],
    *,
    root: str,
    max_in_flight: int = 500,
    open_ledgers: set[int] | None = None,
) -> dict[str, dict[int, int]]:
    """bookie -> {ledger id: ledger length in bytes} for every ledger whose ensembles name it.

    `open_ledgers`, when given, receives the ids of those ledgers that are not closed yet (a writer may still
    hold them: their last segment waits for the writer or the open-ledger grace and fencing)."""
    wanted = set(bookies)
    out: dict[str, dict[int, int]] = defaultdict(dict)
    if not wanted:
        return {}
    for ledger_id, metadata in ledgers.iter_all_metadata(zk, root=root, max_in_flight=max_in_flight):
        for bookie in metadata.bookies():
            if bookie in wanted:
                out[bookie][ledger_id] = max(0, metadata.length)
                if open_ledgers is not None and not metadata.is_closed:
                    open_ledgers.add(ledger_id)
    return {b: out.get(b, {}) for b in wanted}
