"""Ledger metadata in ZooKeeper, with BookKeeper's exact layout, bytes and concurrency rules.

Cluster init mirrors `ZKRegistrationManager.initNewCluster`, id generation `ZkLedgerIdGenerator` /
`LongZkLedgerIdGenerator` (their znodes in bkaudit.zk.idgen), create/read/CAS/delete
`AbstractZkLedgerManager` and the hierarchical managers. Listing is split by top-level hierarchy dir
(`ledger_prefixes`) or by any deeper dir (`iter_ledgers`), the units of parallelism for Spark tasks, and
`read_many` pipelines reads with a bounded window so a full scan runs at ZooKeeper's speed, not at one round
trip per ledger, while `max_in_flight` and a RateLimiter keep the audited cluster safe.

Codecs are imported lazily from bkaudit.formats (pure, owned elsewhere); this module only moves bytes.
"""

from __future__ import annotations

import heapq
import itertools
import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
)

from bkaudit.errors import MetadataConflict, NoSuchLedger, ZooKeeperError
from bkaudit.zk import idgen, paths
from bkaudit.zk.client import backoff_delays, delete_empty_parents, get_children_many, is_transient

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from kazoo.protocol.states import ZnodeStat
    from kazoo.security import ACL

    from bkaudit.model.ledger import LedgerMetadata
    from bkaudit.zk.client import RateLimiter

DEFAULT_ROOT = paths.DEFAULT_ROOT


# -- cluster -----------------------------------------------------------------------------------------------
def init_cluster(
    zk: KazooClient,
    *,
    root: str = DEFAULT_ROOT,
    layout: str = "hierarchical",
    acl: list[ACL] | None = None,
) -> bool:
    """Create a new BookKeeper cluster's metadata under `root`; False (and no change) if `root` exists.

    One multi() creates root, available, available/readonly and INSTANCEID (a random UUID) atomically, as
    BookKeeper's initNewCluster; then LAYOUT and the under-replication base (LAYOUT, ledgers, locks), which
    BookKeeper creates on first use. Unlike BookKeeper, missing parents of `root` are created (empty,
    PERSISTENT) first, so roots like `/pulsar/ledgers` work on an empty ZooKeeper.
    """
    from bkaudit.zk.underreplication import ensure_underreplication_layout

    paths.validate_root(root)
    layout_bytes = _layout_bytes(layout)
    if zk.exists(root) is not None:
        return False
    parent = root.rsplit("/", 1)[0]
    if parent:
        zk.ensure_path(parent, acl=acl)
    if not _create_cluster_nodes(zk, root, acl):
        return False
    _create_if_absent(zk, paths.layout_path(root=root), layout_bytes, acl)
    ensure_underreplication_layout(zk, root=root, acl=acl)
    return True


def _create_cluster_nodes(zk: KazooClient, root: str, acl: list[ACL] | None) -> bool:
    instance_id = str(uuid.uuid4()).encode("utf-8")
    tx = zk.transaction()
    tx.create(root, b"", acl=acl)
    tx.create(paths.available_root(root=root), b"", acl=acl)
    tx.create(paths.readonly_root(root=root), b"", acl=acl)
    tx.create(paths.instanceid_path(root=root), instance_id, acl=acl)
    results = tx.commit()
    failures = [r for r in results if isinstance(r, Exception)]
    if not failures:
        return True
    if isinstance(results[0], NodeExistsError):
        return False  # another initializer won the race
    raise ZooKeeperError(f"initializing cluster metadata at {root} failed: {failures[0]!r}")


def _create_if_absent(zk: KazooClient, path: str, data: bytes, acl: list[ACL] | None) -> bool:
    try:
        zk.create(path, data, acl=acl)
        return True
    except NodeExistsError:
        return False


def _layout_bytes(layout: str) -> bytes:
    """The `{root}/LAYOUT` record for a ledger manager name (`2\\n<factory class>:1`)."""
    from bkaudit.formats import records

    if layout not in paths.LAYOUTS:
        raise ValueError(f"unknown ledger layout {layout!r} (known: {', '.join(paths.LAYOUTS)})")
    return bytes(records.encode_ledger_layout(_layout_record(layout)))


