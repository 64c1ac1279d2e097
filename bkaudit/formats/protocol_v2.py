"""BookKeeper's pre-v3 ("v2") wire protocol: fixed binary packets, as BookieProtoEncoding codes them.

Pulsar brokers speak it by default (`bookkeeperUseV2WireProtocol=true`), and a Java bookie serves it on the
same port as v3 (BookieProtoEncoding.RequestDecoder falls back to it per connection). The frame is
BookKeeper's usual 4-byte length; its payload starts with a packet header int (BookieProtocol.PacketHeader):
version in the top byte, opcode in the next, flags in the low 16 bits (version 0: the int is the opcode).

Requests (RequestEnDeCoderPreV3.decode) carry only ADD, READ, AUTH and BATCH_READ; any other opcode, or a
packet too short for its fields, is a decoder exception, upon which a Java bookie closes the connection:
`decode_request` raises FormatError for exactly those. Responses (ResponseEnDeCoderPreV3.encode) are a header
int, an int error code (the v2 codes below, not v3's), ledger id and entry id, then the payload.
Pure bytes in and out; the bookie's processing of these requests is bkaudit.bookie.servicev2.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from bkaudit.errors import FormatError
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb

CURRENT_PROTOCOL_VERSION = 2
LOWEST_COMPAT_PROTOCOL_VERSION = 0
ADDENTRY, READENTRY, AUTH, READ_LAC, WRITE_LAC, GET_BOOKIE_INFO, BATCH_READ_ENTRY = 1, 2, 3, 4, 5, 6, 7
FLAG_DO_FENCING, FLAG_RECOVERY_ADD, FLAG_HIGH_PRIORITY = 0x1, 0x2, 0x4
MASTER_KEY_LENGTH = 20
STATUS: dict[str, int] = {
    "EOK": 0, "ENOLEDGER": 1, "ENOENTRY": 2, "EBADREQ": 100, "EIO": 101, "EUA": 102, "EBADVERSION": 103,
    "EFENCED": 104, "EREADONLY": 105, "ETOOMANYREQUESTS": 106, "EUNKNOWNLEDGERSTATE": 107,
}
"""BookieProtocol's error codes by their (shared) v3 StatusCode names."""
RESPONSE_HEADERS_SIZE = 24
"""Header int, error code, ledger id, entry id (ResponseEnDeCoderPreV3.RESPONSE_HEADERS_SIZE)."""

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_READ = struct.Struct(">qq")
_BATCH = struct.Struct(">qqqiq")
_RESPONSE = struct.Struct(">iiqq")


def packet_header(version: int, opcode: int, flags: int) -> int:
    """PacketHeader.toInt, as a signed 32-bit int."""
    if version == 0:
        return _signed(opcode & 0xFF, 8)
    return _signed(((version & 0xFF) << 24) | ((opcode & 0xFF) << 16) | (flags & 0xFFFF), 32)


def split_header(header: int) -> tuple[int, int, int]:
    """(version, opcode, flags) of a header int, each as the Java byte / short it is read into."""
    version = _signed((header >> 24) & 0xFF, 8)
    if version == 0:
        return 0, _signed(header & 0xFF, 8), 0
    return version, _signed((header >> 16) & 0xFF, 8), _signed(header & 0xFFFF, 16)


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """A decoded v2 request. `body` is the entry of an ADD (ledger and entry ids are read from it, as the
    decoder does) or the AuthMessage of an AUTH; batch reads also carry `request_id`, `max_count`,
    `max_size`."""

    version: int
    opcode: int
    flags: int
    ledger_id: int = -1
    entry_id: int = -1
    master_key: bytes | None = None
    body: bytes = b""
    request_id: int = 0
    max_count: int = 0
    max_size: int = 0

    @property
    def fencing(self) -> bool:
        return bool(self.flags & FLAG_DO_FENCING)

    @property
    def recovery_add(self) -> bool:
        return bool(self.flags & FLAG_RECOVERY_ADD)

    @property
    def high_priority(self) -> bool:
        return bool(self.flags & FLAG_HIGH_PRIORITY)

    @property
    def version_compatible(self) -> bool:
        """PacketProcessorBase.isVersionCompatible: else the answer is EBADVERSION."""
        return LOWEST_COMPAT_PROTOCOL_VERSION <= self.version <= CURRENT_PROTOCOL_VERSION


