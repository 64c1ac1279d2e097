"""Which ledgers reference which bookies (any segment), with their sizes: one pipelined metadata pass."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from typing import TYPE_CHECKING

from bkaudit.zk import ledgers

if TYPE_CHECKING:
    from kazoo.client import KazooClient


def ledgers_of(
    zk: KazooClient, bookies: Collection[str], *, root: str, max_in_flight: int = 500
) -> dict[str, dict[int, int]]:
    """bookie -> {ledger id: ledger length in bytes} for every ledger whose ensembles name it."""
    wanted = set(bookies)
    out: dict[str, dict[int, int]] = defaultdict(dict)
    if not wanted:
        return {}
    for ledger_id, metadata in ledgers.iter_all_metadata(zk, root=root, max_in_flight=max_in_flight):
        for bookie in metadata.bookies():
            if bookie in wanted:
                out[bookie][ledger_id] = max(0, metadata.length)
    return {b: out.get(b, {}) for b in wanted}
