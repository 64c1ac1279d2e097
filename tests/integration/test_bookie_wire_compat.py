"""A bkaudit bookie driven the way a BookKeeper v3 client drives a Java bookie, over a raw TCP socket.

Nothing here goes through bkaudit's client or rpc code. The peer is built from BookKeeper's definitions only:
- the messages come from compiling the protocol's .proto file in this test (protoc via grpc_tools, into a
  private descriptor pool): bkaudit/formats/proto/BookkeeperProtocol.proto is field-for-field BookKeeper's
  bookkeeper-proto/src/main/proto/BookkeeperProtocol.proto (its one extension, numbers >= 1000, is never used
  here);
- the framing is BookKeeper's (BookieProtoEncoding / LengthFieldBasedFrameDecoder(5 MiB, 0, 4, 0, 4)): a
  4-byte big-endian length, then the serialized Request; responses come back the same way, matched by txnId;
- entries are packaged as BookKeeper's DUMMY digest type does (ledgerId, entryId, lac, length: big-endian
  int64s, then the payload);
- the listing answer is decoded as AvailabilityOfEntriesOfLedger's layout (64-byte header, 24-byte groups).
Only bkaudit.cluster (to start the bookie process under test) is imported from bkaudit.
"""

from __future__ import annotations

import itertools
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from bkaudit.cluster.local import LocalCluster

pytestmark = pytest.mark.cluster

PROTO = Path(__file__).resolve().parents[2] / "bkaudit" / "formats" / "proto" / "BookkeeperProtocol.proto"
MAX_FRAME = 5 * 1024 * 1024
KEY = bytes(range(20))  # a 20-byte master key, as SHA1("ledger" + password) would be
_txn = itertools.count(1)
_ledgers = itertools.count(70_000)


