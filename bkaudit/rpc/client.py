"""BookieClient: BookKeeper's native v3 protocol on one TCP connection per bookie, correlated by txnId.

This is what a BookKeeper client (PerChannelBookieClient) speaks to a Java bookie: length-prefixed v3
protobuf frames (bkaudit.rpc.framing), `BKPacketHeader{VERSION_THREE, operation, txnId}`, many requests in
flight on one connection, no AUTH frame (BookKeeper's null auth provider), and for TLS a plaintext START_TLS
exchange followed by the TLS handshake on the same socket.

Every call returns a concurrent.futures.Future at once. All native connections of the process share a few
asyncio event loop threads (bkaudit.rpc.ioloop; a client stays on one): callers serialize their request and
append it to the connection's outgoing buffer; the loop writes whatever accumulated in one `write` and
parses responses as they arrive. No thread is created per call. One process-wide timer thread
(bkaudit.rpc.deadlines) fails requests that outlive `request_timeout_s`. The v3 operations themselves
(requests built, responses completed) are the transport-independent RequestClient (bkaudit.rpc.operations).

Failure model: a non-OK status fails the future with BookieError(status name) (FencedError for EFENCED);
a timeout, a refused connection, a garbage or oversized frame, or a closed connection fails with
BookieError("UNAVAILABLE", why). A broken connection is closed, all its pending futures fail promptly, and the
next call opens a fresh one (reconnect).

A timed-out request is not gone from the bookie: it still waits in the bookie's queue and is answered late.
The client keeps those (`backlog`, for `Deadlines.LATE_FACTOR` timeouts, bkaudit.rpc.deadlines) and the
time any frame last arrived (`last_heard`, late answers included), so a caller can tell a queueing bookie
from a frozen one and wait for the queue to drain before adding to it (bkaudit.job.bookie_calls.ask).

Listing: `get_list_of_entries_batch` uses bkaudit's batch operation (op 1000) only when the bookie
advertised it (`batch_listing=True`, from its BookieServiceInfo); any other bookie gets one standard
GET_LIST_OF_ENTRIES_OF_LEDGER request per ledger, all pipelined, combined into the same answer. A bkaudit
bookie never sends a batch answer above its frame limit: ledgers that did not fit come back ETOOMANYREQUESTS
and are asked again, in order, until a round makes no progress (bkaudit.bookie.listing).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import threading
import time

from google.protobuf.message import DecodeError

from bkaudit.errors import FormatError
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.rpc import ioloop
from bkaudit.rpc.deadlines import DEADLINES
from bkaudit.rpc.framing import DEFAULT_MAX_FRAME_BYTES, FrameReceiver
from bkaudit.rpc.operations import EOK, STATUS_NAME, V3, Pending, RequestClient
from bkaudit.rpc.tls import TlsConfig

log = logging.getLogger(__name__)

_LEN = struct.Struct(">I")


def split_target(target: str) -> tuple[str, int]:
    """host and port of "host:port" or "[v6]:port"; FormatError otherwise."""
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise FormatError(f"bookie address {target!r} is not host:port", field="target")
    return host.strip("[]"), int(port)


class _Connection(asyncio.BufferedProtocol):
    """One TCP connection to a bookie, living on the shared I/O loop.

    `out` (frames waiting to be written) and `pending` are filled by caller threads under the client lock; the
    loop drains `out` in one write per burst and resolves `pending` as responses arrive.
    """

    def __init__(self, client: BookieClient) -> None:
        self.client = client
        self.pending: dict[int, Pending] = {}
        self.out: list[bytes] = []
        self.flush_scheduled = False
        self.ready = False
        self.closed = False
        self.transport: asyncio.Transport | None = None
        self.frames = FrameReceiver(client.max_frame_bytes)  # answers are read into their own buffers
        self.expired: dict[int, float] = {}
        """txn -> when it timed out, for requests whose late answer has not arrived (in timeout order)."""
        self._tls_answer: asyncio.Future[int] | None = None
        self.deadlines = DEADLINES.watch(self)

    # -- opening (on the loop) -------------------------------------------------------------------------------
    async def open(self) -> None:
        client = self.client
        loop = asyncio.get_running_loop()
        try:
            host, port = split_target(client.target)
            await asyncio.wait_for(loop.create_connection(lambda: self, host, port), client.connect_timeout_s)
            if self.closed:  # closed while connecting
                if self.transport is not None:
                    self.transport.abort()
                return
            if client.tls is not None:
                await self._start_tls(loop, host)
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self.fail(f"cannot connect to {client.target}: {why}")
            return
        if self.closed:
            return
        self.ready = True
        self.flush()

    async def _start_tls(self, loop: asyncio.AbstractEventLoop, host: str) -> None:
        """PerChannelBookieClient's START_TLS: a plaintext request and EOK answer, then TLS on the socket."""
        client = self.client
        assert client.tls is not None and self.transport is not None
        req = pb.Request()
        req.header.version = V3
        req.header.operation = pb.START_TLS
        req.header.txnId = next(client._txn)
        req.startTLSRequest.SetInParent()
        self._tls_answer = loop.create_future()
        data = req.SerializeToString()
        self.transport.write(_LEN.pack(len(data)) + data)
        status = await asyncio.wait_for(self._tls_answer, client.connect_timeout_s)
        self._tls_answer = None
        if status != EOK:
            raise ConnectionError(f"bookie refused START_TLS with {STATUS_NAME.get(status, status)} "
                                  "(TLS not configured on the bookie?)")
        context = client.tls.ssl_context()
        server_name = client.tls.server_name or host
        transport = await loop.start_tls(self.transport, self, context, server_hostname=server_name,
                                         ssl_handshake_timeout=client.connect_timeout_s)
        if transport is None:
            raise ConnectionError("TLS handshake did not complete")
        self.transport = transport

    # -- asyncio.Protocol ------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self.frames.updated(nbytes)
        except FormatError as exc:
            self.fail(f"bookie sent a bad frame: {exc}")
            return
        pending = self.pending
        client = self.client
        if frames:
            client.last_heard = time.monotonic()
        expired = self.expired
        for i, body in enumerate(frames):
            resp = pb.Response()
            try:
                resp.MergeFromString(body)
            except DecodeError as exc:
                self.fail(f"bookie sent an undecodable response frame ({len(body)} bytes): {exc}")
                return
            if self._tls_answer is not None and resp.header.operation == pb.START_TLS:
                if not self._tls_answer.done():
                    self._tls_answer.set_result(resp.status)
                if i + 1 < len(frames) or self.frames.partial:
                    self.fail("bookie sent data after its START_TLS response")
                return
            txn = resp.header.txnId
            p = pending.pop(txn, None)
            if p is not None:
                client._complete(p, resp)
            elif expired:
                expired.pop(txn, None)  # a late answer: the bookie worked through one more stale request

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        if self.frames.partial:
            reason = f"connection closed in the middle of a frame ({self.frames.partial} bytes buffered)"
        else:
            reason = f"connection closed by the bookie{f': {exc}' if exc else ''}"
        self.fail(reason)

    def pause_writing(self) -> None:  # the bookie is not reading: stop reading its answers until it does
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None:
            self.transport.resume_reading()

    # -- on the loop -----------------------------------------------------------------------------------------
    def flush(self) -> None:
        with self.client._lock:
            self.flush_scheduled = False
            if not self.ready or self.closed or not self.out:
                return
            out, self.out = self.out, []
        assert self.transport is not None
        self.transport.write(b"".join(out))

    def fail(self, reason: str) -> None:
        """Close the connection and fail every request waiting on it (idempotent)."""
        client = self.client
        with client._lock:
            first = not self.closed
            self.closed = True
            pending, self.pending = self.pending, {}
            self.out = []
            self.expired = {}
            if client._conn is self:
                client._conn = None
        if first and self.transport is not None:
            self.transport.abort()
        if self._tls_answer is not None and not self._tls_answer.done():
            self._tls_answer.set_exception(ConnectionError(reason))
        if first and not pending:
            log.info("connection to bookie %s (%s) closed: %s", client.bookie_id, client.target, reason)
        client._fail_all(pending, reason)


