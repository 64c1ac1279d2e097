"""Batched ZooKeeper reads: getData ops carried by multiRead requests (ZooKeeper >= 3.6), pipelined.

kazoo has no multiRead, so `MultiRead` is a kazoo request of our own, sent through the client's private
`_call` (the same path kazoo's own requests take). `read_chunks` is the scan: chunks of paths in, each
chunk's answers out column-wise (the snapshot's reader and bench/snapshot.py's raw side (a') use it);
`read_batched` yields what `bkaudit.zk.ledgers.read_many` yields, one read at a time, on top of it. Both
fall back to single reads on a server without multiRead.
"""

from __future__ import annotations

import functools
import struct
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.exceptions import EXCEPTIONS, NoNodeError
from kazoo.protocol.serialization import multiheader_struct, stat_struct, write_string
from kazoo.protocol.states import ZnodeStat

from bkaudit.zk.client import is_transient, with_retries
from bkaudit.zk.ledgers import read_many

MULTI_READ_BATCH = 100  # getData ops per multiRead request (keeps responses far below jute.maxbuffer)
_OP_GET_DATA = 4
_OP_ERROR = -1
_HEAD_AND_SIZE = struct.Struct("!iBii")  # MultiHeader (type, done, err) + the int after it
T = TypeVar("T")


class MultiRead(tuple):  # type: ignore[type-arg]
    """ZooKeeper's multiRead (opcode 22, ZooKeeper >= 3.6) of getData ops, as a kazoo request.

    Why: kazoo costs one Python round trip through its connection thread (plus a wake-up syscall) per
    request, which caps a pipelined scan at roughly 8,600 reads/s per client here. One multiRead carries
    `MULTI_READ_BATCH` reads: the same znodes, a fraction of the packets, and ZooKeeper answers each op
    separately (a missing znode is an error for that op only).
    """

    type = 22

    def __new__(cls, paths: list[str]) -> MultiRead:
        return super().__new__(cls, (paths,))

    @property
    def paths(self) -> list[str]:
        return self[0]  # type: ignore[no-any-return]

    def serialize(self) -> bytes:
        head = multiheader_struct.pack(_OP_GET_DATA, False, -1)
        out = bytearray()
        for path in self.paths:
            out += head
            out += write_string(path)
            out += b"\x00"  # watch = false
        out += multiheader_struct.pack(-1, True, -1)
        return bytes(out)

    @classmethod
    def deserialize(cls, buf: bytes, offset: int) -> Answers:
        """The answers column-wise, in request order (see `Answers`)."""
        data: list[Any] = []
        stats: list[Any] = []
        add_data, add_stat = data.append, stats.append
        head, head_size = _HEAD_AND_SIZE.unpack_from, _HEAD_AND_SIZE.size
        stat, stat_size = stat_struct.unpack_from, stat_struct.size
        last = len(buf) - head_size  # the closing header (9 bytes) is shorter than head + data length
        failed = 0
        while offset <= last:
            op, done, _, size = head(buf, offset)  # `size`: getData's data length, or an error op's code
            offset += head_size
            if done:
                break
            if op == _OP_GET_DATA:
                if size > 0:
                    add_data(buf[offset : offset + size])
                    offset += size
                else:
                    add_data(b"")
                add_stat(stat(buf, offset))
                offset += stat_size
            elif op == _OP_ERROR:
                add_data(EXCEPTIONS[size]())
                add_stat(None)
                failed += 1
            else:
                raise ValueError(f"unexpected multiRead result type {op}")
        return Answers(data, stats, failed)


@dataclass(frozen=True, slots=True)
class Answers:
    """One multiRead's answers column-wise, in request order: `data[i]` the znode's bytes and `stats[i]` its
    Stat as a plain tuple (ZnodeStat's field order). As `MultiRead.deserialize` returns it, a failed op has
    its kazoo exception in `data[i]` and None in `stats[i]` (`failed` of them); `read_chunks` hands out
    only answers whose failures were NoNode, as None in both (`gone` of them).

    Columns rather than a tuple per read: the snapshot consumes a chunk at a time
    (`bkaudit.tables.rows.LedgerBatchBuilder.add_chunk`), with no Python object per read beyond its bytes.
    """

    data: list[Any]
    stats: list[Any]
    failed: int = 0
    gone: int = 0

    def __len__(self) -> int:
        return len(self.data)


def _read_chunk(zk: Any, paths: list[str]) -> Any:
    """One multiRead, waited for (the retried unit)."""
    return _submit(zk, paths).get()


def _submit(zk: Any, paths: list[str]) -> Any:
    result = zk.handler.async_result()
    chroot = getattr(zk, "chroot", "") or ""
    zk._call(MultiRead([chroot + p for p in paths] if chroot else paths), result)
    return result


