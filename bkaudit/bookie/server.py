"""The bookie process: storage + RPC service + ZooKeeper identity, and its lifecycle.

Start-up order matters: take the data directory (lock, open storage), prove identity (cookie) before
serving, serve, then announce (registration, rack). Shutdown reverses it gracefully: announce read-only
first so writers move away, drain what is in flight, stop serving, deregister, close storage.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bkaudit import __version__
from bkaudit.bookie import lifecycle as bookie_lifecycle
from bkaudit.bookie.mode import BookieMode
from bkaudit.bookie.nativeserver import NativeServer
from bkaudit.bookie.registration import Registration, check_cookie
from bkaudit.bookie.service import BookieService
from bkaudit.bookie.settings import BookieSettings
from bkaudit.bookie.storage import Storage
from bkaudit.config import Settings, ZkSettings
from bkaudit.errors import ClusterError
from bkaudit.formats import records
from bkaudit.rpc.framing import max_payload_bytes
from bkaudit.rpc.settings import BATCH_LISTING_PROPERTY, GRPC_PROTOCOL
from bkaudit.rpc.tls import server_credentials, server_ssl_context
from bkaudit.shutdown import STOP_GRACE_S, StopWatchdog, stop_signals
from bkaudit.store.zookeeper import bind
from bkaudit.zk import client as zkclient

log = logging.getLogger(__name__)

DiskUsage = Callable[[], tuple[int, int]]
TRANSPORT_PROPERTY = ("bkaudit.transport", "native")


@dataclass(frozen=True)
class BookieOptions:
    """Per-process choices (command line) on top of the [bookie] settings."""

    data_dir: str
    port: int
    bookie_id: str | None = None
    rack: str | None = None
    readonly: bool = False
    autorecovery: bool = False
    no_listing: bool = False
    events_path: str | None = None
    """JSON-lines audit trail of the data-integrity check (`--events`), as AutoRecovery's."""


@dataclass(frozen=True)
class Services:
    """What runs inside a bookie process but belongs to a higher layer, handed in by whoever composes the
    process (`bkaudit bookie run`, bkaudit.bookie.commands): the bookie layer never imports AutoRecovery.

    `autorecovery(settings, zk, bookie_id)` starts AutoRecovery (`--autorecovery`) and returns an object
    whose `stop()` the bookie calls at shutdown. `integrity(settings=, storage=, cluster=, bookie_id=,
    interval_s=, events_path=)` returns the data-integrity check (`[bookie] data_integrity_checking`):
    `preboot(reason)` (run by the cookie check before stamping), `needed`, `start()`, `stop()`.
    """

    autorecovery: Callable[[Settings, Any, str], Any] | None = None
    integrity: Callable[..., Any] | None = None


