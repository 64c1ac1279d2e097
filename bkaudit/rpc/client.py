"""BookieClient: BookKeeper's native v3 protocol on one TCP connection per bookie, correlated by txnId.

This is what a BookKeeper client (PerChannelBookieClient) speaks to a Java bookie: length-prefixed v3
protobuf frames (bkaudit.rpc.framing), `BKPacketHeader{VERSION_THREE, operation, txnId}`, many requests in
flight on one connection, no AUTH frame (BookKeeper's null auth provider), and for TLS a plaintext START_TLS
exchange followed by the TLS handshake on the same socket.

Every call returns a concurrent.futures.Future at once. All native connections of the process share a few
asyncio event loop threads (bkaudit.rpc.ioloop; a client stays on one): callers serialize their request and
append it to the connection's outgoing buffer; the loop writes whatever accumulated in one `write` and
parses responses as they arrive. No thread is created per call. One module-wide timer thread fails requests
that outlive `request_timeout_s`.

Failure model: a non-OK status fails the future with BookieError(status name) (FencedError for EFENCED);
a timeout, a refused connection, a garbage or oversized frame, or a closed connection fails with
BookieError("UNAVAILABLE", why). A broken connection is closed, all its pending futures fail promptly, and the
next call opens a fresh one (reconnect).

A timed-out request is not gone from the bookie: it still waits in the bookie's queue and is answered late.
The client keeps those (`backlog`, for `_Deadlines.LATE_FACTOR` timeouts) and the time any frame last arrived
(`last_heard`, late answers included), so a caller can tell a queueing bookie from a frozen one and wait for
the queue to drain before adding to it (bkaudit.job.fanout.ask).

Listing: `get_list_of_entries_batch` uses bkaudit's batch operation (op 1000) only when the bookie
advertised it (`batch_listing=True`, from its BookieServiceInfo); any other bookie gets one standard
GET_LIST_OF_ENTRIES_OF_LEDGER request per ledger, all pipelined, combined into the same answer. A bkaudit
bookie never sends a batch answer above its frame limit: ledgers that did not fit come back ETOOMANYREQUESTS
and are asked again, in order, until a round makes no progress (bkaudit.bookie.listing).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from bkaudit.errors import BookieError, FencedError, FormatError
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.formats.wire import varint
from bkaudit.rpc import ioloop
from bkaudit.rpc.framing import DEFAULT_MAX_FRAME_BYTES, FrameReceiver
from bkaudit.rpc.tls import TlsConfig

log = logging.getLogger(__name__)

HIGH_PRIORITY = 100
_V3 = pb.VERSION_THREE
_EOK = pb.EOK
_STATUS_NAME = {v: k for k, v in pb.StatusCode.items()}
_FENCE = pb.ReadRequest.FENCE_LEDGER
_RECOVERY_ADD = pb.AddRequest.RECOVERY_ADD
_BOTH_DISK_FLAGS = pb.GetBookieInfoRequest.TOTAL_DISK_CAPACITY | pb.GetBookieInfoRequest.FREE_DISK_SPACE
_LEN = struct.Struct(">I")
_LIST_ONE = pb.GET_LIST_OF_ENTRIES_OF_LEDGER
_LIST_HEADER = bytes([0x08, _V3, 0x10, _LIST_ONE, 0x18])  # version, operation, then the txnId varint
_LIST_FIELD = b"\xe2\x06"  # Request.getListOfEntriesOfLedgerRequest (field 108, length-delimited)
_READ_HEADER = bytes([0x08, _V3, 0x10, pb.READ_ENTRY, 0x18])
_READ_FIELD = b"\xa2\x06"  # Request.readRequest (field 100, length-delimited)


@dataclass(frozen=True, slots=True)
class ReadLacResult:
    """ReadLac: the explicit LAC body (WriteLac) and the bookie's last entry; either may be None."""

    lac_body: bytes | None
    last_entry_body: bytes | None


@dataclass(frozen=True, slots=True)
class BookieInfo:
    """GetBookieInfo: disk capacity and free space of the bookie's data directory, in bytes."""

    total_disk: int
    free_disk: int


