"""Which ledgers reference which bookies (any segment), with their sizes: one pipelined metadata pass."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection
from typing import TYPE_CHECKING

from bkaudit.errors import FormatError
from bkaudit.zk import ledgers

if TYPE_CHECKING:
    from kazoo.client import KazooClient

log = logging.getLogger(__name__)


def ledgers_of(
    zk: KazooClient, bookies: Collection[str], *, root: str, max_in_flight: int = 500
) -> dict[str, dict[int, int]]:
    """bookie -> {ledger id: ledger length in bytes} for every ledger whose ensembles name it."""
    from bkaudit.formats.ledger_metadata import parse

    wanted = set(bookies)
    out: dict[str, dict[int, int]] = defaultdict(dict)
    if not wanted:
        return {}
    by_path: dict[str, int] = {}
    for prefix in ledgers.ledger_prefixes(zk, root=root):
        for ledger_id, path in ledgers.iter_ledger_paths(zk, prefix, root=root):
            by_path[path] = ledger_id
    for path, data, _ in ledgers.read_many(zk, list(by_path), max_in_flight=max_in_flight):
        if data is None:
            continue  # deleted since listing
        try:
            metadata = parse(data)
        except FormatError as exc:
            log.warning("skipping unparseable ledger metadata %s: %s", path, exc)
            continue
        for bookie in metadata.bookies():
            if bookie in wanted:
                out[bookie][by_path[path]] = max(0, metadata.length)
    return {b: out.get(b, {}) for b in wanted}
