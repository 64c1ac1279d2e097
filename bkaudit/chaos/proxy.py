"""A loopback TCP proxy in front of each bookie, so chaos can delay, drop, reset or truncate its traffic.

Only chaos's own clients go through it: `ProxiedPool` is a BookieClientPool whose address lookup returns the
proxy in front of the address the bookie registered (BookKeeper's resolver, unchanged, picks the upstream).
Bookies, AutoRecovery and the checker keep talking to each other directly; nothing in the product changes.

Modes (one per proxy, switched at any time; existing connections follow the switch):
- pass: forward both ways;
- delay: hold every chunk `delay_s` before forwarding it;
- drop: swallow everything both ways (a silent network: requests time out);
- reset: reset every connection (TCP RST) and every new one;
- truncate: forward the first half of the next chunk from the bookie, then reset the connection.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
import struct
import threading
import time
from typing import Any

from bkaudit.rpc.pool import BookieAddress, BookieClientPool

log = logging.getLogger(__name__)

MODES = ("pass", "delay", "drop", "reset", "truncate")
CHUNK = 65536


class Proxy:
    """Listens on 127.0.0.1:<free port> and forwards to `upstream` ("host:port")."""

    def __init__(self, upstream: str, *, delay_s: float = 0.5) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host.strip("[]"), int(port))
        self.delay_s = delay_s
        self.mode = "pass"
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._closed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._accept_loop, name=f"chaos-proxy-{port}", daemon=True)
        self._thread.start()

    def set_mode(self, mode: str, *, delay_s: float | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}")
        with self._lock:
            self.mode = mode
            if delay_s is not None:
                self.delay_s = delay_s
            conns = list(self._conns) if mode == "reset" else []
        for conn in conns:
            _reset(conn)

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            _reset(conn)
        self._thread.join(2)

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.mode == "reset":
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _reset(client)
                continue
            for s in (client, upstream):
                s.settimeout(None)
                with self._lock:
                    self._conns.add(s)
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_bookie: bool) -> None:
        try:
            while True:
                data = src.recv(CHUNK)
                if not data:
                    break
                mode = self.mode
                if mode == "delay":
                    time.sleep(self.delay_s)
                elif mode == "drop":
                    continue
                elif mode == "reset":
                    break
                elif mode == "truncate" and from_bookie:
                    dst.sendall(data[: max(1, len(data) // 2)])
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                _reset(s)
                with self._lock:
                    self._conns.discard(s)


def _reset(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer sees a TCP RST, as from a crashed host or a middlebox.

    SHUT_RD first wakes the pump thread blocked reading this socket (it sends nothing), so the close below is
    the last use of the descriptor and really resets the connection."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


class ProxySet:
    """One proxy per bookie id, created on first use, upstream = the bookie's registered address."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proxies: dict[str, Proxy] = {}

    def front(self, bookie_id: str, upstream: str) -> str:
        with self._lock:
            proxy = self._proxies.get(bookie_id)
            if proxy is None:
                proxy = self._proxies[bookie_id] = Proxy(upstream)
            return proxy.address

    def set_mode(self, bookie_id: str, mode: str) -> bool:
        """Switch the proxy of `bookie_id` (False if no client used that bookie yet)."""
        with self._lock:
            proxy = self._proxies.get(bookie_id)
        if proxy is None:
            return False
        proxy.set_mode(mode)
        return True

    def heal(self) -> None:
        with self._lock:
            proxies = list(self._proxies.values())
        for proxy in proxies:
            proxy.set_mode("pass")

    def close(self) -> None:
        with self._lock:
            proxies, self._proxies = list(self._proxies.values()), {}
        for proxy in proxies:
            proxy.close()


class ProxiedPool(BookieClientPool):
    """A bookie connection pool whose clients connect through `proxies` (chaos's clients only)."""

    def __init__(self, *, proxies: ProxySet, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.proxies = proxies

    def lookup(self, bookie_id: str) -> BookieAddress:
        real = super().lookup(bookie_id)
        return dataclasses.replace(real, target=self.proxies.front(bookie_id, real.target))
