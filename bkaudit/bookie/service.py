"""The bookie's request processing: BookKeeper v3 `Request` bytes in, `Response` bytes out.

Semantics follow BookKeeper's *ProcessorV3 classes (shared/spec/bookkeeper-formats.md section 4): a response
header is {VERSION_THREE, operation, txnId} (PacketProcessorBaseV3.getHeader), the top-level status mirrors
the sub-response's, a wrong protocol version is EBADVERSION, an operation BookieRequestProcessor has no case
for is EBADREQ without a sub-message and with the request's header copied. Each message is parsed here
(`parse_request`: what protobuf-java's parseFrom accepts); bytes that are not a v3 Request are the native
transport's business (a Java bookie's RequestDecoder then reads the connection as v2:
bkaudit.bookie.servicev2) and earn an EBADREQ reply (txnId 0) on the gRPC stream.

Threading: `dispatch` runs on the RPC event loop and never blocks; adds, fences and WriteLac go to the
storage's group-commit queue, reads and batch listings to a small thread pool; completions come back through
the stream's thread-safe `reply`. Requests on one stream therefore complete in any order (the client
correlates by txnId). Work in flight is bounded: beyond `max_pending` a request is answered ETOOMANYREQUESTS
at once.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any

from google.protobuf.message import DecodeError

from bkaudit.bookie.listing import batch_response
from bkaudit.bookie.servicev2 import V2Processor
from bkaudit.bookie.storage import Storage
from bkaudit.errors import BookieError, FormatError
from bkaudit.formats.entry import parse_entry_header
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.formats.wire import length_delimited, varint
from bkaudit.rpc.framing import DEFAULT_MAX_PAYLOAD_BYTES

log = logging.getLogger(__name__)

Reply = Callable[[bytes], None]
Upgrade = Callable[[bytes], None]
"""Transport hook for START_TLS: write this (plaintext) EOK answer, then run the TLS handshake."""
CODE = {name: pb.StatusCode.Value(name) for name in pb.StatusCode.keys()}  # noqa: SIM118
EOK = pb.EOK
HIGH_PRIORITY = 100
_V3 = pb.VERSION_THREE
_ENOLEDGER = varint(pb.ENOLEDGER)
AUTH_PLUGIN = "AuthDisabledPlugin"


class BookieMode:
    """Why the bookie is read-only, if it is: "forced" (--readonly), "disk" (free space low), "shutdown".

    Listeners (registration) are told about every writable <-> read-only transition.
    """

    def __init__(self) -> None:
        self._reasons: set[str] = set()
        self._lock = threading.Lock()
        self._listeners: list[Callable[[bool], None]] = []

    @property
    def readonly(self) -> bool:
        return bool(self._reasons)

    @property
    def reasons(self) -> frozenset[str]:
        return frozenset(self._reasons)

    def high_priority_writes(self) -> bool:
        """BookKeeper's isAvailableForHighPriorityWrites: recovery adds still land while only the disk
        threshold made the bookie read-only (there is room, just not for new ledgers' traffic)."""
        return not (self._reasons - {"disk"})

    def set(self, reason: str, on: bool) -> None:
        with self._lock:
            before = self.readonly
            (self._reasons.add if on else self._reasons.discard)(reason)
            after = self.readonly
            listeners = list(self._listeners)
        if before != after:
            for listener in listeners:
                listener(after)

    def listen(self, listener: Callable[[bool], None], *, assumed: bool | None = None) -> None:
        """Tell `listener` of every later transition. `assumed` is the mode the caller already acted on (the
        registration it made): a transition between that and this call is told now, else it would be lost
        (a bookie drained while it started stayed registered writable)."""
        with self._lock:
            self._listeners.append(listener)
            current = self.readonly
        if assumed is not None and current != assumed:
            listener(current)


class _Workers:
    """A few threads running read jobs from one queue (leaner than a ThreadPoolExecutor: no Future each)."""

    def __init__(self, threads: int) -> None:
        self._queue: SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]] | None] = SimpleQueue()
        self._threads = [threading.Thread(target=self._run, name=f"bookie-read-{i}", daemon=True)
                         for i in range(threads)]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        self._queue.put((fn, args))

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            fn, args = job
            try:
                fn(*args)
            except Exception:
                log.exception("read job failed")

    def shutdown(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(timeout=10)


def parse_request(data: bytes) -> pb.Request | None:
    """The v3 Request in `data`, or None where protobuf-java's parseFrom throws InvalidProtocolBufferException
    (undecodable bytes, or a required field missing anywhere, e.g. an operation outside the enum): then
    BookieProtoEncoding.RequestDecoder decodes the connection as v2 from this frame on."""
    req = pb.Request()
    try:
        req.MergeFromString(data)
    except DecodeError:
        return None
    return req if req.IsInitialized() else None


class BookieService:
    """Processes requests against one Storage; transport-agnostic (see bkaudit.bookie.rpcserver)."""

    def __init__(self, storage: Storage, mode: BookieMode | None = None, *, max_pending: int = 10000,
                 read_threads: int = 4, answer_listing: bool = True,
                 max_response_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> None:
        self.storage = storage
        self.answer_listing = answer_listing
        """False: behave like DbLedgerStorage behind a Java bookie: ENOLEDGER for a ledger it does not hold,
        no answer at all for one it holds."""
        self.max_response_bytes = max_response_bytes
        """No listing answer is larger: the largest message a client's frame decoder accepts
        (nettyMaxFrameSizeBytes - 4, bkaudit.rpc.framing.max_payload_bytes)."""
        self.mode = mode or BookieMode()
        self.max_pending = max_pending
        self._pool = _Workers(read_threads)
        self._inflight = 0
        self._lock = threading.Lock()
        self._handlers: dict[int, Callable[[pb.Request, Reply], None]] = {
            pb.ADD_ENTRY: self._add,
            pb.READ_ENTRY: self._read,
            pb.READ_LAC: self._read_lac,
            pb.WRITE_LAC: self._write_lac,
            pb.GET_BOOKIE_INFO: self._bookie_info,
            pb.GET_LIST_OF_ENTRIES_OF_LEDGER: self._list_entries,
            pb.GET_LIST_OF_ENTRIES_OF_LEDGERS: self._list_entries_batch,
            pb.AUTH: self._auth,
            pb.FORCE_LEDGER: self._force_ledger,
        }
        self.v2 = V2Processor(self)
        """The pre-v3 protocol's ADD / READ / BATCH_READ / AUTH, on the same storage."""

    @property
    def inflight(self) -> int:
        """Requests received and not yet answered (0 once drained)."""
        return self._inflight

    def close(self) -> None:
        self._pool.shutdown()

    def begin(self, reply: Reply) -> Reply:
        """Count a request in flight until its answer (`reply`, wrapped) is given; drain waits for it."""
        with self._lock:
            self._inflight += 1
        return self._counted(reply)

    @property
    def overloaded(self) -> bool:
        """More requests in flight than `max_pending`: answer ETOOMANYREQUESTS."""
        return self._inflight > self.max_pending

    def submit_read(self, fn: Callable[..., None], *args: Any) -> None:
        """Run `fn(*args)` on a read thread (reads never block the event loop)."""
        self._pool.submit(fn, *args)

    # -- entry point -----------------------------------------------------------------------------------------
    def dispatch(self, data: bytes, reply: Reply, *, upgrade: Upgrade | None = None,
                 authenticated: bool = True) -> None:
        """Handle one request message as `serve` does; bytes that are not a Request at all are answered
        EBADREQ (txnId 0), one missing required fields EBADREQ too (the gRPC stream has no v2 to fall back
        to; the native transport parses with `parse_request` and calls `serve` itself)."""
        req = pb.Request()
        try:
            req.MergeFromString(data)
        except DecodeError:
            self.begin(reply)(_undecodable())
            return
        self.serve(req, reply, upgrade=upgrade, authenticated=authenticated)

    def serve(self, req: pb.Request, reply: Reply, *, upgrade: Upgrade | None = None,
              authenticated: bool = True) -> None:
        """Handle one parsed request; `reply` (thread-safe) gets the response bytes exactly once.

        `upgrade` is the transport's START_TLS hook (None: TLS not configured, START_TLS is EBADREQ).
        `authenticated` False (`[bookie] require_tls`, before the handshake): everything but START_TLS is
        EUA, as BookKeeper's AuthHandler answers on a channel its auth provider has not authenticated yet
        (BookKeeper's default provider authenticates every channel at once: plaintext is served).
        """
        if req.header.operation == pb.START_TLS:
            _start_tls(req, reply, upgrade)
            return
        if not authenticated:
            reply(_bare(req, pb.EUA))
            return
        done = self.begin(reply)
        try:
            self._process(req, done)
        except Exception:  # a bug must cost one request, never the stream or the bookie
            log.exception("request %s failed", req.header.txnId)
            done(_response(req, pb.EIO))

    def _counted(self, reply: Reply) -> Reply:
        def done(data: bytes) -> None:
            with self._lock:
                self._inflight -= 1
            reply(data)

        return done

    def _process(self, req: pb.Request, done: Reply) -> None:
        header = req.header
        if not self.answer_listing and header.operation in _LISTING and self._holds_listed(req):
            with self._lock:
                self._inflight -= 1  # dropped unanswered, as DbLedgerStorage's UnsupportedOperationException
            return
        if not req.HasField("header") or not header.HasField("txnId"):
            done(_undecodable(header.txnId))
            return
        handler = self._handlers.get(header.operation) if header.HasField("operation") else None
        if handler is None:  # BookieRequestProcessor's default case: before any processor's version check
            done(_bare(req, pb.EBADREQ))
            return
        if header.version != pb.VERSION_THREE:
            done(_response(req, pb.EBADVERSION))
            return
        if not req.IsInitialized():
            done(_response(req, pb.EBADREQ))
            return
        if self._inflight > self.max_pending:
            done(_response(req, pb.ETOOMANYREQUESTS))
            return
        handler(req, done)

    def _holds_listed(self, req: pb.Request) -> bool:
        """Whether a listing request reaches the storage of a DbLedgerStorage-like bookie, which then throws
        (`answer_listing` off): a Java bookie first looks the ledger up (HandleFactoryImpl.getReadOnlyHandle,
        LedgerDescriptor.createReadOnly: NoLedgerException, answered ENOLEDGER by
        GetListOfEntriesOfLedgerProcessorV3), so only a ledger it holds goes unanswered. The batch listing is
        bkaudit's own and never advertised by such a bookie: always unanswered."""
        if req.header.operation != pb.GET_LIST_OF_ENTRIES_OF_LEDGER:
            return True
        return self.storage.knows(req.getListOfEntriesOfLedgerRequest.ledgerId)

    # -- operations ------------------------------------------------------------------------------------------
    def _add(self, req: pb.Request, done: Reply) -> None:
        add = req.addRequest
        if not req.HasField("addRequest"):
            done(_response(req, pb.EBADREQ))
            return
        high = req.header.priority >= HIGH_PRIORITY
        if self.mode.readonly and not (high and self.mode.high_priority_writes()):
            done(_response(req, pb.EREADONLY))
            return
        body = add.body
        ids = entry_header(body)
        if ids is None or ids[0] < 0 or ids[1] < 0:
            done(_response(req, pb.EBADREQ))  # BookieImpl cannot read the ids (an exception: EBADREQ)
            return
        recovery = add.HasField("flag") and add.flag == pb.AddRequest.RECOVERY_ADD
        # stored under the ids in the body, whatever the request says (BookieImpl.addEntry /
        # recoveryAddEntry read them there); the answer names the request's (WriteEntryProcessorV3)
        self.storage.submit_add(ids[0], ids[1], add.masterKey, body, recovery,
                                lambda status: done(_response(req, CODE[status])))

    def _read(self, req: pb.Request, done: Reply) -> None:
        r = req.readRequest
        if not req.HasField("readRequest") or r.HasField("previousLAC"):
            done(_response(req, pb.EBADREQ))  # long-poll reads are not served by this bookie
            return
        if r.HasField("flag") and r.flag == pb.ReadRequest.FENCE_LEDGER:
            if not r.HasField("masterKey"):
                done(_response(req, pb.EUA))
                return

            def fenced(status: str) -> None:
                if status == "EOK":
                    self._pool.submit(self._read_body, req, done)
                else:
                    done(_response(req, CODE[status]))

            self.storage.submit_fence(r.ledgerId, r.masterKey, fenced)
        else:
            self._pool.submit(self._read_body, req, done)

    def _read_body(self, req: pb.Request, done: Reply) -> None:
        r = req.readRequest
        try:
            body = self.storage.read_entry(r.ledgerId, r.entryId)
        except BookieError as exc:
            done(_response(req, CODE.get(exc.status, pb.EIO)))
        except Exception:
            log.exception("read of ledger %s entry %s failed", r.ledgerId, r.entryId)
            done(_response(req, pb.EIO))
        else:
            fenced = r.HasField("flag") and r.flag == pb.ReadRequest.FENCE_LEDGER
            max_lac = None if fenced else self._max_lac(r.ledgerId, r.entryId, body)
            done(_response(req, EOK, body=body, max_lac=max_lac))

    def _max_lac(self, ledger_id: int, entry_id: int, body: bytes) -> int | None:
        """ReadEntryProcessorV3 answers a read (not a fencing one) with the bookie's LAC for the ledger
        (BookieImpl.readLastAddConfirmed), so a tailing reader sees it advance. Ledger storage keeps the
        highest LAC its entries carried and, without it, takes the last entry's; writers send non-decreasing
        LACs, so that is the last entry's. None (no maxLAC) when it cannot be told: a ledger in limbo, where
        a Java bookie fails the read (getLastAddConfirmed throws DataUnknownException) while bkaudit serves
        the entry it holds (docs/bookie.md)."""
        try:
            last = body if entry_id < 0 else self.storage.read_entry(ledger_id, -1)
        except BookieError:
            return None
        ids = entry_header(last)
        return None if ids is None else ids[2]

    def _read_lac(self, req: pb.Request, done: Reply) -> None:
        self._pool.submit(self._read_lac_body, req, done)

    def _read_lac_body(self, req: pb.Request, done: Reply) -> None:
        """ReadLacProcessorV3: the explicit LAC, then the last entry; each failure sets the status, and
        when neither body was read the answer is ENOENTRY whatever failed (an unknown ledger too). An
        explicit LAC without entries is EIO (reading entry -1 throws NoEntryException, an IOException), the
        LAC body still attached. Limbo stays EUNKNOWNLEDGERSTATE here (a Java bookie overwrites it with
        ENOENTRY, the very "nothing here" limbo exists to avoid; docs/bookie.md)."""
        ledger_id = req.readLacRequest.ledgerId
        try:
            lac_body, last = self.storage.read_lac(ledger_id)
        except BookieError as exc:
            status = CODE.get(exc.status, pb.EIO)
            done(_response(req, pb.ENOENTRY if status == pb.ENOLEDGER else status))
            return
        if lac_body is None and last is None:
            done(_response(req, pb.ENOENTRY))
            return
        status = EOK if last is not None else pb.EIO
        done(_response(req, status, lac_body=lac_body, last_entry=last))

    def _write_lac(self, req: pb.Request, done: Reply) -> None:
        w = req.writeLacRequest
        if self.mode.readonly:
            done(_response(req, pb.EREADONLY))
            return
        if len(w.body) < 8:
            done(_response(req, pb.EBADREQ))  # no ledger id to read (an exception: EBADREQ)
            return
        # the LAC is kept for the ledger its body names (BookieImpl.setExplicitLac reads it there)
        (ledger_id,) = _LEDGER_ID.unpack_from(w.body, 0)
        self.storage.submit_write_lac(ledger_id, w.masterKey, w.body,
                                      lambda status: done(_response(req, CODE[status])))

    def _bookie_info(self, req: pb.Request, done: Reply) -> None:
        requested = req.getBookieInfoRequest.requested
        total, free = self.storage.disk_usage()
        info: dict[str, int] = {}
        if requested & pb.GetBookieInfoRequest.TOTAL_DISK_CAPACITY:
            info["totalDiskCapacity"] = total
        if requested & pb.GetBookieInfoRequest.FREE_DISK_SPACE:
            info["freeDiskSpace"] = free
        done(_response(req, EOK, info=info))

    def _list_entries(self, req: pb.Request, done: Reply) -> None:
        """The listing hot path: answered at once from memory, the response assembled by hand.

        EIO when the storage is lost or when the encoding cannot fit in one frame (a client would have to
        drop the connection to refuse it, as BookKeeper's frame decoder does).
        """
        ledger_id = req.getListOfEntriesOfLedgerRequest.ledgerId
        try:
            availability = self.storage.availability(ledger_id)
        except BookieError as exc:
            done(_response(req, CODE.get(exc.status, pb.EIO)))
            return
        answer = list_response(response_header(req), ledger_id, availability)
        if len(answer) > self.max_response_bytes:
            log.warning("listing of ledger %d is %d bytes, above the %d-byte frame limit: answering EIO",
                        ledger_id, len(answer), self.max_response_bytes)
            answer = _response(req, pb.EIO)
        done(answer)

    def _list_entries_batch(self, req: pb.Request, done: Reply) -> None:
        self._pool.submit(self._list_entries_batch_body, req, done)

    def _list_entries_batch_body(self, req: pb.Request, done: Reply) -> None:
        head = pb.Response(status=EOK)
        head.header.MergeFromString(response_header(req))
        try:
            entries = self.storage.listing_items(req.getListOfEntriesOfLedgersRequest.ledgerId)
        except BookieError as exc:
            done(_response(req, CODE.get(exc.status, pb.EIO)))
            return
        answer = batch_response(head.SerializePartialToString(), entries, max_bytes=self.max_response_bytes)
        if answer is None:
            log.warning("batch listing of %d ledgers cannot fit in %d bytes even without encodings: "
                        "answering ETOOMANYREQUESTS", len(entries), self.max_response_bytes)
            answer = _response(req, pb.ETOOMANYREQUESTS)
        done(answer)

    def _auth(self, req: pb.Request, done: Reply) -> None:
        resp = pb.Response(status=EOK)
        resp.header.CopyFrom(req.header)
        resp.authResponse.authPluginName = AUTH_PLUGIN
        resp.authResponse.payload = b""
        done(resp.SerializePartialToString())

    def _force_ledger(self, req: pb.Request, done: Reply) -> None:
        done(_response(req, EOK))  # every acknowledged add is already durable


def _start_tls(req: pb.Request, reply: Reply, upgrade: Upgrade | None) -> None:
    """BookieRequestProcessor.processStartTLSRequestV3: EOK + startTLSResponse then TLS; no TLS: EBADREQ."""
    resp = pb.Response(status=EOK if upgrade is not None else pb.EBADREQ)
    resp.header.version = pb.VERSION_THREE
    resp.header.operation = pb.START_TLS
    resp.header.txnId = req.header.txnId
    if upgrade is None:
        reply(bytes(resp.SerializePartialToString()))
        return
    resp.startTLSResponse.SetInParent()
    upgrade(bytes(resp.SerializePartialToString()))


# -- response builders ---------------------------------------------------------------------------------------
def list_response(header: bytes, ledger_id: int, availability: bytes | None) -> bytes:
    """The GET_LIST_OF_ENTRIES_OF_LEDGER Response (EOK with the bytes, or ENOLEDGER), assembled by hand.

    `header` is the serialized response header (`response_header`). Byte-identical to `_response`
    (tests/unit/test_bookie_service_wire.py).
    """
    if availability is None:
        sub = b"\x08" + _ENOLEDGER + b"\x10" + varint(ledger_id)
        status = _ENOLEDGER
    else:
        sub = b"\x08\x00\x10" + varint(ledger_id) + length_delimited(b"\x1a", availability)
        status = b"\x00"
    return length_delimited(b"\x0a", header) + b"\x10" + status + length_delimited(b"\xe2\x06", sub)

_LISTING = frozenset({pb.GET_LIST_OF_ENTRIES_OF_LEDGER, pb.GET_LIST_OF_ENTRIES_OF_LEDGERS})
_HEADER_V3 = b"\x08" + varint(_V3) + b"\x10"


def response_header(req: pb.Request) -> bytes:
    """The serialized BKPacketHeader of a processor's answer: {VERSION_THREE, operation, txnId}
    (PacketProcessorBaseV3.getHeader), assembled by hand as protobuf writes it (fields in number order)."""
    return _HEADER_V3 + varint(req.header.operation) + b"\x18" + varint(req.header.txnId)
_LEDGER_ID = struct.Struct(">q")


def entry_header(body: bytes) -> tuple[int, int, int] | None:
    """(ledger id, entry id, LAC) at the head of an entry, as ledger storage reads them; None when the body
    is shorter than an entry header."""
    try:
        ledger_id, entry_id, last_add_confirmed, _ = parse_entry_header(body)
    except FormatError:
        return None
    return ledger_id, entry_id, last_add_confirmed


def _undecodable(txn_id: int = 0) -> bytes:
    """EBADREQ for bytes that are not a Request (the header carries txnId 0 when it could not be read)."""
    resp = pb.Response(status=pb.EBADREQ)
    resp.header.version = pb.VERSION_THREE
    resp.header.txnId = txn_id
    return bytes(resp.SerializePartialToString())


def _bare(req: pb.Request, status: Any) -> bytes:
    resp = pb.Response(status=status)
    resp.header.CopyFrom(req.header)
    return bytes(resp.SerializePartialToString())


def _response(req: pb.Request, status: Any, *, body: bytes | None = None, lac_body: bytes | None = None,
              last_entry: bytes | None = None, availability: bytes | None = None,
              info: dict[str, int] | None = None, max_lac: int | None = None) -> bytes:
    """The Response for `req` with `status` in both the top level and the operation's sub-response.

    Its header is PacketProcessorBaseV3.getHeader's: version 3, the operation, the txnId; nothing else of the
    request's header (priority) is copied.
    """
    resp = pb.Response(status=status)
    op = req.header.operation
    resp.header.version, resp.header.operation, resp.header.txnId = _V3, op, req.header.txnId
    sub: Any
    if op == pb.ADD_ENTRY:
        a = req.addRequest
        sub = resp.addResponse
        sub.status, sub.ledgerId, sub.entryId = status, a.ledgerId, a.entryId
    elif op == pb.READ_ENTRY:
        r = req.readRequest
        sub = resp.readResponse
        sub.status, sub.ledgerId, sub.entryId = status, r.ledgerId, r.entryId
        if body is not None:
            sub.body = body
        if max_lac is not None:
            sub.maxLAC = max_lac
    elif op == pb.READ_LAC:
        sub = resp.readLacResponse
        sub.status, sub.ledgerId = status, req.readLacRequest.ledgerId
        if lac_body is not None:
            sub.lacBody = lac_body
        if last_entry is not None:
            sub.lastEntryBody = last_entry
    elif op == pb.WRITE_LAC:
        sub = resp.writeLacResponse
        sub.status, sub.ledgerId = status, req.writeLacRequest.ledgerId
    elif op == pb.GET_BOOKIE_INFO:
        sub = resp.getBookieInfoResponse
        sub.status = status
        for key, value in (info or {}).items():
            setattr(sub, key, value)
    elif op == pb.GET_LIST_OF_ENTRIES_OF_LEDGER:
        sub = resp.getListOfEntriesOfLedgerResponse
        sub.status, sub.ledgerId = status, req.getListOfEntriesOfLedgerRequest.ledgerId
        if availability is not None:
            sub.availabilityOfEntriesOfLedger = availability
    elif op == pb.GET_LIST_OF_ENTRIES_OF_LEDGERS:
        resp.getListOfEntriesOfLedgersResponse.status = status
    elif op == pb.FORCE_LEDGER:
        sub = resp.forceLedgerResponse
        sub.status, sub.ledgerId = status, req.forceLedgerRequest.ledgerId
    return bytes(resp.SerializePartialToString())
