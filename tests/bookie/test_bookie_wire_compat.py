"""A bkaudit bookie driven the way a BookKeeper v3 client drives a Java bookie, over a raw TCP socket.

Nothing here goes through bkaudit's client or rpc code. The peer is built from BookKeeper's definitions only:
- the messages, framing and entries of tests/bookkeeper_wire.py (BookKeeper's .proto compiled in the test,
  BookieProtoEncoding's 4-byte length, the DUMMY digest layout); responses are matched by txnId;
- the listing answer is decoded as AvailabilityOfEntriesOfLedger's layout (64-byte header, 24-byte groups).
Only bkaudit.cluster (to start the bookie process under test) is imported from bkaudit. Every test taking
`bookie` or `wire` also runs against Apache BookKeeper 4.17.3's own bookie (`[java]`, SortedLedgerStorage):
the expectations are Java's answers, not only our reading of its source.
"""

from __future__ import annotations

import itertools
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from bkaudit.cluster.local import LocalCluster
from tests.bookkeeper_wire import (
    BOOKIE_KINDS,
    KEY,
    NETTY_MAX_FRAME_SIZE,
    Messages,
    Wire,
    bookie_address,
    entry,
    frame,
)

MAX_FRAME = NETTY_MAX_FRAME_SIZE
_ledgers = itertools.count(70_000)


@pytest.fixture(scope="module")
def bk(tmp_path_factory: pytest.TempPathFactory) -> Messages:
    """BookKeeper's messages, compiled from the .proto in this test (never bkaudit's generated module)."""
    return Messages(tmp_path_factory.mktemp("proto"))


@pytest.fixture(scope="module", params=BOOKIE_KINDS)
def bookie(request, zk_server, tmp_path_factory) -> Iterator[tuple[str, int]]:  # type: ignore[no-untyped-def]
    """A bkaudit bookie, and Apache BookKeeper's own: every expectation here holds for both."""
    yield from bookie_address(request, zk_server, tmp_path_factory)


@pytest.fixture
def wire(bk: Messages, bookie: tuple[str, int]) -> Any:
    w = Wire(bk, bookie)
    yield w
    w.close()


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
    wire.sock.sendall(frame(b"\xff\xfe not a protobuf request \x00"))
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


def test_requests_protobuf_java_refuses_close_the_connection(bk: Any, bookie: tuple[str, int]) -> None:
    """protobuf-java's parseFrom refuses a Request missing a required field, and an operation outside the
    enum is such a field (proto2 keeps the number as an unknown field). BookieProtoEncoding.RequestDecoder
    then reads the frame as v2, whose decoder finds op code 6 (the header's length) and throws: the channel is
    closed (a Java bookie may not even answer the requests before it: those run on other threads)."""
    info = bk.Request()
    info.header.version, info.header.operation, info.header.txnId = 3, bk.ops["GET_BOOKIE_INFO"], 7
    info.getBookieInfoRequest.requested = 3
    header = b"\x08\x03\x10\x4d\x18\x09"  # version 3, operation 77, txnId 9
    missing = bk.Request()
    missing.header.version, missing.header.operation, missing.header.txnId = 3, bk.ops["ADD_ENTRY"], 8
    missing.addRequest.ledgerId = 1  # no entryId, masterKey, body
    for refused in (b"\x0a" + bytes([len(header)]) + header, missing.SerializePartialToString()):
        w = Wire(bk, bookie)
        try:
            w.sock.sendall(frame(refused) + frame(info.SerializeToString()))
            assert w.closed_by_peer()
        finally:
            w.close()
    w = Wire(bk, bookie)  # the bookie carries on
    try:
        assert w.call(info)[0].status == bk.status["EOK"]
    finally:
        w.close()


# -- what ReadEntryProcessorV3, ReadLacProcessorV3, WriteEntryProcessorV3 / BookieImpl and
#    PacketProcessorBaseV3 answer (apache/bookkeeper release-4.17.3) ---------------------------------------
def read(wire: Wire, lid: int, eid: int, **extra: Any) -> Any:
    return wire.request("READ_ENTRY", readRequest={"ledgerId": lid, "entryId": eid, **extra})


def add(wire: Wire, lid: int, eid: int, body: bytes) -> Any:
    return wire.request("ADD_ENTRY", addRequest={"ledgerId": lid, "entryId": eid, "masterKey": KEY,
                                                 "body": body})


