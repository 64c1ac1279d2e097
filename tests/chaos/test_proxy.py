"""The chaos proxy on real loopback sockets: each mode does to the traffic what its name says.

The upstream is a plain echo server (the proxy is protocol-agnostic); the bookie-facing use is covered by the
chaos run itself.
"""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from bkaudit.chaos.proxy import Proxy, ProxySet


class Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except OSError:
            pass  # the proxy reset the connection: that is the point


@pytest.fixture
def upstream() -> Iterator[str]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def connect(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.settimeout(5)
    return sock


def test_pass_delay_drop_reset_truncate(upstream: str) -> None:
    proxy = Proxy(upstream, delay_s=0.4)
    try:
        with connect(proxy.address) as s:
            s.sendall(b"hello")
            assert s.recv(100) == b"hello"

            proxy.set_mode("delay")
            t0 = time.monotonic()
            s.sendall(b"slow")
            assert s.recv(100) == b"slow"
            assert time.monotonic() - t0 >= 0.7  # held on the way there and on the way back

            proxy.set_mode("drop")
            s.sendall(b"lost")
            s.settimeout(0.5)
            with pytest.raises(TimeoutError):
                s.recv(100)
            s.settimeout(5)

            proxy.set_mode("pass")  # the same connection carries traffic again
            s.sendall(b"back")
            assert s.recv(100) == b"back"

            proxy.set_mode("reset")  # existing connections are reset at once
            with pytest.raises((ConnectionResetError, BrokenPipeError)):
                s.sendall(b"x")
                if not s.recv(100):
                    raise ConnectionResetError("closed")
        with pytest.raises((ConnectionResetError, BrokenPipeError)), connect(proxy.address) as s:
            s.sendall(b"x")  # new ones too (the reset may already hit the connect)
            if not s.recv(100):
                raise ConnectionResetError("closed")

        proxy.set_mode("truncate")
        with connect(proxy.address) as s:
            s.sendall(b"0123456789")
            got = b""
            with pytest.raises(ConnectionResetError):
                while chunk := s.recv(100):
                    got += chunk
                raise ConnectionResetError("closed")
            assert got == b"01234"
    finally:
        proxy.close()


def test_proxy_set_fronts_each_bookie_once_and_heals(upstream: str) -> None:
    proxies = ProxySet()
    try:
        a = proxies.front("b1", upstream)
        assert proxies.front("b1", upstream) == a and proxies.front("b2", upstream) != a
        assert proxies.set_mode("b1", "drop") and not proxies.set_mode("unknown", "drop")
        proxies.heal()
        with connect(a) as s:
            s.sendall(b"ok")
            assert s.recv(100) == b"ok"
        with pytest.raises(ValueError):
            proxies.set_mode("b1", "explode")
    finally:
        proxies.close()
