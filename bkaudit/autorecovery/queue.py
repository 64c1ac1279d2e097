"""Taking work from the under-replication queue: a random walk skipping locked ledgers, then the lock.

BookKeeper's getLedgerToRereplicate walks the 4-level hex tree shuffling each level, skips children having a
lock and creates the EPHEMERAL lock. The walk is lazy (a handful of getChildren per pick, not a listing of the
whole queue) and random, so many workers spread over the queue instead of colliding on its head. The ledger
id is known from the hex directories alone, so locked or skipped ledgers are passed over before their leaf is
even listed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from kazoo.exceptions import NoNodeError

from bkaudit.zk import paths
from bkaudit.zk import underreplication as ur

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from kazoo.security import ACL

LEVELS = ur.UR_HEX_LEVELS


def locked_ids(zk: KazooClient, *, root: str = paths.DEFAULT_ROOT) -> set[int]:
    """Ledgers currently locked by some worker (children of `underreplication/locks`)."""
    try:
        names = zk.get_children(paths.locks_root(root=root))
    except NoNodeError:
        return set()
    return {i for i in (paths.parse_lock_name(n) for n in names) if i is not None}


def pick_ledger(
    zk: KazooClient,
    *,
    root: str = paths.DEFAULT_ROOT,
    holder: str | None,
    skip: Callable[[int], bool] = lambda _lid: False,
    rng: random.Random | None = None,
    acl: list[ACL] | None = None,
) -> tuple[int, int] | None:
    """Lock a random marked ledger that is not locked and not `skip`ped; (ledger id, marker version) or None.

    The version is the marker's version at lock time: pass it to `mark_replicated`, so a ledger re-marked
    meanwhile stays queued.
    """
    rng = rng or random.Random()
    locked = locked_ids(zk, root=root)

    def unwanted(ledger_id: int) -> bool:
        return ledger_id in locked or skip(ledger_id)

    return _walk(zk, paths.ur_ledgers_root(root=root), 0, 0, unwanted, rng, root, holder, acl)


def _walk(
    zk: KazooClient,
    path: str,
    depth: int,
    prefix: int,
    unwanted: Callable[[int], bool],
    rng: random.Random,
    root: str,
    holder: str | None,
    acl: list[ACL] | None,
) -> tuple[int, int] | None:
    try:
        children = zk.get_children(path)
    except NoNodeError:
        return None  # resolved and cleaned up under our feet
    rng.shuffle(children)
    for name in children:
        if depth < LEVELS:
            try:
                value = (prefix << 16) | int(name, 16)
            except ValueError:
                continue
            if depth == LEVELS - 1 and unwanted(value):
                continue  # the four hex groups are the id: no need to list the leaf
            found = _walk(zk, f"{path}/{name}", depth + 1, value, unwanted, rng, root, holder, acl)
            if found is not None:
                return found
            continue
        ledger_id = paths.parse_underreplicated_path(f"{path}/{name}", root=root)
        if ledger_id is None or unwanted(ledger_id):
            continue
        version = ur.acquire_lock(zk, ledger_id, root=root, holder=holder, acl=acl)
        if version is not None:
            return ledger_id, version
    return None


def holds_lock(zk: KazooClient, ledger_id: int, *, root: str = paths.DEFAULT_ROOT) -> bool:
    """True while THIS session owns the ledger's lock (it vanishes when the session expires)."""
    stat = zk.exists(paths.lock_path(ledger_id, root=root))
    return stat is not None and zk.client_id is not None and stat.ephemeralOwner == zk.client_id[0]