def read_chunks(
    zk: Any,
    chunks: Iterable[tuple[T, list[str]]],
    *,
    max_in_flight: int = 1000,
    rate_limiter: Any = None,
    attempts: int = 5,
) -> Iterator[tuple[T, list[str], Answers]]:
    """(tag, paths, answers) for every (tag, paths) chunk, in order, each chunk one pipelined multiRead.

    `tag` is the caller's (the snapshot passes the chunk's ledger ids). At most `max_in_flight` reads are
    outstanding; the rate limiter is charged one token per znode, so reads/s caps mean the same as with
    single reads. A znode that is gone is None in both columns; any other failed op raises. A chunk that
    fails transiently is retried with backoff. If the server lacks multiRead (ZooKeeper < 3.6), the scan
    continues with `bkaudit.zk.ledgers.read_many` (one pipelined getData per znode), chunk by chunk.
    """
    source = iter(chunks)
    window: deque[tuple[T, list[str], Any]] = deque()
    outstanding = 0
    proven = False
    nxt = next(source, None)
    while True:
        while nxt is not None and (not window or outstanding + len(nxt[1]) <= max_in_flight):
            tag, paths = nxt
            if rate_limiter is not None:
                rate_limiter.acquire(len(paths))
            window.append((tag, paths, _submit(zk, paths)))
            outstanding += len(paths)
            nxt = next(source, None)
        if not window:
            return
        tag, paths, pending = window.popleft()
        outstanding -= len(paths)
        try:
            answers = pending.get()
        except Exception as exc:
            if not proven:  # no multiRead answered yet: the server may not know it; read singly
                rest = [(t, p) for t, p, _ in window]  # in-flight chunks are abandoned, re-read singly
                ahead = [nxt] if nxt is not None else []
                for t, p in _chain([(tag, paths)], rest, ahead, source):
                    yield t, p, _single_reads(zk, p, max_in_flight, rate_limiter, attempts)
                return
            if not is_transient(exc):
                raise
            answers = with_retries(
                functools.partial(_read_chunk, zk, paths),
                attempts=attempts,
                client=zk,
                what=f"multiRead of {len(paths)} znodes",
            )
        proven = True
        yield tag, paths, _checked(paths, answers)


def read_batched(
    zk: Any,
    znodes: Iterable[str],
    *,
    batch: int = MULTI_READ_BATCH,
    max_in_flight: int = 1000,
    rate_limiter: Any = None,
    attempts: int = 5,
) -> Iterator[tuple[str, bytes | None, Any]]:
    """(path, data, ZnodeStat) for every znode, read by `read_chunks` in multiRead batches of `batch`;
    (path, None, None) if it is gone. For callers that want one read at a time."""
    source = iter(znodes)
    batch = max(1, min(batch, max_in_flight))  # one request never carries more than max_in_flight reads

    def chunks() -> Iterator[tuple[None, list[str]]]:
        while chunk := [p for _, p in zip(range(batch), source, strict=False)]:
            yield None, chunk

    make = tuple.__new__  # ZnodeStat._make without its per-call lookups
    for _, paths, answers in read_chunks(
        zk, chunks(), max_in_flight=max_in_flight, rate_limiter=rate_limiter, attempts=attempts
    ):
        for path, data, stat in zip(paths, answers.data, answers.stats, strict=True):
            yield path, data, make(ZnodeStat, stat) if stat is not None else None


def _checked(paths: list[str], answers: Answers) -> Answers:
    if len(answers) != len(paths):
        raise ValueError(f"multiRead answered {len(answers)} results for {len(paths)} reads")
    if not answers.failed:
        return answers
    data = list(answers.data)
    for i, res in enumerate(data):
        if isinstance(res, NoNodeError):
            data[i] = None
        elif isinstance(res, Exception):
            raise res
    return Answers(data, answers.stats, 0, answers.failed)


def _single_reads(zk: Any, paths: list[str], max_in_flight: int, rate_limiter: Any, attempts: int) -> Answers:
    """One chunk read with single getData (the fallback), as the Answers a multiRead would give (read_many
    answers retried reads late, so its answers are put back in request order)."""
    got = {
        path: (data, stat)
        for path, data, stat in read_many(
            zk, paths, max_in_flight=max_in_flight, rate_limiter=rate_limiter, attempts=attempts
        )
    }
    data: list[Any] = []
    stats: list[Any] = []
    for path in paths:
        d, stat = got[path]
        data.append((d or b"") if stat is not None else None)  # kazoo gives None for null data
        stats.append(tuple(stat) if stat is not None else None)
    return Answers(data, stats, 0, stats.count(None))


def _chain(*parts: Iterable[T]) -> Iterator[T]:
    for part in parts:
        yield from part
