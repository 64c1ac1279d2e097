"""A local BookKeeper-compatible cluster: embedded ZooKeeper + N bookie processes on loopback.

Used by the demo, the tests and the benchmarks. Every process runs in the background and is described in
`<directory>/cluster.json`, so any later command (`bkaudit bookie kill --dir D ...`) can act on it:

    {"zk": "127.0.0.1:P", "root": "/ledgers", "racks": 3, "bookie_args": [],
     "bookies": [{"id", "rack", "port", "pid", "data_dir", "host", "listing", "readonly",
                  "kind", "storage", "http_port"}],
     "zookeeper": {"pid", "port", "data_dir", "heap_mb"} | null, "java_settings": {...},
     "java_memory_mb": [heap, direct] | null}

A bookie's `kind` is "bkaudit" or "java" (Apache BookKeeper's own bookie on `storage`, bkaudit.cluster.java).

Each bookie has a loopback address of its own (127.0.0.2, 127.0.0.3, ...), binds and advertises it, and its id
is `<that address>:<port>`. BookKeeper looks racks up by host, so bookies sharing 127.0.0.1 would be one rack
to it whatever /bookies says; one address per bookie makes the racks mean what they mean in production.
A bookie's id, port, data directory and rack never change across restarts, exactly like a real bookie host.
Signals are only sent to a pid after checking it still runs `bookie run` on that data dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bkaudit.cluster import java as java_bk
from bkaudit.cluster.bookies import (
    BOOKIE_SESSION_TIMEOUT_S,
    LOG_FILE,
    MAX_DISK_USAGE,
    START_TIMEOUT_S,
    STATE_FILE,
    BookieInfo,
    bookie_host,
    java_memory,
)
from bkaudit.cluster.local_java import JavaProcesses
from bkaudit.cluster.local_processes import all_threads_stopped, is_bookie, log_tail, wait_ready, wait_serving
from bkaudit.config import ZkSettings
from bkaudit.errors import ClusterError
from bkaudit.processes import pid_alive
from bkaudit.store.zookeeper import ZkStore, bind
from bkaudit.zk import client as zkclient
from bkaudit.zk.server import (
    DEFAULT_HEAP_MB,
    ZooKeeperServer,
    die_with_parent_prefix,
    free_port,
    stop_background,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from kazoo.client import KazooClient

    from bkaudit.rpc.pool import BookieClientPool
    from bkaudit.store.base import Registry


class LocalCluster(JavaProcesses):
    """Start with `LocalCluster.up(dir)`, re-attach with `LocalCluster.load(dir)`, stop with `down()`.

    Its ledgers live under `[zk] root`'s default, as a BookKeeper cluster's do: the cluster owns that root
    (its bookies, tools and cluster.json are given it) and callers reach the records through `store()`."""

    def __init__(self, directory: Path, zk: str, bookies: list[BookieInfo],
                 zookeeper: dict[str, Any] | None, *, racks: int = 3, bookie_args: Sequence[str] = (),
                 detach: bool = False, zk_auth: str = "", zk_heap_mb: int = DEFAULT_HEAP_MB,
                 java_settings: Mapping[str, object] | None = None,
                 java_memory_mb: tuple[int, int] | None = None) -> None:
        self.directory = directory
        self.java_settings: dict[str, object] = dict(java_settings or {})
        self.java_memory_mb = java_memory_mb
        self.zk_heap_mb = zk_heap_mb
        self.zk = zk
        self.root = ZkSettings.root
        self.bookies = bookies
        self.zookeeper = zookeeper
        self.racks = racks
        self.bookie_args = list(bookie_args)
        self.detach = detach
        self.zk_auth = zk_auth  # "user:password" for a secured ZooKeeper; never written to cluster.json
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._log_starts: dict[str, int] = {}  # where each spawned bookie's log began (it is appended to)
        self._zk_server: ZooKeeperServer | None = None
        self._clients: list[KazooClient] = []
        self._pools: list[BookieClientPool] = []
        self._java: list[java_bk.JavaProcess | java_bk.JavaClient] = []
        self._lock = threading.Lock()

    # -- creation -----------------------------------------------------------------------------------------
    @classmethod
    def up(cls, directory: str | os.PathLike[str], *, bookies: int = 3, racks: int = 3,
           zk_port: int | None = None, zk_connect: str | None = None,
           bookie_args: Sequence[str] = (), detach: bool = False,
           no_listing: Sequence[int] = (), zk_auth: str = "",
           zk_heap_mb: int = DEFAULT_HEAP_MB, java: Mapping[int, str] | None = None,
           java_settings: Mapping[str, object] | None = None,
           java_memory_mb: tuple[int, int] | None = None) -> LocalCluster:
        """Start ZooKeeper (unless `zk_connect`), initialise the cluster, start `bookies` bookies on racks
        /rack-1../rack-N round robin; return once every bookie is registered. Bookies whose index (0-based)
        is in `no_listing` never answer listing requests (DbLedgerStorage-like, `bookie run --no-listing`).
        `detach` lets the processes outlive this Python process (the CLI); otherwise they die with it.
        `zk_auth` ("user:password") is the digest the harness's own ZooKeeper session authenticates with.
        `zk_heap_mb` sizes the ZooKeeper server (bkaudit.zk.server.jvm_opts) for benchmarks of 1M ledgers.
        `java` maps bookie indexes to Java BookKeeper bookies and their ledger storage (`{0: "db"}`: the first
        bookie is Apache BookKeeper's own, on DbLedgerStorage); the others are bkaudit's. `java_settings` are
        extra `bk_server.conf` keys for every Java bookie (TLS, timeouts). `java_memory_mb` (heap, direct)
        sizes every Java bookie's JVM; by default a small one (`JAVA_BOOKIE_MEMORY_MB`) that suits a test's
        handful of ledgers, where BookKeeper's bin/common.sh gives 1 GB and 2 GB. A Java bookie on
        Interleaved or Sorted storage keeps maxDirectMemory / 3 of index pages (pageLimit), and every ledger
        it lists pins its pages until it restarts (docs/compatibility.md): benchmarks of many ledgers need
        the defaults."""
        path = Path(directory).resolve()
        if (path / STATE_FILE).exists():
            raise ClusterError(f"{path} already holds a cluster ({STATE_FILE}); run `bkaudit cluster down "
                               f"--dir {path} --purge` first or choose another directory")
        path.mkdir(parents=True, exist_ok=True)
        cluster = cls(path, zk_connect or "", [], None, racks=max(1, racks), bookie_args=bookie_args,
                      detach=detach, zk_auth=zk_auth, zk_heap_mb=zk_heap_mb, java_settings=java_settings,
                      java_memory_mb=java_memory_mb)
        try:
            if zk_connect is None:
                server = ZooKeeperServer(port=zk_port, data_dir=path / "zookeeper", detach=detach,
                                         heap_mb=zk_heap_mb)
                server.start(timeout_s=START_TIMEOUT_S)
                cluster._zk_server = server
                cluster.zk = server.connect_string
                cluster.zookeeper = {"pid": server.pid, "port": server.port, "data_dir": str(server.data_dir),
                                     "heap_mb": zk_heap_mb}
            cluster._init_metadata()
            for i in range(bookies):
                storage = (java or {}).get(i)
                cluster.bookies.append(cluster._new_bookie(i, None, listing=i not in no_listing,
                                                           kind="java" if storage else "bkaudit",
                                                           storage=storage or ""))
            cluster._save()
            cluster._start_many(cluster.bookies)
        except BaseException:
            cluster.down()
            (path / STATE_FILE).unlink(missing_ok=True)  # nothing runs: `up` may be retried here (logs stay)
            raise
        return cluster

    def _init_metadata(self) -> None:
        hosts, _, chroot = self.zk.partition("/")
        if chroot:  # a chroot must exist before clients can use it
            base = zkclient.connect(hosts)
            try:
                base.ensure_path("/" + chroot)
            finally:
                zkclient.close(base)
        store = self.store()
        store.init_cluster(layout=store.ledgers.layout)

    def _new_bookie(self, index: int, rack: str | None, *, listing: bool = True, kind: str = "bkaudit",
                    storage: str = "") -> BookieInfo:
        if kind not in ("bkaudit", "java"):
            raise ClusterError(f"unknown bookie kind {kind!r} (bkaudit or java)")
        if kind == "java":
            storage = storage or "sorted"
            if storage not in java_bk.STORAGE_CLASSES:
                raise ClusterError(f"unknown ledger storage {storage!r} (known: "
                                   f"{', '.join(java_bk.STORAGE_CLASSES)})")
        host = bookie_host(index)
        port = free_port(host)
        data_dir = self.directory / f"bookie-{index + 1}"
        data_dir.mkdir(parents=True, exist_ok=True)
        rack = rack or f"/rack-{index % self.racks + 1}"
        return BookieInfo(id=f"{host}:{port}", rack=rack, port=port, pid=None, data_dir=str(data_dir),
                          host=host, listing=listing, kind=kind, storage=storage if kind == "java" else "",
                          http_port=free_port(host) if kind == "java" else None)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> LocalCluster:
        """Re-attach to a cluster started earlier (possibly by another process) from its cluster.json."""
        path = Path(directory).resolve()
        try:
            state = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
            bookies = [BookieInfo(**b) for b in state["bookies"]]
            heap_mb = int((state.get("zookeeper") or {}).get("heap_mb", DEFAULT_HEAP_MB))
            cluster = cls(path, state["zk"], bookies, state.get("zookeeper"),
                          racks=int(state.get("racks", 3)), bookie_args=state.get("bookie_args", ()),
                          detach=True, zk_heap_mb=heap_mb, java_settings=state.get("java_settings"),
                          java_memory_mb=java_memory(state.get("java_memory_mb")))
            cluster.root = state["root"]  # the root it was started with
            return cluster
        except FileNotFoundError:
            raise ClusterError(f"no cluster in {path} (no {STATE_FILE}); start one with `bkaudit cluster "
                               "up`") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ClusterError(f"{path / STATE_FILE} is not a valid cluster description: {exc}") from None

    def _save(self) -> None:
        state = {"zk": self.zk, "root": self.root, "racks": self.racks, "bookie_args": self.bookie_args,
                 "bookies": [asdict(b) for b in self.bookies], "zookeeper": self.zookeeper,
                 "java_settings": self.java_settings,
                 "java_memory_mb": list(self.java_memory_mb) if self.java_memory_mb else None}
        tmp = self.directory / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.directory / STATE_FILE)

    # -- bookies ---------------------------------------------------------------------------------------------
    def bookie(self, bookie_id: str) -> BookieInfo:
        for b in self.bookies:
            if b.id == bookie_id:
                return b
        raise ClusterError(f"no bookie {bookie_id!r} in this cluster (known: {', '.join(self.ids())})")

    def ids(self) -> list[str]:
        return [b.id for b in self.bookies]

    def is_running(self, bookie_id: str) -> bool:
        """True while the bookie's process lives (also when paused)."""
        return self._alive(self.bookie(bookie_id))

    def start_bookie(self, bookie_id: str, *, wait: bool = True) -> None:
        """Start a stopped bookie with the same id, port, data directory and rack."""
        b = self.bookie(bookie_id)
        if self._alive(b):
            raise ClusterError(f"bookie {bookie_id} is already running (pid {b.pid})")
        self._start_many([b], wait=wait)

    def restart_bookies(self, *, timeout_s: float = 20) -> None:
        """Every bookie stopped gracefully (in parallel) and started again, back when all are registered: cold
        caches for the next measurement, without paying each bookie's shutdown one after another."""
        self._signal_and_wait([b for b in self.bookies if self._alive(b)], signal.SIGTERM, timeout_s)
        self._start_many(list(self.bookies))

    def add_bookie(self, *, rack: str | None = None, listing: bool = True, kind: str = "bkaudit",
                   storage: str = "") -> BookieInfo:
        b = self._new_bookie(len(self.bookies), rack, listing=listing, kind=kind, storage=storage)
        self.bookies.append(b)
        self._save()
        self._start_many([b])
        return b

    def _start_many(self, bookies: list[BookieInfo], *, wait: bool = True) -> None:
        registry = self.store().registry
        owners = {b.id: registry.registration_owner(b.id) for b in bookies}
        stale = {i: o for i, o in owners.items() if o is not None and o != -1}  # left by a killed process
        self._wait_stale_registrations_expired(registry, stale)
        for b in bookies:
            self._spawn(b)
        self._save()
        if wait:
            for b in bookies:
                self._wait_registered(registry, b, owners[b.id])

    def _wait_stale_registrations_expired(self, registry: Registry, stale: dict[str, int]) -> None:
        """A bookie restarted right after a kill finds its old registration still held by the dead session
        and, as BookKeeper's checkRegNodeAndWaitExpired, waits only one session timeout for it: on a loaded
        machine ZooKeeper can expire the session later than that. The harness, not the bookie, waits longer.
        """
        deadline = time.monotonic() + 5 * BOOKIE_SESSION_TIMEOUT_S
        while stale and time.monotonic() < deadline:
            stale = {i: o for i, o in stale.items() if registry.registration_owner(i) == o}
            if stale:
                time.sleep(0.2)

    def _spawn(self, b: BookieInfo) -> None:
        # setpriv, not a preexec_fn: Python code between fork and exec aborts in a process with gRPC threads
        prefix = [] if self.detach else die_with_parent_prefix()
        if b.kind == "java":
            self._spawn_java(b, prefix)
            return
        cmd = [*prefix, sys.executable, "-m", "bkaudit.cli", "bookie", "run", "--zk", self.zk,
               "--root", self.root,
               "--port", str(b.port), "--data-dir", b.data_dir, *(["--rack", b.rack] if b.rack else []),
               *([] if b.listing else ["--no-listing"]), *(["--readonly"] if b.readonly else []),
               *self.bookie_args]
        env = dict(os.environ)
        env.setdefault("BKAUDIT_ZK__SESSION_TIMEOUT_S", str(BOOKIE_SESSION_TIMEOUT_S))
        env.setdefault("BKAUDIT_BOOKIE__MIN_FREE_FRACTION", f"{1 - MAX_DISK_USAGE:.6f}")
        env["BKAUDIT_BOOKIE__LISTEN_ADDRESS"] = env["BKAUDIT_BOOKIE__ADVERTISED_ADDRESS"] = b.host
        Path(b.data_dir).mkdir(parents=True, exist_ok=True)
        with (Path(b.data_dir) / LOG_FILE).open("ab") as log:
            self._log_starts[b.id] = log.tell()
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)
        self._procs[b.id] = proc
        b.pid = proc.pid

    def _wait_registered(self, registry: Registry, b: BookieInfo, old_owner: int | None) -> None:
        """Until the NEW process registered (not a stale node of a killed one); ClusterError with the log tail
        if it exits or takes too long."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                owner = registry.registration_owner(b.id)
            except Exception as exc:  # ZooKeeper restarting under the start (chaos): ask again
                if not zkclient.is_transient(exc):
                    raise
                owner = None
            if owner is not None and owner != old_owner:
                if b.kind == "java":
                    wait_serving(b, alive=self._alive, deadline=deadline, timeout_s=START_TIMEOUT_S)
                elif b.id in self._log_starts:  # spawned by this object: its log from here on is this run's
                    wait_ready(b, self._log_starts[b.id], alive=self._alive, deadline=deadline,
                               timeout_s=START_TIMEOUT_S)
                return
            if not self._alive(b):
                b.pid = None
                self._save()
                raise ClusterError(f"bookie {b.id} exited during start-up{log_tail(b)}")
            time.sleep(0.05)
        raise ClusterError(f"bookie {b.id} did not register within {START_TIMEOUT_S:g}s{log_tail(b)}")


    def stop_bookie(self, bookie_id: str, *, timeout_s: float = 20) -> None:
        """SIGTERM: the bookie goes read-only, drains, deregisters and exits (SIGKILL after `timeout_s`)."""
        b = self.bookie(bookie_id)
        self._signal_and_wait([b], signal.SIGTERM, timeout_s)

    def kill_bookie(self, bookie_id: str) -> None:
        """SIGKILL: no goodbye; its registration lingers until its ZooKeeper session expires."""
        b = self.bookie(bookie_id)
        self._signal_and_wait([b], signal.SIGKILL, 10)

    def pause_bookie(self, bookie_id: str) -> None:
        """SIGSTOP: still registered (until its session expires) but unresponsive. Returns once every thread
        of the bookie is stopped: kill() only queues the stop, and a request sent at once could still be
        served (seen on a loaded machine)."""
        b = self.bookie(bookie_id)
        self._signal(b, signal.SIGSTOP)
        assert b.pid is not None
        deadline = time.monotonic() + 10
        while not all_threads_stopped(b.pid) and time.monotonic() < deadline:
            time.sleep(0.005)

    def resume_bookie(self, bookie_id: str) -> None:
        self._signal(self.bookie(bookie_id), signal.SIGCONT)

    def wipe_bookie(self, bookie_id: str) -> None:
        """Delete a stopped bookie's data (keeping its log): the bookie lost its disk."""
        b = self.bookie(bookie_id)
        if self._alive(b):
            raise ClusterError(f"bookie {bookie_id} is running (pid {b.pid}); stop or kill it before wiping")
        for child in Path(b.data_dir).iterdir():
            if child.name == LOG_FILE:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()

    def format_bookie(self, bookie_id: str) -> None:
        """Delete the bookie's cookie in ZooKeeper (`bkaudit bookie format`)."""
        self.store().registry.delete_cookie(self.bookie(bookie_id).id)

    # -- whole cluster ---------------------------------------------------------------------------------------
    def stop_zookeeper(self) -> None:
        """Stop the ZooKeeper server this cluster started (its data stays; clients reconnect after start)."""
        if self._zk_server is None:
            raise ClusterError("this cluster did not start its ZooKeeper server (zk_connect was given)")
        self._zk_server.stop()

    def start_zookeeper(self) -> None:
        """Start the stopped ZooKeeper server again on the same port and data directory."""
        if self._zk_server is None:
            raise ClusterError("this cluster did not start its ZooKeeper server (zk_connect was given)")
        old = self._zk_server
        if old.is_running():
            return
        # a new server on the same port and data: the connect string every client holds stays valid
        server = ZooKeeperServer(port=old.port, data_dir=old.data_dir, detach=self.detach,
                                 heap_mb=self.zk_heap_mb)
        server.start(timeout_s=START_TIMEOUT_S)
        self._zk_server = server
        if self.zookeeper is not None:
            self.zookeeper["pid"] = self._zk_server.pid

    def status(self) -> dict[str, Any]:
        """Each bookie's registration (writable / readonly / absent) and whether its process is alive."""
        registry = self.store().registry
        rows = [{**asdict(b), "state": registry.bookie_state(b.id), "alive": self._alive(b)}
                for b in self.bookies]
        zk_alive = None
        if self.zookeeper is not None:
            zk_alive = pid_alive(self.zookeeper.get("pid"))
        return {"zk": self.zk, "root": self.root, "zookeeper_alive": zk_alive, "bookies": rows}

    def down(self, *, timeout_s: float = 20) -> None:
        """Stop every bookie (gracefully, in parallel), the Java processes started next to the cluster and the
        ZooKeeper this cluster started."""
        for proc in self._java:
            with contextlib.suppress(Exception):
                proc.stop() if isinstance(proc, java_bk.JavaProcess) else proc.close()
        self._java.clear()
        self._signal_and_wait([b for b in self.bookies if self._alive(b)], signal.SIGTERM, timeout_s)
        for pool in self._pools:
            pool.close()
        self._pools.clear()
        for client in self._clients:
            with contextlib.suppress(Exception):
                zkclient.close(client)
        self._clients.clear()
        if self._zk_server is not None:
            self._zk_server.stop()
            self._zk_server = None
        elif self.zookeeper is not None and self.zookeeper.get("data_dir"):
            stop_background(self.zookeeper["data_dir"])
        if self.zookeeper is not None:
            self.zookeeper["pid"] = None
        if (self.directory / STATE_FILE).exists() or self.bookies:
            self._save()

    def zk_settings(self) -> ZkSettings:
        """This cluster's [zk] (its ZooKeeper, ledgers root and digest credentials): what a client connects
        with, and what BookKeeper's metadata URI names."""
        return ZkSettings(connect=self.zk, root=self.root, auth_digest=self.zk_auth)

    def zk_client(self) -> KazooClient:
        """A started kazoo client on this cluster's ZooKeeper (closed by `down()`)."""
        with self._lock:
            if not self._clients:
                self._clients.append(zkclient.connect(self.zk_settings()))
            return self._clients[0]

    def store(self) -> ZkStore:
        """The cluster's records on the `zk_client()` session, bound as every store is (store.bind)."""
        return bind(self.zk_client(), self.zk_settings())

    def client_pool(self) -> BookieClientPool:
        """A BookieClientPool resolving bookies from their registrations (closed by `down()`)."""
        from bkaudit.rpc.pool import BookieClientPool

        pool = BookieClientPool(registry=self.store().registry)
        self._pools.append(pool)
        return pool

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # -- processes -------------------------------------------------------------------------------------------
    def _alive(self, b: BookieInfo) -> bool:
        proc = self._procs.get(b.id)
        if proc is not None and proc.pid == b.pid:
            return proc.poll() is None
        return b.pid is not None and is_bookie(b.pid, b.data_dir)

    def _signal(self, b: BookieInfo, sig: int) -> None:
        if not self._alive(b):
            raise ClusterError(f"bookie {b.id} is not running")
        assert b.pid is not None
        os.kill(b.pid, sig)

    def _signal_and_wait(self, bookies: list[BookieInfo], sig: int, timeout_s: float) -> None:
        running = [b for b in bookies if self._alive(b)]
        for b in running:
            assert b.pid is not None
            with contextlib.suppress(ProcessLookupError):
                if sig == signal.SIGTERM:
                    os.kill(b.pid, signal.SIGCONT)  # a paused bookie cannot handle SIGTERM
                os.kill(b.pid, sig)
        deadline = time.monotonic() + timeout_s
        for b in running:
            while self._alive(b) and time.monotonic() < deadline:
                time.sleep(0.02)
            if self._alive(b):
                assert b.pid is not None
                with contextlib.suppress(ProcessLookupError):
                    os.kill(b.pid, signal.SIGKILL)
                while self._alive(b):
                    time.sleep(0.02)
            proc = self._procs.pop(b.id, None)
            if proc is not None:
                proc.wait()
            b.pid = None
        if running:
            self._save()
