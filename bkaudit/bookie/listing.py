"""Wire bytes of the batch GetListOfEntries response, assembled from cached per-ledger pieces.

The checker lists every ledger of every bookie, so the batch operation is the bookie's hottest read path.
Building one protobuf sub-message per ledger costs microseconds each; instead each ledger's serialized
`LedgerAvailability` (tag, length, ledgerId, status, availability bytes) is cached next to the availability
bytes it was built from, and a response is one join. The bytes are exactly what protobuf would write
(fields in number order), which tests/unit/test_bookie_storage.py checks against the generated classes.
"""

from __future__ import annotations

from collections.abc import Iterable

from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.formats.wire import varint

_LEDGERS_TAG = b"\x12"  # GetListOfEntriesOfLedgersResponse.ledgers = 2, length-delimited
_BATCH_TAG = varint((pb.Response.GETLISTOFENTRIESOFLEDGERSRESPONSE_FIELD_NUMBER << 3) | 2)
_STATUS_EOK = b"\x08" + varint(pb.EOK)
_ITEM_EOK = b"\x10" + varint(pb.EOK)
_ITEM_ENOLEDGER = b"\x10" + varint(pb.ENOLEDGER)


class BatchListing:
    """Encodes batch responses; thread-safe (the cache is a dict of immutable tuples)."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[bytes, bytes]] = {}

    def item(self, ledger_id: int, availability: bytes | None) -> bytes:
        """One serialized `ledgers` entry (field tag and length included)."""
        if availability is None:
            body = b"\x08" + varint(ledger_id) + _ITEM_ENOLEDGER
            return _LEDGERS_TAG + varint(len(body)) + body
        cached = self._cache.get(ledger_id)
        if cached is not None and cached[0] is availability:
            return cached[1]
        body = b"\x08" + varint(ledger_id) + _ITEM_EOK + b"\x1a" + varint(len(availability)) + availability
        item = _LEDGERS_TAG + varint(len(body)) + body
        self._cache[ledger_id] = (availability, item)
        return item

    def response(self, header_and_status: bytes, entries: Iterable[tuple[int, bytes | None]]) -> bytes:
        """`header_and_status` (a serialized Response without the batch field) + the batch field."""
        item = self.item
        body = _STATUS_EOK + b"".join([item(lid, data) for lid, data in entries])
        return header_and_status + _BATCH_TAG + varint(len(body)) + body
