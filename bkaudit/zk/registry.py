"""Bookies in ZooKeeper: registrations (writable / read-only), cookies and Pulsar's rack JSON.

Layout and bytes are BookKeeper's (shared/spec/bookkeeper-formats.md section 1): a writable bookie is the
EPHEMERAL `{root}/available/<id>`, a read-only one `{root}/available/readonly/<id>`, both holding a binary
BookieServiceInfoFormat (empty data = legacy, endpoint derived from the id); `{root}/cookies/<id>` lists every
bookie ever formatted into the cluster; racks live in Pulsar's `/bookies` JSON at the ZooKeeper root.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Literal

from kazoo.exceptions import BadVersionError, NoAuthError, NodeExistsError, NoNodeError

from bkaudit.errors import ClusterError, FormatError, ZooKeeperError
from bkaudit.formats import records
from bkaudit.model.topology import RackConfig
from bkaudit.zk import paths
from bkaudit.zk.paths import DEFAULT_ROOT, RACKS_PATH

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from kazoo.security import ACL

log = logging.getLogger(__name__)

DEFAULT_RACK_GROUP = "default"
BookieState = Literal["writable", "readonly", "absent"]


# -- listings ---------------------------------------------------------------------------------------------
def list_writable(zk: KazooClient, root: str = DEFAULT_ROOT) -> list[str]:
    """Writable bookies: children of `available`, without the `readonly` child (ZKRegistrationClient)."""
    try:
        children = zk.get_children(paths.available_root(root=root))
    except NoNodeError:
        return []
    return sorted(c for c in children if c != paths.READONLY_NODE)


def list_readonly(zk: KazooClient, root: str = DEFAULT_ROOT) -> list[str]:
    try:
        return sorted(zk.get_children(paths.readonly_root(root=root)))
    except NoNodeError:
        return []


def list_cookies(zk: KazooClient, root: str = DEFAULT_ROOT) -> list[str]:
    """Every bookie known to the cluster (BookKeeper's "all bookies": the cookie znodes)."""
    try:
        return sorted(zk.get_children(paths.cookies_root(root=root)))
    except NoNodeError:
        return []


def bookie_state(zk: KazooClient, bookie_id: str, root: str = DEFAULT_ROOT) -> BookieState:
    if exists(zk, paths.available_path(bookie_id, root=root)):
        return "writable"
    if exists(zk, paths.readonly_path(bookie_id, root=root)):
        return "readonly"
    return "absent"


def exists(zk: KazooClient, path: str) -> bool:
    """Whether `path` exists, also for nodes this session may not read (ZooKeeper 3.9 checks READ on
    exists; NoAuth therefore means the node is there)."""
    try:
        return zk.exists(path) is not None
    except NoAuthError:
        return True


def registration(zk: KazooClient, bookie_id: str,
                 root: str = DEFAULT_ROOT) -> tuple[BookieState, records.BookieServiceInfo | None]:
    """("writable" | "readonly" | "absent", its BookieServiceInfo); the writable registration is looked at
    first, as BookKeeper's clients choose ensembles from it. FormatError for an unparseable registration.

    Empty data (a legacy registration) yields the endpoint derived from the id, as BookKeeper does.
    """
    where: BookieState
    for where, path in (("writable", paths.available_path(bookie_id, root=root)),
                        ("readonly", paths.readonly_path(bookie_id, root=root))):
        try:
            data, _ = zk.get(path)
        except NoNodeError:
            continue
        return where, records.parse_bookie_service_info(data, bookie_id)
    return "absent", None


def read_bookie_service_info(zk: KazooClient, bookie_id: str,
                             root: str = DEFAULT_ROOT) -> records.BookieServiceInfo | None:
    """The registration of a writable or read-only bookie; None when it is not registered."""
    return registration(zk, bookie_id, root)[1]


def endpoint_target(info: records.BookieServiceInfo) -> str | None:
    """host:port of the bookie-rpc endpoint of a registration."""
    endpoint = info.endpoint()
    if endpoint is None:
        return None
    host = endpoint.host
    return f"[{host}]:{endpoint.port}" if ":" in host else f"{host}:{endpoint.port}"


# -- registration -----------------------------------------------------------------------------------------
def register(zk: KazooClient, bookie_id: str, data: bytes, *, readonly: bool = False,
             root: str = DEFAULT_ROOT, acl: list[ACL] | None = None,
             stale_wait_s: float | None = None) -> str:
    """Create (or refresh) this session's EPHEMERAL registration and remove the opposite one.

    A node left by another session (a killed process of the same bookie whose session has not expired yet)
    is waited out as BookKeeper's ZKRegistrationManager.checkRegNodeAndWaitExpired does: up to the session
    timeout (`stale_wait_s`, default this client's negotiated one) for ZooKeeper to delete it. If it is still
    there, another live process owns the id and registering fails (BookKeeper's NodeExistsException).
    """
    writable, ro = paths.available_path(bookie_id, root=root), paths.readonly_path(bookie_id, root=root)
    want, other = (ro, writable) if readonly else (writable, ro)
    if readonly:
        zk.ensure_path(paths.readonly_root(root=root), acl=acl)
    session = zk.client_id[0] if zk.client_id else None
    wait_s = stale_wait_s if stale_wait_s is not None else _session_timeout_s(zk)
    for _ in range(10):
        try:
            zk.create(want, data, acl=acl, ephemeral=True)
            break
        except NodeExistsError:
            gone = threading.Event()
            stat = zk.exists(want, watch=_setter(gone))
            if stat is None:
                continue
            if stat.ephemeralOwner == session:
                zk.set(want, data)
                break
            log.warning("registration %s belongs to session 0x%x; waiting up to %.1fs for it to expire",
                        want, stat.ephemeralOwner, wait_s)
            if not gone.wait(wait_s) and zk.exists(want) is not None:
                raise ZooKeeperError(
                    f"{want} is still registered by another session (0x{stat.ephemeralOwner:x}) after "
                    f"{wait_s:g}s: another process runs bookie {bookie_id}"
                ) from None
    else:
        raise ZooKeeperError(f"could not register {want}: it keeps being recreated by another session")
    _delete(zk, other, None)  # ours or stale: the id is ours either way
    return want


def _setter(event: threading.Event) -> Callable[[object], None]:
    return lambda _watched: event.set()


def _session_timeout_s(zk: KazooClient) -> float:
    """The negotiated session timeout (kazoo keeps it in ms once connected), else the requested one."""
    negotiated = getattr(zk, "_session_timeout", None)
    return float(negotiated) / 1000.0 if negotiated else 30.0


def deregister(zk: KazooClient, bookie_id: str, *, root: str = DEFAULT_ROOT) -> None:
    """Remove this session's registrations (writable and read-only)."""
    session = zk.client_id[0] if zk.client_id else None
    for path in (paths.available_path(bookie_id, root=root), paths.readonly_path(bookie_id, root=root)):
        _delete(zk, path, session)


def _delete(zk: KazooClient, path: str, session: int | None) -> None:
    """Delete `path` if it belongs to `session` (any owner when session is None)."""
    try:
        _, stat = zk.get(path)
        if session is None or stat.ephemeralOwner == session:
            zk.delete(path, version=stat.version)
    except (NoNodeError, BadVersionError):
        pass


# -- cookies ----------------------------------------------------------------------------------------------
def read_cookie(zk: KazooClient, bookie_id: str,
                root: str = DEFAULT_ROOT) -> tuple[records.Cookie, int] | None:
    """(cookie, znode version) or None when the bookie has no cookie."""
    try:
        data, stat = zk.get(paths.cookie_path(bookie_id, root=root))
    except NoNodeError:
        return None
    return records.parse_cookie(data), stat.version


def instance_id(zk: KazooClient, root: str) -> str:
    """The cluster's INSTANCEID; ClusterError when the cluster was never initialised."""
    try:
        data, _ = zk.get(paths.instanceid_path(root=root))
    except NoNodeError:
        raise ClusterError(
            f"no BookKeeper cluster at {root} (missing {paths.instanceid_path(root=root)}); "
            f"initialise it first: bkaudit cluster init --zk ... --root {root}"
        ) from None
    return str(data.decode("utf-8"))


def create_cookie(zk: KazooClient, cookie: records.Cookie, *, root: str = DEFAULT_ROOT,
                  acl: list[ACL] | None = None) -> None:
    """Create the cookie znode (NodeExistsError if another bookie claimed the id first)."""
    zk.ensure_path(paths.cookies_root(root=root), acl=acl)
    zk.create(paths.cookie_path(cookie.bookie_host, root=root), records.encode_cookie(cookie), acl=acl)


def delete_cookie(zk: KazooClient, bookie_id: str, root: str = DEFAULT_ROOT) -> bool:
    """Remove a bookie's cookie (BookKeeper's `bookie format` of that id); False if there was none."""
    try:
        zk.delete(paths.cookie_path(bookie_id, root=root))
    except NoNodeError:
        return False
    return True


# -- racks ------------------------------------------------------------------------------------------------
def read_racks(zk: KazooClient) -> dict[str, dict[str, records.BookieRackInfo]]:
    """Pulsar's rack configuration (`/bookies`), parsed; {} when absent or empty."""
    try:
        data, _ = zk.get(RACKS_PATH)
    except NoNodeError:
        return {}
    return records.parse_rack_config(data)


def read_rack_config(zk: KazooClient, *, root: str = DEFAULT_ROOT) -> RackConfig:
    """`/bookies` for placement: the groups, with the registrations under `root` that resolve their keys.

    Pulsar's BookieRackAffinityMapping files each key's rack under the host of that bookie's registered
    `bookie-rpc` endpoint, and BookKeeper asks about the host it finds the same way; `Topology` does both
    with `RackConfig.addresses`. Registrations are read only when the map holds something.
    """
    groups = read_racks(zk)
    if not groups:
        return RackConfig({}, addresses={})
    writable, readonly = list_writable(zk, root), list_readonly(zk, root)
    return RackConfig(groups, addresses=endpoint_hosts(zk, writable, readonly, root=root))


def endpoint_hosts(zk: KazooClient, writable: Iterable[str], readonly: Iterable[str] = (), *,
                   root: str = DEFAULT_ROOT) -> dict[str, str]:
    """bookie id → host of its registration's `bookie-rpc` endpoint, as BookKeeper's
    DefaultBookieAddressResolver finds it (the writable registration first, then the read-only one; empty
    data is the legacy endpoint of a `host:port` id). Bookies gone meanwhile, unparseable, or without that
    endpoint are left out: BookKeeper cannot resolve them either.
    """
    from bkaudit.zk.ledgers import read_many

    writable = set(writable)
    wanted = {paths.available_path(b, root=root): b for b in writable}
    wanted.update({paths.readonly_path(b, root=root): b for b in set(readonly) - writable})
    out: dict[str, str] = {}
    for path, data, _ in read_many(zk, list(wanted)):
        bookie_id = wanted[path]
        if data is None:
            continue
        try:
            endpoint = records.parse_bookie_service_info(data, bookie_id).endpoint()
        except FormatError as exc:
            log.info("registration of %s unresolvable (%s): a rack entry covers its id only", bookie_id, exc)
            continue
        if endpoint is not None:
            out[bookie_id] = endpoint.host
    return out


def set_rack(zk: KazooClient, bookie_id: str, rack: str, hostname: str | None = None, *,
             group: str = DEFAULT_RACK_GROUP, acl: list[ACL] | None = None, attempts: int = 100) -> None:
    """Record `bookie_id`'s rack in `/bookies` with a compare-and-set loop.

    Only the bookie's own entry changes (`records.update_rack_entry`): Pulsar's other entries, raw rack
    strings and group order survive. Bookies starting together all rewrite the same JSON document; each
    read-modify-write carries the znode version, and a lost race re-reads and retries, so no entry is lost.
    """
    for _ in range(attempts):
        try:
            data, stat = zk.get(RACKS_PATH)
        except NoNodeError:
            data, stat = b"", None
        try:
            updated = records.update_rack_entry(data, bookie_id=bookie_id, rack=rack, hostname=hostname,
                                                group=group)
        except FormatError as exc:
            raise ZooKeeperError(f"{RACKS_PATH} holds malformed rack JSON (left untouched): {exc}") from exc
        if updated is None:
            return
        try:
            if stat is None:
                zk.create(RACKS_PATH, updated, acl=acl)
            else:
                zk.set(RACKS_PATH, updated, version=stat.version)
            return
        except (BadVersionError, NoNodeError, NodeExistsError):
            continue
    raise ZooKeeperError(f"could not update {RACKS_PATH} for {bookie_id} after {attempts} attempts")


# -- overview ---------------------------------------------------------------------------------------------


def registration_owner(zk: KazooClient, bookie_id: str, root: str = DEFAULT_ROOT) -> int | None:
    """The session owning the bookie's registration (writable or read-only), None if unregistered, -1 when
    registered under an ACL this client may not read (ZooKeeper security on)."""
    from kazoo.exceptions import NoAuthError

    for path in (paths.available_path(bookie_id, root=root), paths.readonly_path(bookie_id, root=root)):
        try:
            stat = zk.exists(path)
        except NoAuthError:
            return -1
        if stat is not None:
            return int(stat.ephemeralOwner)
    return None