class BookieClient(RequestClient):
    """Requests to one bookie over one native BookKeeper connection; thread-safe.

    `target` is host:port of the bookie's `bookie-rpc` endpoint. `max_frame_bytes` bounds a response frame
    (BookKeeper's nettyMaxFrameSizeBytes, 5 MiB by default).
    """

    def __init__(self, bookie_id: str, target: str, *, tls: TlsConfig | None = None,
                 connect_timeout_s: float = 5.0, request_timeout_s: float = 10.0,
                 batch_listing: bool = False, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        super().__init__(bookie_id, target, tls=tls, connect_timeout_s=connect_timeout_s,
                         request_timeout_s=request_timeout_s, batch_listing=batch_listing)
        self.max_frame_bytes = max_frame_bytes
        self._conn: _Connection | None = None
        self._loop = ioloop.get()  # this client's connections live on this loop

    @property
    def backlog(self) -> int:
        conn = self._conn
        return len(conn.expired) if conn is not None and not conn.closed else 0

    def close(self) -> None:
        """Close the connection and fail whatever is still pending."""
        with self._lock:
            self._closed = True
            conn = self._conn
        if conn is not None:
            loop = self._loop
            done = threading.Event()

            def shut() -> None:
                conn.fail("client closed")
                done.set()

            if ioloop.in_loop():
                shut()
            elif not loop.is_closed():
                loop.call_soon_threadsafe(shut)
                done.wait(timeout=5)

    def _connection(self) -> tuple[_Connection, bool]:
        """The live connection (opening one if needed); called with the lock held."""
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn, False
        conn = self._conn = _Connection(self)
        return conn, True

    def _transmit(self, data: bytes, txn: int, p: Pending) -> None:
        self._transmit_many([(data, txn, p)])

    def _transmit_many(self, items: list[tuple[bytes, int, Pending]]) -> None:
        pack = _LEN.pack
        with self._lock:
            closed = self._closed
            if not closed:
                conn, new = self._connection()
                pending, out, fifo = conn.pending, conn.out, conn.deadlines
                deadline = time.monotonic() + self.request_timeout_s
                for data, txn, p in items:
                    pending[txn] = p
                    out.append(pack(len(data)))
                    out.append(data)
                    fifo.append((deadline, txn))
                schedule = not conn.flush_scheduled and not new
                if schedule:
                    conn.flush_scheduled = True
        if closed:  # failed outside the lock: a callback may call this client again
            for _, _, p in items:
                p.future.set_exception(self._error("UNAVAILABLE", "client closed", p))
            return
        loop = self._loop
        if new:
            asyncio.run_coroutine_threadsafe(conn.open(), loop)
        elif schedule:
            loop.call_soon_threadsafe(conn.flush)
