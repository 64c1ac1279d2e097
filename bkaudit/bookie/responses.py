"""The bookie's v3 answers as bytes: each processor's Response, the listing answers assembled by hand.

BookKeeper's *ProcessorV3 classes decide what a response holds (header, status twice, which sub-message);
kept in one place so the v3 service (bkaudit.bookie.service) and the tests that check those bytes against
protobuf agree on them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bkaudit.errors import FormatError
from bkaudit.formats.entry import parse_entry_header
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.formats.wire import length_delimited, varint

Reply = Callable[[bytes], None]
Upgrade = Callable[[bytes], None]
"""Transport hook for START_TLS: write this (plaintext) EOK answer, then run the TLS handshake."""

CODE = {name: pb.StatusCode.Value(name) for name in pb.StatusCode.keys()}  # noqa: SIM118
EOK = pb.EOK
_V3 = pb.VERSION_THREE
_ENOLEDGER = varint(pb.ENOLEDGER)
_HEADER_V3 = b"\x08" + varint(_V3) + b"\x10"


def start_tls(req: pb.Request, reply: Reply, upgrade: Upgrade | None) -> None:
    """BookieRequestProcessor.processStartTLSRequestV3: EOK + startTLSResponse then TLS; no TLS: EBADREQ."""
    resp = pb.Response(status=EOK if upgrade is not None else pb.EBADREQ)
    resp.header.version = pb.VERSION_THREE
    resp.header.operation = pb.START_TLS
    resp.header.txnId = req.header.txnId
    if upgrade is None:
        reply(bytes(resp.SerializePartialToString()))
        return
    resp.startTLSResponse.SetInParent()
    upgrade(bytes(resp.SerializePartialToString()))


def list_response(header: bytes, ledger_id: int, availability: bytes | None) -> bytes:
    """The GET_LIST_OF_ENTRIES_OF_LEDGER Response (EOK with the bytes, or ENOLEDGER), assembled by hand.

    `header` is the serialized response header (`response_header`). Byte-identical to `response`
    (tests/bookie/test_bookie_service_wire.py).
    """
    if availability is None:
        sub = b"\x08" + _ENOLEDGER + b"\x10" + varint(ledger_id)
        status = _ENOLEDGER
    else:
        sub = b"\x08\x00\x10" + varint(ledger_id) + length_delimited(b"\x1a", availability)
        status = b"\x00"
    return length_delimited(b"\x0a", header) + b"\x10" + status + length_delimited(b"\xe2\x06", sub)


def response_header(req: pb.Request) -> bytes:
    """The serialized BKPacketHeader of a processor's answer: {VERSION_THREE, operation, txnId}
    (PacketProcessorBaseV3.getHeader), assembled by hand as protobuf writes it (fields in number order)."""
    return _HEADER_V3 + varint(req.header.operation) + b"\x18" + varint(req.header.txnId)


def entry_header(body: bytes) -> tuple[int, int, int] | None:
    """(ledger id, entry id, LAC) at the head of an entry, as ledger storage reads them; None when the body
    is shorter than an entry header."""
    try:
        ledger_id, entry_id, last_add_confirmed, _ = parse_entry_header(body)
    except FormatError:
        return None
    return ledger_id, entry_id, last_add_confirmed


def undecodable(txn_id: int = 0) -> bytes:
    """EBADREQ for bytes that are not a Request (the header carries txnId 0 when it could not be read)."""
    resp = pb.Response(status=pb.EBADREQ)
    resp.header.version = pb.VERSION_THREE
    resp.header.txnId = txn_id
    return bytes(resp.SerializePartialToString())


def bare(req: pb.Request, status: Any) -> bytes:
    """`status` under the request's own header, no sub-response (BookieRequestProcessor's default case)."""
    resp = pb.Response(status=status)
    resp.header.CopyFrom(req.header)
    return bytes(resp.SerializePartialToString())


def response(req: pb.Request, status: Any, *, body: bytes | None = None, lac_body: bytes | None = None,
             last_entry: bytes | None = None, availability: bytes | None = None,
             info: dict[str, int] | None = None, max_lac: int | None = None) -> bytes:
    """The Response for `req` with `status` in both the top level and the operation's sub-response.

    Its header is PacketProcessorBaseV3.getHeader's: version 3, the operation, the txnId; nothing else of the
    request's header (priority) is copied.
    """
    resp = pb.Response(status=status)
    op = req.header.operation
    resp.header.version, resp.header.operation, resp.header.txnId = _V3, op, req.header.txnId
    sub: Any
    if op == pb.ADD_ENTRY:
        a = req.addRequest
        sub = resp.addResponse
        sub.status, sub.ledgerId, sub.entryId = status, a.ledgerId, a.entryId
    elif op == pb.READ_ENTRY:
        r = req.readRequest
        sub = resp.readResponse
        sub.status, sub.ledgerId, sub.entryId = status, r.ledgerId, r.entryId
        if body is not None:
            sub.body = body
        if max_lac is not None:
            sub.maxLAC = max_lac
    elif op == pb.READ_LAC:
        sub = resp.readLacResponse
        sub.status, sub.ledgerId = status, req.readLacRequest.ledgerId
        if lac_body is not None:
            sub.lacBody = lac_body
        if last_entry is not None:
            sub.lastEntryBody = last_entry
    elif op == pb.WRITE_LAC:
        sub = resp.writeLacResponse
        sub.status, sub.ledgerId = status, req.writeLacRequest.ledgerId
    elif op == pb.GET_BOOKIE_INFO:
        sub = resp.getBookieInfoResponse
        sub.status = status
        for key, value in (info or {}).items():
            setattr(sub, key, value)
    elif op == pb.GET_LIST_OF_ENTRIES_OF_LEDGER:
        sub = resp.getListOfEntriesOfLedgerResponse
        sub.status, sub.ledgerId = status, req.getListOfEntriesOfLedgerRequest.ledgerId
        if availability is not None:
            sub.availabilityOfEntriesOfLedger = availability
    elif op == pb.GET_LIST_OF_ENTRIES_OF_LEDGERS:
        resp.getListOfEntriesOfLedgersResponse.status = status
    elif op == pb.FORCE_LEDGER:
        sub = resp.forceLedgerResponse
        sub.status, sub.ledgerId = status, req.forceLedgerRequest.ledgerId
    return bytes(resp.SerializePartialToString())