def _layout_record(layout: str) -> Any:
    """The LedgerLayout for a manager name: BookKeeper's factory class of that name, manager version 1."""
    import dataclasses

    from bkaudit.formats import records

    default = records.DEFAULT_LEDGER_LAYOUT
    if layout == "hierarchical":
        return default
    prefix = {"longhierarchical": "Long", "legacyhierarchical": "Legacy"}[layout]
    package = default.manager_factory_class.rsplit(".", 1)[0]
    factory = f"{package}.{prefix}HierarchicalLedgerManagerFactory"
    return dataclasses.replace(default, manager_factory_class=factory)


def read_layout(zk: KazooClient, *, root: str = DEFAULT_ROOT) -> str:
    """The cluster's ledger manager name from `{root}/LAYOUT` ("hierarchical" when there is no LAYOUT)."""
    from bkaudit.formats import records

    try:
        data, _ = zk.get(paths.layout_path(root=root))
    except NoNodeError:
        return "hierarchical"
    return str(records.layout_name(records.parse_ledger_layout(data)))


def require_cluster(zk: KazooClient, *, root: str = DEFAULT_ROOT) -> None:
    """ZooKeeperError unless `root` holds a BookKeeper cluster: the root with its `LAYOUT` or `INSTANCEID`
    (BookKeeper's `metaformat` / `initnewcluster` write both; a client's first use writes LAYOUT). A wrong or
    uninitialised `--root` must be an error, never an audit of nothing that passes as clean."""
    if zk.exists(root) is None:
        raise ZooKeeperError(f"no BookKeeper cluster at {root}: the znode does not exist (wrong --root / "
                             "[zk] root?)")
    markers = (paths.layout_path(root=root), paths.instanceid_path(root=root))
    if all(zk.exists(path) is None for path in markers):
        raise ZooKeeperError(f"no BookKeeper cluster at {root}: it has neither LAYOUT nor INSTANCEID (wrong "
                             "--root / [zk] root, or a cluster never initialised)")


# -- ledger ids --------------------------------------------------------------------------------------------
def generate_ledger_id(zk: KazooClient, *, root: str = DEFAULT_ROOT, acl: list[ACL] | None = None) -> int:
    """A new, cluster-unique ledger id, exactly as BookKeeper's hierarchical id generators make it.

    Short ids are the sequence suffix of an EPHEMERAL_SEQUENTIAL `{root}/idgen/ID-` (deleted right away), so
    a fresh cluster yields 0, 1, 2, ... Once that space overflows (>= Integer.MAX_VALUE) `{root}/idgen-long`
    is created and from then on every id is `(HOB << 32) | low` from the long generator.
    """
    long_root = paths.idgen_long_path(root=root)
    if zk.exists(long_root) is not None:
        return idgen.long_id(zk, long_root, acl)
    ledger_id = idgen.sequential_id(zk, paths.idgen_path(root=root) + "/" + paths.ID_PREFIX, acl)
    if 0 <= ledger_id < paths.INT_MAX:
        return ledger_id
    idgen.create_persistent_path(zk, long_root)
    return idgen.long_id(zk, long_root, acl)


# -- single-ledger metadata I/O ----------------------------------------------------------------------------
def _path(ledger_id: int, root: str, layout: str | None) -> str:
    return paths.ledger_path(ledger_id, root=root, layout=layout or "hierarchical")


def create_ledger_metadata(
    zk: KazooClient,
    ledger_id: int,
    metadata: LedgerMetadata,
    *,
    root: str = DEFAULT_ROOT,
    layout: str = "hierarchical",
    acl: list[ACL] | None = None,
) -> int:
    """Store new ledger metadata (format v3), creating missing parents empty; returns the znode version.

    NodeExists becomes MetadataConflict: an id is never reused, so an existing znode means another writer.
    """
    from bkaudit.formats.ledger_metadata import serialize

    data = serialize(metadata, version=3)
    try:
        _, stat = zk.create(_path(ledger_id, root, layout), data, acl=acl, makepath=True, include_data=True)
    except NodeExistsError:
        raise MetadataConflict("metadata znode already exists", ledger_id=ledger_id) from None
    return int(stat.version)


