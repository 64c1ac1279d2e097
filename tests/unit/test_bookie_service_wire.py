"""Hand-assembled listing responses of the bookie are protobuf's own serialization, byte for byte."""

from __future__ import annotations

import pytest

from bkaudit.bookie.service import _response, list_response
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb


@pytest.mark.parametrize("ledger_id", [0, 5, 127, 128, 16383, 16384, 2**40, 2**63 - 1])
@pytest.mark.parametrize("availability", [None, b"", b"\x00" * 64, bytes(range(200))])
@pytest.mark.parametrize("txn", [1, 300, 2**50])
def test_list_response_matches_protobuf(ledger_id: int, availability: bytes | None, txn: int) -> None:
    req = pb.Request()
    req.header.version = pb.VERSION_THREE
    req.header.operation = pb.GET_LIST_OF_ENTRIES_OF_LEDGER
    req.header.txnId = txn
    req.getListOfEntriesOfLedgerRequest.ledgerId = ledger_id
    if availability is None:
        expected = _response(req, pb.ENOLEDGER)
    else:
        expected = _response(req, pb.EOK, availability=availability)
    assert list_response(req.header.SerializeToString(), ledger_id, availability) == expected
