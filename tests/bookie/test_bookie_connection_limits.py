"""What a client of the bookie's native port can hold, authenticated or not (issue 32 item 9): a partial frame
for at most `frame_timeout_s`, at most `max_connections` connections, at most `max_buffered_bytes` of
incomplete frames across connections, and before the TLS handshake of a bookie that requires TLS at most a
START_TLS-sized frame. The issue's repro: 40 connections each holding a partial 5 MiB frame held 200 MiB
for as long as they stayed open, mutual TLS or not.

A real NativeServer over a real BookieService and storage, on loopback; the clients are raw sockets sending
exactly the bytes each case needs.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bkaudit.bookie.nativeserver import PRE_TLS_MAX_FRAME_BYTES, NativeServer
from bkaudit.bookie.service import BookieService
from bkaudit.bookie.storage import Storage
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.rpc.tls import server_ssl_context

MiB = 1024 * 1024
Server = Callable[..., NativeServer]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Server]:
    started: list[tuple[NativeServer, BookieService, Storage]] = []

    def make(**options: object) -> NativeServer:
        storage = Storage(tmp_path / f"bookie{len(started)}")
        service = BookieService(storage)
        server = NativeServer(service, "127.0.0.1", 0, **options)  # type: ignore[arg-type]
        server.start()
        started.append((server, service, storage))
        return server

    yield make
    for server, service, storage in started:
        server.stop(grace=0.5)
        service.close()
        storage.close()


def connect(server: NativeServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def partial(sock: socket.socket, declared: int, sent: int) -> None:
    """The start of a frame announcing `declared` bytes, of which `sent` are sent."""
    sock.sendall(struct.pack(">I", declared) + b"\0" * sent)


def closed(sock: socket.socket, within_s: float) -> bool:
    """True when the bookie closes (or resets) the connection within `within_s`."""
    sock.settimeout(within_s)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def read_request(txn: int) -> bytes:
    req = pb.Request()
    req.header.version = pb.VERSION_THREE
    req.header.operation = pb.READ_ENTRY
    req.header.txnId = txn
    req.readRequest.ledgerId = 404
    req.readRequest.entryId = 0
    data = req.SerializeToString()
    return struct.pack(">I", len(data)) + data


def answered(sock: socket.socket, txn: int) -> bool:
    sock.settimeout(10)
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return False
    (size,) = struct.unpack(">I", head)
    resp = pb.Response.FromString(sock.recv(size, socket.MSG_WAITALL))
    return bool(resp.header.txnId == txn)


def wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_a_frame_that_does_not_arrive_whole_in_time_closes_its_connection(serve: Server) -> None:
    server = serve(frame_timeout_s=1.0)
    idle, stuck = connect(server), connect(server)
    partial(stuck, 512 * 1024, 100 * 1024)
    assert wait_until(lambda: server.buffered == 4 + 100 * 1024)  # the length prefix counts
    began = time.monotonic()
    assert closed(stuck, within_s=10)
    assert 0.8 <= time.monotonic() - began < 5
    assert wait_until(lambda: server.buffered == 0)
    # a connection holding no partial frame may stay idle (clients keep their bookie connections open)
    assert not closed(idle, within_s=1.5)
    idle.sendall(read_request(7))
    assert answered(idle, 7)


def test_the_clock_runs_per_frame_not_per_connection(serve: Server) -> None:
    server = serve(frame_timeout_s=1.0)
    sock = connect(server)
    for txn in range(1, 6):  # 5 frames over ~3 s, each sent in two parts 0.6 s apart: each within 1 s
        data = read_request(txn)
        sock.sendall(data[:5])
        time.sleep(0.6)
        sock.sendall(data[5:])
        assert answered(sock, txn), txn
    assert server.buffered == 0


def test_connections_beyond_max_connections_are_closed_at_once(serve: Server) -> None:
    server = serve(max_connections=4)
    held = [connect(server) for _ in range(4)]
    assert wait_until(lambda: len(server.connections) == 4)
    extra = connect(server)
    assert closed(extra, within_s=5)
    assert server.refused == 1 and len(server.connections) == 4
    held.pop().close()
    assert wait_until(lambda: len(server.connections) == 3)
    again = connect(server)
    again.sendall(read_request(9))
    assert answered(again, 9)


def test_incomplete_frames_of_all_connections_are_bounded_together(serve: Server) -> None:
    server = serve(max_frame_bytes=1 * MiB, max_buffered_bytes=2 * MiB)
    socks = [connect(server) for _ in range(3)]
    for sock in socks[:2]:
        partial(sock, MiB - 4, 900 * 1024)
    assert wait_until(lambda: server.buffered == 2 * (4 + 900 * 1024))
    partial(socks[2], MiB - 4, 900 * 1024)  # would hold 2.6 MiB together
    assert closed(socks[2], within_s=5)
    assert wait_until(lambda: server.buffered == 2 * (4 + 900 * 1024))
    assert server.buffered <= server.max_buffered_bytes
    socks[0].close()  # its bytes are released with it
    assert wait_until(lambda: server.buffered == 4 + 900 * 1024)


def test_the_issue_repro_forty_partial_frames_hold_a_bounded_amount(serve: Server) -> None:
    """40 connections each starting a (nearly) full 5 MiB frame: with the defaults 256 MiB would be allowed,
    here 16 MiB; whatever the count, no more than that is held, and the holders are gone after the timeout."""
    server = serve(max_buffered_bytes=16 * MiB, frame_timeout_s=2.0)
    socks = [connect(server) for _ in range(40)]
    chunk = b"\0" * (256 * 1024)
    for sock in socks:
        try:
            sock.sendall(struct.pack(">I", 5 * MiB - 4))
            for _ in range(8):  # 2 MiB of the frame each
                sock.sendall(chunk)
        except (ConnectionResetError, BrokenPipeError):
            pass  # closed for exceeding max_buffered_bytes
        assert server.buffered <= 16 * MiB
    assert wait_until(lambda: server.buffered == 0 and not server.connections, timeout_s=15)


def test_before_tls_a_bookie_that_requires_it_takes_small_frames_only(serve: Server, tmp_path: Path) -> None:
    from tests.pki import make_pki

    pki = make_pki(tmp_path)
    context = server_ssl_context(pki["server_cert"], pki["server_key"], pki["ca"])
    server = serve(ssl_context=context, require_tls=True)
    sock = connect(server)
    partial(sock, PRE_TLS_MAX_FRAME_BYTES + 1, 10)  # a plaintext client announcing a large frame
    assert closed(sock, within_s=5)
    assert wait_until(lambda: server.buffered == 0)
    small = connect(server)  # a small plaintext request is still answered (EUA), not dropped
    small.sendall(read_request(3))
    assert answered(small, 3)


def test_the_limits_are_bookie_settings(tmp_path: Path) -> None:
    from bkaudit import config
    from bkaudit.bookie.settings import BookieSettings
    from bkaudit.errors import ConfigError

    path = tmp_path / "bkaudit.toml"
    path.write_text("[bookie]\nmax_connections = 64\nframe_timeout_s = 5\nmax_buffered_bytes = 67108864\n")
    conf = config.load(path=path, environ={}).get(BookieSettings)
    assert (conf.max_connections, conf.frame_timeout_s, conf.max_buffered_bytes) == (64, 5.0, 64 * MiB)
    for text, key in (("max_connections = 0", "bookie.max_connections"),
                      ("frame_timeout_s = 0", "bookie.frame_timeout_s"),
                      ("max_buffered_bytes = 1024", "bookie.max_buffered_bytes")):  # below one frame
        path.write_text(f"[bookie]\n{text}\n")
        with pytest.raises(ConfigError) as err:
            config.load(path=path, environ={})
        assert err.value.key == key