def test_reads_carry_the_bookies_lac(bk: Any, wire: Wire) -> None:
    """ReadEntryProcessorV3.readEntry: a read (not a fencing one) answers maxLAC =
    BookieImpl.readLastAddConfirmed, the LAC ledger storage learnt from the entries' headers, so a tailing
    Java reader (ReadCompletion, PendingReadOp.updateLastConfirmed) sees it advance."""
    ok = bk.status["EOK"]
    lid = next(_ledgers)
    assert {r.status for r in wire.call(*(add(wire, lid, e, entry(lid, e, b"p")) for e in range(4)))} == {ok}
    first, last = wire.call(read(wire, lid, 0), read(wire, lid, -1))
    assert first.readResponse.HasField("maxLAC") and first.readResponse.maxLAC == 2  # entry 3 carries LAC 2
    assert last.readResponse.maxLAC == 2 and last.readResponse.entryId == -1
    assert wire.call(add(wire, lid, 4, entry(lid, 4, b"p")))[0].status == ok
    assert wire.call(read(wire, lid, 1))[0].readResponse.maxLAC == 3  # the tail advanced
    (fence,) = wire.call(read(wire, lid, -1, masterKey=KEY, flag=1))
    assert fence.status == ok and not fence.readResponse.HasField("maxLAC")  # getFenceResponse sets none


def test_read_lac_statuses(bk: Any, wire: Wire) -> None:
    """ReadLacProcessorV3: each failed read sets the status, and with neither the explicit LAC nor the last
    entry read the answer is ENOENTRY, an unknown ledger included (NoLedgerException twice). An explicit LAC
    without entries is EIO: reading entry -1 throws NoEntryException, an IOException; the LAC body stays."""
    st = bk.status
    lid = next(_ledgers)
    (unknown,) = wire.call(wire.request("READ_LAC", readLacRequest={"ledgerId": lid}))
    assert unknown.status == st["ENOENTRY"] and unknown.readLacResponse.status == st["ENOENTRY"]
    lac = struct.pack(">qq", lid, 5)  # DigestManager.computeDigestAndPackageForSendingLac, DUMMY digest
    (written,) = wire.call(wire.request("WRITE_LAC", writeLacRequest={"ledgerId": lid, "lac": 5,
                                                                      "masterKey": KEY, "body": lac}))
    assert written.status == st["EOK"]
    (only_lac,) = wire.call(wire.request("READ_LAC", readLacRequest={"ledgerId": lid}))
    assert only_lac.status == st["EIO"] and only_lac.readLacResponse.status == st["EIO"]
    assert only_lac.readLacResponse.lacBody == lac and not only_lac.readLacResponse.HasField("lastEntryBody")
    assert wire.call(add(wire, lid, 0, entry(lid, 0, b"p")))[0].status == st["EOK"]
    (both,) = wire.call(wire.request("READ_LAC", readLacRequest={"ledgerId": lid}))
    assert both.status == st["EOK"]
    assert (both.readLacResponse.lacBody, both.readLacResponse.lastEntryBody) == (lac, entry(lid, 0, b"p"))


def test_adds_and_lacs_take_their_ids_from_the_body(bk: Any, wire: Wire) -> None:
    """BookieImpl.addEntry / recoveryAddEntry find the ledger from the entry's first long
    (getLedgerForEntry) and ledger storage its entry id from the second; setExplicitLac takes the ledger from
    the LAC body. The answers name the request's ids (WriteEntryProcessorV3, WriteLacProcessorV3)."""
    st = bk.status
    lid, other = next(_ledgers), next(_ledgers)
    (added,) = wire.call(add(wire, lid, 0, entry(lid, 7, b"seven")))
    assert added.status == st["EOK"]
    assert (added.addResponse.ledgerId, added.addResponse.entryId) == (lid, 0)
    seven, zero = wire.call(read(wire, lid, 7), read(wire, lid, 0))
    assert seven.readResponse.body == entry(lid, 7, b"seven") and zero.status == st["ENOENTRY"]
    lac = struct.pack(">qq", lid, 7)
    (written,) = wire.call(wire.request("WRITE_LAC", writeLacRequest={"ledgerId": other, "lac": 7,
                                                                      "masterKey": KEY, "body": lac}))
    assert written.status == st["EOK"] and written.writeLacResponse.ledgerId == other
    mine, theirs = wire.call(wire.request("READ_LAC", readLacRequest={"ledgerId": lid}),
                             wire.request("READ_LAC", readLacRequest={"ledgerId": other}))
    assert mine.readLacResponse.lacBody == lac and theirs.status == st["ENOENTRY"]


