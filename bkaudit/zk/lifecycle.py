"""ZooKeeper I/O for bookie lifecycle records: the state znode, its history, drain progress and failures.

No rules here (bkaudit.lifecycle.service decides which transitions are allowed); only compare-and-set writes:
each state change and its history record are one ZooKeeper multi, so a record exists exactly for every
transition that happened, and two writers racing on one bookie cannot both win.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError, RolledBackError

from bkaudit.errors import FormatError, MetadataConflict
from bkaudit.model import lifecycle as lc
from bkaudit.zk import paths
from bkaudit.zk.client import read_children

if TYPE_CHECKING:
    from kazoo.client import KazooClient

ABSENT = -1  # "version" of a missing state znode (an Active bookie)


def read_state(zk: KazooClient, bookie_id: str, *, root: str) -> tuple[lc.StateRecord | None, int]:
    """(record, znode version), or (None, ABSENT) for an Active bookie. FormatError on a malformed znode."""
    try:
        data, stat = zk.get(paths.lifecycle_state_path(bookie_id, root=root))
    except NoNodeError:
        return None, ABSENT
    return lc.parse(data), stat.version


def list_states(zk: KazooClient, *, root: str) -> dict[str, lc.StateRecord | FormatError]:
    """Every bookie with a cookie -> its state record (Active bookies get none; a bad znode its error)."""
    out: dict[str, lc.StateRecord | FormatError] = {}
    try:
        cookies = zk.get_children(paths.cookies_root(root=root))
    except NoNodeError:
        return out
    futures = [(b, zk.get_async(paths.lifecycle_state_path(b, root=root))) for b in sorted(cookies)]
    for bookie, fut in futures:
        try:
            data, _ = fut.get()
        except NoNodeError:
            continue
        try:
            out[bookie] = lc.parse(data)
        except FormatError as exc:
            out[bookie] = exc
    return out


def _history_txn(
    txn: Any, zk: KazooClient, bookie_id: str, record: lc.StateRecord, *, root: str, state_root: str | None
) -> None:
    base = paths.lifecycle_history_root(bookie_id, root=root, state_root=state_root)
    zk.ensure_path(base)
    txn.create(base + "/h-", lc.encode(record), sequence=True)  # the session's ACL ([zk] enable_security)


def _commit(txn: Any, what: str) -> None:
    results = txn.commit()
    # a failed multi reports RolledBackError for every op but the one that failed: find that one
    for result in sorted(results, key=lambda r: isinstance(r, RolledBackError)):
        if isinstance(result, BadVersionError | NodeExistsError | NoNodeError):
            raise MetadataConflict(
                f"{what}: the state changed meanwhile ({type(result).__name__}); re-read it"
            )
        if isinstance(result, NotEmptyError):
            raise MetadataConflict(f"{what}: znode not empty")
        if isinstance(result, Exception):
            raise result


def write_state(
    zk: KazooClient, bookie_id: str, record: lc.StateRecord, *, version: int, root: str,
    state_root: str | None = None,
) -> None:
    """Compare-and-set the state (create when `version` is ABSENT) plus its history record, atomically."""
    path = paths.lifecycle_state_path(bookie_id, root=root)
    txn = zk.transaction()
    if version == ABSENT:
        txn.check(paths.cookie_path(bookie_id, root=root), -1)
        txn.create(path, lc.encode(record))
    else:
        txn.set_data(path, lc.encode(record), version=version)
    _history_txn(txn, zk, bookie_id, record, root=root, state_root=state_root)
    _commit(txn, f"lifecycle of {bookie_id}")


def remove_bookie(
    zk: KazooClient, bookie_id: str, record: lc.StateRecord, *, version: int, root: str,
    state_root: str | None = None,
) -> None:
    """Delete the state (at `version`) and the cookie together, and record the removal."""
    txn = zk.transaction()
    txn.delete(paths.lifecycle_state_path(bookie_id, root=root), version=version)
    txn.delete(paths.cookie_path(bookie_id, root=root))
    _history_txn(txn, zk, bookie_id, record, root=root, state_root=state_root)
    _commit(txn, f"removing {bookie_id}")


def history(
    zk: KazooClient, bookie_id: str, *, root: str, state_root: str | None = None
) -> list[lc.StateRecord]:
    """The bookie's transitions, oldest first (malformed records skipped: the history is informational)."""
    base = paths.lifecycle_history_root(bookie_id, root=root, state_root=state_root)
    return read_children(zk, base, lc.parse, skip=(FormatError,))


# -- drain progress and per-ledger failures ---------------------------------------------------------------
def _read_json(zk: KazooClient, path: str) -> dict[str, Any] | None:
    try:
        data, _ = zk.get(path)
        value = json.loads(data.decode())
    except NoNodeError:
        return None
    except (UnicodeDecodeError, ValueError):
        return {"error": f"unparseable JSON at {path}"}
    return value if isinstance(value, dict) else {"error": f"not a JSON object at {path}"}


