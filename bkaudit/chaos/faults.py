"""Fault injectors: each schedule entry is started, held and healed on a thread of its own.

Processes are acted on through the local cluster's own operations (kill, pause, wipe, format, start) and
AutoRecovery processes through `AutoRecoveryProcesses`; nothing here reaches into a bookie. Every step goes to
the history (`fault` records with phase start / heal / skip), and a wipe also records the `damage` it did:
which entries of which ledgers the wiped bookie held (from the metadata at that moment).

Besides the schedule's own budget, the injector keeps a live count of failed bookies: a restart that takes
longer than planned must not let a later fault push the cluster past `max_bookie_failures` (that fault is
skipped and recorded as such).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bkaudit.chaos.history import History
from bkaudit.chaos.proxy import ProxySet
from bkaudit.chaos.schedule import BOOKIE_FAILURES, Fault, FaultKind
from bkaudit.chaos.workloads import Shared
from bkaudit.cluster.java import JavaProcess
from bkaudit.cluster.local import LocalCluster
from bkaudit.store import faults as damage

log = logging.getLogger(__name__)

GARBAGE = b"\x00chaos: not ledger metadata\xff\xfe"
DISK_FULL_CONFIG = (
    "[bookie]\nmin_free_bytes = 1000000000000000000\ndisk_check_interval_s = 0.5\n"
    "data_integrity_checking = true\n"  # as every chaos bookie (runner._bookie_args)
)

JAVA_DISK_FULL: dict[str, object] = {
    "diskUsageThreshold": 0.02, "diskUsageWarnThreshold": 0.01, "diskUsageLwmThreshold": 0.01,
    "diskCheckInterval": 500,
}
"""A Java bookie seeing a full disk: every ledger directory above diskUsageThreshold (LedgerDirsMonitor), so
it runs read-only (readOnlyModeEnabled, BookKeeper's default)."""

AUTORECOVERY_ENV = {
    "BKAUDIT_ZK__SESSION_TIMEOUT_S": "4",
    "BKAUDIT_AUTORECOVERY__IDLE_POLL_S": "0.2",
    "BKAUDIT_AUTORECOVERY__RW_REREPLICATE_BACKOFF_S": "0.5",
    "BKAUDIT_AUTORECOVERY__LOCK_RELEASE_OF_FAILED_LEDGER_GRACE_S": "1.6",
    "BKAUDIT_AUTORECOVERY__OPEN_LEDGER_REREPLICATION_GRACE": "2",
    "BKAUDIT_AUTORECOVERY__DATA_LOSS_MAX_ATTEMPTS": "3",
    "BKAUDIT_RPC__REQUEST_TIMEOUT_S": "5",
    "BKAUDIT_CLIENT__READ_TIMEOUT_S": "5",
}
"""AutoRecovery tuned for a short run (the values of the AutoRecovery integration tests)."""
AUTORECOVERY_SESSION_S = 4.0


JAVA_AUTORECOVERY_SETTINGS = {
    "lostBookieRecoveryDelay": 0,
    "rwRereplicateBackoffMs": 500,
    "openLedgerRereplicationGracePeriod": 2000,
    "lockReleaseOfFailedLedgerGracePeriod": 1600,
    "auditorPeriodicBookieCheckInterval": 30,
    "zkTimeout": int(AUTORECOVERY_SESSION_S * 1000),
}
"""Apache BookKeeper's AutoRecoveryMain tuned as the bkaudit processes are (ServerConfiguration keys)."""


class AutoRecoveryProcesses:
    """N `bkaudit autorecovery run` processes (each stands for auditor and runs workers), events in files,
    and `java` of Apache BookKeeper's AutoRecoveryMain after them (indexes N..N+java-1) in the same election
    (their repairs are seen in the metadata: `SwapWatcher`)."""

    def __init__(self, cluster: LocalCluster, directory: Path, count: int, *, java: int = 0) -> None:
        self.cluster = cluster
        self.directory = directory
        self.bkaudit = count
        self.count = count + java
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.java_procs: dict[int, list[JavaProcess]] = {}  # every JVM an index ran, its log in each

    def name(self, i: int) -> str:
        return f"ar{i}" if i < self.bkaudit else f"java-ar{i - self.bkaudit}"

    def is_java(self, i: int) -> bool:
        return i >= self.bkaudit

    def events_path(self, i: int) -> Path:
        return self.directory / f"{self.name(i)}.events"

    def _java_alive(self, i: int) -> JavaProcess | None:
        runs = self.java_procs.get(i, [])
        return runs[-1] if runs and runs[-1].alive() else None

    def start(self, i: int) -> None:
        if self.is_java(i):
            if self._java_alive(i) is None:  # AutoRecoveryMain exits on session expiry: start it again
                self.java_procs.setdefault(i, []).append(self.cluster.start_java_autorecovery(
                    JAVA_AUTORECOVERY_SETTINGS))
            return
        proc = self.procs.get(i)
        if proc is not None and proc.poll() is None:
            return
        env = {**os.environ, **AUTORECOVERY_ENV}
        with (self.directory / f"{self.name(i)}.log").open("ab") as out:
            self.procs[i] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bkaudit.cli",
                    "autorecovery",
                    "run",
                    "--zk",
                    self.cluster.zk,
                    "--root",
                    self.cluster.root,
                    "--id",
                    self.name(i),
                    "--events",
                    str(self.events_path(i)),
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def start_all(self) -> None:
        for i in range(self.count):
            self.start(i)

    def signal(self, i: int, sig: int) -> bool:
        if self.is_java(i):
            java = self._java_alive(i)
            if java is None:
                return False
            with contextlib.suppress(ProcessLookupError):
                os.kill(java.pid, sig)
            return True
        proc = self.procs.get(i)
        if proc is None or proc.poll() is not None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        return True

    def kill(self, i: int) -> bool:
        if self.is_java(i):
            java = self._java_alive(i)
            if java is not None:
                java.stop(kill=True)
            return java is not None
        ok = self.signal(i, signal.SIGKILL)
        proc = self.procs.get(i)
        if proc is not None:
            proc.wait()
        return ok

    def stop_all(self, timeout_s: float = 30) -> None:
        for runs in self.java_procs.values():
            for java in runs:
                if java.alive():
                    os.kill(java.pid, signal.SIGCONT)
                    java.stop(timeout_s=timeout_s)
        for i in list(self.procs):
            self.signal(i, signal.SIGCONT)
            self.signal(i, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class SwapWatcher(threading.Thread):
    """Records a repair when a damaged segment's ensemble stops naming the bookie whose copies the damage
    destroyed: the worker copied the entries to a replacement and swapped it in. Apache BookKeeper's worker
    writes no bkaudit events, so with a Java AutoRecovery in the election the metadata is the ground truth
    of its repairs (`locked_t` is the last time the segment still named the damaged bookie)."""

    def __init__(self, cluster: LocalCluster, history: History, *, interval_s: float = 0.5) -> None:
        super().__init__(name="chaos-swap-watcher", daemon=True)
        self.cluster, self.history, self.interval_s = cluster, history, interval_s
        self.stop = threading.Event()
        self._seen: dict[tuple[int, int, int, str], float] = {}  # damage -> last time still unrepaired
        self._done: set[tuple[int, int, int, str]] = set()

    def run(self) -> None:
        while not self.stop.wait(self.interval_s):
            with contextlib.suppress(Exception):  # ZooKeeper restarting (a fault): look again next time
                self.poll()

    def poll(self) -> None:
        store = self.cluster.store()
        for d in self.history.of_type("damage"):
            if d.get("kind") == "metadata":
                continue
            key = (int(d["ledger"]), int(d["segment"]), int(d["index"]), str(d["bookie"]))
            if key in self._done:
                continue
            try:
                md = damage.read_metadata(store, key[0])
            except Exception:
                continue  # deleted, corrupted on purpose, or ZooKeeper away
            now = self.history.now()
            if key[1] < len(md.segments) and md.segments[key[1]].ensemble[key[2]] != key[3]:
                self._done.add(key)
                self.history.record("repair", ledger=key[0], segment=key[1], locked_t=self._seen.get(
                    key, float(d["t"])), done_t=round(now, 4), node="metadata")
            else:
                self._seen[key] = round(now, 4)


class Injector:
    def __init__(
        self,
        *,
        cluster: LocalCluster,
        autorecovery: AutoRecoveryProcesses,
        proxies: ProxySet,
        shared: Shared,
        max_bookie_failures: int,
        workdir: Path,
    ) -> None:
        self.cluster = cluster
        self.autorecovery = autorecovery
        self.proxies = proxies
        self.shared = shared
        self.history: History = shared.history
        self.max_bookie_failures = max_bookie_failures
        self.workdir = workdir
        self.stop = threading.Event()  # set: holds end early, everything heals
        self._lock = threading.Lock()  # one bookie operation at a time (LocalCluster is not thread-safe)
        # ZooKeeper's own lock: a bookie start waits for ZooKeeper, so healing ZooKeeper never waits for it
        self._zk_lock = threading.Lock()
        self._failed: set[int] = set()
        self._threads: list[threading.Thread] = []
        self.injected: dict[str, int] = {}

    # -- running faults --------------------------------------------------------------------------------------
    def launch(self, fault: Fault) -> None:
        thread = threading.Thread(
            target=self._run, args=(fault,), name=f"chaos-fault-{fault.index}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))

    def _run(self, fault: Fault) -> None:
        bookie = fault.target if fault.kind in BOOKIE_FAILURES else None
        if bookie is not None:
            with self._lock:
                if bookie in self._failed or len(self._failed) >= self.max_bookie_failures:
                    self._record(fault, "skip", detail=f"bookies still failed: {sorted(self._failed)}")
                    return
                self._failed.add(bookie)
        try:
            heal = self._start(fault)
            if heal is None:
                return
            self.injected[fault.kind.value] = self.injected.get(fault.kind.value, 0) + 1
            self.stop.wait(fault.hold_s)
            self._retry(fault, heal)
        except Exception as exc:
            log.exception("fault %s failed", fault)
            self._record(fault, "error", detail=f"{type(exc).__name__}: {exc}"[:300])
            if bookie is not None:
                # a half-injected bookie fault (stopped, not yet restarted) still counts against the budget
                # until the bookie is back: otherwise a second one fails with it and the guarantee lapses
                bookie_id = self._bookie_id(bookie)
                self._retry(fault, lambda: self._restart_plain(bookie_id))
        finally:
            if bookie is not None:
                with self._lock:
                    self._failed.discard(bookie)

    def _retry(self, fault: Fault, heal: Any) -> None:
        """Heal, retrying while it fails (e.g. a bookie cannot register while ZooKeeper restarts)."""
        for attempt in range(30):
            try:
                heal()
                self._record(fault, "heal")
                return
            except Exception as exc:
                log.warning("healing %s failed (attempt %d): %s", fault, attempt + 1, exc)
                time.sleep(2)
        self._record(fault, "heal_failed")

    def _record(self, fault: Fault, phase: str, **fields: Any) -> None:
        self.history.record(
            "fault", index=fault.index, kind=fault.kind.value, target=fault.target, phase=phase, **fields
        )

    def _bookie_id(self, index: int) -> str:
        return self.cluster.bookies[index % len(self.cluster.bookies)].id

    def _start(self, fault: Fault) -> Any:
        """Inject `fault`; returns its heal action (None: nothing to heal)."""
        k = fault.kind
        if k in (
            FaultKind.BOOKIE_KILL,
            FaultKind.BOOKIE_PAUSE,
            FaultKind.BOOKIE_RESTART,
            FaultKind.BOOKIE_WIPE,
            FaultKind.DISK_FULL,
            FaultKind.BOOKIE_SESSION_EXPIRY,
        ):
            return self._bookie_fault(fault, self._bookie_id(fault.target))
        if k.value.startswith("proxy_"):
            bookie = self._bookie_id(fault.target)
            mode = k.value.removeprefix("proxy_")
            used = self.proxies.set_mode(bookie, mode)
            self._record(fault, "start", bookie=bookie, detail="" if used else "no client connection yet")
            return lambda: self.proxies.set_mode(bookie, "pass")
        if k is FaultKind.ZK_RESTART:
            with self._zk_lock:
                self.cluster.stop_zookeeper()
            self._record(fault, "start")
            return self._start_zookeeper
        if k is FaultKind.CORRUPT_ZNODE:
            self._corrupt(fault)
            return None
        if k in (FaultKind.AUTORECOVERY_KILL, FaultKind.AUTORECOVERY_SESSION_EXPIRY):
            i = fault.target % max(1, self.autorecovery.count)
            if k is FaultKind.AUTORECOVERY_KILL:
                done = self.autorecovery.kill(i)
                self._record(
                    fault, "start", process=self.autorecovery.name(i), detail="" if done else "not running"
                )
                return lambda: self.autorecovery.start(i)
            done = self.autorecovery.signal(i, signal.SIGSTOP)
            self._record(
                fault, "start", process=self.autorecovery.name(i), detail="" if done else "not running"
            )
            return lambda: self.autorecovery.signal(i, signal.SIGCONT)
        raise ValueError(f"no injector for {k}")

    def _start_zookeeper(self) -> None:
        with self._zk_lock:
            self.cluster.start_zookeeper()

    def _bookie_fault(self, fault: Fault, bookie: str) -> Any:
        c, k = self.cluster, fault.kind
        with self._lock:
            if k is FaultKind.BOOKIE_PAUSE or k is FaultKind.BOOKIE_SESSION_EXPIRY:
                c.pause_bookie(bookie)
                self._record(fault, "start", bookie=bookie)
                return lambda: self._resume(bookie)
            if k is FaultKind.BOOKIE_KILL:
                c.kill_bookie(bookie)
                self._record(fault, "start", bookie=bookie)
                return lambda: self._start_if_stopped(bookie)
            if k is FaultKind.BOOKIE_RESTART:
                c.stop_bookie(bookie)
                self._record(fault, "start", bookie=bookie)
                return lambda: self._start_if_stopped(bookie)
            if k is FaultKind.BOOKIE_WIPE:
                c.kill_bookie(bookie)
                self._record(fault, "start", bookie=bookie)
                self._record_damage(fault, bookie)
                c.wipe_bookie(bookie)
                c.format_bookie(bookie)
                return lambda: self._start_if_stopped(bookie)
            if k is FaultKind.DISK_FULL:
                # as root a read-only directory still takes writes, so the bookie is restarted seeing a full
                # disk (free-space threshold above the disk's size): it registers read-only, refuses adds
                c.stop_bookie(bookie)
                self._record(fault, "start", bookie=bookie)  # writers lose it now, not once it is back
                if c.bookie(bookie).kind == "java":  # BookKeeper's own thresholds: every disk over its limit
                    self._start_with_java_settings(bookie, JAVA_DISK_FULL)
                    return lambda: self._restart_plain(bookie)
                conf = self.workdir / "disk-full.toml"
                conf.write_text(DISK_FULL_CONFIG, encoding="utf-8")
                self._start_with_args(bookie, ["--config", str(conf)])
                return lambda: self._restart_plain(bookie)
        raise ValueError(f"not a bookie fault: {k}")

    def _resume(self, bookie: str) -> None:
        with self._lock:
            self.cluster.resume_bookie(bookie)

    def _start_if_stopped(self, bookie: str) -> None:
        with self._lock:
            if not self.cluster.is_running(bookie):
                self.cluster.start_bookie(bookie)

    def _start_with_args(self, bookie: str, args: list[str]) -> None:
        saved = self.cluster.bookie_args
        self.cluster.bookie_args = [*saved, *args]
        try:
            self.cluster.start_bookie(bookie)
        finally:
            self.cluster.bookie_args = saved

    def _start_with_java_settings(self, bookie: str, settings: dict[str, object]) -> None:
        saved = dict(self.cluster.java_settings)
        self.cluster.java_settings.update(settings)
        try:
            self.cluster.start_bookie(bookie)
        finally:
            self.cluster.java_settings = saved

    def _restart_plain(self, bookie: str) -> None:
        with self._lock:
            self.cluster.stop_bookie(bookie)
            self.cluster.start_bookie(bookie)

    # -- damage ----------------------------------------------------------------------------------------------
    def _record_damage(self, fault: Fault, bookie: str) -> None:
        """What a wipe of `bookie` destroys: per ledger segment naming it, the entry range it stored."""
        store = self.cluster.store()
        with self.shared.lock:
            ledgers = sorted(self.shared.acks)
        for ledger in ledgers:
            try:
                md = damage.read_metadata(store, ledger)
            except Exception:
                continue  # corrupted on purpose, or ZooKeeper away: nothing known to lose
            in_flight = self.shared.max_ack(ledger) + 16  # adds acknowledged after this moment may be on it
            for i, segment in enumerate(md.segments):
                if bookie not in segment.ensemble:
                    continue
                nxt = md.segments[i + 1].first_entry_id - 1 if i + 1 < len(md.segments) else None
                end = md.last_entry_id if md.is_closed else in_flight
                last = end if nxt is None else min(nxt, end)
                if last < segment.first_entry_id:
                    continue
                self.history.record(
                    "damage",
                    ledger=ledger,
                    bookie=bookie,
                    segment=i,
                    index=segment.ensemble.index(bookie),
                    first=segment.first_entry_id,
                    last=last,
                    e=md.ensemble_size,
                    wq=md.write_quorum,
                    aq=md.ack_quorum,
                    closed=md.is_closed,
                    cause=fault.index,
                )

    def _corrupt(self, fault: Fault) -> None:
        closed = self.shared.closed_ledgers()
        if not closed:
            self._record(fault, "skip", detail="no closed ledger yet")
            return
        ledger = closed[fault.target % len(closed)]
        with self.shared.lock:
            self.shared.closed.remove(ledger)  # readers leave it alone
        damage.corrupt_ledger(self.cluster.store(), ledger, GARBAGE)
        self.injected[fault.kind.value] = self.injected.get(fault.kind.value, 0) + 1
        self._record(fault, "start", ledger=ledger)
        self.history.record("damage", ledger=ledger, kind="metadata", cause=fault.index)

    # -- the end ---------------------------------------------------------------------------------------------
    def heal_all(self) -> None:
        """After the schedule: every proxy passes; ZooKeeper, every bookie and AutoRecovery process run."""
        self.stop.set()
        self.join(120)
        self.proxies.heal()
        with self._zk_lock, contextlib.suppress(Exception):
            self.cluster.start_zookeeper()
        with self._lock:
            for b in self.cluster.bookies:
                with contextlib.suppress(Exception):
                    self.cluster.resume_bookie(b.id)
                if not self.cluster.is_running(b.id):
                    self.cluster.start_bookie(b.id)
        for i in range(self.autorecovery.count):
            self.autorecovery.signal(i, signal.SIGCONT)