class BookieServer:
    """One bookie; usable in-process (tests) or through `run()` (the `bkaudit bookie run` process)."""

    def __init__(self, settings: Settings, options: BookieOptions, *, services: Services = Services(),
                 disk_usage: DiskUsage | None = None) -> None:
        self.settings = settings
        self.services = services
        self.conf = settings.get(BookieSettings)
        self.zk_settings = settings.get(ZkSettings)
        self.options = options
        self.root = self.zk_settings.root
        self.port = options.port
        self.bookie_id = options.bookie_id or f"{self.conf.advertised_address}:{options.port}"
        self.data_dir = Path(options.data_dir).resolve()
        self.mode = BookieMode()
        self._disk_usage = disk_usage
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._closers: list[Callable[[], None]] = []
        self.storage: Storage | None = None
        self.service: BookieService | None = None
        self.rpc: NativeServer | None = None
        self.grpc: Any = None  # the optional gRPC listener (bkaudit.bookie.rpcserver.RpcServer)
        self.grpc_port: int | None = None
        self.registration: Registration | None = None
        self._autorecovery: Any = None
        self.integrity: Any = None
        """The data-integrity check when enabled (bkaudit.autorecovery.integrity.IntegrityCheck)."""
        self.failure: str | None = None
        """Why the bookie shut itself down (its storage was lost), None otherwise."""
        self.released: bool | None = None
        """After `stop()`: whether it announced read-only and deregistered itself (ZooKeeper answered); False
        when ZooKeeper was unreachable (its registration then goes with the session)."""

    # -- start -----------------------------------------------------------------------------------------------
    def start(self) -> BookieServer:
        try:
            self._start()
        except BaseException:
            self._close_all()
            raise
        return self

    def _start(self) -> None:
        conf = self.conf
        autorecovery = self.services.autorecovery if self.options.autorecovery else None
        integrity_factory = self.services.integrity if conf.data_integrity_checking else None
        if self.options.autorecovery and autorecovery is None:  # fail fast, before the data directory
            raise ClusterError("--autorecovery: this process was started without AutoRecovery to run (start "
                               "the bookie with `bkaudit bookie run`)")
        if conf.data_integrity_checking and integrity_factory is None:
            raise ClusterError("[bookie] data_integrity_checking: this process was started without the check "
                               "to run (start the bookie with `bkaudit bookie run`)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        storage = self.storage = Storage(self.data_dir, max_batch=conf.group_commit_max_batch,
                                         max_pending=conf.max_pending_requests,
                                         listing_cache_bytes=conf.listing_cache_bytes)
        self._closers.append(storage.close)
        zk = self.zk = zkclient.connect(self.zk_settings)
        self._closers.append(lambda: zkclient.close(zk))
        cluster = bind(zk, self.zk_settings)
        integrity = None
        if integrity_factory is not None:
            integrity = self.integrity = integrity_factory(
                settings=self.settings, storage=storage, cluster=cluster, bookie_id=self.bookie_id,
                interval_s=conf.data_integrity_interval_s, events_path=self.options.events_path)
        check_cookie(cluster, self.bookie_id, self.data_dir, has_data=bool(storage.ledger_ids()),
                     connect=self.zk_settings.connect,
                     preboot=integrity.preboot if integrity is not None else None,
                     stamp_missing=conf.data_integrity_stamp_missing_cookies)
        if self.options.readonly:
            self.mode.set("forced", True)
        bookie_lifecycle.watch(cluster, self.bookie_id, self.mode)  # Draining & co.: read-only
        self._check_disk()
        service = self.service = BookieService(storage, self.mode, max_pending=conf.max_pending_requests,
                                               read_threads=conf.read_threads,
                                               answer_listing=conf.answer_listing
                                               and not self.options.no_listing,
                                               max_response_bytes=max_payload_bytes(conf.max_frame_bytes))
        self._closers.append(service.close)
        context = None
        if conf.tls_cert:
            context = server_ssl_context(conf.tls_cert, conf.tls_key, conf.tls_ca or None)
        if conf.tls_ca and not conf.require_tls:
            log.warning("mutual TLS is configured but plaintext clients are served too, as a BookKeeper "
                        "bookie with the default auth provider does; set [bookie] require_tls = true to "
                        "refuse them")
        rpc = self.rpc = NativeServer(service, conf.listen_address, self.port, ssl_context=context,
                                      require_tls=conf.require_tls, max_frame_bytes=conf.max_frame_bytes,
                                      max_connections=conf.max_connections,
                                      frame_timeout_s=conf.frame_timeout_s,
                                      max_buffered_bytes=conf.max_buffered_bytes)
        self.port = rpc.start()
        self._closers.append(lambda: rpc.stop(grace=1.0))
        if conf.grpc_port >= 0:
            from bkaudit.bookie.rpcserver import RpcServer

            creds = None
            if conf.tls_cert:
                creds = server_credentials(conf.tls_cert, conf.tls_key, conf.tls_ca or None)
            grpc_server = self.grpc = RpcServer(service, conf.listen_address, conf.grpc_port, creds)
            self.grpc_port = grpc_server.start()
            self._closers.append(lambda: grpc_server.stop(grace=1.0))
        # the rack first: once registered, clients and auditors place ledgers with this bookie's location
        rack = self.options.rack or conf.rack
        if rack:
            cluster.registry.set_rack(self.bookie_id, rack, conf.advertised_address)
        registration = self.registration = Registration(
            cluster.registry, self.bookie_id, self._service_info()
        )
        registered_readonly = self.mode.readonly
        registration.start(readonly=registered_readonly)
        self._closers.append(registration.stop)
        self.mode.listen(lambda readonly: registration.set_readonly(readonly), assumed=registered_readonly)
        threading.Thread(target=self._monitor_disk, name="bookie-disk", daemon=True).start()
        if integrity is not None and integrity.needed:  # serving and registered: recover, then copy back
            integrity.start()
            self._closers.append(integrity.stop)
        if autorecovery is not None:
            self._autorecovery = autorecovery(self.settings, self.zk, self.bookie_id)
            self._closers.append(self._autorecovery.stop)
        security = ("mutual TLS" if conf.tls_ca else "TLS") if context else "plaintext"
        log.info("bookie %s serving on %s:%d (%s), data %s, %s", self.bookie_id, conf.listen_address,
                 self.port, security, self.data_dir, "read-only" if self.mode.readonly else "writable")

    def _service_info(self) -> bytes:
        conf = self.conf
        props = {TRANSPORT_PROPERTY[0]: TRANSPORT_PROPERTY[1], "bkaudit.version": __version__,
                 "bkaudit.tls": ("mtls" if conf.tls_ca else "tls") if conf.tls_cert else "none"}
        if conf.answer_listing and not self.options.no_listing:  # a DbLedgerStorage-like bookie lists nothing
            props[BATCH_LISTING_PROPERTY] = "true"
        extra: tuple[records.Endpoint, ...] = ()
        if self.grpc_port is not None:
            extra = (records.Endpoint(GRPC_PROTOCOL, self.grpc_port, conf.advertised_address, GRPC_PROTOCOL),)
        # BookieService.publishInfo: the "tls" extension when a TLS provider is configured. No "http"
        # endpoint (HttpService's "httpserver"): this bookie runs no HTTP server of its own (`bkaudit admin
        # serve` is one server for the whole cluster)
        info = records.bookie_service_info_for(self.bookie_id, conf.advertised_address, self.port,
                                               rpc_extensions=("tls",) if conf.tls_cert else (),
                                               extra_endpoints=extra, properties=props)
        return records.encode_bookie_service_info(info)

    # -- disk space ------------------------------------------------------------------------------------------
    def disk_usage(self) -> tuple[int, int]:
        if self._disk_usage is not None:
            return self._disk_usage()
        usage = shutil.disk_usage(self.data_dir)
        return usage.total, usage.free

    def _check_disk(self) -> None:
        """Read-only below the free-space threshold; writable again only above 1.1x it (no flapping)."""
        total, free = self.disk_usage()
        threshold = max(self.conf.min_free_bytes, int(total * self.conf.min_free_fraction))
        if free < threshold and "disk" not in self.mode.reasons:
            log.warning("free disk %d < threshold %d bytes: switching to read-only", free, threshold)
            self.mode.set("disk", True)
        elif free >= threshold * 1.1 and "disk" in self.mode.reasons:
            log.info("free disk %d recovered above %d bytes: writable again", free, threshold)
            self.mode.set("disk", False)

    def _monitor_disk(self) -> None:
        while not self._stop.wait(self.conf.disk_check_interval_s):
            try:
                self._check_disk()
            except Exception:
                log.exception("disk check failed")
            if self._check_storage():
                return

    def _check_storage(self) -> bool:
        """BookKeeper's LedgerDirsMonitor: a failed ledger directory (DiskErrorException) makes the Bookie's
        diskFailed listener trigger a shutdown (triggerBookieShutdown(ExitCode.BOOKIE_EXCEPTION)). Lost
        storage here does the same: requests fail EIO at once, then the bookie stops and deregisters, so
        nothing lists entries it no longer has. True once it failed."""
        storage = self.storage
        if storage is None or self._stop.is_set():
            return False
        try:
            problem = storage.check()
        except Exception:
            log.exception("storage check failed")
            return False
        if problem is None:
            return False
        self.failure = problem
        log.error("bookie %s: storage lost (%s); shutting down as a BookKeeper bookie does on a disk failure",
                  self.bookie_id, problem)
        threading.Thread(target=self.stop, name="bookie-disk-failure", daemon=True).start()
        return True

    # -- stop ------------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Graceful: go read-only in ZooKeeper, drain in-flight requests, stop serving, deregister, close."""
        if self._stop.is_set():  # stopping already (lost storage, a signal): let that finish
            self._stopped.wait(self.conf.drain_timeout_s + 30)
            return
        self._stop.set()
        zk = getattr(self, "zk", None)
        reachable = zk is not None and bool(zk.connected)
        log.info("bookie %s stopping: switching to read-only", self.bookie_id)
        if self.registration is not None:
            self.mode.set("shutdown", True)
            if reachable:
                try:
                    self.registration.set_readonly(True, wait=True)
                except Exception as exc:
                    log.warning("could not announce read-only: %s", exc)
            else:  # a request would wait for a reconnect that may never come
                log.warning("ZooKeeper unreachable: cannot announce read-only nor deregister; the "
                            "registration goes when the session expires")
        self._drain()
        if zk is not None and not reachable:
            try:  # close the session first: what still waits on ZooKeeper (deregistering) fails at once
                zkclient.close(zk)
            except Exception as exc:
                log.debug("closing the ZooKeeper session: %s", exc)
        self._close_all()
        self.released = reachable
        log.info("bookie %s stopped", self.bookie_id)

    def _drain(self) -> None:
        deadline = time.monotonic() + self.conf.drain_timeout_s
        while time.monotonic() < deadline:
            busy = self.service.inflight if self.service else 0
            busy += self.storage.pending if self.storage else 0
            if busy == 0:
                log.info("drained")
                return
            time.sleep(0.02)
        log.warning("drain timed out after %gs with requests still in flight", self.conf.drain_timeout_s)

    def _close_all(self) -> None:
        self._stop.set()
        while self._closers:
            closer = self._closers.pop()
            try:
                closer()
            except Exception:
                log.exception("shutdown step failed")
        self._stopped.set()

    def wait(self) -> None:
        self._stop.wait()