def read_ledger_bytes(
    zk: KazooClient, ledger_id: int, *, root: str = DEFAULT_ROOT, layout: str | None = None
) -> tuple[bytes, ZnodeStat]:
    """The raw metadata znode content and stat; NoSuchLedger if it does not exist."""
    try:
        data, stat = zk.get(_path(ledger_id, root, layout))
    except NoNodeError:
        raise NoSuchLedger("no metadata znode", ledger_id=ledger_id) from None
    return data, stat


def read_ledger_metadata(
    zk: KazooClient, ledger_id: int, *, root: str = DEFAULT_ROOT, layout: str | None = None
) -> tuple[LedgerMetadata, ZnodeStat]:
    """Decoded metadata and its stat (the version is what a later CAS must expect).

    FormatError from a corrupt znode propagates. Metadata without a ctime keeps ctime None: BookKeeper uses
    `stat.ctime` for display then, and so can the caller, but it must not end up written on the next CAS.
    """
    from bkaudit.formats.ledger_metadata import parse

    data, stat = read_ledger_bytes(zk, ledger_id, root=root, layout=layout)
    return parse(data), stat


def write_ledger_metadata(
    zk: KazooClient,
    ledger_id: int,
    metadata: LedgerMetadata,
    *,
    expected_version: int,
    root: str = DEFAULT_ROOT,
    layout: str | None = None,
) -> int:
    """Compare-and-set metadata (always written as v3); returns the new version.

    A version mismatch raises MetadataConflict: re-read, re-apply the change, retry (BookKeeper's
    MetadataUpdateLoop). Blind overwrites (-1) are refused: they are how concurrent writers lose updates.
    """
    from bkaudit.formats.ledger_metadata import serialize

    if isinstance(expected_version, bool) or not isinstance(expected_version, int) or expected_version < 0:
        raise ValueError(f"expected_version must be the znode version read (>= 0), got {expected_version!r}")
    data = serialize(metadata, version=3)
    try:
        stat = zk.set(_path(ledger_id, root, layout), data, version=expected_version)
    except BadVersionError:
        raise MetadataConflict(
            f"metadata changed since version {expected_version} was read", ledger_id=ledger_id
        ) from None
    except NoNodeError:
        raise NoSuchLedger("no metadata znode", ledger_id=ledger_id) from None
    return int(stat.version)


def delete_ledger_metadata(
    zk: KazooClient,
    ledger_id: int,
    *,
    version: int = -1,
    root: str = DEFAULT_ROOT,
    layout: str | None = None,
) -> None:
    """Delete a ledger's metadata (with `version` as CAS unless -1), then its parents that became empty.

    Parent cleanup is what BookKeeper's asyncDeleteFullPathOptimistic does; it stops at the first non-empty
    parent and never touches `root`.
    """
    path = _path(ledger_id, root, layout)
    try:
        zk.delete(path, version=version)
    except NoNodeError:
        raise NoSuchLedger("no metadata znode", ledger_id=ledger_id) from None
    except BadVersionError:
        raise MetadataConflict(f"metadata is not at version {version}", ledger_id=ledger_id) from None
    delete_empty_parents(zk, path, stop_at=root)


# -- listing -----------------------------------------------------------------------------------------------
def ledger_prefixes(zk: KazooClient, *, root: str = DEFAULT_ROOT) -> list[str]:
    """Top-level hierarchy dirs under `root` (2-digit short, 3-digit long), sorted; special znodes skipped.

    Each prefix is an independent slice of the id space: the unit of work for one Spark task.
    """
    paths.validate_root(root)
    try:
        children = zk.get_children(root)
    except NoNodeError:
        return []
    keep = (c for c in children if not paths.is_skipped_in_listing(c) and paths.is_ledger_parent_node(c))
    return sorted(keep, key=lambda c: (len(c), c))


