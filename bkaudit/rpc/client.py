"""BookieClient: one bidirectional gRPC stream to one bookie, requests correlated by txnId.

Every call returns a concurrent.futures.Future at once. Callers (ledger client, checker, replication
worker) pipeline thousands of requests, so the hot path is: build the protobuf by attribute assignment,
serialize once, register the future under the client lock, put the bytes on the stream's queue. A
receiver thread per stream parses responses and resolves futures; one module-wide timer thread fails
requests that outlive `request_timeout_s`. No thread is created per call.

Failure model: a non-OK status fails the future with BookieError(status name) (FencedError for EFENCED);
a timeout, a transport error or a broken stream fails with BookieError("UNAVAILABLE"). When the stream
breaks, all its pending futures fail promptly and the next call opens a fresh channel and stream (reconnect).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from bkaudit.errors import BookieError, FencedError
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.rpc import framing
from bkaudit.rpc.settings import FRAMED_METHOD, MAX_MESSAGE_BYTES, METHOD
from bkaudit.rpc.tls import TlsConfig

log = logging.getLogger(__name__)

HIGH_PRIORITY = 100
_V3 = pb.VERSION_THREE
_EOK = pb.EOK
_STATUS_NAME = {v: k for k, v in pb.StatusCode.items()}
_FENCE = pb.ReadRequest.FENCE_LEDGER
_RECOVERY_ADD = pb.AddRequest.RECOVERY_ADD
_BOTH_DISK_FLAGS = pb.GetBookieInfoRequest.TOTAL_DISK_CAPACITY | pb.GetBookieInfoRequest.FREE_DISK_SPACE
_END = object()
_LEN = struct.Struct(">I")


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

    def __init__(self, kind: int, future: Future[Any], ledger_id: int | None, entry_id: int | None) -> None:
        self.kind = kind
        self.future = future
        self.ledger_id = ledger_id
        self.entry_id = entry_id


class _Stream:
    """One gRPC call: a sender queue consumed by gRPC, a receiver thread, and the futures awaiting replies."""

    def __init__(self, client: BookieClient, channel: grpc.Channel) -> None:
        self.client = client
        self.channel = channel
        self.framed = client.framed
        self.queue: SimpleQueue[Any] = SimpleQueue()
        self.pending: dict[int, _Pending] = {}
        self.closed = False
        method = FRAMED_METHOD if self.framed else METHOD
        call = channel.stream_stream(method, request_serializer=None, response_deserializer=None)
        self.call = call(self._coalesce() if self.framed else iter(self.queue.get, _END))
        self.receiver = threading.Thread(target=self._receive, name=f"bookie-client-{client.bookie_id}",
                                         daemon=True)
        self.receiver.start()

    def _coalesce(self) -> Iterator[bytes]:
        """The request stream: everything queued since the last send leaves in one gRPC message."""
        queue = self.queue
        get, get_nowait = queue.get, queue.get_nowait
        pack = _LEN.pack
        while True:
            data = get()
            if data is _END:
                return
            parts = [pack(len(data)), data]
            size = len(data)
            end = False
            while size < framing.COALESCE_BYTES:
                try:
                    data = get_nowait()
                except Empty:
                    break
                if data is _END:
                    end = True
                    break
                parts.append(pack(len(data)))
                parts.append(data)
                size += len(data)
            yield b"".join(parts)
            if end:
                return

    def _receive(self) -> None:
        reason = "stream ended"
        client = self.client
        pending = self.pending
        framed = self.framed
        try:
            for message in self.call:
                for data in framing.split(message) if framed else (message,):
                    resp = pb.Response()
                    try:
                        resp.MergeFromString(data)
                    except DecodeError:
                        log.warning("bookie %s sent an undecodable response", client.bookie_id)
                        continue
                    p = pending.pop(resp.header.txnId, None)
                    if p is not None:
                        client._complete(p, resp)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            reason = f"{getattr(code, 'name', code)}: {exc.details() if hasattr(exc, 'details') else exc}"
        except Exception as exc:  # never leave futures hanging (a broken frame included)
            reason = f"receiver failed: {exc!r}"
        self.client._broken(self, reason)
        self.close()

    def close(self) -> None:
        self.queue.put(_END)
        self.call.cancel()
        self.channel.close()


class BookieClient:
    """Requests to one bookie over one stream; thread-safe. `target` is host:port of its gRPC endpoint."""

    framed = True
    """Use the framed method (coalesced messages); False sends one request per gRPC message."""

    def __init__(self, bookie_id: str, target: str, *, tls: TlsConfig | None = None,
                 connect_timeout_s: float = 5.0, request_timeout_s: float = 10.0) -> None:
        self.bookie_id = bookie_id
        self.target = target
        self.tls = tls
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._lock = threading.Lock()
        self._stream: _Stream | None = None
        self._txn = itertools.count(1)
        self._closed = False

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
        req, txn = self._request(pb.GET_LIST_OF_ENTRIES_OF_LEDGER, False)
        req.getListOfEntriesOfLedgerRequest.ledgerId = ledger_id
        return self._send(req, txn, pb.GET_LIST_OF_ENTRIES_OF_LEDGER, ledger_id, None)

    def get_list_of_entries_batch(self, ledger_ids: Sequence[int]) -> Future[dict[int, bytes | BookieError]]:
        """Batch extension, one message: availability bytes (or that ledger's BookieError) for every id."""
        req, txn = self._request(pb.GET_LIST_OF_ENTRIES_OF_LEDGERS, False)
        req.getListOfEntriesOfLedgersRequest.ledgerId.extend(ledger_ids)
        return self._send(req, txn, pb.GET_LIST_OF_ENTRIES_OF_LEDGERS, None, None)

    def close(self) -> None:
        """Half-close the stream, fail whatever is still pending, release the channel."""
        with self._lock:
            self._closed = True
            stream, self._stream = self._stream, None
        if stream is not None:
            self._broken(stream, "client closed")
            stream.close()

    def __enter__(self) -> BookieClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"BookieClient({self.bookie_id!r}, {self.target!r})"

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
        data = req.SerializeToString()
        fut: Future[Any] = Future()
        p = _Pending(kind, fut, ledger_id, entry_id)
        with self._lock:
            if self._closed:
                fut.set_exception(self._error("UNAVAILABLE", "client closed", p))
                return fut
            stream = self._stream
            if stream is None or stream.closed:
                try:
                    stream = self._stream = _Stream(self, self._channel())
                except Exception as exc:
                    fut.set_exception(self._error("UNAVAILABLE", f"cannot open stream: {exc}", p))
                    return fut
            stream.pending[txn] = p
        _DEADLINES.add(time.monotonic() + self.request_timeout_s, stream, txn)
        stream.queue.put(data)
        return fut

    def _channel(self) -> grpc.Channel:
        connect_ms = int(self.connect_timeout_s * 1000)
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            # a connection attempt (TCP + HTTP/2 handshake) gives up after connect_timeout_s
            ("grpc.min_reconnect_backoff_ms", connect_ms),
            ("grpc.initial_reconnect_backoff_ms", min(connect_ms, 200)),
            ("grpc.max_reconnect_backoff_ms", max(connect_ms, 1000)),
            # notice a dead or frozen bookie on an idle stream
            ("grpc.keepalive_time_ms", 15000),
            ("grpc.keepalive_timeout_ms", 5000),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.enable_retries", 0),
            ("grpc.use_local_subchannel_pool", 1),
        ]
        if self.tls is None:
            return grpc.insecure_channel(self.target, options=options)
        return grpc.secure_channel(self.target, self.tls.credentials(),
                                   options=options + self.tls.channel_options())

    def _broken(self, stream: _Stream, reason: str) -> None:
        """Fail every future of a stream that ended; the next call opens a new one."""
        with self._lock:
            stream.closed = True
            pending, stream.pending = stream.pending, {}
            if self._stream is stream:
                self._stream = None
        if pending:
            log.info("stream to bookie %s (%s) broke: %s; failing %d requests", self.bookie_id, self.target,
                     reason, len(pending))
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
            if kind == pb.ADD_ENTRY or kind == pb.WRITE_LAC:
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
            elif kind == pb.GET_LIST_OF_ENTRIES_OF_LEDGER:
                fut.set_result(resp.getListOfEntriesOfLedgerResponse.availabilityOfEntriesOfLedger)
            else:
                fut.set_result(self._batch_result(resp))
        except Exception as exc:  # a malformed response fails one future, not the receiver
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


class _Deadlines:
    """One timer thread for every client: fails requests still pending at their deadline (lazy heap)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Stream, int]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None

    def add(self, deadline: float, stream: _Stream, txn: int) -> None:
        with self._cv:
            heap = self._heap
            heapq.heappush(heap, (deadline, next(self._seq), stream, txn))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="bookie-client-deadlines", daemon=True)
                self._thread.start()
            elif heap[0][2] is stream and heap[0][3] == txn:  # the new deadline is the earliest
                self._cv.notify()

    def _run(self) -> None:
        while True:
            expired: list[tuple[_Stream, int]] = []
            with self._cv:
                heap = self._heap
                now = time.monotonic()
                while heap and heap[0][0] <= now:
                    _, _, stream, txn = heapq.heappop(heap)
                    expired.append((stream, txn))
                if not expired:
                    self._cv.wait(timeout=(heap[0][0] - now) if heap else None)
                    continue
            for stream, txn in expired:
                p = stream.pending.pop(txn, None)
                if p is not None:
                    stream.client._timeout(p)


_DEADLINES = _Deadlines()
