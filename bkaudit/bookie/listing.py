"""The bookie's listing answers: a byte-bounded cache of encodings, and batch responses that fit one frame.

The checker lists every ledger of every bookie, so listing is the bookie's hottest read path. Encoding a
ledger's runs costs time proportional to its runs (a 50,000-entry E3/WQ2 ledger: 16,700 groups, 400 KB), so
encodings are cached per ledger, least recently used first out beyond `max_bytes` (`[bookie]
listing_cache_bytes`), and dropped when the ledger changes (the storage invalidates on every commit and
deletion).

A batch response (bkaudit's op 1000) is assembled by hand: each ledger's `LedgerAvailability` (tag, length,
ledgerId, status, availability bytes) joined after the header. The bytes are exactly what protobuf writes
(fields in number order; tests/bookie/test_bookie_storage.py checks them against the generated classes). It
never exceeds the frame limit the bookie was given (BookKeeper's nettyMaxFrameSizeBytes): ledgers that no
longer fit are answered ETOOMANYREQUESTS (ask again, in a smaller call), a ledger whose encoding alone cannot
fit in a frame EIO; when not even those short answers fit, the whole response is ETOOMANYREQUESTS.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.formats.wire import varint

_LEDGERS_TAG = b"\x12"  # GetListOfEntriesOfLedgersResponse.ledgers = 2, length-delimited
_BATCH_TAG = varint((pb.Response.GETLISTOFENTRIESOFLEDGERSRESPONSE_FIELD_NUMBER << 3) | 2)
_STATUS_EOK = b"\x08" + varint(pb.EOK)
_ITEM_EOK = b"\x10" + varint(pb.EOK)
_ITEM_STATUS: dict[int, bytes] = {s: b"\x10" + varint(s) for s in (pb.ENOLEDGER, pb.ETOOMANYREQUESTS, pb.EIO,
                                                                 pb.EUNKNOWNLEDGERSTATE)}
_MAX_LENGTH_VARINT = 5  # a length below 4 GiB


class ListingCache:
    """Listings by ledger id, kept as the ready batch item, least recently used evicted beyond `max_bytes`.

    A ledger's entry is its serialized `LedgerAvailability` (what a batch response carries, so a cached ledger
    costs one join there) whose tail is the availability encoding (sliced off for single-ledger answers).
    Not locked itself: the storage calls it under its index lock, the lock that also guards the index the
    encodings come from, so an encoding is never cached after a change to its ledger was published.
    `bytes` is the accounted size: the items plus `ENTRY_OVERHEAD` per cached ledger.
    """

    ENTRY_OVERHEAD = 200
    """Bytes a cached ledger costs besides its item: dict slot and links, key, tuple, bytes header (measured
    with tracemalloc: ~195 on CPython 3.11)."""

    __slots__ = ("_entries", "bytes", "evictions", "hits", "max_bytes", "misses")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, tuple[bytes, int]] = OrderedDict()
        self.bytes = 0
        self.hits = self.misses = self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, ledger_id: object) -> bool:
        return ledger_id in self._entries

    def item(self, ledger_id: int) -> bytes | None:
        """The cached batch item of a ledger (None: not cached)."""
        entry = self._entries.get(ledger_id)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(ledger_id)
        return entry[0]

    def get(self, ledger_id: int) -> bytes | None:
        """The cached availability encoding of a ledger (None: not cached)."""
        item = self.item(ledger_id)
        if item is None:
            return None
        size = self._entries[ledger_id][1]
        return item[len(item) - size :]

    def put(self, ledger_id: int, availability: bytes) -> bytes:
        """Cache a ledger's encoding (as its batch item, returned); one larger than the whole bound is not
        kept; the least recently used are evicted."""
        item = ledger_item(ledger_id, availability)
        self.invalidate(ledger_id)
        cost = len(item) + self.ENTRY_OVERHEAD
        if cost > self.max_bytes:
            return item
        entries = self._entries
        entries[ledger_id] = (item, len(availability))
        self.bytes += cost
        while self.bytes > self.max_bytes:
            _, (old, _) = entries.popitem(last=False)
            self.bytes -= len(old) + self.ENTRY_OVERHEAD
            self.evictions += 1
        return item

    def invalidate(self, ledger_id: int) -> None:
        old = self._entries.pop(ledger_id, None)
        if old is not None:
            self.bytes -= len(old[0]) + self.ENTRY_OVERHEAD

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0


_SHORT_ITEM_MAX = 16
"""Largest item without availability: tag, length, ledgerId (<= 10 bytes) and status, with their tags."""


def _short_item(ledger_id: int, status: int) -> bytes:
    body = b"\x08" + varint(ledger_id) + _ITEM_STATUS[status]
    return _LEDGERS_TAG + varint(len(body)) + body


def unknown_item(ledger_id: int) -> bytes:
    """The batch item of a ledger in limbo: EUNKNOWNLEDGERSTATE, no listing (see docs/bookie.md)."""
    return _short_item(ledger_id, pb.EUNKNOWNLEDGERSTATE)


def ledger_item(ledger_id: int, availability: bytes) -> bytes:
    """One serialized `ledgers` entry with status EOK (field tag and length included)."""
    body = b"\x08" + varint(ledger_id) + _ITEM_EOK + b"\x1a" + varint(len(availability)) + availability
    return _LEDGERS_TAG + varint(len(body)) + body


def batch_response(header_and_status: bytes, items: Sequence[tuple[int, bytes | None]], *,
                   max_bytes: int) -> bytes | None:
    """`header_and_status` (a serialized Response without the batch field) + the batch field, <= `max_bytes`.

    `items`: per requested ledger its `ledger_item` (None: unknown, answered ENOLEDGER). Ledgers are answered
    in request order while they fit; the first that does not, and every later one with entries, get
    ETOOMANYREQUESTS; one no frame could carry gets EIO. None when not even short answers fit: the caller
    answers the whole request ETOOMANYREQUESTS.
    """
    base = len(header_and_status) + len(_BATCH_TAG) + _MAX_LENGTH_VARINT + len(_STATUS_EOK)
    total = base + _SHORT_ITEM_MAX * len(items)  # every ledger gets at least a short item
    if total > max_bytes:
        return None
    out: list[bytes] = []
    full = True  # still answering in full
    for lid, item in items:
        if item is None:
            out.append(_short_item(lid, pb.ENOLEDGER))
        elif base + _SHORT_ITEM_MAX + len(item) > max_bytes:  # no frame can carry this ledger's encoding
            out.append(_short_item(lid, pb.EIO))
        elif full and total + len(item) - _SHORT_ITEM_MAX <= max_bytes:
            total += len(item) - _SHORT_ITEM_MAX
            out.append(item)
        else:
            full = False
            out.append(_short_item(lid, pb.ETOOMANYREQUESTS))
    body_size = len(_STATUS_EOK) + sum(map(len, out))
    return b"".join((header_and_status, _BATCH_TAG, varint(body_size), _STATUS_EOK, *out))  # one copy