def decode_request(data: bytes) -> Request:
    """RequestEnDeCoderPreV3.decode; FormatError where it throws (a Java bookie then closes the channel)."""
    try:
        (header,) = _INT.unpack_from(data, 0)
        version, opcode, flags = split_header(header)
        rest = memoryview(data)[4:]
        # a master key follows the fixed fields of a fencing read, only from protocol version 2 on
        keyed = bool(flags & FLAG_DO_FENCING) and version >= 2
        if opcode == ADDENTRY:
            key = _master_key(rest, 0)
            ledger_id, entry_id = _READ.unpack_from(rest, MASTER_KEY_LENGTH)
            return Request(version=version, opcode=opcode, flags=flags, ledger_id=ledger_id,
                           entry_id=entry_id, master_key=key, body=bytes(rest[MASTER_KEY_LENGTH:]))
        if opcode == READENTRY:
            ledger_id, entry_id = _READ.unpack_from(rest, 0)
            return Request(version=version, opcode=opcode, flags=flags, ledger_id=ledger_id,
                           entry_id=entry_id, master_key=_master_key(rest, _READ.size) if keyed else None)
        if opcode == BATCH_READ_ENTRY:
            ledger_id, entry_id, request_id, max_count, max_size = _BATCH.unpack_from(rest, 0)
            return Request(version=version, opcode=opcode, flags=flags, ledger_id=ledger_id,
                           entry_id=entry_id, master_key=_master_key(rest, _BATCH.size) if keyed else None,
                           request_id=request_id, max_count=max_count, max_size=max_size)
        if opcode == AUTH:
            message = pb.AuthMessage()
            message.MergeFromString(bytes(rest))
            if not message.IsInitialized():  # AuthMessage.Builder.build() throws
                raise FormatError("AUTH message without plugin name or payload", field="authMessage")
            return Request(version=version, opcode=opcode, flags=flags, body=bytes(rest))
    except (struct.error, DecodeError) as exc:
        raise FormatError(f"truncated or undecodable v2 request ({len(data)} bytes): {exc}") from None
    raise FormatError(f"v2 request with unknown op code {opcode}", field="opCode")


def _master_key(data: memoryview, offset: int) -> bytes:
    if len(data) < offset + MASTER_KEY_LENGTH:
        raise struct.error(f"no {MASTER_KEY_LENGTH}-byte master key at {offset}")
    return bytes(data[offset : offset + MASTER_KEY_LENGTH])


def response(req: Request, status: str, data: bytes = b"") -> bytes:
    """An ADD or READ response payload (without the frame length): headers, then `data` (a read's entry).

    Ledger and entry ids are the request's; the version is the request's too (ResponseBuilder).
    """
    head = _RESPONSE.pack(packet_header(req.version, req.opcode, 0), STATUS[status], req.ledger_id,
                          req.entry_id)
    return head + data if data else head


def batch_read_response(req: Request, status: str, entries: Sequence[bytes] = ()) -> bytes:
    """A BATCH_READ_ENTRY response payload: headers, the request id, then each entry as an int length and its
    bytes (ResponseEnDeCoderPreV3.encode, BatchedReadResponse)."""
    parts = [response(req, status), _LONG.pack(req.request_id)]
    for entry in entries:
        parts += (_INT.pack(len(entry)), entry)
    return b"".join(parts)


BATCH_READ_OVERHEAD = RESPONSE_HEADERS_SIZE + 8 + 4
"""What BatchedReadEntryProcessor counts before the entries: headers, request id and the frame length."""
BATCH_ENTRY_OVERHEAD = 4
"""Each entry's length int."""


def auth_response(auth_message: bytes) -> bytes:
    """The answer to AUTH: header (CURRENT_PROTOCOL_VERSION, AUTH) and the serialized AuthMessage."""
    return _INT.pack(packet_header(CURRENT_PROTOCOL_VERSION, AUTH, 0)) + auth_message