class _Pending:
    __slots__ = ("entry_id", "future", "kind", "ledger_id")

    def __init__(self, kind: int, future: Any, ledger_id: int | None, entry_id: int | None) -> None:
        self.kind = kind
        self.future = future
        self.ledger_id = ledger_id
        self.entry_id = entry_id


def list_request(txn: int, ledger_id: int) -> bytes:
    """The serialized GET_LIST_OF_ENTRIES_OF_LEDGER Request, assembled by hand (the listing hot path).

    Byte-identical to protobuf's serialization of the same Request (checked in tests/unit/test_rpc_native.py).
    """
    header = _LIST_HEADER + varint(txn)
    sub = b"\x08" + varint(ledger_id)
    return b"\x0a" + bytes([len(header)]) + header + _LIST_FIELD + bytes([len(sub)]) + sub


def read_entry_request(txn: int, ledger_id: int, entry_id: int) -> bytes:
    """The serialized plain READ_ENTRY Request (no fencing, master key or priority), assembled by hand:
    the read-evidence hot path sends one per entry. Byte-identical to protobuf's serialization (checked in
    tests/unit/test_rpc_native.py)."""
    header = _READ_HEADER + varint(txn)
    sub = b"\x08" + varint(ledger_id) + b"\x10" + varint(entry_id)
    return b"\x0a" + bytes([len(header)]) + header + _READ_FIELD + bytes([len(sub)]) + sub


class _Gather:
    """Per-ledger listing answers combined into one batch-shaped result (dict ledger -> bytes | BookieError).

    If every request failed for lack of transport (UNAVAILABLE), the combined future fails with that error, so
    callers' circuit breakers see the same thing as for a failed batch call.
    """

    __slots__ = ("_left", "_lock", "future", "out")

    def __init__(self, future: Future[dict[int, bytes | BookieError]], count: int) -> None:
        self.future = future
        self.out: dict[int, bytes | BookieError] = {}
        self._left = count
        self._lock = threading.Lock()

    def put(self, ledger_id: int, value: bytes | BookieError) -> None:
        with self._lock:
            self.out[ledger_id] = value
            self._left -= 1
            last = self._left == 0
        if not last:
            return
        values = list(self.out.values())
        if values and all(isinstance(v, BookieError) and v.status == "UNAVAILABLE" for v in values):
            self.future.set_exception(values[0])  # type: ignore[arg-type]
        else:
            self.future.set_result(self.out)


class _Slot:
    """A future-like target for one ledger of a gathered listing (no concurrent Future per ledger)."""

    __slots__ = ("_done", "gather", "ledger_id")

    def __init__(self, gather: _Gather, ledger_id: int) -> None:
        self.gather = gather
        self.ledger_id = ledger_id
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, value: bytes) -> None:
        if not self._done:
            self._done = True
            self.gather.put(self.ledger_id, value)

    def set_exception(self, exc: BaseException) -> None:
        if not self._done:
            self._done = True
            err = exc if isinstance(exc, BookieError) else BookieError("EIO", str(exc))
            self.gather.put(self.ledger_id, err)


