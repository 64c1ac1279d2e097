"""The ZooKeeper store's scan: how a snapshot splits ZooKeeper's ledger tree into Spark partitions (listed
by `zk.ledgers.iter_ledgers`). It knows the tree's path widths, so it lives with the store, not the jobs.

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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bkaudit.zk.client import close, connect, get_children_many
from bkaudit.zk.ledgers import child_counts, ledger_prefixes
from bkaudit.zk.paths import LONG_WIDTHS, SHORT_WIDTHS

if TYPE_CHECKING:
    from bkaudit.zk.settings import ZkSettings

SHORT_DEPTH = 3  # dirs + leaf below the root
LONG_DEPTH = 5
BALANCE_FACTOR = 4  # aim for this many units per partition before packing
MAX_UNITS = 20_000  # never plan more units than this (each costs a stat)
_DIR_WEIGHT = 100  # guessed ledgers per child of a unit that is not a leaf parent
LISTING_IN_FLIGHT = 200  # pipelined getChildren / exists outstanding while planning


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


def plan_units(settings: ZkSettings, partitions: int) -> list[Unit]:
    """Units covering every ledger of the cluster `settings` name, expanded until there are enough to
    balance `partitions`; read on a short session of its own."""
    root = settings.root
    zk = connect(settings)
    try:
        units = [Unit(p) for p in ledger_prefixes(zk, root=root)]
        target = max(1, partitions) * BALANCE_FACTOR
        while len(units) < target:
            expandable = [u for u in units if u.levels_left > 1]
            if not expandable:
                break
            shallowest = max(u.levels_left for u in expandable)
            grow = [u for u in expandable if u.levels_left == shallowest]
            keep = [u for u in units if u not in grow]
            listed = get_children_many(zk, [f"{root}/{u.path}" for u in grow], LISTING_IN_FLIGHT)
            grown = [
                Unit(f"{parent[len(root) + 1 :]}/{kid}")
                for parent, kids in listed
                for kid in sorted(kids)
                if _is_dir_name(parent[len(root) + 1 :], kid)
            ]
            if len(keep) + len(grown) > MAX_UNITS:
                break
            units = keep + grown
        counts = child_counts(zk, [f"{root}/{u.path}" for u in units], LISTING_IN_FLIGHT)
    finally:
        close(zk)
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
