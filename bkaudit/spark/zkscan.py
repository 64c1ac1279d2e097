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
