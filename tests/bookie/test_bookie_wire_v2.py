"""A bkaudit bookie driven by a v2 client (Pulsar's `bookkeeperUseV2WireProtocol=true`) on its v3 port.

The far end is tests/bookkeeper_wire.py's `V2`: BookieProtocol's packets written from BookKeeper's Java
source, nothing from bkaudit's. What each answer must be comes from release-4.17.3:

- BookieProtoEncoding.RequestDecoder: a connection is read as v3 until a frame fails protobuf's parseFrom,
  then as v2 for good; RequestEnDeCoderPreV3.decode knows ADD, READ, AUTH and BATCH_READ only and throws on
  anything else or on a short packet, and BookieRequestHandler.exceptionCaught closes the channel;
- BookieRequestProcessor's v2 branch, WriteEntryProcessor, ReadEntryProcessor, BatchedReadEntryProcessor,
  PacketProcessorBase.isVersionCompatible, ResponseBuilder, ResponseEnDeCoderPreV3.encode.
Only bkaudit.cluster (to start the bookie process) is imported from bkaudit. Every test also runs against
Apache BookKeeper 4.17.3's own bookie (`[java]`).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator

import pytest

from tests.bookkeeper_wire import (
    BOOKIE_KINDS,
    KEY,
    V2,
    Messages,
    V2Response,
    Wire,
    bookie_address,
    entry,
    frame,
    v2_call,
)

_ledgers = itertools.count(90_000)


@pytest.fixture(scope="module")
def bk(tmp_path_factory: pytest.TempPathFactory) -> Messages:
    return Messages(tmp_path_factory.mktemp("proto"))


@pytest.fixture(scope="module", params=BOOKIE_KINDS)
def bookie(request, zk_server, tmp_path_factory) -> Iterator[tuple[str, int]]:  # type: ignore[no-untyped-def]
    """A bkaudit bookie, and Apache BookKeeper's own: every expectation here holds for both."""
    yield from bookie_address(request, zk_server, tmp_path_factory)


@pytest.fixture
def wire(bk: Messages, bookie: tuple[str, int]) -> Iterator[Wire]:
    w = Wire(bk, bookie)
    yield w
    w.close()


def by_id(responses: list[V2Response]) -> dict[tuple[int, int], V2Response]:
    """v2 has no txnId: a Java client matches answers by (ledger, entry) (EntryCompletionKey)."""
    return {(r.ledger_id, r.entry_id): r for r in responses}


def test_v2_adds_and_reads_on_the_v3_port(wire: Wire) -> None:
    lid = next(_ledgers)
    bodies = {e: entry(lid, e, f"v2 payload {e}".encode()) for e in range(5)}
    added = v2_call(wire, *(V2.add(bodies[e]) for e in bodies))  # pipelined, the connection's first frames
    assert sorted((r.version, r.op, r.rc, r.ledger_id, r.entry_id, r.data) for r in added) == [
        (2, V2.ADDENTRY, V2.EOK, lid, e, b"") for e in bodies]
    unknown = lid + 50_000
    reads = by_id(v2_call(wire, V2.read(lid, 2), V2.read(lid, -1), V2.read(lid, 9), V2.read(unknown, 0)))
    assert (reads[lid, 2].op, reads[lid, 2].rc, reads[lid, 2].data) == (V2.READENTRY, V2.EOK, bodies[2])
    assert (reads[lid, -1].rc, reads[lid, -1].data) == (V2.EOK, bodies[4])  # entry -1: the last entry
    assert (reads[lid, 9].rc, reads[lid, 9].data) == (V2.ENOENTRY, b"")
    assert (reads[unknown, 0].rc, reads[unknown, 0].data) == (V2.ENOLEDGER, b"")
    # older packet versions are answered in their own version (ResponseBuilder keeps the request's)
    (v1,) = v2_call(wire, V2.read(lid, 1, version=1))
    (v0,) = v2_call(wire, V2.read(lid, 1, version=0))
    assert (v1.version, v1.rc, v1.data) == (1, V2.EOK, bodies[1])
    assert (v0.version, v0.op, v0.rc, v0.data) == (0, V2.READENTRY, V2.EOK, bodies[1])
    # PacketProcessorBase.isVersionCompatible: above CURRENT_PROTOCOL_VERSION is EBADVERSION
    (bad,) = v2_call(wire, V2.read(lid, 1, version=3))
    assert (bad.version, bad.rc, bad.data) == (3, V2.EBADVERSION, b"")