@pytest.fixture(scope="module")
def bk(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """BookKeeper's messages, compiled from the .proto in this test (never bkaudit's generated module)."""
    from grpc_tools import protoc

    out = tmp_path_factory.mktemp("proto") / "bk.desc"
    rc = protoc.main(["protoc", f"-I{PROTO.parent}", f"--descriptor_set_out={out}", PROTO.name])
    assert rc == 0
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for f in files.file:
        pool.Add(f)
    package = files.file[0].package

    class Messages:
        Request = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Request"))
        Response = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Response"))
        ops = {v.name: v.number for v in pool.FindEnumTypeByName(f"{package}.OperationType").values}
        status = {v.name: v.number for v in pool.FindEnumTypeByName(f"{package}.StatusCode").values}

    return Messages


@pytest.fixture(scope="module")
def bookie(cluster3: LocalCluster) -> tuple[str, int]:
    host, port = cluster3.bookies[1].id.rsplit(":", 1)
    return host, int(port)


class Wire:
    """One TCP connection speaking BookKeeper's framing."""

    def __init__(self, bk: Any, address: tuple[str, int]) -> None:
        self.bk = bk
        self.sock = socket.create_connection(address, timeout=20)
        self.buf = b""

    def request(self, op: str, **sub: Any) -> Any:
        req = self.bk.Request()
        req.header.version = 3  # VERSION_THREE
        req.header.operation = self.bk.ops[op]
        req.header.txnId = next(_txn)
        for field, values in sub.items():
            getattr(req, field).SetInParent()
            for k, v in values.items():
                setattr(getattr(req, field), k, v)
        return req

    def send(self, *requests: Any) -> None:
        self.sock.sendall(b"".join(self.frame(r.SerializeToString()) for r in requests))

    @staticmethod
    def frame(data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + data

    def receive(self) -> Any:
        """The next response, or None when the bookie closed the connection."""
        while True:
            if len(self.buf) >= 4:
                (size,) = struct.unpack(">I", self.buf[:4])
                assert size <= MAX_FRAME
                if len(self.buf) >= 4 + size:
                    resp = self.bk.Response.FromString(self.buf[4 : 4 + size])
                    self.buf = self.buf[4 + size :]
                    return resp
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return None
            self.buf += chunk

    def call(self, *requests: Any) -> list[Any]:
        """Pipeline `requests`, return their responses in request order (matched by txnId)."""
        self.send(*requests)
        by_txn = {}
        while len(by_txn) < len(requests):
            resp = self.receive()
            assert resp is not None, "connection closed before every request was answered"
            by_txn[resp.header.txnId] = resp
        return [by_txn[r.header.txnId] for r in requests]

    def closed_by_peer(self) -> bool:
        """True once the bookie closes the connection (nothing else may arrive before)."""
        return self.receive() is None

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def wire(bk: Any, bookie: tuple[str, int]) -> Any:
    w = Wire(bk, bookie)
    yield w
    w.close()


def entry(ledger_id: int, entry_id: int, payload: bytes) -> bytes:
    """A DUMMY-digest entry: ledgerId, entryId, lastAddConfirmed, length (big-endian int64), payload."""
    return struct.pack(">qqqq", ledger_id, entry_id, entry_id - 1, len(payload)) + payload


def available(data: bytes) -> list[int]:
    """AvailabilityOfEntriesOfLedger: header (int32 version 0, int32 groups, 56 zero bytes), then groups of
    (int64 firstSequenceStart, int64 lastSequenceStart, int32 sequenceSize, int32 sequencePeriod)."""
    version, groups = struct.unpack_from(">ii", data, 0)
    assert version == 0 and len(data) >= 64 + 24 * groups
    out = []
    for g in range(groups):
        first, last, size, period = struct.unpack_from(">qqii", data, 64 + 24 * g)
        starts = [first] if last == first else range(first, last + 1, period)
        for start in starts:
            out.extend(range(start, start + size))
    return out


def test_add_read_list_fence_as_a_bookkeeper_client(bk: Any, wire: Wire) -> None:
    ok, st = bk.status["EOK"], bk.status
    lid = next(_ledgers)
    bodies = {e: entry(lid, e, f"payload {e}".encode()) for e in range(5)}
    adds = [wire.request("ADD_ENTRY", addRequest={"ledgerId": lid, "entryId": e, "masterKey": KEY,
                                                  "body": bodies[e]}) for e in bodies]
    for req, resp in zip(adds, wire.call(*adds), strict=True):  # pipelined on one connection
        assert resp.status == ok and resp.header.txnId == req.header.txnId
        assert resp.header.operation == bk.ops["ADD_ENTRY"] and resp.header.version == 3
        assert (resp.addResponse.status, resp.addResponse.ledgerId, resp.addResponse.entryId) == (
            ok, lid, req.addRequest.entryId)

    read2, last, missing, unknown = wire.call(
        wire.request("READ_ENTRY", readRequest={"ledgerId": lid, "entryId": 2}),
        wire.request("READ_ENTRY", readRequest={"ledgerId": lid, "entryId": -1}),
        wire.request("READ_ENTRY", readRequest={"ledgerId": lid, "entryId": 9}),
        wire.request("READ_ENTRY", readRequest={"ledgerId": lid + 10_000, "entryId": 0}))
    assert read2.status == ok and read2.readResponse.body == bodies[2]
    assert last.status == ok and last.readResponse.body == bodies[4]
    assert missing.status == st["ENOENTRY"] and missing.readResponse.status == st["ENOENTRY"]
    assert unknown.status == st["ENOLEDGER"]

    listing, no_ledger = wire.call(
        wire.request("GET_LIST_OF_ENTRIES_OF_LEDGER", getListOfEntriesOfLedgerRequest={"ledgerId": lid}),
        wire.request("GET_LIST_OF_ENTRIES_OF_LEDGER",
                     getListOfEntriesOfLedgerRequest={"ledgerId": lid + 10_000}))
    assert listing.status == ok and listing.getListOfEntriesOfLedgerResponse.ledgerId == lid
    got = listing.getListOfEntriesOfLedgerResponse.availabilityOfEntriesOfLedger
    assert available(got) == [0, 1, 2, 3, 4]
    assert no_ledger.status == st["ENOLEDGER"]

    lac, info = wire.call(
        wire.request("READ_LAC", readLacRequest={"ledgerId": lid}),
        wire.request("GET_BOOKIE_INFO", getBookieInfoRequest={"requested": 3}))
    assert lac.status == ok and lac.readLacResponse.lastEntryBody == bodies[4]
    assert info.status == ok and 0 < info.getBookieInfoResponse.freeDiskSpace <= (
        info.getBookieInfoResponse.totalDiskCapacity)

    # recovery: a fencing read (FENCE_LEDGER=1, with the master key, high priority) ...
    fence = wire.request("READ_ENTRY", readRequest={"ledgerId": lid, "entryId": 4, "masterKey": KEY,
                                                    "flag": 1})
    fence.header.priority = 100
    no_key = wire.request("READ_ENTRY", readRequest={"ledgerId": lid, "entryId": 4, "flag": 1})
    (fenced, eua) = wire.call(fence, no_key)
    assert fenced.status == ok and fenced.readResponse.body == bodies[4]
    assert eua.status == st["EUA"]
    # ... then the writer's next add is EFENCED, while a recovery add (RECOVERY_ADD=1) still lands
    body5 = entry(lid, 5, b"after fence")
    add5 = {"ledgerId": lid, "entryId": 5, "masterKey": KEY, "body": body5}
    writer, recovery = wire.call(wire.request("ADD_ENTRY", addRequest=add5),
                                 wire.request("ADD_ENTRY", addRequest={**add5, "flag": 1}))
    assert writer.status == st["EFENCED"] and writer.addResponse.status == st["EFENCED"]
    assert recovery.status == ok


def test_protocol_errors_are_answered(bk: Any, wire: Wire) -> None:
    st = bk.status
    bad_version = wire.request("READ_ENTRY", readRequest={"ledgerId": 1, "entryId": 0})
    bad_version.header.version = 2
    unsupported = wire.request("RANGE_READ_ENTRY")
    no_tls = wire.request("START_TLS", startTLSRequest={})
    v, u, t = wire.call(bad_version, unsupported, no_tls)
    assert v.status == st["EBADVERSION"]
    assert u.status == st["EBADREQ"]
    assert t.status == st["EBADREQ"]  # START_TLS on a bookie without TLS, as BookieRequestProcessor answers


def test_garbage_frame_closes_the_connection(bk: Any, bookie: tuple[str, int], wire: Wire) -> None:
    ok = wire.request("GET_BOOKIE_INFO", getBookieInfoRequest={"requested": 3})
    wire.sock.sendall(wire.frame(b"\xff\xfe not a protobuf request \x00"))
    assert wire.closed_by_peer()
    other = Wire(bk, bookie)  # the bookie itself keeps serving
    try:
        assert other.call(ok)[0].status == bk.status["EOK"]
    finally:
        other.close()


def test_oversized_frame_closes_the_connection(bk: Any, bookie: tuple[str, int], wire: Wire) -> None:
    wire.sock.sendall(struct.pack(">I", MAX_FRAME + 1) + b"\x0a" * 1024)  # the rest never needs to come
    assert wire.closed_by_peer()
    other = Wire(bk, bookie)
    try:
        lid = next(_ledgers)
        body = entry(lid, 0, b"x" * (1024 * 1024))  # a 1 MiB entry is well within the limit
        add = other.request("ADD_ENTRY", addRequest={"ledgerId": lid, "entryId": 0, "masterKey": KEY,
                                                     "body": body})
        assert other.call(add)[0].status == bk.status["EOK"]
    finally:
        other.close()


def test_truncated_frame_then_half_close_closes_the_connection(bk: Any, wire: Wire) -> None:
    wire.sock.sendall(struct.pack(">I", 100) + b"\x0a\x06\x08\x03")  # 4 of 100 bytes, then no more
    wire.sock.shutdown(socket.SHUT_WR)
    assert wire.closed_by_peer()
