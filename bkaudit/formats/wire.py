"""Protobuf wire-format primitives for bytes we assemble by hand instead of through generated classes."""

from __future__ import annotations


def varint(value: int) -> bytes:
    """Protobuf base-128 varint (negative int64 values as their 64-bit two's complement)."""
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