class RequestClient:
    """The v3 operations, request building and response completion, independent of the transport.

    Subclasses provide `_transmit(data, txn, pending)` (send one serialized Request) and `close`.
    """

    def __init__(self, bookie_id: str, target: str, *, tls: TlsConfig | None = None,
                 connect_timeout_s: float = 5.0, request_timeout_s: float = 10.0,
                 batch_listing: bool = False) -> None:
        self.bookie_id = bookie_id
        self.target = target
        self.tls = tls
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self.batch_listing = batch_listing
        """The bookie advertised bkaudit's batch listing (op 1000); never sent otherwise."""
        self._lock = threading.Lock()
        self._txn = itertools.count(1)
        self._closed = False
        self.last_heard = float("-inf")
        """time.monotonic() when the bookie last sent a frame, answers to timed-out requests included."""

    @property
    def backlog(self) -> int:
        """Requests that timed out here and are presumably still queued at the bookie (0: none known)."""
        return 0

    # -- operations ------------------------------------------------------------------------------------------
    def add_entry(self, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, *,
                  recovery: bool = False) -> Future[None]:
        req, txn = self._request(pb.ADD_ENTRY, recovery)
        a = req.addRequest
        a.ledgerId = ledger_id
        a.entryId = entry_id
        a.masterKey = master_key
        a.body = body
        if recovery:
            a.flag = _RECOVERY_ADD
        return self._send(req, txn, pb.ADD_ENTRY, ledger_id, entry_id)

    def read_entry(self, ledger_id: int, entry_id: int, *, fence: bool = False,
                   master_key: bytes | None = None, high_priority: bool = False) -> Future[bytes]:
        """The stored entry bytes (entry_id -1: the bookie's last entry). `fence` needs the master key."""
        if not (fence or high_priority) and master_key is None:
            txn = next(self._txn)
            fut: Future[bytes] = Future()
            self._transmit(read_entry_request(txn, ledger_id, entry_id), txn,
                           _Pending(pb.READ_ENTRY, fut, ledger_id, entry_id))
            return fut
        req, txn = self._request(pb.READ_ENTRY, high_priority or fence)
        r = req.readRequest
        r.ledgerId = ledger_id
        r.entryId = entry_id
        if master_key is not None:
            r.masterKey = master_key
        if fence:
            r.flag = _FENCE
        return self._send(req, txn, pb.READ_ENTRY, ledger_id, entry_id)

    def read_lac(self, ledger_id: int) -> Future[ReadLacResult]:
        req, txn = self._request(pb.READ_LAC, False)
        req.readLacRequest.ledgerId = ledger_id
        return self._send(req, txn, pb.READ_LAC, ledger_id, None)

    def write_lac(self, ledger_id: int, lac: int, master_key: bytes, body: bytes) -> Future[None]:
        req, txn = self._request(pb.WRITE_LAC, False)
        w = req.writeLacRequest
        w.ledgerId = ledger_id
        w.lac = lac
        w.masterKey = master_key
        w.body = body
        return self._send(req, txn, pb.WRITE_LAC, ledger_id, None)

    def get_bookie_info(self) -> Future[BookieInfo]:
        req, txn = self._request(pb.GET_BOOKIE_INFO, False)
        req.getBookieInfoRequest.requested = _BOTH_DISK_FLAGS
        return self._send(req, txn, pb.GET_BOOKIE_INFO, None, None)

    def get_list_of_entries(self, ledger_id: int) -> Future[bytes]:
        """AvailabilityOfEntriesOfLedger bytes; an unknown ledger fails with BookieError("ENOLEDGER")."""
        txn = next(self._txn)
        fut: Future[bytes] = Future()
        self._transmit(list_request(txn, ledger_id), txn, _Pending(_LIST_ONE, fut, ledger_id, None))
        return fut

    def get_list_of_entries_batch(self, ledger_ids: Sequence[int]) -> Future[dict[int, bytes | BookieError]]:
        """Availability bytes (or that ledger's BookieError) for every id.

        One batch message (op 1000) to a bookie that advertised it; otherwise one standard
        GET_LIST_OF_ENTRIES_OF_LEDGER per ledger, pipelined, gathered into the same dict.
        """
        fut: Future[dict[int, bytes | BookieError]] = Future()
        if self.batch_listing:
            self._batch_round(list(ledger_ids), {}, fut)
            return fut
        ids = list(dict.fromkeys(ledger_ids))
        if not ids:
            fut.set_result({})
            return fut
        gather = _Gather(fut, len(ids))
        items = []
        for ledger_id in ids:
            txn = next(self._txn)
            items.append((list_request(txn, ledger_id), txn,
                          _Pending(_LIST_ONE, _Slot(gather, ledger_id), ledger_id, None)))
        self._transmit_many(items)
        return fut

    def _batch_round(self, ledger_ids: list[int], out: dict[int, bytes | BookieError],
                     result: Future[dict[int, bytes | BookieError]]) -> None:
        """One op-1000 call; ledgers answered ETOOMANYREQUESTS (did not fit the frame) go in the next."""
        req, txn = self._request(pb.GET_LIST_OF_ENTRIES_OF_LEDGERS, False)
        req.getListOfEntriesOfLedgersRequest.ledgerId.extend(ledger_ids)
        call = self._send(req, txn, pb.GET_LIST_OF_ENTRIES_OF_LEDGERS, None, None)

        def answered(done: Future[dict[int, bytes | BookieError]]) -> None:
            try:
                answers = done.result()
            except BaseException as exc:  # the whole call failed: so does the listing (as one call would)
                result.set_exception(exc)
                return
            out.update(answers)
            again = [lid for lid in dict.fromkeys(ledger_ids)
                     if isinstance(answers.get(lid), BookieError)
                     and answers[lid].status == "ETOOMANYREQUESTS"]  # type: ignore[union-attr]
            if again and len(again) < len(answers):
                self._batch_round(again, out, result)
            else:
                result.set_result(out)

        call.add_done_callback(answered)

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> RequestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.bookie_id!r}, {self.target!r})"

    # -- plumbing --------------------------------------------------------------------------------------------
    def _request(self, operation: int, high_priority: bool) -> tuple[pb.Request, int]:
        txn = next(self._txn)
        req = pb.Request()
        h = req.header
        h.version = _V3
        h.operation = operation  # type: ignore[assignment]
        h.txnId = txn
        if high_priority:
            h.priority = HIGH_PRIORITY
        return req, txn

    def _send(self, req: pb.Request, txn: int, kind: int, ledger_id: int | None,
              entry_id: int | None) -> Future[Any]:
        fut: Future[Any] = Future()
        self._transmit(req.SerializeToString(), txn, _Pending(kind, fut, ledger_id, entry_id))
        return fut

    def _transmit(self, data: bytes, txn: int, p: _Pending) -> None:
        raise NotImplementedError

    def _transmit_many(self, items: list[tuple[bytes, int, _Pending]]) -> None:
        for data, txn, p in items:
            self._transmit(data, txn, p)

    def _fail_all(self, pending: dict[int, _Pending], reason: str) -> None:
        if pending:
            log.info("connection to bookie %s (%s) broke: %s; failing %d requests", self.bookie_id,
                     self.target, reason, len(pending))
        for p in pending.values():
            if not p.future.done():
                p.future.set_exception(self._error("UNAVAILABLE", reason, p))

    def _timeout(self, p: _Pending) -> None:
        if not p.future.done():
            p.future.set_exception(
                self._error("UNAVAILABLE", f"no response within {self.request_timeout_s:g}s", p))

    def _error(self, status: str, message: str, p: _Pending) -> BookieError:
        if status == "EFENCED":
            return FencedError(bookie_id=self.bookie_id, ledger_id=p.ledger_id, entry_id=p.entry_id)
        return BookieError(status, message, bookie_id=self.bookie_id, ledger_id=p.ledger_id,
                           entry_id=p.entry_id)

    def _complete(self, p: _Pending, resp: pb.Response) -> None:
        fut = p.future
        if fut.done():
            return
        status = resp.status
        if status != _EOK:
            fut.set_exception(self._error(_STATUS_NAME.get(status, str(status)), "", p))
            return
        kind = p.kind
        try:
            if kind == _LIST_ONE:
                fut.set_result(resp.getListOfEntriesOfLedgerResponse.availabilityOfEntriesOfLedger)
            elif kind == pb.ADD_ENTRY or kind == pb.WRITE_LAC:
                fut.set_result(None)
            elif kind == pb.READ_ENTRY:
                fut.set_result(resp.readResponse.body)
            elif kind == pb.READ_LAC:
                r = resp.readLacResponse
                fut.set_result(ReadLacResult(r.lacBody if r.HasField("lacBody") else None,
                                             r.lastEntryBody if r.HasField("lastEntryBody") else None))
            elif kind == pb.GET_BOOKIE_INFO:
                i = resp.getBookieInfoResponse
                fut.set_result(BookieInfo(i.totalDiskCapacity, i.freeDiskSpace))
            else:
                fut.set_result(self._batch_result(resp))
        except Exception as exc:  # a malformed response fails one future, not the connection
            if not fut.done():
                fut.set_exception(BookieError("EBADREQ", f"malformed response: {exc}",
                                              bookie_id=self.bookie_id))

    def _batch_result(self, resp: pb.Response) -> dict[int, bytes | BookieError]:
        out: dict[int, bytes | BookieError] = {}
        bookie_id = self.bookie_id
        for item in resp.getListOfEntriesOfLedgersResponse.ledgers:
            if item.status == _EOK:
                out[item.ledgerId] = item.availabilityOfEntriesOfLedger
            else:
                out[item.ledgerId] = BookieError(_STATUS_NAME.get(item.status, str(item.status)),
                                                 bookie_id=bookie_id, ledger_id=item.ledgerId)
        return out


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
        self.pending: dict[int, _Pending] = {}
        self.out: list[bytes] = []
        self.flush_scheduled = False
        self.ready = False
        self.closed = False
        self.transport: asyncio.Transport | None = None
        self.frames = FrameReceiver(client.max_frame_bytes)  # answers are read into their own buffers
        self.expired: dict[int, float] = {}
        """txn -> when it timed out, for requests whose late answer has not arrived (in timeout order)."""
        self._tls_answer: asyncio.Future[int] | None = None
        self.deadlines = _DEADLINES.watch(self)

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
        req.header.version = _V3
        req.header.operation = pb.START_TLS
        req.header.txnId = next(client._txn)
        req.startTLSRequest.SetInParent()
        self._tls_answer = loop.create_future()
        data = req.SerializeToString()
        self.transport.write(_LEN.pack(len(data)) + data)
        status = await asyncio.wait_for(self._tls_answer, client.connect_timeout_s)
        self._tls_answer = None
        if status != _EOK:
            raise ConnectionError(f"bookie refused START_TLS with {_STATUS_NAME.get(status, status)} "
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

    def _transmit(self, data: bytes, txn: int, p: _Pending) -> None:
        self._transmit_many([(data, txn, p)])

    def _transmit_many(self, items: list[tuple[bytes, int, _Pending]]) -> None:
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


class _Deadlines:
    """One timer thread for every client: fails requests still pending at their deadline.

    Requests of one connection share one timeout, so their deadlines grow in send order: each connection keeps
    a FIFO of (deadline, txn) appended without any lock, and this thread pops from its front every TICK_S,
    failing what is still pending past its deadline and dropping what was answered.
    A "stream" is anything with `pending` (txn -> _Pending), `client` (with `_timeout`) and `closed`.
    """

    TICK_S = 0.05
    LATE_FACTOR = 8
    """A timed-out request not answered within this many timeouts more is presumed dropped by the bookie."""

    def __init__(self) -> None:
        self._streams: set[Any] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, stream: Any) -> deque[tuple[float, int]]:
        """Register a stream; returns the FIFO its sender appends (deadline, txn) to."""
        stream.deadlines = deque()
        with self._lock:
            self._streams.add(stream)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="bookie-client-deadlines", daemon=True)
                self._thread.start()
        return stream.deadlines  # type: ignore[no-any-return]

    def add(self, deadline: float, stream: Any, txn: int) -> None:
        fifo = getattr(stream, "deadlines", None)
        if fifo is None:
            fifo = self.watch(stream)
        fifo.append((deadline, txn))

    def _run(self) -> None:
        while True:
            time.sleep(self.TICK_S)
            now = time.monotonic()
            with self._lock:
                streams = list(self._streams)
            for stream in streams:
                fifo, pending = stream.deadlines, stream.pending
                expired = getattr(stream, "expired", None)
                while fifo:
                    deadline, txn = fifo[0]
                    if txn in pending:
                        if deadline > now:
                            break
                        if expired is not None:
                            expired[txn] = now  # before the pop: an answer racing it then finds no pending
                        p = pending.pop(txn, None)
                        if p is not None:
                            stream.client._timeout(p)
                        elif expired is not None:
                            expired.pop(txn, None)  # answered in time after all
                    fifo.popleft()
                if expired:
                    self._forget(expired, now - self.LATE_FACTOR * stream.client.request_timeout_s)
                if stream.closed and not fifo:
                    with self._lock:
                        self._streams.discard(stream)

    @staticmethod
    def _forget(expired: dict[int, float], before: float) -> None:
        """Drop timed-out requests older than `before` (the oldest come first)."""
        while True:
            try:  # the loop thread pops late answers meanwhile: a changed dict ends this tick's pass
                txn, when = next(iter(expired.items()))
            except (StopIteration, RuntimeError):
                return
            if when > before:
                return
            expired.pop(txn, None)


_DEADLINES = _Deadlines()
