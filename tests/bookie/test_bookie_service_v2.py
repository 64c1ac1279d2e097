"""v2 requests through the real BookieService over a Storage on disk: the answers that need a bookie state a
wire test cannot set up cheaply (read-only reasons, overload, limbo). Packets and answers are
tests/bookkeeper_wire.py's `V2` (BookieProtocol, written from BookKeeper's Java source).

- WriteEntryProcessor.processPacket: EREADONLY unless the request is high priority and the bookie is
  available for high-priority writes (BookieImpl.isAvailableForHighPriorityWrites: only the disk made it
  read-only);
- BookieRequestProcessor.processAddRequest: a rejected request is ResponseBuilder.buildErrorResponse
  (ETOOMANYREQUESTS);
- ReadEntryProcessor: DataUnknownException (a ledger in limbo) is EUNKNOWNLEDGERSTATE (107).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkaudit.bookie.service import BookieService
from bkaudit.bookie.storage import Storage
from tests.bookkeeper_wire import KEY, V2, V2Response, entry

EUNKNOWNLEDGERSTATE, ETOOMANYREQUESTS = 107, 106
LEDGER = 11


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    s = Storage(tmp_path)
    yield s
    s.close()


def call(service: BookieService, packet: bytes) -> V2Response:
    """Hand the frame's payload to the service as the native transport does for a v2 connection."""
    got: list[bytes] = []
    done = threading.Event()

    def reply(data: bytes) -> None:
        got.append(data)
        done.set()

    (size,) = struct.unpack(">I", packet[:4])
    service.v2.dispatch(packet[4 : 4 + size], reply)
    assert done.wait(10)
    return V2Response.parse(got[0])


def test_read_only_bookie_takes_high_priority_adds_only_when_the_disk_is_the_reason(storage: Storage) -> None:
    service = BookieService(storage)
    try:
        service.mode.set("disk", True)
        assert call(service, V2.add(entry(LEDGER, 0, b"p"))).rc == V2.EREADONLY
        high = call(service, V2.add(entry(LEDGER, 0, b"p"), flags=V2.FLAG_HIGH_PRIORITY))
        assert (high.rc, high.ledger_id, high.entry_id) == (V2.EOK, LEDGER, 0)
        service.mode.set("forced", True)
        assert call(service, V2.add(entry(LEDGER, 1, b"p"), flags=V2.FLAG_HIGH_PRIORITY)).rc == V2.EREADONLY
        assert call(service, V2.read(LEDGER, 0)).data == entry(LEDGER, 0, b"p")  # reads go on
    finally:
        service.close()


def test_overload_is_answered_in_the_requests_own_shape(storage: Storage) -> None:
    service = BookieService(storage, max_pending=0)
    try:
        add = call(service, V2.add(entry(LEDGER, 0, b"p")))
        batch = call(service, V2.batch_read(LEDGER, 0, request_id=9, max_count=2, max_size=1 << 20))
        assert (add.op, add.rc) == (V2.ADDENTRY, ETOOMANYREQUESTS)
        assert (batch.op, batch.rc, batch.request_id, batch.entries) == (
            V2.BATCH_READ_ENTRY, ETOOMANYREQUESTS, 9, ())
        assert service.inflight == 0
    finally:
        service.close()


def test_limbo_ledger_answers_unknown_rather_than_missing(storage: Storage) -> None:
    service = BookieService(storage)
    try:
        storage.enter_limbo(LEDGER)
        assert call(service, V2.add(entry(LEDGER, 0, b"p"), key=KEY, flags=V2.FLAG_RECOVERY_ADD)).rc == V2.EOK
        assert call(service, V2.read(LEDGER, 0)).rc == V2.EOK  # held entries are served
        assert call(service, V2.read(LEDGER, 1)).rc == EUNKNOWNLEDGERSTATE
        assert call(service, V2.read(LEDGER, -1)).rc == EUNKNOWNLEDGERSTATE
    finally:
        service.close()
