"""The bookie's hand-assembled listing responses: protobuf's own serialization, byte for byte, with the answer
header PacketProcessorBaseV3.getHeader builds, and never larger than a Java client's frame decoder takes."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from bkaudit.bookie.bulkload import bulk_load_index
from bkaudit.bookie.responses import list_response, response_header
from bkaudit.bookie.responses import response as _response
from bkaudit.bookie.service import BookieService
from bkaudit.bookie.storage import Storage
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.rpc.framing import max_payload_bytes
from tests.bookkeeper_wire import Messages


@pytest.mark.parametrize("ledger_id", [0, 5, 127, 128, 16383, 16384, 2**40, 2**63 - 1])
@pytest.mark.parametrize("availability", [None, b"", b"\x00" * 64, bytes(range(200))])
@pytest.mark.parametrize("txn", [1, 300, 2**50])
def test_list_response_matches_protobuf(ledger_id: int, availability: bytes | None, txn: int) -> None:
    req = pb.Request()
    req.header.version = pb.VERSION_THREE
    req.header.operation = pb.GET_LIST_OF_ENTRIES_OF_LEDGER
    req.header.txnId = txn
    req.header.priority = 100  # never copied into an answer (PacketProcessorBaseV3.getHeader)
    req.getListOfEntriesOfLedgerRequest.ledgerId = ledger_id
    if availability is None:
        expected = _response(req, pb.ENOLEDGER)
    else:
        expected = _response(req, pb.EOK, availability=availability)
    assert list_response(response_header(req), ledger_id, availability) == expected
    resp = pb.Response.FromString(expected)
    assert [f.name for f, _ in resp.header.ListFields()] == ["version", "operation", "txnId"]


def test_listing_answer_limit_is_the_frame_limit_less_its_length_prefix(tmp_path: Path, bk: Messages) -> None:
    """A single-ledger listing is sent when it fills a frame to the byte (`[bookie] max_frame_bytes`, Netty's
    maxFrameLength, counts the 4-byte length: max_payload_bytes) and is EIO one byte beyond, where a Java
    client's LengthFieldBasedFrameDecoder would drop the connection. The answer is parsed with BookKeeper's
    .proto compiled in the test."""
    bulk_load_index(tmp_path, [(1, [(e, e) for e in range(0, 600, 2)])])
    req = bk.Request()
    req.header.version, req.header.operation, req.header.txnId = 3, bk.ops["GET_LIST_OF_ENTRIES_OF_LEDGER"], 4
    req.getListOfEntriesOfLedgerRequest.ledgerId = 1
    with Storage(tmp_path) as storage:
        unbounded = BookieService(storage)
        size = len(_ask(unbounded, req.SerializeToString()))
        unbounded.close()
        for frame, status in ((size + 4, "EOK"), (size + 3, "EIO")):
            service = BookieService(storage, max_response_bytes=max_payload_bytes(frame))
            try:
                answer = _ask(service, req.SerializeToString())
                resp = bk.Response.FromString(answer)
                assert resp.status == resp.getListOfEntriesOfLedgerResponse.status == bk.status[status]
                assert len(answer) == size or status == "EIO"
            finally:
                service.close()


def _ask(service: BookieService, data: bytes) -> bytes:
    got: list[bytes] = []
    done = threading.Event()
    service.dispatch(data, lambda b: (got.append(b), done.set()))
    assert done.wait(10)
    return got[0]


@pytest.fixture(scope="module")
def bk(tmp_path_factory: pytest.TempPathFactory) -> Messages:
    return Messages(tmp_path_factory.mktemp("proto"))
