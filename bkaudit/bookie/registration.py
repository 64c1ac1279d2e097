"""A bookie's identity and presence in ZooKeeper: cookie validation, registration, re-registration.

Cookies (BookKeeper's LegacyCookieValidation): a bookie stamps `{root}/cookies/<id>` and
`<data-dir>/current/VERSION` with the same Cookie text on first start. Afterwards both must exist and agree.
A bookie whose data directory lost its VERSION while ZooKeeper still has its cookie was wiped: it must not
rejoin silently claiming to hold ledgers it no longer has, so it refuses to start until an operator runs
`bkaudit bookie format`, which removes the cookie and lets it join as a new, empty bookie.

Registration: `Registration` keeps the EPHEMERAL znode in step with the bookie's mode (writable / read-only)
and re-creates it after a ZooKeeper session expires (ephemeral nodes die with the session). All ZooKeeper
work happens on its own thread, never in kazoo's event callbacks.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bkaudit.bookie.ledgerdb import current_dir
from bkaudit.errors import BkAuditError, FormatError, MetadataConflict
from bkaudit.formats import records

if TYPE_CHECKING:
    from bkaudit.store.base import ClusterStore, Registry, SessionEvent

log = logging.getLogger(__name__)

VERSION_FILE = "VERSION"


class CookieError(BkAuditError):
    """The bookie's local cookie and ZooKeeper's disagree: starting could lie about which data it holds."""


def expected_cookie(bookie_id: str, data_dir: str | os.PathLike[str], instance: str) -> records.Cookie:
    """The cookie this bookie stamps: its id, its data directory, the cluster instance."""
    d = str(Path(data_dir).resolve())
    return records.Cookie(bookie_host=bookie_id, journal_dirs=(d,), ledger_dirs=(d,), instance_id=instance)


def read_local_cookie(data_dir: str | os.PathLike[str]) -> records.Cookie | None:
    path = current_dir(data_dir) / VERSION_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return records.parse_cookie(data)
    except FormatError as exc:
        raise CookieError(f"{path} is not a valid cookie: {exc}") from exc


def write_local_cookie(data_dir: str | os.PathLike[str], cookie: records.Cookie) -> None:
    """Write VERSION atomically and durably (temp file, fsync, rename, fsync the directory)."""
    cur = current_dir(data_dir)
    cur.mkdir(parents=True, exist_ok=True)
    tmp = cur / (VERSION_FILE + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(records.encode_cookie(cookie))
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(cur / VERSION_FILE)
    fd = os.open(cur, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_cookie(cluster: ClusterStore, bookie_id: str, data_dir: str | os.PathLike[str], *,
                 has_data: bool, connect: str = "<zk>", preboot: Callable[[str], None] | None = None,
                 stamp_missing: bool = False) -> records.Cookie:
    """Verify the bookie's cookies or stamp a brand-new bookie's; CookieError when it must not start.

    `preboot` (the data-integrity check is enabled, bkaudit.bookie.integrity) runs before cookies are
    stamped: on a new environment (no cookie anywhere: a new bookie, or one wiped and formatted under its
    old id; BookKeeper's DataIntegrityCookieValidation stamps that case without a check, see
    docs/bookie.md), and, with `stamp_missing` (dataIntegrityStampMissingCookies), when the cookies in
    ZooKeeper and the directory are missing or differ, which are then re-stamped instead of refused.
    """
    # reads retried across a lost connection (BookKeeper's ZooKeeperClient retries): a ZooKeeper restart
    # during start-up must not kill the bookie
    registry, root = cluster.registry, cluster.label
    instance = cluster.retrying(registry.instance_id, what="cluster instance id")
    expected = expected_cookie(bookie_id, data_dir, instance)
    local = read_local_cookie(data_dir)
    remote = cluster.retrying(lambda: registry.read_cookie(bookie_id), what="bookie cookie")
    format_hint = f"bkaudit bookie format --zk {connect} --root {root} --bookie {bookie_id}"
    if local is None and remote is None:
        if has_data:
            raise CookieError(f"{data_dir} holds ledger data but no cookie (current/VERSION); refusing to "
                              "guess which bookie it belongs to")
        if preboot is not None:
            preboot("NEW_ENVIRONMENT")
        try:
            registry.create_cookie(expected)
        except MetadataConflict:
            raise CookieError(f"another bookie registered the cookie of {bookie_id} concurrently") from None
        write_local_cookie(data_dir, expected)
        log.info("stamped new cookie for bookie %s (instance %s)", bookie_id, expected.instance_id)
        return expected
    if remote is None:
        raise CookieError(
            f"bookie {bookie_id}: {data_dir} has a cookie but ZooKeeper has none under {root} (the cookie "
            "was formatted or the cluster re-initialised); wipe the data directory to join as a new bookie"
        )
    if local == remote[0] == expected:
        return expected
    if preboot is not None and stamp_missing:
        log.warning("bookie %s: ZooKeeper cookie %s or directory cookie %s differ from %s: running the "
                    "data-integrity check, then stamping new cookies", bookie_id, remote[0], local, expected)
        preboot("INVALID_COOKIE")
        registry.replace_cookie(expected, version=remote[1])
        write_local_cookie(data_dir, expected)
        return expected
    if local is None:
        raise CookieError(
            f"bookie {bookie_id} has a cookie in ZooKeeper but its data directory {data_dir} has none: "
            "its data was wiped or lost. It must not rejoin as if it still held its ledgers. If the loss is "
            "accepted (re-replication restores the ledgers elsewhere), remove the old identity with: "
            f"{format_hint}; or enable [bookie] data_integrity_checking and "
            "data_integrity_stamp_missing_cookies to have the bookie heal itself"
        )
    if local != remote[0]:
        raise CookieError(f"bookie {bookie_id}: local cookie {local} differs from ZooKeeper's {remote[0]}")
    raise CookieError(f"bookie {bookie_id}: cookie {local} does not match this bookie ({expected})")


class Registration:
    """Keeps the bookie's registration (`{root}/available[/readonly]/<id>`) matching its mode, across session
    expiries."""

    def __init__(self, registry: Registry, bookie_id: str, data: bytes) -> None:
        self.registry = registry
        self.bookie_id = bookie_id
        self.data = data
        self.readonly = False
        self._present = False
        self._stopping = False
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="bookie-registration", daemon=True)
        self._unlisten: Callable[[], None] | None = None

    def start(self, *, readonly: bool) -> None:
        """Register now (errors surface to the caller), then follow changes in the background."""
        self.readonly = readonly
        self._present = True
        self.sync()
        self._unlisten = self.registry.on_session(self._on_session)
        self._thread.start()

    def set_readonly(self, readonly: bool, *, wait: bool = False) -> None:
        """Move the registration between writable and read-only (now if `wait`, else in the background)."""
        self.readonly = readonly
        if wait:
            self.sync()
        else:
            self._wake.set()

    def sync(self) -> None:
        """Make ZooKeeper match the desired state (idempotent)."""
        with self._lock:
            if self._present:
                self.registry.register(self.bookie_id, self.data, readonly=self.readonly)
                log.info("registered %s as %s", self.bookie_id, "read-only" if self.readonly else "writable")
            else:
                self.registry.deregister(self.bookie_id)
                log.info("deregistered %s", self.bookie_id)

    def stop(self) -> None:
        """Remove the registration and stop following the session."""
        self._stopping = True
        self._present = False
        if self._unlisten is not None:
            self._unlisten()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        try:
            self.sync()
        except Exception as exc:
            log.warning("deregistering %s failed (the ephemeral node dies with the session): %s",
                        self.bookie_id, exc)

    def _on_session(self, event: SessionEvent) -> None:
        # the store's event thread: only signal. After "lost", a new session connects and its "connected"
        # triggers re-registration; a reconnection of the same session makes the sync a harmless no-op.
        if event == "lost":
            log.warning("ZooKeeper session of bookie %s expired; will re-register", self.bookie_id)
        else:
            self._wake.set()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            try:
                self.sync()
            except Exception as exc:
                log.warning("registration of %s failed, retrying: %s", self.bookie_id, exc)
                threading.Event().wait(1.0)
                self._wake.set()
