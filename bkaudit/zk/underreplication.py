"""The under-replication queue, switches and auditor election, as BookKeeper's ZooKeeper managers keep them.

Mirrors `ZkLedgerUnderreplicationManager` and `ZkLedgerAuditorManager` znode for znode and byte for byte,
so a real BookKeeper ReplicationWorker consumes the markers bkaudit publishes and bkaudit's workers consume
BookKeeper's. The concurrency rules matter as much as the bytes:
- marking merges into an existing marker with a compare-and-set loop (never a blind overwrite);
- a lock is an EPHEMERAL znode (it dies with its holder's session) and remembers the marker version seen when
  it was taken; marking replicated deletes the marker only at that version, so a ledger re-marked meanwhile
  stays queued.
Publishing rate is the caller's policy; functions that write in bulk accept an optional RateLimiter.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.security import OPEN_ACL_UNSAFE

from bkaudit.errors import FormatError, MetadataError
from bkaudit.zk import paths
from bkaudit.zk.client import delete_empty_parents, get_children_many

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from kazoo.protocol.states import ZnodeStat
    from kazoo.security import ACL

    from bkaudit.formats.records import UnderreplicatedMarker
    from bkaudit.zk.client import RateLimiter

DEFAULT_ROOT = paths.DEFAULT_ROOT
UR_HEX_LEVELS = 4


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- layout ------------------------------------------------------------------------------------------------
def ensure_underreplication_layout(
    zk: KazooClient, *, root: str = DEFAULT_ROOT, acl: list[ACL] | None = None
) -> None:
    """Create the under-replication base, LAYOUT, `ledgers` and `locks` if absent (BookKeeper's checkLayout).

    An existing LAYOUT other than BASIC/1 raises MetadataError: BookKeeper refuses to run against it
    (CompatibilityException), and so do we.
    """
    from bkaudit.formats import records

    _create_if_absent(zk, paths.underreplication_root(root=root), b"", acl, makepath=True)
    layout = paths.ur_layout_path(root=root)
    if not _create_if_absent(zk, layout, records.encode_underreplication_layout(), acl):
        data, _ = zk.get(layout)
        try:
            records.parse_underreplication_layout(data)
        except FormatError as exc:
            raise MetadataError(f"incompatible under-replication layout at {layout}: {exc}") from exc
    _create_if_absent(zk, paths.ur_ledgers_root(root=root), b"", acl)
    _create_if_absent(zk, paths.locks_root(root=root), b"", acl)


def _create_if_absent(
    zk: KazooClient, path: str, data: bytes, acl: list[ACL] | None, *, makepath: bool = False
) -> bool:
    try:
        zk.create(path, data, acl=acl, makepath=makepath)
        return True
    except NodeExistsError:
        return False


# -- markers -----------------------------------------------------------------------------------------------
def mark_underreplicated(
    zk: KazooClient,
    ledger_id: int,
    replicas: Iterable[str],
    *,
    root: str = DEFAULT_ROOT,
    now_ms: int | None = None,
    acl: list[ACL] | None = None,
    rate_limiter: RateLimiter | None = None,
) -> bool:
    """Mark a ledger under-replicated, missing `replicas` (bookie ids); True if the marker was written.

    BookKeeper's markLedgerUnderreplicatedAsync: create the marker (parents created optimistically); if it
    exists, read it, append the replicas it lacks (refreshing ctime) and setData at the read version,
    re-reading on BadVersion and re-creating if it vanished. Nothing new to add → no write, False.
    """
    from bkaudit.formats import records

    wanted = tuple(dict.fromkeys(replicas))
    path = paths.underreplicated_ledger_path(ledger_id, root=root)
    if rate_limiter is not None:
        rate_limiter.acquire()
    while True:
        stamp = _now_ms() if now_ms is None else now_ms
        fresh = records.UnderreplicatedMarker(wanted, stamp)
        try:
            zk.create(path, records.encode_underreplicated_marker(fresh), acl=acl, makepath=True)
            return True
        except NodeExistsError:
            pass
        merged = _merge_existing(zk, path, wanted, now_ms)
        if merged is not None:
            return merged


def _merge_existing(zk: KazooClient, path: str, wanted: tuple[str, ...], now_ms: int | None) -> bool | None:
    """The CAS loop on an existing marker: True/False when done, None if the marker vanished (re-create)."""
    from bkaudit.formats import records

    while True:
        try:
            data, stat = zk.get(path)
        except NoNodeError:
            return None
        merged = records.merge_replicas(records.parse_underreplicated_marker(data), wanted,
                                        _now_ms() if now_ms is None else now_ms)
        if merged is None:
            return False
        try:
            zk.set(path, records.encode_underreplicated_marker(merged), version=stat.version)
            return True
        except BadVersionError:
            continue
        except NoNodeError:
            return None


def get_marker(
    zk: KazooClient, ledger_id: int, *, root: str = DEFAULT_ROOT
) -> tuple[UnderreplicatedMarker, ZnodeStat] | None:
    """The ledger's marker and stat, or None if it is not marked (FormatError if the marker is corrupt)."""
    from bkaudit.formats import records

    try:
        data, stat = zk.get(paths.underreplicated_ledger_path(ledger_id, root=root))
    except NoNodeError:
        return None
    return records.parse_underreplicated_marker(data), stat


def list_underreplicated(
    zk: KazooClient, *, root: str = DEFAULT_ROOT, max_in_flight: int = 100
) -> Iterator[int]:
    """Ids of all marked ledgers in ascending order (walks the 4-level hex tree with pipelined listing).

    Directories vanishing mid-walk (markers being resolved and their parents cleaned up) are skipped.
    """
    level = [paths.ur_ledgers_root(root=root)]
    for _ in range(UR_HEX_LEVELS):
        level = [f"{p}/{c}" for p, kids in get_children_many(zk, level, max_in_flight) for c in sorted(kids)]
    for parent, leaves in get_children_many(zk, level, max_in_flight):
        ids = (paths.parse_underreplicated_path(f"{parent}/{leaf}", root=root) for leaf in leaves)
        yield from sorted(i for i in ids if i is not None)


# -- locks -------------------------------------------------------------------------------------------------
def acquire_lock(
    zk: KazooClient,
    ledger_id: int,
    *,
    root: str = DEFAULT_ROOT,
    holder: str | None,
    acl: list[ACL] | None = None,
) -> int | None:
    """Take the ledger's re-replication lock; returns the marker version seen, or None (locked / not marked).

    The lock is EPHEMERAL with LockDataFormat data (`holder`, or empty if unknown): it disappears with this
    session, so a crashed worker never blocks a ledger. Keep the returned version for mark_replicated.
    """
    from bkaudit.formats import records

    stat = zk.exists(paths.underreplicated_ledger_path(ledger_id, root=root))
    if stat is None:
        return None
    try:
        zk.create(paths.lock_path(ledger_id, root=root), records.encode_lock_data(holder), acl=acl,
                  ephemeral=True, makepath=True)
    except NodeExistsError:
        return None
    return int(stat.version)


def lock_holder(zk: KazooClient, ledger_id: int, *, root: str = DEFAULT_ROOT) -> str | None:
    """Who holds the ledger's lock (its LockDataFormat bookieId), or None if unlocked or anonymous."""
    from bkaudit.formats import records

    try:
        data, _ = zk.get(paths.lock_path(ledger_id, root=root))
    except NoNodeError:
        return None
    return records.parse_lock_data(data)


def is_locked(zk: KazooClient, ledger_id: int, *, root: str = DEFAULT_ROOT) -> bool:
    """True while some session holds the ledger's lock (BookKeeper's isLedgerBeingReplicated)."""
    return zk.exists(paths.lock_path(ledger_id, root=root)) is not None


def release_lock(zk: KazooClient, ledger_id: int, *, root: str = DEFAULT_ROOT, force: bool = False) -> bool:
    """Release the ledger's lock if this session holds it (any session's with `force`); True if deleted.

    Checking the ephemeral owner keeps a worker whose session expired (and whose lock was then taken by
    another worker) from deleting the new holder's lock.
    """
    path = paths.lock_path(ledger_id, root=root)
    stat = zk.exists(path)
    if stat is None:
        return False
    if not force and stat.ephemeralOwner != zk.client_id[0]:
        return False
    try:
        zk.delete(path, version=stat.version)
        return True
    except (NoNodeError, BadVersionError):
        return False


def mark_replicated(zk: KazooClient, ledger_id: int, *, version: int, root: str = DEFAULT_ROOT) -> bool:
    """Resolve a marker at the version seen when locking, clean up empty hex dirs, release the lock.

    Returns False if the marker changed since (BadVersion: it was re-marked, e.g. another bookie went
    missing) — it then stays queued, as in BookKeeper. A marker already gone counts as resolved.
    """
    path = paths.underreplicated_ledger_path(ledger_id, root=root)
    try:
        try:
            zk.delete(path, version=version)
        except BadVersionError:
            return False
        except NoNodeError:
            return True
        delete_empty_parents(zk, path, stop_at=paths.ur_ledgers_root(root=root), max_levels=UR_HEX_LEVELS)
        return True
    finally:
        release_lock(zk, ledger_id, root=root)


def locked_ids(zk: KazooClient, *, root: str = DEFAULT_ROOT) -> set[int]:
    """Ledgers currently locked by some worker (children of `underreplication/locks`)."""
    try:
        names = zk.get_children(paths.locks_root(root=root))
    except NoNodeError:
        return set()
    return {i for i in (paths.parse_lock_name(n) for n in names) if i is not None}


def queued_ids(zk: KazooClient, *, root: str = DEFAULT_ROOT, max_in_flight: int = 100) -> list[int]:
    """Ids of the marked ledgers, from the hex directories alone (a directory may be left empty for a moment
    after its marker was resolved: taking that ledger then simply finds no marker)."""
    level = [(paths.ur_ledgers_root(root=root), 0)]
    for _ in range(UR_HEX_LEVELS):
        values = dict(level)
        nxt = []
        for parent, kids in get_children_many(zk, [p for p, _ in level], max_in_flight):
            for kid in kids:
                try:
                    nxt.append((f"{parent}/{kid}", (values[parent] << 16) | int(kid, 16)))
                except ValueError:
                    continue  # not a hex dir: not BookKeeper's layout, ignore
        level = nxt
    return sorted(ledger_id for _, ledger_id in level if ledger_id <= paths.LONG_MAX)


def holds_lock(zk: KazooClient, ledger_id: int, *, root: str = DEFAULT_ROOT) -> bool:
    """True while THIS session owns the ledger's lock (it vanishes when the session expires)."""
    stat = zk.exists(paths.lock_path(ledger_id, root=root))
    return stat is not None and zk.client_id is not None and stat.ephemeralOwner == zk.client_id[0]


# -- switches ----------------------------------------------------------------------------------------------
def is_replication_enabled(zk: KazooClient, *, root: str = DEFAULT_ROOT) -> bool:
    """Auto-recovery is enabled unless `{root}/underreplication/disable` exists."""
    return zk.exists(paths.disable_path(root=root)) is None


def disable_replication(zk: KazooClient, *, root: str = DEFAULT_ROOT, acl: list[ACL] | None = None) -> bool:
    """Create the `disable` znode (empty, PERSISTENT); False if it was already disabled."""
    return _create_if_absent(zk, paths.disable_path(root=root), b"", acl, makepath=True)


def enable_replication(zk: KazooClient, *, root: str = DEFAULT_ROOT) -> bool:
    """Delete the `disable` znode; False if it was already enabled."""
    try:
        zk.delete(paths.disable_path(root=root))
        return True
    except NoNodeError:
        return False


def wait_until_enabled(zk: KazooClient, timeout: float | None = None, *, root: str = DEFAULT_ROOT) -> bool:
    """Block until replication is enabled (the `disable` znode is deleted); False on timeout.

    Uses an exists-watch like BookKeeper's notifyLedgerReplicationEnabled, re-armed on every event.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    path = paths.disable_path(root=root)
    while True:
        changed = threading.Event()
        if zk.exists(path, watch=_setter(changed)) is None:
            return True
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return False
        changed.wait(remaining)


def _setter(event: threading.Event) -> Callable[[object], None]:
    return lambda _watched: event.set()


def get_lost_bookie_recovery_delay(zk: KazooClient, *, root: str = DEFAULT_ROOT) -> int | None:
    """The auditor's lost-bookie delay in seconds (ASCII decimal), or None if never set."""
    try:
        data, _ = zk.get(paths.lost_bookie_recovery_delay_path(root=root))
    except NoNodeError:
        return None
    try:
        return int(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise FormatError(f"lostBookieRecoveryDelay is not a decimal integer: {data!r}") from None


def seed_lost_bookie_recovery_delay(zk: KazooClient, delay_s: int, *, root: str = DEFAULT_ROOT) -> int:
    """Create `lostBookieRecoveryDelay` from the config if absent (as BookKeeper's Auditor does); the stored
    value."""
    try:
        zk.create(paths.lost_bookie_recovery_delay_path(root=root), str(delay_s).encode("ascii"),
                  acl=list(OPEN_ACL_UNSAFE), makepath=True)
    except NodeExistsError:
        pass
    stored = get_lost_bookie_recovery_delay(zk, root=root)
    return delay_s if stored is None else stored


def set_lost_bookie_recovery_delay(zk: KazooClient, delay_s: int, *, root: str = DEFAULT_ROOT) -> None:
    """Write the delay as `Integer.toString` bytes; created OPEN_ACL_UNSAFE as BookKeeper does.

    Setting 0, or re-setting the previous value, makes a running auditor audit at once (triggerAudit).
    """
    if isinstance(delay_s, bool) or not isinstance(delay_s, int) or not -(2**31) <= delay_s < 2**31:
        raise ValueError(f"delay must be a Java int number of seconds, got {delay_s!r}")
    path = paths.lost_bookie_recovery_delay_path(root=root)
    data = str(delay_s).encode("ascii")
    exists = zk.exists(path) is not None
    if exists or not _create_if_absent(zk, path, data, list(OPEN_ACL_UNSAFE), makepath=True):
        zk.set(path, data)


def read_check_ctime(zk: KazooClient, kind: str, *, root: str = DEFAULT_ROOT) -> int:
    """When the auditor's `kind` check last completed (epoch ms); -1 if never (missing znode or field)."""
    from bkaudit.formats import records

    try:
        data, _ = zk.get(paths.check_ctime_path(kind, root=root))
    except NoNodeError:
        return -1
    return int(records.parse_check_ctime(data))


def write_check_ctime(
    zk: KazooClient, kind: str, ctime_ms: int, *, root: str = DEFAULT_ROOT, acl: list[ACL] | None = None
) -> None:
    """Record when the auditor's `kind` check completed (binary protobuf, as BookKeeper)."""
    from bkaudit.formats import records

    path = paths.check_ctime_path(kind, root=root)
    data = records.encode_check_ctime(ctime_ms)
    if not _create_if_absent(zk, path, data, acl, makepath=True):
        zk.set(path, data)


# -- auditor election --------------------------------------------------------------------------------------
def create_vote(
    zk: KazooClient, bookie_id: str, *, root: str = DEFAULT_ROOT, acl: list[ACL] | None = None
) -> str:
    """Enter the auditor election: an EPHEMERAL_SEQUENTIAL `V_` with AuditorVoteFormat; returns its path."""
    from bkaudit.formats import records

    election = paths.election_root(root=root)
    _create_if_absent(zk, election, b"", acl, makepath=True)
    prefix = f"{election}/{paths.VOTE_PREFIX}"
    vote = records.encode_auditor_vote(bookie_id)
    return str(zk.create(prefix, vote, acl=acl, ephemeral=True, sequence=True))


def list_votes(zk: KazooClient, *, root: str = DEFAULT_ROOT) -> list[str]:
    """Vote paths ordered by sequence number (the first is the auditor)."""
    election = paths.election_root(root=root)
    try:
        children = zk.get_children(election)
    except NoNodeError:
        return []
    votes = [(seq, name) for name in children if (seq := _vote_sequence(name)) is not None]
    return [f"{election}/{name}" for _, name in sorted(votes)]


def _vote_sequence(name: str) -> int | None:
    if not name.startswith(paths.VOTE_PREFIX):
        return None
    try:
        return int(name[len(paths.VOTE_PREFIX) :])
    except ValueError:
        return None


def current_auditor(zk: KazooClient, *, root: str = DEFAULT_ROOT) -> str | None:
    """The elected auditor's bookie id (data of the lowest vote), or None when nobody is voting."""
    from bkaudit.formats import records

    for vote in list_votes(zk, root=root):
        try:
            data, _ = zk.get(vote)
        except NoNodeError:
            continue  # its session ended between listing and reading: the next vote leads now
        return records.parse_auditor_vote(data)
    return None


def predecessor(zk: KazooClient, vote_path: str, *, root: str = DEFAULT_ROOT) -> str | None:
    """The vote just before `vote_path` (the one to watch), or None if `vote_path` leads the election.

    Watching only the predecessor, not the leader, avoids a herd of re-elections when the auditor dies.
    """
    votes = list_votes(zk, root=root)
    if vote_path not in votes:
        raise MetadataError(f"vote {vote_path} is not in the election (session expired?)")
    index = votes.index(vote_path)
    return votes[index - 1] if index > 0 else None


def announce_auditor(zk: KazooClient, bookie_id: str, *, root: str = DEFAULT_ROOT) -> None:
    """What the winner does: write its vote text onto `auditorelection` itself (for humans and tools)."""
    from bkaudit.formats import records

    zk.set(paths.election_root(root=root), records.encode_auditor_vote(bookie_id))
