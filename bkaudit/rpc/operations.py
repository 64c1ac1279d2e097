"""The BookKeeper v3 operations of a bookie client: requests built, responses completed, any transport.

RequestClient is what the native (bkaudit.rpc.client) and gRPC (bkaudit.rpc.grpcclient) transports share:
which Request each call sends, how each Response resolves its future, how a listing is gathered (one batch
call, or one request per ledger). A transport only moves serialized frames (`_transmit`).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from bkaudit.errors import BookieError, FencedError
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.formats.wire import varint
from bkaudit.rpc.tls import TlsConfig

# the logger a client's connection messages have always carried (bkaudit.rpc.client's)
log = logging.getLogger("bkaudit.rpc.client")

HIGH_PRIORITY = 100
V3 = pb.VERSION_THREE
EOK = pb.EOK
STATUS_NAME = {v: k for k, v in pb.StatusCode.items()}
_FENCE = pb.ReadRequest.FENCE_LEDGER
_RECOVERY_ADD = pb.AddRequest.RECOVERY_ADD
_BOTH_DISK_FLAGS = pb.GetBookieInfoRequest.TOTAL_DISK_CAPACITY | pb.GetBookieInfoRequest.FREE_DISK_SPACE
_LIST_ONE = pb.GET_LIST_OF_ENTRIES_OF_LEDGER
_LIST_HEADER = bytes([0x08, V3, 0x10, _LIST_ONE, 0x18])  # version, operation, then the txnId varint
_LIST_FIELD = b"\xe2\x06"  # Request.getListOfEntriesOfLedgerRequest (field 108, length-delimited)
_READ_HEADER = bytes([0x08, V3, 0x10, pb.READ_ENTRY, 0x18])
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


class Pending:
    """A request in flight: what answers it (`kind`), the future it resolves, the ids its errors name."""

    __slots__ = ("entry_id", "future", "kind", "ledger_id")

    def __init__(self, kind: int, future: Any, ledger_id: int | None, entry_id: int | None) -> None:
        self.kind = kind
        self.future = future
        self.ledger_id = ledger_id
        self.entry_id = entry_id


def list_request(txn: int, ledger_id: int) -> bytes:
    """The serialized GET_LIST_OF_ENTRIES_OF_LEDGER Request, assembled by hand (the listing hot path).

    Byte-identical to protobuf's serialization of the same Request (checked in tests/rpc/test_rpc_native.py).
    """
    header = _LIST_HEADER + varint(txn)
    sub = b"\x08" + varint(ledger_id)
    return b"\x0a" + bytes([len(header)]) + header + _LIST_FIELD + bytes([len(sub)]) + sub


def read_entry_request(txn: int, ledger_id: int, entry_id: int) -> bytes:
    """The serialized plain READ_ENTRY Request (no fencing, master key or priority), assembled by hand:
    the read-evidence hot path sends one per entry. Byte-identical to protobuf's serialization (checked in
    tests/rpc/test_rpc_native.py)."""
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
                           Pending(pb.READ_ENTRY, fut, ledger_id, entry_id))
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
        self._transmit(list_request(txn, ledger_id), txn, Pending(_LIST_ONE, fut, ledger_id, None))
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
                          Pending(_LIST_ONE, _Slot(gather, ledger_id), ledger_id, None)))
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
        h.version = V3
        h.operation = operation  # type: ignore[assignment]
        h.txnId = txn
        if high_priority:
            h.priority = HIGH_PRIORITY
        return req, txn

    def _send(self, req: pb.Request, txn: int, kind: int, ledger_id: int | None,
              entry_id: int | None) -> Future[Any]:
        fut: Future[Any] = Future()
        self._transmit(req.SerializeToString(), txn, Pending(kind, fut, ledger_id, entry_id))
        return fut

    def _transmit(self, data: bytes, txn: int, p: Pending) -> None:
        raise NotImplementedError

    def _transmit_many(self, items: list[tuple[bytes, int, Pending]]) -> None:
        for data, txn, p in items:
            self._transmit(data, txn, p)

    def _fail_all(self, pending: dict[int, Pending], reason: str) -> None:
        if pending:
            log.info("connection to bookie %s (%s) broke: %s; failing %d requests", self.bookie_id,
                     self.target, reason, len(pending))
        for p in pending.values():
            if not p.future.done():
                p.future.set_exception(self._error("UNAVAILABLE", reason, p))

    def _timeout(self, p: Pending) -> None:
        if not p.future.done():
            p.future.set_exception(
                self._error("UNAVAILABLE", f"no response within {self.request_timeout_s:g}s", p))

    def _error(self, status: str, message: str, p: Pending) -> BookieError:
        if status == "EFENCED":
            return FencedError(bookie_id=self.bookie_id, ledger_id=p.ledger_id, entry_id=p.entry_id)
        return BookieError(status, message, bookie_id=self.bookie_id, ledger_id=p.ledger_id,
                           entry_id=p.entry_id)

    def _complete(self, p: Pending, resp: pb.Response) -> None:
        fut = p.future
        if fut.done():
            return
        status = resp.status
        if status != EOK:
            fut.set_exception(self._error(STATUS_NAME.get(status, str(status)), "", p))
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
            if item.status == EOK:
                out[item.ledgerId] = item.availabilityOfEntriesOfLedger
            else:
                out[item.ledgerId] = BookieError(STATUS_NAME.get(item.status, str(item.status)),
                                                 bookie_id=bookie_id, ledger_id=item.ledgerId)
        return out
