"""BookKeeper's ledger id generators on ZooKeeper: the znodes behind `ledgers.generate_ledger_id`.

ZkLedgerIdGenerator's EPHEMERAL_SEQUENTIAL ids, and LongZkLedgerIdGenerator's HOB directories once those
overflow; apart from the metadata I/O because they change with BookKeeper's id scheme, not its layout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kazoo.exceptions import NodeExistsError

from bkaudit.zk import paths

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from kazoo.security import ACL

HOB_KEEP = 3  # LongZkLedgerIdGenerator keeps the 3 newest HOB dirs


def sequential_id(zk: KazooClient, prefix: str, acl: list[ACL] | None) -> int:
    """Create EPHEMERAL_SEQUENTIAL `prefix`, parse its suffix, delete it (async, as BookKeeper)."""
    created = zk.create(prefix, b"", acl=acl, ephemeral=True, sequence=True, makepath=True)
    suffix = created[len(prefix) :] if created.startswith(prefix) else created.rsplit(paths.ID_PREFIX, 1)[-1]
    zk.delete_async(created)
    return int(suffix)


def create_persistent_path(zk: KazooClient, path: str) -> None:
    """PERSISTENT, OPEN_ACL_UNSAFE, parents too; an existing node is fine (another client switched first)."""
    from kazoo.security import OPEN_ACL_UNSAFE

    try:
        zk.create(path, b"", acl=OPEN_ACL_UNSAFE, makepath=True)
    except NodeExistsError:
        pass


def long_id(zk: KazooClient, long_root: str, acl: list[ACL] | None) -> int:
    """`(HOB << 32) | low` from the newest HOB dir under `long_root`, opening the next HOB when `low`
    overflows, and collecting HOB dirs beyond the newest HOB_KEEP (LongZkLedgerIdGenerator)."""
    while True:
        hobs = _hob_dirs(zk, long_root)
        if not hobs:
            _create_hob(zk, long_root, 1)
            continue
        high = hobs[-1]
        low = sequential_id(zk, f"{long_root}/{paths.HOB_PREFIX}{high:010d}/{paths.ID_PREFIX}", acl)
        _collect_old_hobs(zk, long_root, hobs)
        if 0 <= low < paths.INT_MAX:
            return (high << 32) | low
        _create_hob(zk, long_root, high + 1)


def _hob_dirs(zk: KazooClient, long_root: str) -> list[int]:
    values = []
    for name in zk.get_children(long_root):
        if name.startswith(paths.HOB_PREFIX):
            try:
                values.append(int(name[len(paths.HOB_PREFIX) :]))
            except ValueError:
                continue
    return sorted(values)


def _create_hob(zk: KazooClient, long_root: str, high: int) -> None:
    from kazoo.security import OPEN_ACL_UNSAFE

    try:
        zk.create(f"{long_root}/{paths.HOB_PREFIX}{high:010d}", b"", acl=OPEN_ACL_UNSAFE)
    except NodeExistsError:
        pass


def _collect_old_hobs(zk: KazooClient, long_root: str, hobs: list[int]) -> None:
    """Delete all but the newest HOB dirs (version 0, errors ignored), as LongZkLedgerIdGenerator."""
    for high in hobs[:-HOB_KEEP] if len(hobs) > HOB_KEEP else []:
        try:
            zk.delete(f"{long_root}/{paths.HOB_PREFIX}{high:010d}", version=0)
        except Exception:  # best effort: a racing generator may have deleted it first
            continue