def write_progress(
    zk: KazooClient, bookie_id: str, progress: dict[str, Any], *, root: str, state_root: str | None = None
) -> None:
    path = paths.drain_progress_path(bookie_id, root=root, state_root=state_root)
    data = json.dumps(progress, sort_keys=True).encode()
    try:
        zk.set(path, data)
    except NoNodeError:
        try:
            zk.create(path, data, makepath=True)
        except NodeExistsError:
            zk.set(path, data)


def read_progress(
    zk: KazooClient, bookie_id: str, *, root: str, state_root: str | None = None
) -> dict[str, Any] | None:
    return _read_json(zk, paths.drain_progress_path(bookie_id, root=root, state_root=state_root))


def record_failure(
    zk: KazooClient, bookie_id: str, ledger_id: int, error: str, at: str, *, root: str,
    state_root: str | None = None,
) -> int:
    """Count one failed replication of `ledger_id` while draining `bookie_id`; the new count (CAS loop)."""
    path = paths.drain_failure_path(bookie_id, ledger_id, root=root, state_root=state_root)
    while True:
        try:
            data, stat = zk.get(path)
        except NoNodeError:
            record = {"ledger_id": ledger_id, "count": 1, "error": error, "at": at}
            try:
                zk.create(path, json.dumps(record).encode(), makepath=True)
                return 1
            except NodeExistsError:
                continue
        try:
            count = int(json.loads(data.decode()).get("count", 0)) + 1
        except (UnicodeDecodeError, ValueError, AttributeError):
            count = 1
        record = {"ledger_id": ledger_id, "count": count, "error": error, "at": at}
        try:
            zk.set(path, json.dumps(record).encode(), version=stat.version)
            return count
        except (BadVersionError, NoNodeError):
            continue


def list_failures(
    zk: KazooClient, bookie_id: str, *, root: str, state_root: str | None = None
) -> dict[int, dict[str, Any]]:
    base = paths.drain_failures_root(bookie_id, root=root, state_root=state_root)
    try:
        names = zk.get_children(base)
    except NoNodeError:
        return {}
    out: dict[int, dict[str, Any]] = {}
    for name in names:
        if not name.startswith("L") or not name[1:].isdigit():
            continue
        value = _read_json(zk, f"{base}/{name}")
        if value is not None:
            out[int(name[1:])] = value
    return out


def clear_drain_records(zk: KazooClient, bookie_id: str, *, root: str, state_root: str | None = None) -> None:
    """Drop the progress and failure records (after removal: the history stays)."""
    failures = paths.drain_failures_root(bookie_id, root=root, state_root=state_root)
    for path in (failures, paths.drain_progress_path(bookie_id, root=root, state_root=state_root)):
        try:
            zk.delete(path, recursive=True)
        except NoNodeError:
            pass


# -- serving (read-only) requests -------------------------------------------------------------------------
def read_serving(zk: KazooClient, bookie_id: str, *, root: str, state_root: str | None = None) -> bool:
    """True when an operator asked the bookie to serve reads only (cluster-level readOnly switch)."""
    try:
        data, _ = zk.get(paths.serving_path(bookie_id, root=root, state_root=state_root))
    except NoNodeError:
        return False
    return serving_read_only(data)


def encode_serving(read_only: bool, *, by: str, at: str) -> bytes:
    """A serving switch's bytes (JSON: readOnly, who set it, when)."""
    return json.dumps({"readOnly": read_only, "by": by, "at": at}).encode()


def serving_read_only(data: bytes | None) -> bool:
    """What a serving switch's bytes say (unreadable: not switched), for every reader of the switch: the
    ZooKeeper reads and watches here and the memory store (bkaudit.store.memory)."""
    if not data:
        return False
    try:
        value = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError):
        return False
    return isinstance(value, dict) and value.get("readOnly") is True


def parse_state(data: bytes | None) -> lc.StateRecord | FormatError | None:
    """A state znode's bytes as a watch delivers them: None without a record, FormatError if unreadable."""
    if not data:
        return None
    try:
        return lc.parse(data)
    except FormatError as exc:
        return exc


def watch(
    zk: KazooClient, bookie_id: str, *, root: str, state_root: str | None,
    on_state: Callable[[lc.StateRecord | FormatError | None], None], on_serving: Callable[[bool], None],
) -> None:
    """DataWatches on the bookie's state record and serving switch (each called now, then on changes)."""
    from kazoo.recipe.watchers import DataWatch

    state = paths.lifecycle_state_path(bookie_id, root=root)
    DataWatch(zk, state, lambda data, _stat: on_state(parse_state(data)))
    DataWatch(zk, paths.serving_path(bookie_id, root=root, state_root=state_root),
              lambda data, _stat: on_serving(serving_read_only(data)))


def write_serving(
    zk: KazooClient, bookie_id: str, read_only: bool, *, by: str, at: str, root: str,
    state_root: str | None = None,
) -> None:
    path = paths.serving_path(bookie_id, root=root, state_root=state_root)
    data = encode_serving(read_only, by=by, at=at)
    try:
        zk.set(path, data)
    except NoNodeError:
        try:
            zk.create(path, data, makepath=True)
        except NodeExistsError:
            zk.set(path, data)