def test_v2_fencing_read_and_recovery_add(wire: Wire) -> None:
    lid = next(_ledgers)
    bodies = {e: entry(lid, e, b"x" * e) for e in range(4)}
    assert {r.rc for r in v2_call(wire, *(V2.add(bodies[e]) for e in range(3)))} == {V2.EOK}
    fence = V2.FLAG_DO_FENCING | V2.FLAG_HIGH_PRIORITY
    # version 1 carries no master key with a fencing read: "Password not provided", EUA
    (no_key,) = v2_call(wire, V2.read(lid, -1, flags=fence, version=1))
    (wrong_key,) = v2_call(wire, V2.read(lid, -1, key=bytes(20), flags=fence))
    assert (no_key.rc, wrong_key.rc) == (V2.EUA, V2.EUA)
    (added,) = v2_call(wire, V2.add(bodies[3]))
    assert added.rc == V2.EOK  # the refused fences fenced nothing
    (fenced,) = v2_call(wire, V2.read(lid, -1, key=KEY, flags=fence))
    assert (fenced.rc, fenced.data) == (V2.EOK, bodies[3])
    after = entry(lid, 4, b"after the fence")
    (writer,) = v2_call(wire, V2.add(after))
    (recovery,) = v2_call(wire, V2.add(after, flags=V2.FLAG_RECOVERY_ADD | V2.FLAG_HIGH_PRIORITY))
    assert (writer.rc, recovery.rc) == (V2.EFENCED, V2.EOK)
    (read,) = v2_call(wire, V2.read(lid, 4))
    assert read.data == after
    (wrong,) = v2_call(wire, V2.add(entry(lid, 5, b"y"), key=bytes(20), flags=V2.FLAG_RECOVERY_ADD))
    assert wrong.rc == V2.EUA


def test_v2_batch_read(wire: Wire) -> None:
    """BatchedReadEntryProcessor.readData: consecutive entries, at most maxCount; past the first, only while
    the frame (24 + 8 + 4, then each entry and its int length) stays within maxSize."""
    lid = next(_ledgers)
    bodies = [entry(lid, e, bytes([e]) * 100) for e in range(6)]
    assert {r.rc for r in v2_call(wire, *(V2.add(b) for b in bodies))} == {V2.EOK}

    def batch(start: int, count: int, size: int, ledger_id: int = lid) -> V2Response:
        (resp,) = v2_call(wire, V2.batch_read(ledger_id, start, request_id=start * 10 + count,
                                              max_count=count, max_size=size))
        assert (resp.op, resp.ledger_id, resp.entry_id, resp.request_id) == (
            V2.BATCH_READ_ENTRY, ledger_id, start, start * 10 + count)
        return resp

    assert batch(1, 3, 1 << 20).entries == tuple(bodies[1:4])
    assert batch(2, 0, 1 << 20).entries == tuple(bodies[2:])  # maxCount <= 0: up to the last entry
    two = 36 + 2 * (len(bodies[0]) + 4)
    assert batch(0, 5, two).entries == tuple(bodies[:2])
    assert batch(0, 5, two - 1).entries == (bodies[0],)
    assert batch(0, 5, 1).entries == (bodies[0],)  # the first entry whatever its size
    missing = batch(9, 3, 1 << 20)
    assert (missing.rc, missing.entries) == (V2.ENOENTRY, ())
    assert batch(0, 3, 1 << 20, ledger_id=lid + 50_000).rc == V2.ENOLEDGER


def test_v2_auth_is_answered_by_the_disabled_plugin(bk: Messages, wire: Wire) -> None:
    message = bk.AuthMessage(authPluginName="AuthDisabledPlugin", payload=b"").SerializeToString()
    wire.sock.sendall(frame(V2.header(V2.AUTH) + message))
    data = wire.receive_frame()
    assert data is not None and struct.unpack(">I", data[:4])[0] == (2 << 24) | (V2.AUTH << 16)
    answer = bk.AuthMessage.FromString(data[4:])
    assert (answer.authPluginName, answer.payload) == ("AuthDisabledPlugin", b"")


def test_the_protocol_is_chosen_per_connection_as_java_does(bk: Messages, bookie: tuple[str, int]) -> None:
    info = bk.Request()
    info.header.version, info.header.operation, info.header.txnId = 3, bk.ops["GET_BOOKIE_INFO"], 5
    info.getBookieInfoRequest.requested = 3
    lid = next(_ledgers)
    mixed = Wire(bk, bookie)  # a v2 client sends its v3-only requests first: still read as v3
    try:
        (answer,) = mixed.call(info)
        assert answer.status == bk.status["EOK"]
        (added,) = v2_call(mixed, V2.add(entry(lid, 0, b"p")))
        assert added.rc == V2.EOK
        mixed.send(info)  # after the first v2 frame a v3 one reads as op code 6: the decoder throws
        assert mixed.closed_by_peer()
    finally:
        mixed.close()
    for packet in (
        frame(V2.header(V2.READ_LAC) + struct.pack(">qq", lid, 0)),  # no READ_LAC / WRITE_LAC / INFO in v2
        frame(V2.header(V2.WRITE_LAC) + struct.pack(">qq", lid, 0)),
        frame(V2.header(V2.GET_BOOKIE_INFO) + struct.pack(">q", 3)),
        frame(V2.header(V2.ADDENTRY) + KEY + struct.pack(">q", lid)),  # no entry id to read
        frame(V2.header(V2.READENTRY) + struct.pack(">q", lid)),
        frame(V2.header(V2.READENTRY, V2.FLAG_DO_FENCING) + struct.pack(">qq", lid, 0)),  # no master key
    ):
        w = Wire(bk, bookie)
        try:
            w.sock.sendall(packet)
            assert w.closed_by_peer()
        finally:
            w.close()
    fresh = Wire(bk, bookie)  # the bookie and its other connections carry on
    try:
        assert fresh.call(info)[0].status == bk.status["EOK"]
        (read,) = v2_call(fresh, V2.read(lid, 0))
        assert (read.rc, read.data) == (V2.EOK, entry(lid, 0, b"p"))
    finally:
        fresh.close()