def iter_ledger_paths(
    zk: KazooClient, prefix: str, *, root: str = DEFAULT_ROOT, max_in_flight: int = 100
) -> Iterator[tuple[int, str]]:
    """Yield (ledger_id, znode path) under one top-level dir, in ascending id order.

    Levels are listed with pipelined getChildren; a dir deleted mid-walk (a ledger deleted and its parents
    cleaned up) is simply empty, as in BookKeeper's own iterators.
    """
    paths.validate_root(root)
    if not paths.is_ledger_parent_node(prefix):
        raise ValueError(f"not a ledger hierarchy dir: {prefix!r} (expected 2 or 3 digits)")
    depth = 2 if len(prefix) == 2 else 4  # dir levels below root, incl. prefix, before the leaf
    level = [f"{root}/{prefix}"]
    for _ in range(depth - 1):
        level = [f"{p}/{c}" for p, kids in get_children_many(zk, level, max_in_flight) for c in sorted(kids)]
    for parent, leaves in get_children_many(zk, level, max_in_flight):
        found = []
        for leaf in leaves:
            ledger_id = paths.parse_ledger_path(f"{parent}/{leaf}", root=root)
            if ledger_id is not None:
                found.append((ledger_id, f"{parent}/{leaf}"))
        yield from sorted(found)


def iter_ledgers(
    zk: KazooClient, root: str, units: Iterable[str], max_in_flight: int = 200
) -> Iterator[tuple[int, str]]:
    """(ledger_id, znode path) of every ledger under the units (`iter_ledger_dirs`, one at a time)."""
    for ids, znodes in iter_ledger_dirs(zk, root, units, max_in_flight):
        yield from zip(ids, znodes, strict=True)


def iter_ledger_dirs(
    zk: KazooClient, root: str, units: Iterable[str], max_in_flight: int = 200
) -> Iterator[tuple[list[int], list[str]]]:
    """(ledger ids, znode paths) of each leaf directory under the units, ids ascending, listing level by
    level (pipelined).

    A unit is any directory of the hierarchy relative to `root` (`00`, `00/0003`, `000/0000/0001`): the
    snapshot's finer split of the id space (`bkaudit.store.zkscan`). Only names of BookKeeper's hierarchy are
    followed (`\\d{2}/\\d{4}/L\\d{4}` and `\\d{3}/\\d{4}/\\d{4}/\\d{4}/L\\d{4}`, as
    `bkaudit.zk.paths.parse_hierarchy`); ids are assembled from the names already matched, a directory
    at a time, instead of re-parsing each full path (a measurable cost at a million ledgers).
    """
    for unit in units:
        parts = unit.split("/")
        widths = paths.SHORT_WIDTHS if len(parts[0]) == 2 else paths.LONG_WIDTHS
        level = [(f"{root}/{unit}", "".join(parts))]
        for depth in range(len(parts), len(widths)):
            width = widths[depth]
            kids_of = dict(level)
            level = [
                (f"{p}/{k}", kids_of[p] + k)
                for p, kids in get_children_many(zk, list(kids_of), max_in_flight)
                for k in sorted(kids)
                if len(k) == width and k.isdigit() and k.isascii()
            ]
        digits_of = dict(level)
        for parent, leaves in get_children_many(zk, list(digits_of), max_in_flight):
            names = sorted(
                n for n in leaves if len(n) == 5 and n[0] == "L" and n[1:].isdigit() and n.isascii()
            )
            base = int(digits_of[parent]) * 10_000  # leaf names are the id's last four digits
            ids = [base + int(n[1:]) for n in names]
            if ids and ids[-1] > paths.LONG_MAX:  # only the long hierarchy's last directories reach this
                names = [n for n, i in zip(names, ids, strict=True) if i <= paths.LONG_MAX]
                ids = ids[: len(names)]
            if ids:
                yield ids, [f"{parent}/{n}" for n in names]


def child_counts(zk: KazooClient, znodes: list[str], max_in_flight: int = 200) -> dict[str, int]:
    """numChildren of each znode via pipelined exists (0 when it vanished); no data transferred."""
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


