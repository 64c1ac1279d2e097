"""What is computed from the records the same way for every store: the bookie table, the ledger indexes."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from bkaudit.errors import FormatError
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.store.base import Registry


def describe_bookies(registry: Registry) -> list[dict[str, object]]:
    """One row per bookie known by cookie or registration: id, state, endpoint, rack, has_cookie."""
    from bkaudit.zk.registry import DEFAULT_RACK_GROUP, endpoint_target

    writable, readonly = set(registry.writable()), set(registry.readonly())
    cookies = set(registry.cookies())
    racks = registry.racks().get(DEFAULT_RACK_GROUP, {})
    rows: list[dict[str, object]] = []
    for bookie_id in sorted(writable | readonly | cookies):
        state = "writable" if bookie_id in writable else "readonly" if bookie_id in readonly else "absent"
        endpoint = None
        if state != "absent":
            try:
                info = registry.registration(bookie_id)[1]
                endpoint = endpoint_target(info) if info is not None else None
            except FormatError:
                endpoint = "(unparseable registration)"
        rack = racks.get(bookie_id)
        rows.append({"id": bookie_id, "state": state, "endpoint": endpoint,
                     "rack": rack.rack if rack is not None else None, "has_cookie": bookie_id in cookies})
    return rows


def index_bookies(ledgers: Iterable[tuple[int, LedgerMetadata]]) -> dict[str, list[int]]:
    """LedgerIndex.every_bookie over (ledger id, metadata) pairs in ascending id order."""
    out: dict[str, list[int]] = {}
    for ledger_id, metadata in ledgers:
        for bookie in metadata.bookies():
            out.setdefault(bookie, []).append(ledger_id)
    return out


def index_ledgers(
    ledgers: Iterable[tuple[int, LedgerMetadata]], bookies: Collection[str], *,
    open_ledgers: set[int] | None = None,
) -> dict[str, dict[int, int]]:
    """LedgerIndex.ledgers_of over (ledger id, metadata) pairs, for every implementation."""
    wanted = set(bookies)
    out: dict[str, dict[int, int]] = {b: {} for b in wanted}
    if not wanted:
        return {}
    for ledger_id, metadata in ledgers:
        for bookie in metadata.bookies():
            if bookie in wanted:
                out[bookie][ledger_id] = max(0, metadata.length)
                if open_ledgers is not None and not metadata.is_closed:
                    open_ledgers.add(ledger_id)
    return out
