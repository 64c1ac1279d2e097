"""gRPC transport of the bookie: one bidirectional-stream method carrying raw BookKeeper v3 bytes.

The method `/bkaudit.Bookie/Exchange` is registered through a generic handler with no (de)serializers, so the
service sees each message's bytes and can answer garbage with EBADREQ. The server is grpc.aio on a private
event loop thread: one loop multiplexes every stream, a request costs no thread hop until it reaches the
storage writer or the read pool, and replies from those threads re-enter the loop with call_soon_threadsafe.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import grpc
from grpc import aio

from bkaudit.bookie.service import BookieService
from bkaudit.errors import BookieError, FormatError
from bkaudit.rpc import framing
from bkaudit.rpc.settings import FRAMED_METHOD, MAX_MESSAGE_BYTES, METHOD, SERVICE

log = logging.getLogger(__name__)

SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # clients ping idle streams to notice dead bookies; allow it
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 5000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.so_reuseport", 0),
]


class RpcServer:
    """Serves a BookieService on `address:port` (TLS when `credentials` are given) from a background loop."""

    def __init__(self, service: BookieService, address: str, port: int,
                 credentials: grpc.ServerCredentials | None = None) -> None:
        self.service = service
        self.address = address
        self.port = port
        self.credentials = credentials
        self._loop = asyncio.new_event_loop()
        self._server: aio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="bookie-rpc", daemon=True)

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
        server = aio.server(options=SERVER_OPTIONS)
        handlers = {
            METHOD.rsplit("/", 1)[1]: grpc.stream_stream_rpc_method_handler(self._exchange),
            FRAMED_METHOD.rsplit("/", 1)[1]: grpc.stream_stream_rpc_method_handler(self._exchange_framed),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        target = f"{self.address}:{self.port}"
        if self.credentials is None:
            port = server.add_insecure_port(target)
        else:
            port = server.add_secure_port(target, self.credentials)
        if not port:
            raise OSError(f"could not bind {target}")
        await server.start()
        self._server = server
        return int(port)

    async def _exchange(self, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        """One request per gRPC message, one response per gRPC message."""
        async for message in _StreamSession(self.service, framed=False).run(requests):
            yield message

    async def _exchange_framed(self, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        """Frames in, frames out: responses ready together leave in one gRPC message."""
        async for message in _StreamSession(self.service, framed=True).run(requests):
            yield message

    def stop(self, grace: float = 5.0) -> None:
        """Stop accepting streams, let open ones finish for up to `grace` seconds, stop the loop."""
        if self._server is not None:
            fut = asyncio.run_coroutine_threadsafe(self._server.stop(grace), self._loop)
            try:
                fut.result(timeout=grace + 5)
            except Exception as exc:
                log.warning("rpc server stop: %s", exc)
            self._server = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)


class _StreamSession:
    """One client stream: dispatches every request as it arrives, yields replies as they complete.

    Replies from other threads (storage writer, read pool) are appended to a deque and the loop is woken once
    per burst, not once per reply.
    """

    def __init__(self, service: BookieService, *, framed: bool) -> None:
        self.service = service
        self.framed = framed
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()
        self.out: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.outstanding = 0
        self.eof = False
        self._incoming: deque[bytes] = deque()
        self._scheduled = False

    def reply(self, data: bytes) -> None:
        """Thread-safe: called exactly once per dispatched request."""
        if threading.get_ident() == self.loop_thread:
            self._deliver(data)
            return
        self._incoming.append(data)
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon_threadsafe(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        incoming = self._incoming
        while incoming:
            self._deliver(incoming.popleft())

    def _deliver(self, data: bytes) -> None:
        self.outstanding -= 1
        self.out.put_nowait(data)
        if self.eof and self.outstanding == 0:
            self.out.put_nowait(None)

    def _dispatch(self, data: bytes) -> None:
        self.outstanding += 1
        self.service.dispatch(data, self.reply)

    async def _pump(self, requests: AsyncIterator[bytes]) -> None:
        try:
            async for message in requests:
                if not self.framed:
                    self._dispatch(message)
                    continue
                try:
                    for data in framing.split(message):
                        self._dispatch(data)
                except FormatError:
                    self._dispatch(b"\xff")  # broken framing: the rest is garbage, answered with EBADREQ
        except (asyncio.CancelledError, grpc.RpcError):
            pass
        except Exception:
            log.exception("request stream failed")
        self.eof = True
        if self.outstanding == 0:
            self.out.put_nowait(None)

    async def run(self, requests: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        reader = self.loop.create_task(self._pump(requests))
        out = self.out
        try:
            while True:
                item = await out.get()
                if item is None:
                    return
                if not self.framed:
                    yield item
                    continue
                batch, size, last = [item], len(item), False
                while not out.empty() and size < framing.COALESCE_BYTES:
                    more = out.get_nowait()
                    if more is None:
                        last = True
                        break
                    batch.append(more)
                    size += len(more)
                yield framing.join(batch)
                if last:
                    return
        finally:
            reader.cancel()
