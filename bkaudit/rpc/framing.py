"""BookKeeper's framing: a uint32 big-endian length, then that many protobuf bytes (a v3 Request/Response).

This is what BookKeeper writes on its TCP connections (BookieProtoEncoding, read back with
`LengthFieldBasedFrameDecoder(maxFrameSize, 0, 4, 0, 4)`; shared/spec/bookkeeper-formats.md section 4). The
native transport uses `Frames` to cut a byte stream into messages; the gRPC transport packs runs of frames
into one gRPC message (`join`/`split`) so its per-message cost is shared by many requests.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

from bkaudit.errors import FormatError

_LEN = struct.Struct(">I")
DEFAULT_MAX_FRAME_BYTES = 5 * 1024 * 1024
"""BookKeeper's nettyMaxFrameSizeBytes default (AbstractConfiguration.DEFAULT_NETTY_MAX_FRAME_SIZE)."""
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


class Frames:
    """Incremental decoder of a byte stream into frames, refusing frames above `max_frame_bytes`.

    `feed` returns the complete frames received so far; a frame length above the limit raises FormatError
    (the peer is not speaking this protocol, or is broken: the connection must be closed). `partial` says how
    many bytes of an incomplete frame are buffered (non-zero at end of stream means a truncated frame).
    """

    __slots__ = ("_buf", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()

    @property
    def partial(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        if buf:
            buf += data
            src: bytes | bytearray = buf
        else:  # nothing pending: cut frames straight out of the received bytes
            src = data
        out: list[bytes] = []
        offset, end = 0, len(src)
        unpack = _LEN.unpack_from
        limit = self.max_frame_bytes
        error: FormatError | None = None
        with memoryview(src) as view:  # one copy per frame (the view is released before `buf` is resized)
            while end - offset >= 4:
                (size,) = unpack(view, offset)
                if size > limit:
                    error = FormatError(f"frame length {size} exceeds the maximum frame size of {limit} "
                                        "bytes", field="length")
                    break
                if end - offset - 4 < size:
                    break
                out.append(view[offset + 4 : offset + 4 + size].tobytes())
                offset += 4 + size
        if src is buf:
            if offset:
                del buf[:offset]
        elif offset < end:
            buf += memoryview(data)[offset:]
        if error is not None:
            raise error
        return out

    def take_rest(self) -> bytes:
        """Bytes buffered beyond the complete frames (e.g. what follows a START_TLS exchange)."""
        rest, self._buf = bytes(self._buf), bytearray()
        return rest