def list_ledger_ids(zk: KazooClient, *, root: str = DEFAULT_ROOT) -> list[int]:
    """Every ledger id under `root`, across short and long hierarchies, sorted."""
    ids: list[int] = []
    for prefix in ledger_prefixes(zk, root=root):
        ids.extend(lid for lid, _ in iter_ledger_paths(zk, prefix, root=root))
    return sorted(ids)


# -- pipelined reads ---------------------------------------------------------------------------------------
def iter_all_metadata(
    zk: KazooClient, *, root: str = DEFAULT_ROOT, max_in_flight: int = 500
) -> Iterator[tuple[int, LedgerMetadata]]:
    """(ledger id, metadata) of every ledger, read pipelined (BookKeeper's BookieLedgerIndexer pass).

    Ledgers deleted since the listing are skipped; an unparseable znode is skipped with a warning (the
    checker, not this pass, reports it).
    """
    import logging

    from bkaudit.errors import FormatError
    from bkaudit.formats.ledger_metadata import parse

    by_path = {path: lid for prefix in ledger_prefixes(zk, root=root)
               for lid, path in iter_ledger_paths(zk, prefix, root=root)}
    for path, data, _ in read_many(zk, list(by_path), max_in_flight=max_in_flight):
        if data is None:
            continue  # deleted since listing
        try:
            metadata = parse(data)
        except FormatError as exc:
            logging.getLogger(__name__).warning("skipping unparseable ledger metadata %s: %s", path, exc)
            continue
        yield by_path[path], metadata


def read_many(
    zk: KazooClient,
    znodes: Iterable[str],
    *,
    max_in_flight: int = 500,
    rate_limiter: RateLimiter | None = None,
    attempts: int = 5,
    base_delay_s: float = 0.1,
    max_delay_s: float = 5.0,
) -> Iterator[tuple[str, bytes | None, ZnodeStat | None]]:
    """Yield (path, data, stat) for each path, pipelining up to `max_in_flight` reads on one session.

    A node deleted between listing and reading yields (path, None, None). Transient errors (connection loss,
    session expiry, throttling) are retried per item with jittered backoff; after `attempts` tries a
    ZooKeeperError ends the scan. Results come in input order, except that retried items come later.
    ZooKeeper answers one session's requests in order, so waiting on the oldest request is optimal.
    """
    if max_in_flight < 1:
        raise ValueError("max_in_flight must be >= 1")
    window: deque[tuple[str, int, Any]] = deque()
    retries: list[tuple[float, int, str, int]] = []  # (due, tie-breaker, path, attempt)
    ticket = itertools.count()
    source = iter(znodes)
    exhausted = False
    while True:
        exhausted = _fill_window(zk, window, retries, source, exhausted, max_in_flight, rate_limiter)
        if not window:
            if not retries:
                return
            time.sleep(max(0.0, retries[0][0] - time.monotonic()))
            continue
        path, attempt, result = window.popleft()
        try:
            data, stat = result.get()
        except NoNodeError:
            yield path, None, None
            continue
        except Exception as exc:
            if not is_transient(exc):
                raise
            if attempt + 1 >= attempts:
                raise ZooKeeperError(f"reading {path} failed after {attempts} attempts: {exc!r}") from exc
            delay = list(backoff_delays(attempt + 2, base_delay_s, max_delay_s))[-1]
            heapq.heappush(retries, (time.monotonic() + delay, next(ticket), path, attempt + 1))
            continue
        yield path, data, stat


def _fill_window(
    zk: KazooClient,
    window: deque[tuple[str, int, Any]],
    retries: list[tuple[float, int, str, int]],
    source: Iterator[str],
    exhausted: bool,
    max_in_flight: int,
    rate_limiter: RateLimiter | None,
) -> bool:
    """Top the window up, due retries first; returns whether `source` is exhausted."""
    while len(window) < max_in_flight:
        if retries and retries[0][0] <= time.monotonic():
            _, _, path, attempt = heapq.heappop(retries)
        elif not exhausted:
            next_path = next(source, None)
            if next_path is None:
                return True
            path, attempt = next_path, 0
        else:
            break
        if rate_limiter is not None:
            rate_limiter.acquire()
        window.append((path, attempt, zk.get_async(path)))
    return exhausted