def test_answers_carry_version_operation_and_txn_only(bk: Any, wire: Wire) -> None:
    """PacketProcessorBaseV3.getHeader: {VERSION_THREE, the operation, the txnId}; a request's priority is
    not copied. (Only BookieRequestProcessor's default case and AUTH copy the request's header.)"""
    lid = next(_ledgers)
    requests = [
        add(wire, lid, 0, entry(lid, 0, b"p")),
        read(wire, lid, 0),
        wire.request("READ_LAC", readLacRequest={"ledgerId": lid}),
        wire.request("WRITE_LAC", writeLacRequest={"ledgerId": lid, "lac": 0, "masterKey": KEY,
                                                   "body": struct.pack(">qq", lid, 0)}),
        wire.request("GET_BOOKIE_INFO", getBookieInfoRequest={"requested": 3}),
        wire.request("GET_LIST_OF_ENTRIES_OF_LEDGER", getListOfEntriesOfLedgerRequest={"ledgerId": lid}),
        wire.request("FORCE_LEDGER", forceLedgerRequest={"ledgerId": lid}),
    ]
    for req in requests:
        req.header.priority = 100
        (resp,) = wire.call(req)  # one at a time: the read must see the add
        assert resp.status == bk.status["EOK"], (req.header.operation, resp.status)
        assert [f.name for f, _ in resp.header.ListFields()] == ["version", "operation", "txnId"]
        assert (resp.header.version, resp.header.operation, resp.header.txnId) == (
            3, req.header.operation, req.header.txnId)


def sized_add(wire: Wire, size: int) -> Any:
    """An ADD_ENTRY Request of exactly `size` serialized bytes (the entry's payload pads it)."""
    lid = next(_ledgers)
    req = add(wire, lid, 0, entry(lid, 0, b""))
    pad = size - req.ByteSize()
    while req.ByteSize() != size:  # the body's length varint grows with the body
        req.addRequest.body = entry(lid, 0, b"x" * pad)
        pad -= req.ByteSize() - size
    return req


def test_the_frame_limit_counts_the_length_prefix(bk: Any, bookie: tuple[str, int]) -> None:
    """BookieNettyServer's LengthFieldBasedFrameDecoder(nettyMaxFrameSizeBytes, 0, 4, 0, 4) adds the 4-byte
    length to the length it reads before comparing with the limit: a 5,242,876-byte request is the largest
    a Java bookie takes, one byte more closes the connection."""
    for size, served in ((MAX_FRAME - 4, True), (MAX_FRAME - 3, False)):
        w = Wire(bk, bookie)
        try:
            req = sized_add(w, size)
            assert len(req.SerializeToString()) == size
            if served:
                assert w.call(req)[0].status == bk.status["EOK"]
                continue
            try:
                w.send(req)
            except (BrokenPipeError, ConnectionResetError):
                continue  # closed (and reset) while the rest of the frame was still being sent
            assert w.closed_by_peer()
        finally:
            w.close()


def test_a_listing_answer_fills_a_frame_to_the_byte_and_no_further(  # type: ignore[no-untyped-def]
        bk: Any, cluster3: LocalCluster, cluster_factory, tmp_path) -> None:
    """A Java client drops the connection on an answer above nettyMaxFrameSizeBytes - 4 (its frame decoder,
    PerChannelBookieClient.exceptionCaught on TooLongFrameException), and a Java bookie would send one
    (GetListOfEntriesOfLedgerProcessorV3 has no bound). bkaudit's bookie answers EIO instead, the status
    that processor gives when the listing cannot be produced, from exactly one byte above the limit.

    The answer's size N is measured on a default bookie; a second bookie runs with max_frame_bytes = N + 4
    and holds the same entries: asked with a txnId of the same varint length it answers the N bytes, with
    one a byte longer it answers EIO."""
    lid = next(_ledgers)
    ids = [e for k in range(45) for e in range(5 * k, 5 * k + 1 + k % 2)]  # runs of 1 and 2: many groups

    def fill(w: Wire) -> None:
        assert {r.status for r in w.call(*(add(w, lid, e, entry(lid, e, b"p")) for e in ids))} == {0}

    def listing(w: Wire, txn: int) -> Any:
        req = w.request("GET_LIST_OF_ENTRIES_OF_LEDGER", getListOfEntriesOfLedgerRequest={"ledgerId": lid})
        req.header.txnId = txn
        w.send(req)
        data = w.receive_frame()
        assert data is not None
        return len(data), bk.Response.FromString(data)

    host, port = cluster3.bookies[1].id.rsplit(":", 1)
    wire = Wire(bk, (host, int(port)))
    fill(wire)
    size, resp = listing(wire, 1)
    wire.close()
    assert resp.status == bk.status["EOK"] and size > 1020
    assert available(resp.getListOfEntriesOfLedgerResponse.availabilityOfEntriesOfLedger) == ids
    conf = tmp_path / "frame.toml"
    conf.write_text(f"[bookie]\nmax_frame_bytes = {size + 4}\n")
    small = cluster_factory(bookies=1, racks=1, bookie_args=["--config", str(conf)])
    host, port = small.bookies[0].id.rsplit(":", 1)
    w = Wire(bk, (host, int(port)))
    try:
        fill(w)
        at_limit, resp = listing(w, 2)
        assert (at_limit, resp.status) == (size, bk.status["EOK"])
        _, over = listing(w, 200)  # a 2-byte txnId: one byte above the limit
        assert over.status == over.getListOfEntriesOfLedgerResponse.status == bk.status["EIO"]
    finally:
        w.close()
