"""The terminal "data lost" record: which entries of a ledger no surviving replica can serve.

BookKeeper has no such state: a ledger whose entries are gone stays under-replicated and is retried forever,
loading bookies and hiding the loss in a growing queue (#3316, pulsar#15992, #4872). bkaudit's worker gives
up after a bounded number of attempts and writes this record at `{root}/bkaudit/dataloss/hhhh/hhhh/hhhh/hhhh/
L%010d` (BookKeeper ignores that subtree). The BookKeeper marker stays, so BookKeeper tooling still sees the
ledger as under-replicated; bkaudit's workers skip ledgers that have a record until an operator deletes it
(`bkaudit autorecovery clear-data-loss`). The record is JSON so operators and the data engineers' tables can
read it without a protobuf schema.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError

from bkaudit.model.dataloss import DataLossRecord, encode, parse
from bkaudit.zk import paths
from bkaudit.zk.client import delete_empty_parents, get_children_many

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from kazoo.security import ACL

HEX_LEVELS = 4


def write(
    zk: KazooClient,
    record: DataLossRecord,
    *,
    root: str = paths.DEFAULT_ROOT,
    state_root: str | None = None,
    acl: list[ACL] | None = None,
) -> None:
    """Create or replace the ledger's record (the latest detection wins)."""
    path = paths.data_loss_path(record.ledger_id, root=root, state_root=state_root)
    data = encode(record)
    try:
        zk.create(path, data, acl=acl, makepath=True)
    except NodeExistsError:
        zk.set(path, data)


def read(
    zk: KazooClient, ledger_id: int, *, root: str = paths.DEFAULT_ROOT, state_root: str | None = None
) -> DataLossRecord | None:
    try:
        data, _ = zk.get(paths.data_loss_path(ledger_id, root=root, state_root=state_root))
    except NoNodeError:
        return None
    return parse(data)


def exists(
    zk: KazooClient, ledger_id: int, *, root: str = paths.DEFAULT_ROOT, state_root: str | None = None
) -> bool:
    return zk.exists(paths.data_loss_path(ledger_id, root=root, state_root=state_root)) is not None


def delete(
    zk: KazooClient, ledger_id: int, *, root: str = paths.DEFAULT_ROOT, state_root: str | None = None
) -> bool:
    """Remove the record (the ledger is retried again); False if there was none."""
    path = paths.data_loss_path(ledger_id, root=root, state_root=state_root)
    try:
        zk.delete(path)
    except NoNodeError:
        return False
    stop_at = paths.data_loss_root(root=root, state_root=state_root)
    delete_empty_parents(zk, path, stop_at=stop_at, max_levels=HEX_LEVELS)
    return True


def list_ids(
    zk: KazooClient,
    *,
    root: str = paths.DEFAULT_ROOT,
    state_root: str | None = None,
    max_in_flight: int = 100,
) -> Iterator[int]:
    """Ledger ids with a record, ascending (pipelined walk of the hex tree)."""

    def parse(path: str) -> int | None:
        return paths.parse_data_loss_path(path, root=root, state_root=state_root)

    yield from _walk(zk, paths.data_loss_root(root=root, state_root=state_root), parse, max_in_flight)


def _walk(
    zk: KazooClient, base: str, parse_path: Callable[[str], int | None], max_in_flight: int
) -> Iterator[int]:
    level = [base]
    for _ in range(HEX_LEVELS):
        level = [f"{p}/{c}" for p, kids in get_children_many(zk, level, max_in_flight) for c in sorted(kids)]
    for parent, leaves in get_children_many(zk, level, max_in_flight):
        ids = (parse_path(f"{parent}/{leaf}") for leaf in leaves)
        yield from sorted(i for i in ids if i is not None)


def migrate_legacy(
    zk: KazooClient, *, root: str = paths.DEFAULT_ROOT, state_root: str | None = None
) -> list[int]:
    """Move records from `<root>/bkaudit/dataloss` (earlier releases) to the state root; the ids moved.

    Each record is copied (unless the new place already has one: the newer detection wins) and then deleted;
    `<root>/bkaudit` is removed once empty, so `bookkeeper shell nukeexistingcluster` works again. Idempotent:
    an interrupted migration resumes on the next start.
    """
    legacy = paths.legacy_data_loss_root(root=root)
    if zk.exists(paths.legacy_bkaudit_root(root=root)) is None:
        return []
    moved: list[int] = []
    for ledger_id in list(_walk(zk, legacy, lambda p: paths.parse_legacy_data_loss_path(p, root=root), 100)):
        old = paths.legacy_data_loss_path(ledger_id, root=root)
        try:
            data, stat = zk.get(old)
        except NoNodeError:
            continue
        new = paths.data_loss_path(ledger_id, root=root, state_root=state_root)
        try:
            zk.create(new, data, acl=_migrated_acl(zk, old), makepath=True)
        except NodeExistsError:
            pass
        try:
            zk.delete(old, version=stat.version)
        except NoNodeError:
            pass
        delete_empty_parents(zk, old, stop_at=legacy, max_levels=HEX_LEVELS)
        moved.append(ledger_id)
    for path in (legacy, paths.legacy_bkaudit_root(root=root)):
        try:
            zk.delete(path)
        except NoNodeError:
            continue
        except NotEmptyError:  # something else lives there: the operator decides (docs/autorecovery.md)
            log.warning("%s holds znodes bkaudit did not write; remove them before a BookKeeper nuke", path)
            break
    return moved


def _migrated_acl(zk: KazooClient, old: str) -> list[ACL] | None:
    """The legacy record's ACL, unless it is world-open while this session creates secured znodes ([zk]
    enable_security): a record written before security was turned on must not stay open after the move."""
    acl = stat_acl(zk, old)
    secured = any(a.id.scheme != "world" for a in zk.default_acl or ())
    if acl is not None and secured and all(a.id.scheme == "world" for a in acl):
        return None  # the session's (CREATOR_ALL) ACL
    return acl


def stat_acl(zk: KazooClient, path: str) -> list[ACL] | None:
    try:
        acl, _ = zk.get_acls(path)
    except NoNodeError:
        return None
    return list(acl)
