"""Protobuf wire-format primitives for bytes we assemble by hand instead of through generated classes."""

from __future__ import annotations

_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


def varint(value: int) -> bytes:
    """Protobuf base-128 varint (negative int64 values as their 64-bit two's complement)."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if 0 <= value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_delimited(tag: bytes, data: bytes) -> bytes:
    """A length-delimited field: its tag bytes, the varint length, the data."""
    return tag + varint(len(data)) + data
