"""The native client against a misbehaving peer: garbage, oversized and truncated frames, closes, silence.

The peer is a plain socket server written here (a fake is the only way to make a bookie misbehave on
purpose); it speaks BookKeeper's framing (4-byte big-endian length + protobuf) with the v3 messages.
Every failure must reach the caller promptly as BookieError("UNAVAILABLE", why), close the connection,
and leave the client able to reconnect: never a crash, never a hang.
"""

from __future__ import annotations

import itertools
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkaudit.errors import BookieError, FormatError
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.rpc.client import BookieClient
from bkaudit.rpc.framing import FrameReceiver, Frames
from bkaudit.rpc.operations import list_request, read_entry_request

Handler = Callable[[socket.socket], None]


def read_request(conn: socket.socket) -> pb.Request:
    head = b""
    while len(head) < 4:
        chunk = conn.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("client went away")
        head += chunk
    (size,) = struct.unpack(">I", head)
    body = b""
    while len(body) < size:
        body += conn.recv(size - len(body))
    return pb.Request.FromString(body)


def answer(req: pb.Request) -> bytes:
    resp = pb.Response(status=pb.EOK)
    resp.header.CopyFrom(req.header)
    resp.getBookieInfoResponse.status = pb.EOK
    resp.getBookieInfoResponse.totalDiskCapacity = 100
    resp.getBookieInfoResponse.freeDiskSpace = 40
    data = resp.SerializeToString()
    return struct.pack(">I", len(data)) + data


class FakeBookie:
    """Accepts connections; the n-th connection is served by handlers[n] (the last one repeats)."""

    def __init__(self, *handlers: Handler) -> None:
        self.handlers = list(handlers)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.target = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            handler = self.handlers[min(self.connections, len(self.handlers) - 1)]
            self.connections += 1
            threading.Thread(target=self._serve, args=(handler, conn), daemon=True).start()

    @staticmethod
    def _serve(handler: Handler, conn: socket.socket) -> None:
        with conn:
            try:
                handler(conn)
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def fake() -> Iterator[Callable[..., FakeBookie]]:
    made: list[FakeBookie] = []

    def make(*handlers: Handler) -> FakeBookie:
        made.append(FakeBookie(*handlers))
        return made[-1]

    yield make
    for f in made:
        f.close()


def fails_fast(client: BookieClient, match: str) -> BookieError:
    """The request fails with UNAVAILABLE naming `match`, long before the (generous) request timeout."""
    start = time.monotonic()
    exc = client.get_bookie_info().exception(timeout=20)
    assert isinstance(exc, BookieError) and exc.status == "UNAVAILABLE", exc
    assert match in str(exc), str(exc)
    assert time.monotonic() - start < 10  # the request timeout is 60 s: failure came from the connection
    return exc


def well_behaved(conn: socket.socket) -> None:
    while True:
        conn.sendall(answer(read_request(conn)))


