"""BookKeeper's framing: a uint32 big-endian length, then that many protobuf bytes (a v3 Request/Response).

This is what BookKeeper writes on its TCP connections (BookieProtoEncoding, read back with
`LengthFieldBasedFrameDecoder(maxFrameSize, 0, 4, 0, 4)`; shared/spec/bookkeeper-formats.md section 4). The
native transport uses `Frames` to cut a byte stream into messages; the gRPC transport packs runs of frames
into one gRPC message (`join`/`split`) so its per-message cost is shared by many requests.

The frame limit is Netty's: that decoder adds the 4-byte length field to the length it reads before comparing
with `maxFrameSize` (lengthFieldEndOffset), so the largest message a Java peer accepts is `maxFrameSize - 4`
bytes (5,242,876 by default). `max_frame_bytes` here means the same thing, prefix included, on both ends.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

from bkaudit.errors import FormatError

_LEN = struct.Struct(">I")
LENGTH_PREFIX = 4
DEFAULT_MAX_FRAME_BYTES = 5 * 1024 * 1024
"""BookKeeper's nettyMaxFrameSizeBytes default (AbstractConfiguration.DEFAULT_NETTY_MAX_FRAME_SIZE)."""


def max_payload_bytes(max_frame_bytes: int) -> int:
    """The largest message a peer with this frame limit accepts: the limit counts the length prefix."""
    return max_frame_bytes - LENGTH_PREFIX


DEFAULT_MAX_PAYLOAD_BYTES = max_payload_bytes(DEFAULT_MAX_FRAME_BYTES)
"""5,242,876: the largest Request or Response a default-configured Java bookie or client takes."""
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


def _too_long(size: int, max_frame_bytes: int) -> FormatError:
    return FormatError(f"frame of {size + LENGTH_PREFIX} bytes (length {size}) exceeds the maximum frame "
                       f"size of {max_frame_bytes} bytes", field="length")


class Frames:
    """Incremental decoder of a byte stream into frames, refusing frames above `max_frame_bytes` (prefix
    included, as Netty's LengthFieldBasedFrameDecoder counts).

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
        limit = max_payload_bytes(self.max_frame_bytes)
        error: FormatError | None = None
        with memoryview(src) as view:  # one copy per frame (the view is released before `buf` is resized)
            while end - offset >= 4:
                (size,) = unpack(view, offset)
                if size > limit:
                    error = _too_long(size, self.max_frame_bytes)
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


class FrameReceiver:
    """`Frames` for an `asyncio.BufferedProtocol`: the socket is read straight into the receiver's buffers.

    Small frames are cut out of one fixed scratch buffer as bytes; a frame of `direct_bytes` or more (a batch
    listing answer is megabytes) is read into a buffer the receiver keeps and reuses, and handed out as a
    memoryview of it: its bytes cross user space once, and no megabyte buffer is allocated (and page-faulted
    in) per frame. That view is valid until the next `get_buffer`: parse it before returning to the loop.
    The buffer grows to the largest frame seen (at most `max_frame_bytes`). The same limit applies as in
    `Frames`: a frame above `max_frame_bytes`, its length prefix included, raises FormatError.
    """

    __slots__ = (
        "_big", "_end", "_got", "_scratch", "_spare", "_start", "_view", "direct_bytes", "max_frame_bytes",
    )

    def __init__(
        self,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        *,
        scratch_bytes: int = 256 * 1024,
        direct_bytes: int = 64 * 1024,
    ) -> None:
        if not 4 < direct_bytes <= scratch_bytes // 2:
            raise ValueError("direct_bytes must be above 4 and at most half of scratch_bytes")
        self.max_frame_bytes = max_frame_bytes
        self.direct_bytes = direct_bytes
        self._scratch = bytearray(scratch_bytes)  # never resized: `_view` and the handed-out views stay valid
        self._view = memoryview(self._scratch)
        self._start = self._end = 0  # unread bytes of the scratch buffer
        self._big: memoryview | None = None  # the large frame being received, and how much of it arrived
        self._got = 0
        self._spare = bytearray()  # never resized (views of it may be alive): replaced when too small

    @property
    def partial(self) -> int:
        """Bytes of an incomplete frame received so far (non-zero at end of stream: a truncated frame)."""
        return self._end - self._start + (4 + self._got if self._big is not None else 0)

    def get_buffer(self) -> memoryview:
        """Where the next read goes: the rest of the large frame, or the free tail of the scratch buffer."""
        if self._big is not None:
            return self._big[self._got :]
        view = self._view
        if len(view) - self._end < self.direct_bytes:  # make room: move the unread bytes to the front
            rest = self._end - self._start
            view[:rest] = view[self._start : self._end]
            self._start, self._end = 0, rest
        return view[self._end :]

    def updated(self, nbytes: int) -> list[bytes | memoryview]:
        """`nbytes` arrived in the last `get_buffer`: the frames completed by them."""
        big = self._big
        if big is not None:
            self._got += nbytes
            if self._got < len(big):
                return []
            self._big, self._got = None, 0
            return [big]
        self._end += nbytes
        out: list[bytes | memoryview] = []
        view, start, end = self._view, self._start, self._end
        unpack = _LEN.unpack_from
        while end - start >= 4:
            (size,) = unpack(view, start)
            if size > max_payload_bytes(self.max_frame_bytes):
                self._start = start
                raise _too_long(size, self.max_frame_bytes)
            if end - start - 4 >= size:
                out.append(view[start + 4 : start + 4 + size].tobytes())
                start += 4 + size
            elif size >= self.direct_bytes:  # a large frame: the rest is read straight into its own buffer
                have = end - start - 4
                if len(self._spare) < size:
                    self._spare = bytearray(size)
                self._big = big = memoryview(self._spare)[:size]
                big[:have] = view[start + 4 : end]
                self._got = have
                start = end
                break
            else:
                break
        if start == end:
            start = end = 0
        self._start, self._end = start, end
        return out
