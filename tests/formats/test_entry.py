"""bkaudit.formats.entry against the spec's verified vectors and independent digest implementations.

The reference digests below use a bitwise CRC32C, zlib and hmac directly on the concatenated bytes, so they
share nothing with the code under test but the standard library.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkaudit.errors import FormatError
from bkaudit.formats.entry import DIGEST_LENGTH, DigestManager, Entry, master_key, parse_entry_header
from bkaudit.model.ledger import DigestType
from tests import shared_vectors

VECTOR = shared_vectors.load("entry_digest.json")["entry"]
FAST = settings(max_examples=100, deadline=None)
int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
CHECKED_TYPES = [DigestType.CRC32, DigestType.CRC32C, DigestType.MAC]


def crc32c_bitwise(data: bytes) -> int:
    """Castagnoli CRC, reflected polynomial 0x82F63B78, init and xorout 0xFFFFFFFF."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def reference_digest(digest_type: DigestType, password: bytes, covered: bytes) -> bytes:
    if digest_type is DigestType.CRC32C:
        return struct.pack(">I", crc32c_bitwise(covered))
    if digest_type is DigestType.CRC32:
        return struct.pack(">q", zlib.crc32(covered))
    if digest_type is DigestType.MAC:
        return hmac.new(hashlib.sha1(b"mac" + password).digest(), covered, "sha1").digest()
    return b""


# -- vectors -------------------------------------------------------------------------------------------------

VECTOR_DIGESTS = {
    DigestType.CRC32C: VECTOR["digest_hex"]["CRC32C"],
    DigestType.CRC32: VECTOR["digest_hex"]["CRC32"],
    DigestType.MAC: VECTOR["digest_hex"]["MAC(password=pwd)"],
    DigestType.DUMMY: "",
}


@pytest.mark.parametrize("digest_type", list(DigestType), ids=lambda t: t.name)
def test_entry_vector(digest_type: DigestType) -> None:
    manager = DigestManager(VECTOR["ledger_id"], b"pwd", digest_type)
    payload = VECTOR["payload"].encode()
    packaged = manager.package(VECTOR["entry_id"], VECTOR["lac"], VECTOR["length"], payload)
    assert packaged.hex() == VECTOR["header_hex"] + VECTOR_DIGESTS[digest_type] + payload.hex()
    header = bytes.fromhex(VECTOR["header_hex"])
    assert reference_digest(digest_type, b"pwd", header + payload).hex() == VECTOR_DIGESTS[digest_type]
    entry = manager.verify(packaged, VECTOR["entry_id"])
    assert entry == Entry(VECTOR["ledger_id"], VECTOR["entry_id"], VECTOR["lac"], VECTOR["length"], payload)
    assert parse_entry_header(packaged) == (1, 0, -1, 5)


def test_master_key_vectors() -> None:
    assert master_key(b"pwd").hex() == VECTOR["master_key_hex(password=pwd)"]
    assert master_key(b"").hex() == "850bf1071c5e3d8c24235676f8816ae0cbe2f14f"
    assert DigestManager(1, b"pwd", DigestType.CRC32C).master_key == master_key(b"pwd")


def test_lac_vector() -> None:
    manager = DigestManager(1, b"", DigestType.CRC32C)
    assert manager.package_lac(4).hex() == "0000000000000001000000000000000471d4dbbd"
    assert manager.verify_lac(bytes.fromhex("0000000000000001000000000000000471d4dbbd")) == 4


def test_digest_lengths() -> None:
    assert DIGEST_LENGTH == {
        DigestType.CRC32: 8,
        DigestType.CRC32C: 4,
        DigestType.MAC: 20,
        DigestType.DUMMY: 0,
    }


# -- round trips against the reference -----------------------------------------------------------------------


@FAST
@given(
    st.sampled_from(list(DigestType)),
    st.integers(min_value=0, max_value=2**63 - 1),
    int64,
    int64,
    int64,
    st.binary(max_size=300),
    st.binary(max_size=20),
)
def test_package_matches_reference_and_round_trips(
    digest_type: DigestType, ledger_id: int, entry_id: int, lac: int, length: int, payload: bytes, pwd: bytes
) -> None:
    manager = DigestManager(ledger_id, pwd, digest_type)
    packaged = manager.package(entry_id, lac, length, payload)
    header = struct.pack(">qqqq", ledger_id, entry_id, lac, length)
    assert packaged == header + reference_digest(digest_type, pwd, header + payload) + payload
    assert manager.verify(packaged, entry_id) == Entry(ledger_id, entry_id, lac, length, payload)
    assert manager.verify(bytearray(packaged)).payload == payload
    assert manager.package(entry_id, lac, length, memoryview(bytearray(payload))) == packaged


@FAST
@given(st.sampled_from(list(DigestType)), st.integers(0, 2**63 - 1), int64, st.binary(max_size=20))
def test_lac_round_trip(digest_type: DigestType, ledger_id: int, lac: int, pwd: bytes) -> None:
    manager = DigestManager(ledger_id, pwd, digest_type)
    body = manager.package_lac(lac)
    header = struct.pack(">qq", ledger_id, lac)
    assert body == header + reference_digest(digest_type, pwd, header)
    assert manager.verify_lac(body) == lac
    assert manager.verify_lac(memoryview(body)) == lac


