"""How a snapshot splits ZooKeeper's ledger tree into Spark partitions, and how one partition lists it.

BookKeeper's ledger znodes live in a digit hierarchy under the root: `/{2}/{4}/L{4}` (short ids) and
`/{3}/{4}/{4}/{4}/L{4}` (long ids), both present in a `hierarchical` cluster. A *unit* is one directory of
that tree (relative to the root, e.g. `00/0003`); every ledger lies under exactly one unit, so units can be
read independently by different tasks.

Planning (driver, one short ZooKeeper session): start from the top-level dirs and expand one level at a time
while there are fewer units than the partitions need for balance: sequential ids put a whole cluster under
`00` (or `000/0000/0000`), and one unit would mean one task. Units that hold leaves directly are weighed by
their child count (one pipelined `exists` each, no data transferred), then bin-packed onto at most
`max_zk_sessions` partitions, which caps the concurrent ZooKeeper sessions of the whole job.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from bkaudit.zk import paths

SHORT_DEPTH = 3  # dirs + leaf below the root
LONG_DEPTH = 5
SHORT_WIDTHS = (2, 4)  # digits of each directory level
LONG_WIDTHS = (3, 4, 4, 4)
BALANCE_FACTOR = 4  # aim for this many units per partition before packing
MAX_UNITS = 20_000  # never plan more units than this (each costs a stat)
_DIR_WEIGHT = 100  # guessed ledgers per child of a unit that is not a leaf parent


@dataclass(frozen=True)
class Unit:
    """A directory of the ledger tree (relative to the root) and its estimated number of ledgers."""

    path: str
    weight: int = 1

    @property
    def levels_left(self) -> int:
        """Directory levels between this unit and its leaves (1 = its children are ledger znodes)."""
        parts = self.path.split("/")
        return (SHORT_DEPTH if len(parts[0]) == 2 else LONG_DEPTH) - len(parts)


def children_many(zk: Any, parents: list[str], max_in_flight: int = 200) -> Iterator[tuple[str, list[str]]]:
    """(parent, sorted children) with pipelined getChildren; a parent deleted meanwhile has none."""
    from kazoo.exceptions import NoNodeError

    from bkaudit.zk.client import with_retries

    window: deque[tuple[str, Any]] = deque()
    source = iter(parents)
    while True:
        while len(window) < max_in_flight:
            parent = next(source, None)
            if parent is None:
                break
            window.append((parent, zk.get_children_async(parent)))
        if not window:
            return
        parent, result = window.popleft()
        try:
            kids = result.get()
        except NoNodeError:
            kids = []
        except Exception:
            kids = with_retries(
                lambda p=parent: _children_or_empty(zk, p), client=zk, what=f"listing {parent}"
            )
        yield parent, sorted(kids)


def _children_or_empty(zk: Any, parent: str) -> list[str]:
    from kazoo.exceptions import NoNodeError

    try:
        return list(zk.get_children(parent))
    except NoNodeError:
        return []


def _child_counts(zk: Any, znodes: list[str], max_in_flight: int = 200) -> dict[str, int]:
    """numChildren of each znode via pipelined exists (0 when it vanished)."""
    counts: dict[str, int] = {}
    window: deque[tuple[str, Any]] = deque()
    source = iter(znodes)
    while True:
        while len(window) < max_in_flight:
            znode = next(source, None)
            if znode is None:
                break
            window.append((znode, zk.exists_async(znode)))
        if not window:
            return counts
        znode, result = window.popleft()
        try:
            stat = result.get()
        except Exception:
            stat = None
        counts[znode] = int(stat.numChildren) if stat is not None else 0


def plan_units(zk: Any, root: str, partitions: int) -> list[Unit]:
    """Units covering every ledger under `root`, expanded until there are enough to balance `partitions`."""
    from bkaudit.zk.ledgers import ledger_prefixes

    units = [Unit(p) for p in ledger_prefixes(zk, root=root)]
    target = max(1, partitions) * BALANCE_FACTOR
    while len(units) < target:
        expandable = [u for u in units if u.levels_left > 1]
        if not expandable:
            break
        shallowest = max(u.levels_left for u in expandable)
        grow = [u for u in expandable if u.levels_left == shallowest]
        keep = [u for u in units if u not in grow]
        listed = children_many(zk, [f"{root}/{u.path}" for u in grow])
        grown = [
            Unit(f"{parent[len(root) + 1 :]}/{kid}")
            for parent, kids in listed
            for kid in kids
            if _is_dir_name(parent[len(root) + 1 :], kid)
        ]
        if len(keep) + len(grown) > MAX_UNITS:
            break
        units = keep + grown
    counts = _child_counts(zk, [f"{root}/{u.path}" for u in units])
    weighed = []
    for u in units:
        n = counts.get(f"{root}/{u.path}", 0)
        weighed.append(Unit(u.path, max(1, n if u.levels_left == 1 else n * _DIR_WEIGHT)))
    return sorted(weighed, key=lambda u: (len(u.path.split("/")[0]), u.path))


def _is_dir_name(parent: str, name: str) -> bool:
    """Is `name` the next directory level of the hierarchy below `parent` (relative to the root)?"""
    parts = parent.split("/")
    widths = SHORT_WIDTHS if len(parts[0]) == 2 else LONG_WIDTHS
    return len(parts) < len(widths) and len(name) == widths[len(parts)] and name.isdigit() and name.isascii()


def pack(units: Iterable[Unit], partitions: int) -> list[list[str]]:
    """Longest-processing-time bin packing of units onto `partitions` groups; empty groups are dropped."""
    bins: list[tuple[int, int, list[Unit]]] = [(0, i, []) for i in range(max(1, partitions))]
    heapq.heapify(bins)
    for unit in sorted(units, key=lambda u: -u.weight):
        load, i, members = heapq.heappop(bins)
        members.append(unit)
        heapq.heappush(bins, (load + unit.weight, i, members))
    groups = [
        sorted((u.path for u in members), key=lambda p: (len(p.split("/")[0]), p))
        for _, _, members in sorted(bins, key=lambda b: b[1])
    ]
    return [g for g in groups if g]


def iter_ledgers(zk: Any, root: str, units: Iterable[str]) -> Iterator[tuple[int, str]]:
    """(ledger_id, znode path) of every ledger under the units, listing level by level (pipelined).

    Only names of BookKeeper's hierarchy are followed (`\\d{2}/\\d{4}/L\\d{4}` and
    `\\d{3}/\\d{4}/\\d{4}/\\d{4}/L\\d{4}`, as `bkaudit.zk.paths.parse_hierarchy`); the id is assembled from
    the names already matched instead of re-parsing each full path (a measurable cost at a million ledgers).
    """
    for unit in units:
        parts = unit.split("/")
        widths = SHORT_WIDTHS if len(parts[0]) == 2 else LONG_WIDTHS
        level = [(f"{root}/{unit}", "".join(parts))]
        for depth in range(len(parts), len(widths)):
            width = widths[depth]
            kids_of = dict(level)
            level = [
                (f"{p}/{k}", kids_of[p] + k)
                for p, kids in children_many(zk, list(kids_of))
                for k in kids
                if len(k) == width and k.isdigit() and k.isascii()
            ]
        digits_of = dict(level)
        for parent, leaves in children_many(zk, list(digits_of)):
            head = digits_of[parent]
            for leaf in leaves:
                if len(leaf) == 5 and leaf[0] == "L" and leaf[1:].isdigit() and leaf.isascii():
                    ledger_id = int(head + leaf[1:])
                    if ledger_id <= paths.LONG_MAX:
                        yield ledger_id, f"{parent}/{leaf}"


# -- batched reads (ZooKeeper multiRead) ---------------------------------------------------------------------
MULTI_READ_BATCH = 100  # getData ops per multiRead request (keeps responses far below jute.maxbuffer)
_OP_GET_DATA = 4
_OP_ERROR = -1


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
        from kazoo.protocol.serialization import multiheader_struct, write_string

        head = multiheader_struct.pack(_OP_GET_DATA, False, -1)
        out = bytearray()
        for path in self.paths:
            out += head
            out += write_string(path)
            out += b"\x00"  # watch = false
        out += multiheader_struct.pack(-1, True, -1)
        return bytes(out)

    @classmethod
    def deserialize(cls, buf: bytes, offset: int) -> list[Any]:
        """[(data, ZnodeStat) or a kazoo exception instance] in request order."""
        from kazoo.exceptions import EXCEPTIONS
        from kazoo.protocol.serialization import int_struct, multiheader_struct, stat_struct
        from kazoo.protocol.states import ZnodeStat

        results: list[Any] = []
        head, stat_size = multiheader_struct, stat_struct.size
        while True:
            op, done, _ = head.unpack_from(buf, offset)
            offset += head.size
            if done:
                return results
            if op == _OP_GET_DATA:
                size = int_struct.unpack_from(buf, offset)[0]
                offset += 4
                data = bytes(buf[offset : offset + size]) if size >= 0 else b""
                offset += max(size, 0)
                results.append((data, ZnodeStat._make(stat_struct.unpack_from(buf, offset))))
                offset += stat_size
            elif op == _OP_ERROR:
                code = int_struct.unpack_from(buf, offset)[0]
                offset += 4
                results.append(EXCEPTIONS[code]())
            else:
                raise ValueError(f"unexpected multiRead result type {op}")


def _submit(zk: Any, paths: list[str]) -> Any:
    result = zk.handler.async_result()
    chroot = getattr(zk, "chroot", "") or ""
    zk._call(MultiRead([chroot + p for p in paths] if chroot else paths), result)
    return result


def read_batched(
    zk: Any,
    znodes: Iterable[str],
    *,
    batch: int = MULTI_READ_BATCH,
    max_in_flight: int = 1000,
    rate_limiter: Any = None,
    attempts: int = 5,
) -> Iterator[tuple[str, bytes | None, Any]]:
    """(path, data, stat) for every znode via pipelined multiRead batches; (path, None, None) if it is gone.

    At most `max_in_flight` reads are outstanding (max_in_flight // batch requests); the rate limiter is
    charged one token per znode, so reads/s caps mean the same as with single reads. A batch that fails
    transiently is retried with backoff. If the server lacks multiRead (ZooKeeper < 3.6), the scan
    continues with `bkaudit.zk.ledgers.read_many` (one pipelined getData per znode).
    """
    from bkaudit.zk.client import is_transient, with_retries
    from bkaudit.zk.ledgers import read_many

    source = iter(znodes)
    batch = max(1, min(batch, max_in_flight))  # one request never carries more than max_in_flight reads
    requests = max(1, max_in_flight // batch)
    window: deque[tuple[list[str], Any]] = deque()
    proven = False
    while True:
        while len(window) < requests:
            chunk = [p for _, p in zip(range(batch), source, strict=False)]
            if not chunk:
                break
            if rate_limiter is not None:
                rate_limiter.acquire(len(chunk))
            window.append((chunk, _submit(zk, chunk)))
        if not window:
            return
        chunk, pending = window.popleft()
        try:
            results = pending.get()
        except Exception as exc:
            if not proven:  # no multiRead answered yet: the server may not know it; read singly
                rest = [p for c, r in window for p in c]  # in-flight batches are abandoned, re-read singly
                yield from read_many(
                    zk,
                    _chain(chunk, rest, source),
                    max_in_flight=max_in_flight,
                    rate_limiter=rate_limiter,
                    attempts=attempts,
                )
                return
            if not is_transient(exc):
                raise
            results = with_retries(
                lambda c=chunk: _submit(zk, c).get(),
                attempts=attempts,
                client=zk,
                what=f"multiRead of {len(chunk)} znodes",
            )
        proven = True
        yield from _pair(chunk, results)


def _chain(*parts: Iterable[str]) -> Iterator[str]:
    for part in parts:
        yield from part


def _pair(chunk: list[str], results: list[Any]) -> Iterator[tuple[str, bytes | None, Any]]:
    from kazoo.exceptions import NoNodeError

    if len(results) != len(chunk):
        raise ValueError(f"multiRead answered {len(results)} results for {len(chunk)} reads")
    for path, res in zip(chunk, results, strict=True):
        if isinstance(res, NoNodeError):
            yield path, None, None
        elif isinstance(res, Exception):
            raise res
        else:
            yield path, res[0], res[1]