def test_garbage_response_frame_fails_the_request_and_the_client_reconnects(fake) -> None:  # type: ignore[no-untyped-def]
    def garbage(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(struct.pack(">I", 7) + b"\xff\xff\xff\xff\xff\xff\xff")
        conn.recv(1)  # the client closes its side

    bookie = fake(garbage, well_behaved)
    with BookieClient("b", bookie.target, request_timeout_s=60) as client:
        fails_fast(client, "undecodable response")
        info = client.get_bookie_info().result(20)  # a fresh connection, answered properly
        assert (info.total_disk, info.free_disk) == (100, 40)
        assert bookie.connections == 2


def test_oversized_frame_fails_the_request(fake) -> None:  # type: ignore[no-untyped-def]
    def oversized(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(struct.pack(">I", 6 * 1024 * 1024) + b"\x00" * 100)
        conn.recv(1)

    with BookieClient("b", fake(oversized).target, request_timeout_s=60) as client:
        fails_fast(client, "exceeds the maximum frame size")


def read_answer_of(size: int) -> Handler:
    """Answers every READ_ENTRY with an EOK Response of exactly `size` serialized bytes (the body pads it)."""
    def handler(conn: socket.socket) -> None:
        while True:
            req = read_request(conn)
            resp = pb.Response(status=pb.EOK)
            resp.header.CopyFrom(req.header)
            r = resp.readResponse
            r.status, r.ledgerId, r.entryId = pb.EOK, req.readRequest.ledgerId, req.readRequest.entryId
            r.body = b""
            pad = size - resp.ByteSize()
            while resp.ByteSize() != size:  # the body's length varint grows with the body
                r.body = b"x" * pad
                pad -= resp.ByteSize() - size
            data = resp.SerializeToString()
            conn.sendall(struct.pack(">I", len(data)) + data)

    return handler


def test_response_frame_limit_counts_the_length_prefix(fake) -> None:  # type: ignore[no-untyped-def]
    """Netty's LengthFieldBasedFrameDecoder(maxFrameSize, 0, 4, 0, 4), as PerChannelBookieClient builds it,
    adds the 4-byte length to the length it reads before comparing with maxFrameSize (5 MiB): the largest
    response a Java client accepts is 5,242,876 bytes, and so is bkaudit's."""
    largest = 5 * 1024 * 1024 - 4
    with BookieClient("b", fake(read_answer_of(largest)).target, request_timeout_s=60) as client:
        assert len(client.read_entry(1, 0).result(20)) > largest - 100
    with BookieClient("b", fake(read_answer_of(largest + 1)).target, request_timeout_s=60) as client:
        exc = client.read_entry(1, 0).exception(20)
        assert isinstance(exc, BookieError) and exc.status == "UNAVAILABLE"
        assert "exceeds the maximum frame size of 5242880" in str(exc)


def test_truncated_frame_fails_the_request(fake) -> None:  # type: ignore[no-untyped-def]
    def truncated(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(struct.pack(">I", 50) + b"\x0a\x06")  # 2 of 50 bytes, then close

    with BookieClient("b", fake(truncated).target, request_timeout_s=60) as client:
        fails_fast(client, "middle of a frame")


def test_peer_closing_at_once_and_nobody_listening(fake) -> None:  # type: ignore[no-untyped-def]
    def slam(conn: socket.socket) -> None:
        pass

    with BookieClient("b", fake(slam).target, request_timeout_s=60) as client:
        fails_fast(client, "closed")
    gone = socket.create_server(("127.0.0.1", 0))
    target = f"127.0.0.1:{gone.getsockname()[1]}"
    gone.close()
    with BookieClient("b", target, request_timeout_s=60, connect_timeout_s=2) as client:
        fails_fast(client, "cannot connect")


def test_silent_peer_times_out(fake) -> None:  # type: ignore[no-untyped-def]
    def silent(conn: socket.socket) -> None:
        read_request(conn)
        conn.recv(1)

    with BookieClient("b", fake(silent).target, request_timeout_s=0.5) as client:
        exc = client.get_bookie_info().exception(timeout=20)
        assert isinstance(exc, BookieError) and "no response within 0.5s" in str(exc)


def test_pipelined_listing_without_batch_support_sends_only_bookkeeper_operations(fake) -> None:  # type: ignore[no-untyped-def]
    seen: list[int] = []

    def lister(conn: socket.socket) -> None:
        while True:
            req = read_request(conn)
            seen.append(req.header.operation)
            odd = req.getListOfEntriesOfLedgerRequest.ledgerId % 2
            resp = pb.Response(status=pb.EOK if odd else pb.ENOLEDGER)
            resp.header.CopyFrom(req.header)
            sub = resp.getListOfEntriesOfLedgerResponse
            sub.status, sub.ledgerId = resp.status, req.getListOfEntriesOfLedgerRequest.ledgerId
            sub.availabilityOfEntriesOfLedger = b"L%d" % sub.ledgerId
            data = resp.SerializeToString()
            conn.sendall(struct.pack(">I", len(data)) + data)

    with BookieClient("b", fake(lister).target, batch_listing=False) as client:
        got = client.get_list_of_entries_batch(list(range(1, 2001))).result(30)
    assert set(seen) == {pb.GET_LIST_OF_ENTRIES_OF_LEDGER}  # never op 1000 to a bookie that did not advertise
    assert len(seen) == 2000 and len(got) == 2000
    assert got[7] == b"L7"
    assert isinstance(got[8], BookieError) and got[8].status == "ENOLEDGER"


@pytest.mark.parametrize(("txn", "ledger"), [(1, 5), (300, 0), (2**40, 2**62), (7, 123456789)])
def test_hand_built_listing_request_is_protobufs_serialization(txn: int, ledger: int) -> None:
    req = pb.Request()
    req.header.version = pb.VERSION_THREE
    req.header.operation = pb.GET_LIST_OF_ENTRIES_OF_LEDGER
    req.header.txnId = txn
    req.getListOfEntriesOfLedgerRequest.ledgerId = ledger
    assert list_request(txn, ledger) == req.SerializeToString()


@pytest.mark.parametrize(("txn", "ledger", "entry"),
                         [(1, 5, 0), (300, 0, -1), (2**40, 2**62, 2**62), (7, 123456789, 99999)])
def test_hand_built_read_request_is_protobufs_serialization(txn: int, ledger: int, entry: int) -> None:
    req = pb.Request()
    req.header.version = pb.VERSION_THREE
    req.header.operation = pb.READ_ENTRY
    req.header.txnId = txn
    req.readRequest.ledgerId = ledger
    req.readRequest.entryId = entry
    assert read_entry_request(txn, ledger, entry) == req.SerializeToString()


def test_spec_vector_of_the_listing_frame() -> None:
    """shared/spec/bookkeeper-formats.md: the GET_LIST_OF_ENTRIES_OF_LEDGER frame for txnId 1, ledger 5."""
    data = list_request(1, 5)
    assert struct.pack(">I", len(data)) + data == bytes.fromhex("0000000d0a060803100b1801e206020805")


def test_frames_decoder() -> None:
    frames = Frames(max_frame_bytes=20)  # Netty's limit counts the 4-byte length: 16-byte messages at most
    assert frames.feed(b"\x00\x00\x00\x02ab\x00\x00") == [b"ab"]
    assert frames.partial == 2
    assert frames.feed(b"\x00\x01c") == [b"c"]
    assert frames.partial == 0
    assert frames.feed(b"\x00\x00\x00\x10" + b"x" * 16) == [b"x" * 16]
    with pytest.raises(FormatError, match=r"frame of 21 bytes .* exceeds the maximum frame size of 20"):
        frames.feed(b"\x00\x00\x00\x11")


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(st.binary(max_size=40), max_size=8), cuts=st.lists(st.integers(0, 400), max_size=10))
def test_frames_decoder_yields_every_message_however_cut(messages: list[bytes], cuts: list[int]) -> None:
    """Ground truth: the messages framed with BookKeeper's 4-byte big-endian length, cut anywhere."""
    stream = b"".join(struct.pack(">I", len(m)) + m for m in messages)
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    frames = Frames(max_frame_bytes=44)
    got: list[bytes] = []
    for lo, hi in itertools.pairwise(bounds):
        got += frames.feed(stream[lo:hi])
        assert all(type(g) is bytes for g in got)
    assert got == messages and frames.partial == 0


def test_frames_decoder_keeps_the_bytes_from_an_oversized_frame_on() -> None:
    frames = Frames(max_frame_bytes=5)
    with pytest.raises(FormatError, match="exceeds"):
        frames.feed(b"\x00\x00\x00\x01a\x00\x00\x00\x09xyz")
    assert frames.partial == 7 and frames.take_rest() == b"\x00\x00\x00\x09xyz"


def _receive(receiver: FrameReceiver, data: bytes, kinds: list[type] | None = None) -> list[bytes]:
    """What an asyncio BufferedProtocol transport does: read into `get_buffer()`, report the count; each
    frame is copied at once (a large one is a view of a buffer the next read reuses)."""
    got: list[bytes] = []
    while data:
        buf = receiver.get_buffer()
        assert len(buf) > 0
        n = min(len(buf), len(data))
        buf[:n] = data[:n]
        frames = receiver.updated(n)
        if kinds is not None:
            kinds += [type(f) for f in frames if len(f) > 60]
        got += [bytes(f) for f in frames]
        data = data[n:]
    return got


@settings(max_examples=300, deadline=None)
@given(
    messages=st.lists(st.binary(max_size=300), max_size=10),
    cuts=st.lists(st.integers(0, 3000), max_size=12),
)
def test_frame_receiver_yields_every_message_however_cut(messages: list[bytes], cuts: list[int]) -> None:
    """Ground truth as above; frames on both sides of `direct_bytes`, a scratch buffer smaller than some."""
    stream = b"".join(struct.pack(">I", len(m)) + m for m in messages)
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    receiver = FrameReceiver(max_frame_bytes=304, scratch_bytes=64, direct_bytes=32)
    got: list[bytes] = []
    kinds: list[type] = []
    for lo, hi in itertools.pairwise(bounds):
        got += _receive(receiver, stream[lo:hi], kinds)
    assert got == messages and receiver.partial == 0
    assert set(kinds) <= {memoryview}  # beyond the scratch: read into the reused buffer


def test_frame_receiver_counts_a_truncated_frame_and_refuses_an_oversized_one() -> None:
    receiver = FrameReceiver(max_frame_bytes=104, scratch_bytes=64, direct_bytes=16)
    assert _receive(receiver, b"\x00\x00\x00\x02ab\x00\x00\x00\x14" + b"x" * 10) == [b"ab"]
    assert receiver.partial == 14  # the large frame's header and 10 of its 20 bytes
    assert _receive(receiver, b"y" * 10 + b"\x00\x00") == [b"x" * 10 + b"y" * 10]
    assert receiver.partial == 2
    with pytest.raises(FormatError, match=r"frame of 105 bytes .* exceeds the maximum frame size of 104"):
        _receive(receiver, b"\x00\x65")
    with pytest.raises(ValueError):
        FrameReceiver(scratch_bytes=64, direct_bytes=33)


def test_closed_client_fails_at_once_and_callbacks_may_call_it_again(fake) -> None:  # type: ignore[no-untyped-def]
    bookie = fake(well_behaved)
    client = BookieClient("b", bookie.target)
    assert client.get_bookie_info().result(20).total_disk == 100
    client.close()
    again: list[BookieError] = []
    fut = client.get_bookie_info()
    fut.add_done_callback(lambda f: again.append(client.get_bookie_info().exception(timeout=5)))
    exc = fut.exception(timeout=5)
    assert isinstance(exc, BookieError) and "client closed" in str(exc)
    assert len(again) == 1 and "client closed" in str(again[0])


def test_tls_client_against_a_bookie_without_tls_fails_with_the_reason(fake) -> None:  # type: ignore[no-untyped-def]
    from bkaudit.rpc.tls import TlsConfig

    seen: list[pb.Request] = []

    def no_tls(conn: socket.socket) -> None:  # BookieRequestProcessor without TLS configured: EBADREQ
        req = read_request(conn)
        seen.append(req)
        resp = pb.Response(status=pb.EBADREQ)
        resp.header.CopyFrom(req.header)
        data = resp.SerializeToString()
        conn.sendall(struct.pack(">I", len(data)) + data)
        conn.recv(1)

    with BookieClient("b", fake(no_tls).target, tls=TlsConfig(), request_timeout_s=60) as client:
        fails_fast(client, "refused START_TLS with EBADREQ")
    first = seen[0]  # START_TLS goes out before anything else
    assert first.header.operation == pb.START_TLS and first.HasField("startTLSRequest")