def run(settings: Settings, options: BookieOptions, services: Services = Services()) -> int:
    """Process entry: serve until SIGTERM / SIGINT, then stop gracefully; returns the exit code."""
    logging.basicConfig(level=os.environ.get("BKAUDIT_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
    logging.getLogger("kazoo.client").setLevel(logging.WARNING)
    server = BookieServer(settings, options, services=services)
    requested = threading.Event()
    # bounded whatever ZooKeeper's state: the drain, then STOP_GRACE_S for the rest (bkaudit.shutdown)
    watchdog = StopWatchdog(server.conf.drain_timeout_s + STOP_GRACE_S, f"bookie {server.bookie_id}")

    def on_stop() -> None:
        log.info("received a stop signal")
        requested.set()

    with stop_signals(on_stop, watchdog):
        server.start()
        print(f"bookie {server.bookie_id} ready on port {server.port}", flush=True)
        while not requested.wait(0.5) and server.failure is None:
            pass
        watchdog.arm()
        server.stop()
        watchdog.done()
    if server.failure is not None:
        log.error("bookie %s exits: storage lost (%s)", server.bookie_id, server.failure)
        return 1
    if not server.released:
        log.error("bookie %s stopped without deregistering: ZooKeeper unreachable", server.bookie_id)
        return 1
    return 0
