"""ZooKeeper sessions: connect (with auth and BookKeeper's ACLs), retry transient errors, rate-limit.

The audited cluster's ZooKeeper is shared with BookKeeper and Pulsar, and BookKeeper users' top complaint is
audits expiring sessions and overloading ZooKeeper. So every bulk reader takes a `RateLimiter`, transient
errors are retried with jittered exponential backoff (not hammered), and connection problems surface as one
clear `ZooKeeperError` instead of a kazoo traceback.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionDropped,
    ConnectionLoss,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
    ThrottledOpError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE

from bkaudit.errors import ZooKeeperError
from bkaudit.logs import install_kazoo_filter

if TYPE_CHECKING:
    from kazoo.security import ACL

    from bkaudit.zk.settings import ZkSettings

T = TypeVar("T")

# Errors after which the same request may succeed: the connection moved/dropped, the server was slow, the
# session expired (kazoo opens a new session by itself) or ZooKeeper asked us to back off.
# ConnectionClosedError (a SessionExpiredError subclass) means *we* stopped the client: not transient.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionLoss,
    ConnectionDropped,
    OperationTimeoutError,
    SessionExpiredError,
    ThrottledOpError,
    KazooTimeoutError,
)


def is_transient(exc: BaseException) -> bool:
    """True if retrying the same ZooKeeper request later may succeed."""
    return isinstance(exc, TRANSIENT_ERRORS) and not isinstance(exc, ConnectionClosedError)


# -- sessions ----------------------------------------------------------------------------------------------
def connect(
    settings_or_connect: ZkSettings | str,
    *,
    timeout_s: float | None = None,
    read_only: bool = False,
) -> KazooClient:
    """A started kazoo client for the given settings (or bare connect string with default settings).

    Digest credentials from `auth_digest` are added after the session starts (kazoo re-sends them on every
    reconnect); `default_acl` follows BookKeeper's `ZkUtils.getACLs`, so nodes bkaudit creates carry the same
    ACLs BookKeeper's would. Raises ZooKeeperError naming the servers if no session is established in time.
    """
    settings = _settings(settings_or_connect)
    wait_s = settings.connect_timeout_s if timeout_s is None else timeout_s
    install_kazoo_filter()  # kazoo's DEBUG lines carry auth packets and znode data (passwords, secrets)
    client = KazooClient(
        hosts=settings.connect,
        timeout=settings.session_timeout_s,
        read_only=read_only,
        default_acl=acls(settings),
        connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 5.0},
    )
    try:
        client.start(timeout=wait_s)
    except KazooTimeoutError:
        _discard(client)
        raise ZooKeeperError(
            f"cannot connect to ZooKeeper at {settings.connect} within {wait_s:g}s "
            "(is it running and reachable? check --zk / BKAUDIT_ZK / [zk] connect)"
        ) from None
    if settings.auth_digest:
        _add_digest_auth(client, settings)
    return client


def require_reachable(connect: str, *, timeout_s: float = 2.0) -> None:
    """Fail in about `timeout_s` when no server of a connect string accepts a TCP connection.

    A cheap check before anything expensive (a Spark JVM, a job): kazoo's own start keeps retrying for the
    whole connect timeout. It only proves a listener, not a healthy ensemble; `connect` still decides that.
    """
    import socket

    problems = []
    for host, port in connect_addresses(connect):
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return
        except OSError as exc:
            problems.append(f"{host}:{port} ({exc.strerror or type(exc).__name__})")
    raise ZooKeeperError(
        f"ZooKeeper is not reachable at {connect}: {', '.join(problems) or 'no servers named'} "
        "(is it running? check --zk / BKAUDIT_ZK / [zk] connect)"
    )


def connect_addresses(connect: str) -> list[tuple[str, int]]:
    """(host, port) of each server in "h1:p1,h2:p2/chroot" (port 2181 when omitted, [v6]:port allowed)."""
    hosts = connect.split("/", 1)[0]
    out = []
    for item in filter(None, (h.strip() for h in hosts.split(","))):
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = rest.lstrip(":")
        else:
            host, _, port = item.rpartition(":") if ":" in item else (item, "", "")
        out.append((host, int(port) if port.isdigit() else 2181))
    return out


def _settings(settings_or_connect: ZkSettings | str) -> ZkSettings:
    from bkaudit.zk.settings import ZkSettings

    if isinstance(settings_or_connect, ZkSettings):
        return settings_or_connect
    if isinstance(settings_or_connect, str):
        return ZkSettings(connect=settings_or_connect)
    raise TypeError(f"expected ZkSettings or a connect string, got {type(settings_or_connect).__name__}")


def _add_digest_auth(client: KazooClient, settings: ZkSettings) -> None:
    try:
        client.add_auth("digest", settings.auth_digest)
    except AuthFailedError:
        _discard(client)
        user = settings.auth_digest.split(":", 1)[0]
        raise ZooKeeperError(
            f"ZooKeeper at {settings.connect} rejected the digest credentials of user {user!r}"
        ) from None


def _discard(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()


def close(client: KazooClient) -> None:
    """Stop and close a client (ephemeral nodes of its session go away now, not at session timeout)."""
    _discard(client)


def acls(settings: ZkSettings | None) -> list[ACL] | None:
    """ACLs for znodes bkaudit creates, as BookKeeper's ZkUtils.getACLs (None: no settings, kazoo's default).

    `enable_security` (BookKeeper's zkEnableSecurity) → CREATOR_ALL_ACL, else OPEN_ACL_UNSAFE.
    """
    if settings is None:
        return None
    return list(CREATOR_ALL_ACL if settings.enable_security else OPEN_ACL_UNSAFE)


# -- retries -----------------------------------------------------------------------------------------------
def read_children(
    zk: KazooClient, base: str, decode: Callable[[bytes], T], *, skip: tuple[type[Exception], ...]
) -> list[T]:
    """Every child of `base` decoded, in name order (sequential znodes: creation order); children deleted
    meanwhile, and those `decode` rejects with one of `skip`, are left out. No `base`: an empty list."""
    try:
        names = sorted(zk.get_children(base))
    except NoNodeError:
        return []
    out = []
    for name in names:
        try:
            data, _ = zk.get(f"{base}/{name}")
            out.append(decode(data))
        except (NoNodeError, *skip):
            continue
    return out


# -- znode helpers shared by the ledger, under-replication and bkaudit-state modules ---------------------
def delete_empty_parents(zk: KazooClient, path: str, *, stop_at: str, max_levels: int | None = None) -> int:
    """Delete the parents of `path` while they are empty, below `stop_at`; returns how many were removed."""
    removed = 0
    parent = path.rsplit("/", 1)[0]
    while parent.startswith(stop_at + "/") and (max_levels is None or removed < max_levels):
        try:
            zk.delete(parent)
        except NotEmptyError:
            break
        except NoNodeError:
            pass  # someone else cleaned it up: keep going upwards
        removed += 1
        parent = parent.rsplit("/", 1)[0]
    return removed


def get_children_many(
    zk: KazooClient, parents: list[str], max_in_flight: int = 100
) -> Iterator[tuple[str, list[str]]]:
    """(parent, children) in input order with up to `max_in_flight` getChildren outstanding; NoNode → []."""
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
            children = result.get()
        except NoNodeError:
            children = []
        except Exception as exc:
            if not is_transient(exc):
                raise
            children = _get_children_retrying(zk, parent)
        yield parent, children


def _get_children_retrying(zk: KazooClient, parent: str) -> list[str]:
    def attempt() -> list[str]:
        try:
            return list(zk.get_children(parent))
        except NoNodeError:
            return []

    return with_retries(attempt, client=zk, what=f"listing {parent}")


_JITTER = random.Random()
"""Its own generator: the global one belongs to the application (and a retry in a background thread that
drew from it disturbed Hypothesis' strategies in the same test process: HypothesisDeprecationWarning)."""


def backoff_delays(attempts: int, base_delay_s: float, max_delay_s: float) -> Iterator[float]:
    """`attempts - 1` sleeps: exponential from `base_delay_s`, capped, with 50-100 % jitter.

    Jitter keeps many Spark tasks that failed together from retrying in lock-step against ZooKeeper.
    """
    for i in range(max(0, attempts - 1)):
        cap = min(max_delay_s, base_delay_s * (2**i))
        yield cap * (0.5 + _JITTER.random() / 2)


def with_retries(
    fn: Callable[[], T],
    *,
    attempts: int = 5,
    base_delay_s: float = 0.1,
    max_delay_s: float = 5.0,
    client: KazooClient | None = None,
    what: str = "ZooKeeper request",
) -> T:
    """Call `fn()`, retrying transient kazoo errors with backoff; ZooKeeperError once attempts run out.

    After a dropped connection or an expired session, kazoo reconnects (with a new session) by itself; given
    the `client`, the wait before the next attempt also waits for that reconnection (bounded by the delay).
    Non-transient errors (NoNode, BadVersion, NodeExists, ...) propagate unchanged on the first occurrence:
    they are answers, not failures.
    """
    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    delays = backoff_delays(attempts, base_delay_s, max_delay_s)
    while True:
        try:
            return fn()
        except Exception as exc:
            if not is_transient(exc):
                raise
            delay = next(delays, None)
            if delay is None:
                raise ZooKeeperError(
                    f"{what} failed after {attempts} attempts: {type(exc).__name__}: {exc}"
                ) from exc
            _pause(client, delay)


def _pause(client: KazooClient | None, delay_s: float) -> None:
    """Sleep `delay_s`; with a disconnected client, wait for its reconnection for at least that long."""
    time.sleep(delay_s)
    deadline = time.monotonic() + delay_s
    while client is not None and not client.connected and time.monotonic() < deadline:
        time.sleep(0.02)


# -- rate limiting -----------------------------------------------------------------------------------------
class RateLimiter:
    """A thread-safe token bucket: at most `rate_per_s` permits per second, bursts up to `burst`.

    Protects the audited ZooKeeper from a full scan. `rate_per_s` 0 or None means unlimited (acquire returns
    at once). Permits are reserved in arrival order, so concurrent callers share the rate fairly and a
    request larger than the burst simply waits longer instead of blocking forever.
    """

    def __init__(self, rate_per_s: float | None, burst: int | None = None) -> None:
        if rate_per_s is not None and rate_per_s < 0:
            raise ValueError("rate_per_s must be >= 0 (0 or None = unlimited)")
        self.rate = float(rate_per_s or 0.0)
        self.burst = float(burst if burst is not None else max(1.0, self.rate))
        if self.burst <= 0:
            raise ValueError("burst must be >= 1")
        self._tokens = self.burst
        self._stamp = time.monotonic()
        self._lock = threading.Lock()

    @property
    def unlimited(self) -> bool:
        return self.rate <= 0

    def acquire(self, n: int = 1) -> float:
        """Block until `n` permits are available; returns the seconds waited."""
        if self.unlimited or n <= 0:
            return 0.0
        with self._lock:
            self._refill()
            self._tokens -= n
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if wait > 0:
            time.sleep(wait)
        return wait

    def try_acquire(self, n: int = 1) -> bool:
        """Take `n` permits if available now, without waiting."""
        if self.unlimited or n <= 0:
            return True
        with self._lock:
            self._refill()
            if self._tokens >= n:
                self._tokens -= n
                return True
            return False

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def __repr__(self) -> str:
        return f"RateLimiter(rate_per_s={self.rate:g}, burst={self.burst:g})"


def rate_limiter(rate_per_s: float | None, burst: int | None = None) -> RateLimiter | None:
    """A RateLimiter, or None when unlimited (callers skip the call entirely on the hot path)."""
    return RateLimiter(rate_per_s, burst) if rate_per_s else None

