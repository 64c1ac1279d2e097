"""GrpcBookieClient: the optional gRPC transport, for clusters made only of bkaudit bookies.

The same BookKeeper v3 Request/Response bytes as the native transport (bkaudit.rpc.client), carried on one
bidirectional gRPC stream (`/bkaudit.Bookie/ExchangeFramed`, each gRPC message a run of BookKeeper frames) to
a bkaudit bookie's `bkaudit-grpc` endpoint. A Java bookie does not speak it; `[rpc] transport = "grpc"`
selects it. Kept for its HTTP/2 features (one port through proxies, keepalive pings); see
docs/dependencies.md for the measured comparison with the native transport.

A receiver thread per stream parses responses and resolves futures; the shared timer thread of
bkaudit.rpc.deadlines fails requests that outlive `request_timeout_s`.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Iterator
from queue import Empty, SimpleQueue
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.rpc import framing
from bkaudit.rpc.deadlines import DEADLINES
from bkaudit.rpc.operations import Pending, RequestClient
from bkaudit.rpc.settings import FRAMED_METHOD, MAX_MESSAGE_BYTES, METHOD

log = logging.getLogger(__name__)

_END = object()
_LEN = struct.Struct(">I")


class _Stream:
    """One gRPC call: a sender queue consumed by gRPC, a receiver thread, and the futures awaiting replies."""

    def __init__(self, client: GrpcBookieClient, channel: grpc.Channel) -> None:
        self.client = client
        self.channel = channel
        self.framed = client.framed
        self.queue: SimpleQueue[Any] = SimpleQueue()
        self.pending: dict[int, Pending] = {}
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


class GrpcBookieClient(RequestClient):
    """Requests to one bkaudit bookie over one gRPC stream; thread-safe. `target`: its gRPC endpoint."""

    framed = True
    """Use the framed method (coalesced messages); False sends one request per gRPC message."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("max_frame_bytes", None)
        super().__init__(*args, **kwargs)
        self._stream: _Stream | None = None

    def close(self) -> None:
        """Half-close the stream, fail whatever is still pending, release the channel."""
        with self._lock:
            self._closed = True
            stream, self._stream = self._stream, None
        if stream is not None:
            self._broken(stream, "client closed")
            stream.close()

    def _transmit(self, data: bytes, txn: int, p: Pending) -> None:
        with self._lock:
            if self._closed:
                p.future.set_exception(self._error("UNAVAILABLE", "client closed", p))
                return
            stream = self._stream
            if stream is None or stream.closed:
                try:
                    stream = self._stream = _Stream(self, self._channel())
                except Exception as exc:
                    p.future.set_exception(self._error("UNAVAILABLE", f"cannot open stream: {exc}", p))
                    return
            stream.pending[txn] = p
        DEADLINES.add(time.monotonic() + self.request_timeout_s, stream, txn)
        stream.queue.put(data)

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
        self._fail_all(pending, reason)