# -- corruption and foreign data -----------------------------------------------------------------------------


@FAST
@given(st.sampled_from(CHECKED_TYPES), st.binary(max_size=64), st.data())
def test_any_bit_flip_is_detected(digest_type: DigestType, payload: bytes, data: st.DataObject) -> None:
    manager = DigestManager(7, b"secret", digest_type)
    packaged = bytearray(manager.package(3, 2, 100, payload))
    bit = data.draw(st.integers(0, len(packaged) * 8 - 1))
    packaged[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(FormatError) as info:
        manager.verify(bytes(packaged), 3)
    assert info.value.field == "digest"


@FAST
@given(st.sampled_from(CHECKED_TYPES), st.integers(-(2**63), 2**63 - 1), st.data())
def test_any_bit_flip_in_lac_is_detected(digest_type: DigestType, lac: int, data: st.DataObject) -> None:
    manager = DigestManager(7, b"secret", digest_type)
    body = bytearray(manager.package_lac(lac))
    bit = data.draw(st.integers(0, len(body) * 8 - 1))
    body[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(FormatError):
        manager.verify_lac(bytes(body))


@pytest.mark.parametrize("digest_type", list(DigestType), ids=lambda t: t.name)
def test_foreign_ledger_is_rejected(digest_type: DigestType) -> None:
    packaged = DigestManager(1, b"pwd", digest_type).package(0, -1, 5, b"hello")
    with pytest.raises(FormatError) as info:
        DigestManager(2, b"pwd", digest_type).verify(packaged, 0)
    assert (info.value.field, info.value.offset) == ("ledgerId", 0)
    lac = DigestManager(1, b"pwd", digest_type).package_lac(9)
    with pytest.raises(FormatError) as info:
        DigestManager(2, b"pwd", digest_type).verify_lac(lac)
    assert info.value.field == "ledgerId"


@pytest.mark.parametrize("digest_type", list(DigestType), ids=lambda t: t.name)
def test_wrong_entry_id_is_rejected(digest_type: DigestType) -> None:
    manager = DigestManager(1, b"pwd", digest_type)
    packaged = manager.package(5, 4, 50, b"payload")
    with pytest.raises(FormatError) as info:
        manager.verify(packaged, 6)
    assert (info.value.field, info.value.offset) == ("entryId", 8)
    assert manager.verify(packaged).entry_id == 5  # entry id not checked when not given


def test_wrong_password_with_mac_is_rejected() -> None:
    packaged = DigestManager(1, b"right", DigestType.MAC).package(0, -1, 1, b"x")
    with pytest.raises(FormatError) as info:
        DigestManager(1, b"wrong", DigestType.MAC).verify(packaged, 0)
    assert (info.value.field, info.value.offset) == ("digest", 32)
    lac = DigestManager(1, b"right", DigestType.MAC).package_lac(0)
    with pytest.raises(FormatError):
        DigestManager(1, b"wrong", DigestType.MAC).verify_lac(lac)


def test_digest_checked_before_ids() -> None:
    """A corrupt entry reports the digest even when its ids are also wrong (BookKeeper's order)."""
    packaged = bytearray(DigestManager(1, b"", DigestType.CRC32C).package(0, -1, 1, b"x"))
    packaged[-1] ^= 0xFF
    with pytest.raises(FormatError) as info:
        DigestManager(2, b"", DigestType.CRC32C).verify(bytes(packaged), 9)
    assert info.value.field == "digest"


@pytest.mark.parametrize("digest_type", list(DigestType), ids=lambda t: t.name)
def test_short_entries_are_rejected(digest_type: DigestType) -> None:
    manager = DigestManager(1, b"pwd", digest_type)
    packaged = manager.package(0, -1, 0, b"")
    assert manager.verify(packaged).payload == b""
    for cut in range(len(packaged)):
        with pytest.raises(FormatError) as info:
            manager.verify(packaged[:cut])
        assert info.value.field == ("header" if cut < 32 else "digest")


@pytest.mark.parametrize("digest_type", list(DigestType), ids=lambda t: t.name)
def test_lac_of_wrong_length_is_rejected(digest_type: DigestType) -> None:
    manager = DigestManager(1, b"pwd", digest_type)
    body = manager.package_lac(3)
    for bad in (body[:-1] if body[16:] else body[:15], body + b"\x00", b""):
        with pytest.raises(FormatError):
            manager.verify_lac(bad)


def test_parse_entry_header_short_input() -> None:
    with pytest.raises(FormatError) as info:
        parse_entry_header(bytes(31))
    assert (info.value.field, info.value.offset) == ("header", 0)
    assert parse_entry_header(bytes.fromhex(VECTOR["header_hex"])) == (1, 0, -1, 5)


def test_package_rejects_out_of_range_header_fields() -> None:
    with pytest.raises(ValueError):
        DigestManager(1, b"", DigestType.CRC32C).package(2**63, 0, 0, b"")


def test_entry_is_frozen() -> None:
    entry = Entry(1, 2, 1, 3, b"abc")
    with pytest.raises(AttributeError):
        entry.payload = b""  # type: ignore[misc]
