"""BookKeeper's own framing (uint32 big-endian length + protobuf bytes), used to coalesce messages.

Python gRPC costs ~0.1-0.2 ms of CPU per stream message on each side, which would cap a bookie at a few
thousand requests per second. The framed method therefore carries, in each gRPC message, a run of
BookKeeper v3 frames exactly as BookKeeper writes them on its TCP connections
(shared/spec/bookkeeper-formats.md section 4): senders coalesce whatever is queued into one message, so the
per-message cost is shared by many requests.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

from bkaudit.errors import FormatError

_LEN = struct.Struct(">I")
MAX_FRAME_BYTES = 256 * 1024 * 1024
COALESCE_BYTES = 4 * 1024 * 1024
"""Stop adding frames to one gRPC message beyond this many bytes (keeps messages well under the limit)."""


def frame(data: bytes) -> bytes:
    return _LEN.pack(len(data)) + data


def join(messages: Iterable[bytes]) -> bytes:
    """Frame and concatenate protobuf messages into one payload."""
    pack = _LEN.pack
    return b"".join(pack(len(m)) + m for m in messages)


def split(payload: bytes) -> Iterator[bytes]:
    """The protobuf messages of a framed payload, in order; FormatError at the first broken frame."""
    view = memoryview(payload)
    offset, end = 0, len(payload)
    unpack = _LEN.unpack_from
    while offset < end:
        if end - offset < 4:
            raise FormatError("truncated frame length", field="length", offset=offset)
        (size,) = unpack(view, offset)
        offset += 4
        if size > end - offset:
            raise FormatError(f"frame of {size} bytes, only {end - offset} left", field="length",
                              offset=offset - 4)
        yield bytes(view[offset : offset + size])
        offset += size
