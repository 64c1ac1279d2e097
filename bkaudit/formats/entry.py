"""BookKeeper's entry format, entry digests and master key (spec section 6), byte-compatible with Java.

An entry, as added and as read back, is `int64 ledgerId | int64 entryId | int64 lastAddConfirmed |
int64 length | digest | payload` (big-endian); the digest covers the 32 header bytes and the payload. The
bookie, the client and the replication worker all go through `DigestManager`, so a corrupt or foreign entry is
caught wherever it is read. The client and bookie call this about 10^4 times a second: keys are precomputed
once per ledger and digests are computed over header and payload without joining them first.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

import google_crc32c

from bkaudit.errors import FormatError
from bkaudit.model.ledger import DigestType

Payload: TypeAlias = bytes | bytearray | memoryview

HEADER_SIZE = 32
"""ledgerId, entryId, lastAddConfirmed, length: four int64."""
LAC_HEADER_SIZE = 16
"""ledgerId, lac: two int64 (the explicit-LAC body of WriteLac / ReadLac)."""

DIGEST_LENGTH: dict[DigestType, int] = {
    DigestType.CRC32: 8,
    DigestType.CRC32C: 4,
    DigestType.MAC: 20,
    DigestType.DUMMY: 0,
}

_HEADER = struct.Struct(">qqqq")
_LAC_HEADER = struct.Struct(">qq")
_CRC32_DIGEST = struct.Struct(">Q")  # java.util.zip.CRC32 value written as a long: upper 4 bytes zero
_CRC32C_DIGEST = struct.Struct(">I")


def master_key(password: bytes) -> bytes:
    """The `masterKey` sent with add / fence / writeLac requests: SHA1("ledger" + password)."""
    return hashlib.sha1(b"ledger" + password).digest()


def mac_key(password: bytes) -> bytes:
    """The HmacSHA1 key of MAC digests: SHA1("mac" + password)."""
    return hashlib.sha1(b"mac" + password).digest()


@dataclass(frozen=True, slots=True)
class Entry:
    """A verified entry: its header fields and payload (`length` is the ledger length including it)."""

    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    length: int
    payload: bytes


def parse_entry_header(data: Payload) -> tuple[int, int, int, int]:
    """(ledger_id, entry_id, lac, length) of an entry, without verifying its digest (for diagnostics)."""
    if len(data) < HEADER_SIZE:
        raise FormatError(
            f"{len(data)} bytes, shorter than the {HEADER_SIZE}-byte entry header", field="header", offset=0
        )
    ledger_id, entry_id, lac, length = _HEADER.unpack_from(data, 0)
    return ledger_id, entry_id, lac, length


def _crc32c_digest(header: bytes, payload: bytes) -> bytes:
    return _CRC32C_DIGEST.pack(google_crc32c.extend(google_crc32c.value(header), payload))


def _crc32_digest(header: bytes, payload: bytes) -> bytes:
    return _CRC32_DIGEST.pack(zlib.crc32(payload, zlib.crc32(header)))


def _no_digest(header: bytes, payload: bytes) -> bytes:
    return b""


class DigestManager:
    """Packages and verifies the entries and explicit LACs of one ledger (BookKeeper's DigestManager)."""

    __slots__ = ("_digest", "_hmac", "digest_length", "digest_type", "ledger_id", "master_key")

    def __init__(self, ledger_id: int, password: bytes, digest_type: DigestType) -> None:
        self.ledger_id = ledger_id
        self.digest_type = digest_type
        self.digest_length = DIGEST_LENGTH[digest_type]
        self.master_key = master_key(password)
        self._hmac = hmac.new(mac_key(password), digestmod=hashlib.sha1)
        digests: dict[DigestType, Callable[[bytes, bytes], bytes]] = {
            DigestType.CRC32C: _crc32c_digest,
            DigestType.CRC32: _crc32_digest,
            DigestType.MAC: self._mac_digest,
            DigestType.DUMMY: _no_digest,
        }
        self._digest = digests[digest_type]

    def __repr__(self) -> str:
        return f"DigestManager(ledger_id={self.ledger_id}, digest_type={self.digest_type.name})"

    def _mac_digest(self, header: bytes, payload: bytes) -> bytes:
        mac = self._hmac.copy()  # the keyed state is precomputed; copying skips re-keying per entry
        mac.update(header)
        mac.update(payload)
        return mac.digest()

    # -- entries ---------------------------------------------------------------------------------------------

    def package(self, entry_id: int, lac: int, length: int, payload: Payload) -> bytes:
        """The entry as sent to bookies: header, digest over header and payload, payload."""
        try:
            header = _HEADER.pack(self.ledger_id, entry_id, lac, length)
        except struct.error as exc:
            fields = f"ledger {self.ledger_id} entry {entry_id} lac {lac} length {length}"
            raise ValueError(f"entry header fields must be int64: {fields}") from exc
        body = payload if isinstance(payload, bytes) else bytes(payload)
        return header + self._digest(header, body) + body  # one copy of the payload

    def verify(self, data: Payload, entry_id: int | None = None) -> Entry:
        """Check length, digest, ledger id and (if given) entry id, in BookKeeper's order; return the entry.

        Any mismatch raises FormatError naming the field, so a corrupt, truncated or foreign entry never
        passes (with DUMMY digests only the ids are checked: that digest type protects nothing).
        """
        raw = data if isinstance(data, bytes) else bytes(data)
        payload_offset = HEADER_SIZE + self.digest_length
        if len(raw) < payload_offset:
            field = "header" if len(raw) < HEADER_SIZE else "digest"
            raise FormatError(
                f"{len(raw)} bytes, shorter than the header and {self.digest_length}-byte "
                f"{self.digest_type.name} digest",
                field=field,
                offset=0 if field == "header" else HEADER_SIZE,
            )
        header = raw[:HEADER_SIZE]
        payload = raw[payload_offset:]
        self._check_digest(header, payload, raw[HEADER_SIZE:payload_offset], HEADER_SIZE)
        ledger_id, actual_entry_id, lac, length = _HEADER.unpack(header)
        self._check_ledger(ledger_id)
        if entry_id is not None and actual_entry_id != entry_id:
            raise FormatError(f"entry id {actual_entry_id}, expected {entry_id}", field="entryId", offset=8)
        return Entry(ledger_id, actual_entry_id, lac, length, payload)

    # -- explicit LAC ----------------------------------------------------------------------------------------

    def package_lac(self, lac: int) -> bytes:
        """The explicit-LAC body (WriteLac / ReadLac): ledger id, lac, digest over those 16 bytes."""
        header = _LAC_HEADER.pack(self.ledger_id, lac)
        return header + self._digest(header, b"")

    def verify_lac(self, data: Payload) -> int:
        """Verify an explicit-LAC body and return the LAC; its length must be exact (Java ignores extras)."""
        raw = data if isinstance(data, bytes) else bytes(data)
        expected_length = LAC_HEADER_SIZE + self.digest_length
        if len(raw) != expected_length:
            raise FormatError(
                f"LAC body of {len(raw)} bytes, expected {expected_length} for {self.digest_type.name}",
                field="lac" if len(raw) < LAC_HEADER_SIZE else "digest",
                offset=0 if len(raw) < LAC_HEADER_SIZE else LAC_HEADER_SIZE,
            )
        header = raw[:LAC_HEADER_SIZE]
        self._check_digest(header, b"", raw[LAC_HEADER_SIZE:], LAC_HEADER_SIZE)
        ledger_id, lac = _LAC_HEADER.unpack(header)
        self._check_ledger(ledger_id)
        return int(lac)

    # -- checks ----------------------------------------------------------------------------------------------

    def _check_digest(self, header: bytes, payload: bytes, received: bytes, offset: int) -> None:
        if not hmac.compare_digest(self._digest(header, payload), received):
            raise FormatError(
                f"{self.digest_type.name} digest mismatch for ledger {self.ledger_id}: "
                "corrupt data or wrong password",
                field="digest",
                offset=offset,
            )

    def _check_ledger(self, ledger_id: int) -> None:
        if ledger_id != self.ledger_id:
            raise FormatError(f"ledger id {ledger_id}, expected {self.ledger_id}", field="ledgerId", offset=0)
