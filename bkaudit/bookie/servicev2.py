"""The bookie's pre-v3 ("v2") protocol: ADD, READ (fencing too), BATCH_READ and AUTH, on the same storage.

Pulsar brokers write and read with it by default (`bookkeeperUseV2WireProtocol=true`). A Java bookie serves
it on its v3 port: BookieProtoEncoding.RequestDecoder decodes a connection as v3 until a frame fails to parse,
then as v2 for good (bkaudit.bookie.nativeserver keeps that per-connection switch). What each request does is
BookieRequestProcessor's v2 branch and its processors:

- every request passes PacketProcessorBase.isVersionCompatible (versions 0 to 2), else EBADVERSION;
- ADD (WriteEntryProcessor): EREADONLY unless high priority while only the disk made the bookie read-only;
  the entry is stored under the ids in its body (the decoder reads them there), FLAG_RECOVERY_ADD writes to
  a fenced ledger, and the answer carries the same ids;
- READ (ReadEntryProcessor): FLAG_DO_FENCING fences first and needs the master key (EUA without one); entry
  -1 is the last entry; no maxLAC in v2;
- BATCH_READ (BatchedReadEntryProcessor): consecutive entries from the first, at most `max_count` (<= 0: no
  limit) and, past the first, while the response frame stays within min(max_size, maxBatchReadSize = 5 MiB);
  a missing first entry is the error, a later one ends the batch;
- AUTH: answered with the AuthDisabledPlugin and an empty payload, as BookKeeper's default auth provider.

READ_LAC, WRITE_LAC, GET_BOOKIE_INFO and anything else do not exist in v2 (the decoder throws and the channel
is closed); Java clients in v2 mode send those as v3 frames, which a v2 connection can no longer read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from bkaudit.errors import BookieError, FormatError
from bkaudit.formats import protocol_v2 as v2
from bkaudit.formats.entry import HEADER_SIZE
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb

if TYPE_CHECKING:
    from bkaudit.bookie.service import BookieService

log = logging.getLogger(__name__)

Reply = Callable[[bytes], None]
MAX_BATCH_READ_BYTES = 5 * 1024 * 1024
"""ServerConfiguration's maxBatchReadSize default: a batch read's response never grows beyond it (bar its
first entry)."""
_AUTH_ANSWER = pb.AuthMessage(authPluginName="AuthDisabledPlugin", payload=b"").SerializeToString()
_NO_LIMIT = 2**31 - 1


class V2Processor:
    """Answers v2 requests for one BookieService (its storage, mode, read threads and in-flight bound)."""

    def __init__(self, service: BookieService) -> None:
        self.service = service

    def dispatch(self, data: bytes, reply: Reply, *, authenticated: bool = True) -> None:
        """Handle one v2 frame; `reply` gets the answer's bytes once. FormatError where a Java bookie closes
        the connection: bytes its v2 decoder cannot read, or (`authenticated` False, `[bookie] require_tls`
        before the handshake) anything but ADD and READ, which AuthHandler answers EUA."""
        req = v2.decode_request(data)
        if not authenticated:
            if req.opcode not in (v2.ADDENTRY, v2.READENTRY):
                raise FormatError(f"v2 op code {req.opcode} on a channel not authenticated yet")
            reply(v2.response(req, "EUA"))
            return
        if req.opcode == v2.AUTH:
            reply(v2.auth_response(_AUTH_ANSWER))
            return
        done = self.service.begin(reply)
        try:
            self._process(req, done)
        except Exception:  # a bug must cost one request, never the stream or the bookie
            log.exception("v2 request %s failed", req)
            done(_error(req, "EIO"))

    def _process(self, req: v2.Request, done: Reply) -> None:
        if not req.version_compatible:
            done(_error(req, "EBADVERSION"))
        elif self.service.overloaded:
            done(_error(req, "ETOOMANYREQUESTS"))
        elif req.opcode == v2.ADDENTRY:
            self._add(req, done)
        elif req.fencing:
            self._fence_then_read(req, done)
        else:
            self.service.submit_read(self._read, req, done)

    def _add(self, req: v2.Request, done: Reply) -> None:
        mode = self.service.mode
        if mode.readonly and not (req.high_priority and mode.high_priority_writes()):
            done(_error(req, "EREADONLY"))
            return
        if len(req.body) < HEADER_SIZE or req.entry_id < 0 or req.ledger_id < 0:
            done(_error(req, "EBADREQ"))  # ledger storage cannot read the entry's header: EBADREQ
            return
        assert req.master_key is not None
        self.service.storage.submit_add(req.ledger_id, req.entry_id, req.master_key, req.body,
                                        req.recovery_add, lambda status: done(v2.response(req, status)))

    def _fence_then_read(self, req: v2.Request, done: Reply) -> None:
        if req.master_key is None:  # "Password not provided, Not safe to fence"
            done(_error(req, "EUA"))
            return

        def fenced(status: str) -> None:
            if status == "EOK":
                self.service.submit_read(self._read, req, done)
            else:
                done(_error(req, status))

        self.service.storage.submit_fence(req.ledger_id, req.master_key, fenced)

    def _read(self, req: v2.Request, done: Reply) -> None:
        storage = self.service.storage
        try:
            if req.opcode == v2.READENTRY:
                done(v2.response(req, "EOK", storage.read_entry(req.ledger_id, req.entry_id)))
                return
            done(v2.batch_read_response(req, "EOK", self._batch(req)))
        except BookieError as exc:
            done(_error(req, exc.status if exc.status in v2.STATUS else "EIO"))
        except Exception:
            log.exception("v2 read of ledger %s entry %s failed", req.ledger_id, req.entry_id)
            done(_error(req, "EIO"))

    def _batch(self, req: v2.Request) -> list[bytes]:
        """BatchedReadEntryProcessor.readData: the first entry always, the next ones while they fit."""
        storage = self.service.storage
        count = req.max_count if req.max_count > 0 else _NO_LIMIT
        max_size = min(req.max_size, MAX_BATCH_READ_BYTES)
        size = v2.BATCH_READ_OVERHEAD
        entries: list[bytes] = []
        for i in range(count):
            try:
                entry = storage.read_entry(req.ledger_id, req.entry_id + i)
            except BookieError:
                if not entries:
                    raise
                break
            size += len(entry) + v2.BATCH_ENTRY_OVERHEAD
            if entries and size > max_size:
                break
            entries.append(entry)
        return entries


def _error(req: v2.Request, status: str) -> bytes:
    """ResponseBuilder.buildErrorResponse: an ADD, READ or BATCH_READ answer without data."""
    if req.opcode == v2.BATCH_READ_ENTRY:
        return v2.batch_read_response(req, status)
    return v2.response(req, status)
