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

The answers' bytes are bkaudit.bookie.responses', the read-only state bkaudit.bookie.mode's.
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
from bkaudit.bookie.mode import BookieMode
from bkaudit.bookie.responses import (
    CODE,
    EOK,
    Reply,
    Upgrade,
    bare,
    entry_header,
    list_response,
    response,
    response_header,
    start_tls,
    undecodable,
)
from bkaudit.bookie.servicev2 import V2Processor
from bkaudit.bookie.storage import Storage
from bkaudit.errors import BookieError
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.rpc.framing import DEFAULT_MAX_PAYLOAD_BYTES

log = logging.getLogger(__name__)

HIGH_PRIORITY = 100
AUTH_PLUGIN = "AuthDisabledPlugin"
_LISTING = frozenset({pb.GET_LIST_OF_ENTRIES_OF_LEDGER, pb.GET_LIST_OF_ENTRIES_OF_LEDGERS})
_LEDGER_ID = struct.Struct(">q")


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
            self.begin(reply)(undecodable())
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
            start_tls(req, reply, upgrade)
            return
        if not authenticated:
            reply(bare(req, pb.EUA))
            return
        done = self.begin(reply)
        try:
            self._process(req, done)
        except Exception:  # a bug must cost one request, never the stream or the bookie
            log.exception("request %s failed", req.header.txnId)
            done(response(req, pb.EIO))

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
            done(undecodable(header.txnId))
            return
        handler = self._handlers.get(header.operation) if header.HasField("operation") else None
        if handler is None:  # BookieRequestProcessor's default case: before any processor's version check
            done(bare(req, pb.EBADREQ))
            return
        if header.version != pb.VERSION_THREE:
            done(response(req, pb.EBADVERSION))
            return
        if not req.IsInitialized():
            done(response(req, pb.EBADREQ))
            return
        if self._inflight > self.max_pending:
            done(response(req, pb.ETOOMANYREQUESTS))
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
            done(response(req, pb.EBADREQ))
            return
        high = req.header.priority >= HIGH_PRIORITY
        if self.mode.readonly and not (high and self.mode.high_priority_writes()):
            done(response(req, pb.EREADONLY))
            return
        body = add.body
        ids = entry_header(body)
        if ids is None or ids[0] < 0 or ids[1] < 0:
            done(response(req, pb.EBADREQ))  # BookieImpl cannot read the ids (an exception: EBADREQ)
            return
        recovery = add.HasField("flag") and add.flag == pb.AddRequest.RECOVERY_ADD
        # stored under the ids in the body, whatever the request says (BookieImpl.addEntry /
        # recoveryAddEntry read them there); the answer names the request's (WriteEntryProcessorV3)
        self.storage.submit_add(ids[0], ids[1], add.masterKey, body, recovery,
                                lambda status: done(response(req, CODE[status])))

    def _read(self, req: pb.Request, done: Reply) -> None:
        r = req.readRequest
        if not req.HasField("readRequest") or r.HasField("previousLAC"):
            done(response(req, pb.EBADREQ))  # long-poll reads are not served by this bookie
            return
        if r.HasField("flag") and r.flag == pb.ReadRequest.FENCE_LEDGER:
            if not r.HasField("masterKey"):
                done(response(req, pb.EUA))
                return

            def fenced(status: str) -> None:
                if status == "EOK":
                    self._pool.submit(self._read_body, req, done)
                else:
                    done(response(req, CODE[status]))

            self.storage.submit_fence(r.ledgerId, r.masterKey, fenced)
        else:
            self._pool.submit(self._read_body, req, done)

    def _read_body(self, req: pb.Request, done: Reply) -> None:
        r = req.readRequest
        try:
            body = self.storage.read_entry(r.ledgerId, r.entryId)
        except BookieError as exc:
            done(response(req, CODE.get(exc.status, pb.EIO)))
        except Exception:
            log.exception("read of ledger %s entry %s failed", r.ledgerId, r.entryId)
            done(response(req, pb.EIO))
        else:
            fenced = r.HasField("flag") and r.flag == pb.ReadRequest.FENCE_LEDGER
            max_lac = None if fenced else self._max_lac(r.ledgerId, r.entryId, body)
            done(response(req, EOK, body=body, max_lac=max_lac))

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
            done(response(req, pb.ENOENTRY if status == pb.ENOLEDGER else status))
            return
        if lac_body is None and last is None:
            done(response(req, pb.ENOENTRY))
            return
        status = EOK if last is not None else pb.EIO
        done(response(req, status, lac_body=lac_body, last_entry=last))

    def _write_lac(self, req: pb.Request, done: Reply) -> None:
        w = req.writeLacRequest
        if self.mode.readonly:
            done(response(req, pb.EREADONLY))
            return
        if len(w.body) < 8:
            done(response(req, pb.EBADREQ))  # no ledger id to read (an exception: EBADREQ)
            return
        # the LAC is kept for the ledger its body names (BookieImpl.setExplicitLac reads it there)
        (ledger_id,) = _LEDGER_ID.unpack_from(w.body, 0)
        self.storage.submit_write_lac(ledger_id, w.masterKey, w.body,
                                      lambda status: done(response(req, CODE[status])))

    def _bookie_info(self, req: pb.Request, done: Reply) -> None:
        requested = req.getBookieInfoRequest.requested
        total, free = self.storage.disk_usage()
        info: dict[str, int] = {}
        if requested & pb.GetBookieInfoRequest.TOTAL_DISK_CAPACITY:
            info["totalDiskCapacity"] = total
        if requested & pb.GetBookieInfoRequest.FREE_DISK_SPACE:
            info["freeDiskSpace"] = free
        done(response(req, EOK, info=info))

    def _list_entries(self, req: pb.Request, done: Reply) -> None:
        """The listing hot path: answered at once from memory, the response assembled by hand.

        EIO when the storage is lost or when the encoding cannot fit in one frame (a client would have to
        drop the connection to refuse it, as BookKeeper's frame decoder does).
        """
        ledger_id = req.getListOfEntriesOfLedgerRequest.ledgerId
        try:
            availability = self.storage.availability(ledger_id)
        except BookieError as exc:
            done(response(req, CODE.get(exc.status, pb.EIO)))
            return
        answer = list_response(response_header(req), ledger_id, availability)
        if len(answer) > self.max_response_bytes:
            log.warning("listing of ledger %d is %d bytes, above the %d-byte frame limit: answering EIO",
                        ledger_id, len(answer), self.max_response_bytes)
            answer = response(req, pb.EIO)
        done(answer)

    def _list_entries_batch(self, req: pb.Request, done: Reply) -> None:
        self._pool.submit(self._list_entries_batch_body, req, done)

    def _list_entries_batch_body(self, req: pb.Request, done: Reply) -> None:
        head = pb.Response(status=EOK)
        head.header.MergeFromString(response_header(req))
        try:
            entries = self.storage.listing_items(req.getListOfEntriesOfLedgersRequest.ledgerId)
        except BookieError as exc:
            done(response(req, CODE.get(exc.status, pb.EIO)))
            return
        answer = batch_response(head.SerializePartialToString(), entries, max_bytes=self.max_response_bytes)
        if answer is None:
            log.warning("batch listing of %d ledgers cannot fit in %d bytes even without encodings: "
                        "answering ETOOMANYREQUESTS", len(entries), self.max_response_bytes)
            answer = response(req, pb.ETOOMANYREQUESTS)
        done(answer)

    def _auth(self, req: pb.Request, done: Reply) -> None:
        resp = pb.Response(status=EOK)
        resp.header.CopyFrom(req.header)
        resp.authResponse.authPluginName = AUTH_PLUGIN
        resp.authResponse.payload = b""
        done(resp.SerializePartialToString())

    def _force_ledger(self, req: pb.Request, done: Reply) -> None:
        done(response(req, EOK))  # every acknowledged add is already durable
