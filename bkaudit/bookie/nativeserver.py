"""The bookie's native transport: BookKeeper's TCP protocol, served as a Java bookie does on bookie-rpc.

Each connection carries length-prefixed v3 Request frames (bkaudit.rpc.framing) and gets Response frames back,
in completion order (clients correlate by txnId). One asyncio event loop thread multiplexes every connection:
a request costs no thread hop until it reaches the storage writer or the read pool, and replies from those
threads re-enter the loop once per burst. Replies ready together leave in one `write`.

Like BookieNettyServer: a frame above `max_frame_bytes` (nettyMaxFrameSizeBytes, the 4-byte length
counted) closes the connection (with a warning naming the peer), never the bookie. As
BookieProtoEncoding.RequestDecoder, each connection is read as v3 until a frame is not a v3 Request; from that
frame on it is read as the v2 protocol (bkaudit.bookie.servicev2), for good, and a frame v2 cannot read either
closes it. START_TLS is answered EOK in plaintext, then the TLS handshake runs on the same socket (a bookie
without TLS answers EBADREQ, as BookieRequestProcessor does). No AUTH exchange is needed: BookKeeper's default
auth provider authenticates every channel when it opens, so a bookie with TLS serves plaintext clients too.
`require_tls` (bkaudit's, what a TLS-based BookieAuthProvider does) answers EUA until the handshake instead,
as AuthHandler does on a channel not yet authenticated.

What a peer can hold, authenticated or not (BookKeeper's Netty server bounds none of these):
- connections: beyond `max_connections` a new one is closed at once (reset);
- time: a request frame must arrive whole within `frame_timeout_s` of its first byte (of the end of the
  frame before it), else the connection closes: a peer sending part of a frame, then nothing, holds nothing;
- memory: one connection buffers at most one incomplete frame, `max_frame_bytes`, and before its TLS
  handshake under `require_tls` (only START_TLS is served then) at most PRE_TLS_MAX_FRAME_BYTES; incomplete
  frames of all connections together at most `max_buffered_bytes`, past which the connection whose bytes
  would exceed it is closed.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
import threading
from collections import deque

from bkaudit.bookie.service import BookieService, parse_request
from bkaudit.errors import BookieError, FormatError
from bkaudit.rpc.framing import DEFAULT_MAX_FRAME_BYTES, Frames

log = logging.getLogger(__name__)

_LEN = struct.Struct(">I")

DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_FRAME_TIMEOUT_S = 30.0
DEFAULT_MAX_BUFFERED_BYTES = 256 * 1024 * 1024
PRE_TLS_MAX_FRAME_BYTES = 64 * 1024
"""Largest frame a connection may send before its TLS handshake when the bookie requires TLS: everything but
START_TLS (a few dozen bytes) is answered EUA then, so a larger frame is refused with the connection."""
REFUSAL_LOG_INTERVAL_S = 10.0


class NativeServer:
    """Serves a BookieService on `address:port` from a background event loop thread."""

    def __init__(self, service: BookieService, address: str, port: int, *,
                 ssl_context: ssl.SSLContext | None = None, require_tls: bool = False,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 frame_timeout_s: float = DEFAULT_FRAME_TIMEOUT_S,
                 max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES) -> None:
        self.service = service
        self.address = address
        self.port = port
        self.ssl_context = ssl_context
        self.require_tls = require_tls and ssl_context is not None
        """Refuse (EUA) everything but START_TLS before the TLS handshake."""
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self.frame_timeout_s = frame_timeout_s
        self.max_buffered_bytes = max_buffered_bytes
        self.buffered = 0
        """Bytes of incomplete request frames held by every connection together (the loop thread's)."""
        self.refused = 0
        """Connections closed at once because `max_connections` were open."""
        self._refusal_logged = 0.0
        self.connections: set[_Connection] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="bookie-native", daemon=True)

    def start(self) -> int:
        """Bind and serve; returns the bound port (useful with port 0). BookieError if binding fails."""
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        try:
            self.port = fut.result(timeout=30)
        except Exception as exc:
            self._loop.call_soon_threadsafe(self._loop.stop)
            raise BookieError("EIO", f"cannot serve on {self.address}:{self.port}: {exc}") from exc
        return self.port

    async def _start(self) -> int:
        server = await self._loop.create_server(lambda: _Connection(self), self.address, self.port,
                                                reuse_address=True, backlog=1024)
        self._server = server
        return int(server.sockets[0].getsockname()[1])

    def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, close every connection, stop the loop (in-flight work is drained by the caller)."""
        if self._server is not None:
            async def close() -> None:
                assert self._server is not None
                self._server.close()
                for conn in list(self.connections):
                    conn.close("bookie shutting down", level=logging.INFO)
                try:
                    await asyncio.wait_for(self._server.wait_closed(), grace)
                except Exception:  # best effort at shutdown
                    pass

            try:
                asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=grace + 5)
            except Exception as exc:
                log.warning("native server stop: %s", exc)
            self._server = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)


class _Connection(asyncio.Protocol):
    """One client connection: frames in, dispatched at once; replies coalesced into few writes."""

    def __init__(self, server: NativeServer) -> None:
        self.server = server
        self.service = server.service
        self.loop = server._loop
        self.loop_thread = server._thread.ident
        # before the handshake a bookie that requires TLS serves START_TLS only: small frames only
        limit = min(PRE_TLS_MAX_FRAME_BYTES, server.max_frame_bytes) if server.require_tls else None
        self.frames = Frames(limit or server.max_frame_bytes)
        self.held = 0  # bytes of an incomplete frame, counted in server.buffered
        self._frame_timer: asyncio.TimerHandle | None = None
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.closed = False
        self.upgrading = False
        self.secure = False  # TLS established (a bookie with require_tls answers EUA before that)
        self.v2 = False  # a frame was not a v3 Request: every later one is read as v2 (RequestDecoder)
        self._out: deque[bytes] = deque()
        self._scheduled = False

    # -- asyncio.Protocol ------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        server = self.server
        if len(server.connections) >= server.max_connections:
            self.closed = True
            server.refused += 1
            now = self.loop.time()
            if now - server._refusal_logged >= REFUSAL_LOG_INTERVAL_S:
                server._refusal_logged = now
                log.warning("refusing connection from %s: %d connections open (max_connections); %d refused "
                            "so far", self.peer, len(server.connections), server.refused)
            transport.abort()  # type: ignore[attr-defined]
            return
        server.connections.add(self)

    def _secured(self) -> None:
        self.secure = True
        self.frames.max_frame_bytes = self.server.max_frame_bytes

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self.upgrading:  # reading was paused at START_TLS: this came decrypted, after the handshake
            self.upgrading = False
            self._secured()
        try:
            frames = self.frames.feed(data)
        except FormatError as exc:
            self.close(f"bad frame: {exc}")
            return
        if not self._account(bool(frames)):
            return
        service, reply = self.service, self.reply
        upgrade = self._upgrade if self.server.ssl_context is not None else None
        authenticated = self.secure or not self.server.require_tls
        for body in frames:
            req = None if self.v2 else parse_request(body)
            if req is not None:
                service.serve(req, reply, upgrade=upgrade, authenticated=authenticated)
            else:
                if not self.v2:
                    log.debug("connection from %s speaks the v2 protocol", self.peer)
                    self.v2 = True
                try:
                    service.v2.dispatch(body, reply, authenticated=authenticated)
                except FormatError as exc:
                    self.close(f"not a BookKeeper request: {exc}")
                    return
            if self.upgrading:
                if self.frames.partial:
                    self.close("data after START_TLS before the TLS handshake")
                return

    def connection_lost(self, exc: Exception | None) -> None:
        was_closed, self.closed = self.closed, True
        self.server.connections.discard(self)
        if self.frames.partial and not was_closed:  # the peer went mid-frame (not closed by us)
            log.warning("connection from %s closed in the middle of a frame (%d bytes buffered)", self.peer,
                        self.frames.partial)
        self._release()

    # -- what an incomplete frame holds ----------------------------------------------------------------------
    def _account(self, completed: bool) -> bool:
        """Count this connection's incomplete frame in the server's total and (re)start its clock; False when
        the connection was closed for it."""
        server = self.server
        held = self.frames.partial
        total = server.buffered + held - self.held
        if held and total > server.max_buffered_bytes:
            self.close(f"incomplete frames of all connections would hold {total} bytes "
                       f"(max_buffered_bytes {server.max_buffered_bytes})")
            return False
        server.buffered = total
        self.held = held
        if not held or completed:  # the clock runs from the start of the frame still incomplete
            self._cancel_timer()
        if held and self._frame_timer is None:
            self._frame_timer = self.loop.call_later(server.frame_timeout_s, self._frame_timed_out)
        return True

    def _frame_timed_out(self) -> None:
        self._frame_timer = None
        if not self.closed and self.frames.partial:
            self.close(f"a frame did not arrive whole within {self.server.frame_timeout_s:g}s "
                       f"({self.frames.partial} bytes of it buffered; frame_timeout_s)")

    def _cancel_timer(self) -> None:
        if self._frame_timer is not None:
            self._frame_timer.cancel()
            self._frame_timer = None

    def _release(self) -> None:
        self._cancel_timer()
        self.server.buffered -= self.held
        self.held = 0
        if self.frames.partial:
            self.frames.take_rest()  # the bytes go now, not when the connection object does

    def pause_writing(self) -> None:  # the client does not read its answers: stop reading its requests
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None:
            self.transport.resume_reading()

    # -- replies ---------------------------------------------------------------------------------------------
    def reply(self, data: bytes) -> None:
        """Thread-safe: called exactly once per dispatched request."""
        self._out.append(data)
        if not self._scheduled:
            self._scheduled = True
            if threading.get_ident() == self.loop_thread:
                self.loop.call_soon(self._flush)
            else:
                self.loop.call_soon_threadsafe(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        out = self._out
        if self.closed or self.transport is None:
            out.clear()
            return
        pack = _LEN.pack
        parts: list[bytes] = []
        while out:
            data = out.popleft()
            parts.append(pack(len(data)))
            parts.append(data)
        if parts:
            self.transport.write(b"".join(parts))

    # -- START_TLS -------------------------------------------------------------------------------------------
    def _upgrade(self, response: bytes) -> None:
        """Send the START_TLS answer in plaintext (after every earlier reply), then start TLS."""
        self._flush()
        assert self.transport is not None
        self.transport.write(_LEN.pack(len(response)) + response)
        self.transport.pause_reading()  # the ClientHello is for the TLS layer, not for us
        self.upgrading = True
        self.loop.create_task(self._handshake())

    async def _handshake(self) -> None:
        context = self.server.ssl_context
        assert context is not None and self.transport is not None
        try:
            transport = await self.loop.start_tls(self.transport, self, context, server_side=True,
                                                  ssl_handshake_timeout=30)
        except (TimeoutError, OSError, ssl.SSLError, ConnectionError) as exc:
            log.warning("TLS handshake with %s failed: %s", self.peer, exc)
            self.closed = True
            self.server.connections.discard(self)
            self._release()
            if self.transport is not None:
                self.transport.abort()
            return
        if transport is None:
            self.close("TLS handshake did not complete")
            return
        self.transport = transport
        self.upgrading = False
        self._secured()
        log.info("TLS session with %s (%s)", self.peer, transport.get_extra_info("cipher"))

    def close(self, reason: str, *, level: int = logging.WARNING) -> None:
        if self.closed:
            return
        log.log(level, "closing connection from %s: %s", self.peer, reason)
        self._flush()  # answers to the requests before the bad one still go out, as Netty's writes do
        self.closed = True
        self.server.connections.discard(self)
        self._release()
        if self.transport is not None:
            self.transport.close()
            self.loop.call_later(5.0, self.transport.abort)  # a peer that does not read cannot hold it
