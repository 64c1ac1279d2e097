"""One chaos run: cluster up, workloads and the schedule's faults, heal, recover, check, drain, verify.

Phases (each marked in the history as a `phase` record):
1. faults: writers, readers, the recoverer and AutoRecovery run while the schedule's faults fire;
2. healed: faults stop, everything is healed (proxies pass, ZooKeeper and every bookie run);
3. recovered: every crashed writer's ledger is opened with recovery;
4. checked: AutoRecovery stopped (nothing changes the cluster), the checker runs and publishes its
   durability findings to the under-replication queue - the "stable" check of invariant 4;
5. drained: AutoRecovery runs until the queue is empty;
6. final check (invariant 5), then every acknowledged entry is read back and every ledger's metadata read.
The invariants (bkaudit.chaos.invariants) are then checked against the whole history.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bkaudit.autorecovery.events import read_events
from bkaudit.chaos import invariants
from bkaudit.chaos.checkrun import run_checker
from bkaudit.chaos.faults import AutoRecoveryProcesses, Injector, SwapWatcher
from bkaudit.chaos.history import History, excerpt
from bkaudit.chaos.proxy import ProxySet
from bkaudit.chaos.schedule import FaultKind, Schedule, make_schedule
from bkaudit.chaos.workloads import (
    Reader,
    Recoverer,
    Shared,
    WorkloadSettings,
    Writer,
    connect_client,
    digest,
    drain_recoveries,
)
from bkaudit.client import BookKeeper
from bkaudit.cluster.bookies import BOOKIE_SESSION_TIMEOUT_S
from bkaudit.cluster.local import LocalCluster
from bkaudit.config import ZkSettings
from bkaudit.exitcodes import ExitCode
from bkaudit.zk.server import free_port

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChaosSettings:
    seed: int
    duration_s: float = 60.0
    bookies: int = 5
    racks: int = 3
    max_bookie_failures: int = 1
    kinds: tuple[FaultKind, ...] = tuple(FaultKind)
    writers: int = 2
    readers: int = 1
    crash_probability: float = 0.3
    autorecovery: int = 2
    java_bookies: int = 0
    """The first N bookies are Apache BookKeeper's own, on sorted, interleaved and db storage in turn."""
    java_autorecovery: bool = False
    """One of Apache BookKeeper's AutoRecoveryMain in the election beside the bkaudit processes."""
    checker: bool = True
    mean_gap_s: float = 3.0
    drain_timeout_s: float = 180.0
    workdir: Path | None = None
    history: Path | None = None

    def schedule(self) -> Schedule:
        return make_schedule(
            seed=self.seed,
            duration_s=self.duration_s,
            bookies=self.bookies,
            kinds=self.kinds,
            max_bookie_failures=self.max_bookie_failures,
            autorecovery_processes=self.autorecovery + int(self.java_autorecovery),
            mean_gap_s=self.mean_gap_s,
            session_timeout_s=BOOKIE_SESSION_TIMEOUT_S,
        )


@dataclass(frozen=True)
class ChaosResult:
    seed: int
    schedule: Schedule
    history_path: str
    violations: tuple[invariants.Violation, ...]
    acknowledged: int
    ledgers: int
    injected: dict[str, int]
    checks: tuple[dict[str, Any], ...]
    seconds: float
    excerpt: tuple[dict[str, Any], ...] = field(default=())

    @property
    def exit_code(self) -> int:
        return int(ExitCode.FINDINGS if self.violations else ExitCode.OK)

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "replay": f"bkaudit chaos --seed {self.seed} --duration {self.schedule.duration_s:g}",
            "history": self.history_path,
            "faults_scheduled": self.schedule.counts(),
            "faults_injected": self.injected,
            "entries_acknowledged": self.acknowledged,
            "ledgers": self.ledgers,
            "checks": list(self.checks),
            "violations": [v.as_dict() for v in self.violations],
            "excerpt": list(self.excerpt),
            "seconds": round(self.seconds, 1),
        }


def run(settings: ChaosSettings) -> ChaosResult:
    """Run the schedule of `settings.seed` against a fresh local cluster; never leaves a process behind."""
    started = time.monotonic()
    schedule = settings.schedule()
    workdir = Path(settings.workdir or tempfile.mkdtemp(prefix=f"bkaudit-chaos-{settings.seed}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    history_path = settings.history or workdir / "history.jsonl"
    history = History(history_path)
    history.record(
        "run",
        seed=settings.seed,
        wall0=time.time(),
        settings={k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(settings).items()},
        schedule=[{**dataclasses.asdict(f), "kind": f.kind.value} for f in schedule.faults],
    )
    shared = Shared(history)
    proxies = ProxySet()
    storages = ("sorted", "interleaved", "db")
    cluster = LocalCluster.up(
        workdir / "cluster", bookies=settings.bookies, racks=settings.racks, zk_port=free_port(),
        bookie_args=_bookie_args(workdir),
        java={i: storages[i % len(storages)] for i in range(min(settings.java_bookies, settings.bookies))},
    )
    autorecovery = AutoRecoveryProcesses(cluster, workdir, settings.autorecovery,
                                         java=int(settings.java_autorecovery))
    bk: BookKeeper | None = None
    injector: Injector | None = None
    checks: list[dict[str, Any]] = []
    watcher = SwapWatcher(cluster, history) if settings.java_autorecovery else None
    try:
        if watcher is not None:
            watcher.start()
        autorecovery.start_all()
        conf = WorkloadSettings(
            seed=settings.seed,
            bookies=settings.bookies,
            max_bookie_failures=settings.max_bookie_failures,
            writers=settings.writers,
            readers=settings.readers,
            crash_probability=settings.crash_probability,
        )
        bk = connect_client(zk=ZkSettings(connect=cluster.zk, root=cluster.root), proxies=proxies,
                            add_timeout_s=conf.add_timeout_s)
        threads = [
            *(Writer(index=i, bk=bk, shared=shared, conf=conf) for i in range(conf.writers)),
            *(Reader(index=i, bk=bk, shared=shared, conf=conf) for i in range(conf.readers)),
            Recoverer(bk=bk, shared=shared),
        ]
        for thread in threads:
            thread.start()
        injector = Injector(
            cluster=cluster,
            autorecovery=autorecovery,
            proxies=proxies,
            shared=shared,
            max_bookie_failures=settings.max_bookie_failures,
            workdir=workdir,
        )
        _warm_up(shared, history, cluster.ids())
        _play(schedule, injector, history)
        shared.stop.set()
        for thread in threads:
            thread.join(60)
        injector.heal_all()
        history.record("phase", name="healed")
        unrecovered = drain_recoveries(bk, shared, timeout_s=90)
        history.record("phase", name="recovered", unrecovered=unrecovered)
        autorecovery.stop_all()
        if settings.checker:
            checks.append(_check(history, cluster, workdir, n=1, publish=True, final=False))
        autorecovery.start_all()
        drained = _wait_drained(cluster, settings.drain_timeout_s)
        autorecovery.stop_all()
        history.record("phase", name="drained", drained=drained)
        if settings.checker:
            checks.append(_check(history, cluster, workdir, n=2, publish=False, final=drained))
        _final_reads(bk, shared, history)
        _import_autorecovery(history, cluster, autorecovery)
        _import_integrity(history, workdir)
    finally:
        if watcher is not None:
            watcher.stop.set()
            watcher.join(10)
        if bk is not None:
            bk.close()
        proxies.close()
        if injector is not None:
            injector.stop.set()
        autorecovery.stop_all()
        cluster.down()
        history.close()
    violations = tuple(invariants.check(history.events))
    cut = (
        excerpt(history.events, ledgers={v.ledger for v in violations if v.ledger is not None})
        if violations
        else []
    )
    return ChaosResult(
        seed=settings.seed,
        schedule=schedule,
        history_path=str(history_path),
        violations=violations,
        acknowledged=shared.acked,
        ledgers=len(shared.acks),
        injected=dict(injector.injected) if injector else {},
        checks=tuple(checks),
        seconds=time.monotonic() - started,
        excerpt=tuple(cut),
    )


WARM_UP_TIMEOUT_S = 30.0


def _warm_up(shared: Shared, history: History, bookies: list[str]) -> None:
    """Start the fault clock once every bookie holds an acknowledged entry: on a loaded machine the writers
    start late, and a wipe in the schedule's first second found an empty bookie (seed 2202, in CI)."""
    started = time.monotonic()
    while time.monotonic() - started < WARM_UP_TIMEOUT_S and not shared.stop.is_set():
        with shared.lock:
            if shared.written >= set(bookies):
                break
        time.sleep(0.05)
    with shared.lock:
        covered = len(shared.written & set(bookies))
    history.record("phase", name="warm_up", seconds=round(time.monotonic() - started, 3),
                   bookies_written=covered)


def _play(schedule: Schedule, injector: Injector, history: History) -> None:
    """Fire each fault at its offset; return at the end of the schedule's duration."""
    start = history.record("phase", name="faults")["t"]  # offsets count from here, not from cluster start
    for fault in schedule.faults:
        delay = start + fault.at_s - history.now()
        if delay > 0:
            time.sleep(delay)
        injector.launch(fault)
    rest = start + schedule.duration_s - history.now()
    if rest > 0:
        time.sleep(rest)


def _check(
    history: History, cluster: LocalCluster, workdir: Path, *, n: int, publish: bool, final: bool
) -> dict[str, Any]:
    started = history.now()
    outcome = run_checker(
        zk=ZkSettings(connect=cluster.zk, root=cluster.root),
        warehouse=str(workdir / "warehouse"),
        publish_underreplicated=publish,
    )
    record = history.record(
        "check",
        n=n,
        started=started,
        ended=history.now(),
        exit_code=outcome.exit_code,
        counts=outcome.counts,
        stable=not outcome.error,
        final=final and not outcome.error,
        error=outcome.error[-1000:],
    )
    for row in outcome.findings:
        history.record(
            "finding",
            n=n,
            category=row.get("category"),
            ledger=row.get("ledger_id"),
            bookie=row.get("bookie_id"),
            under_repair=row.get("under_repair"),
        )
    return {k: record[k] for k in ("n", "exit_code", "counts", "error")} | {"findings": len(outcome.findings)}


def _wait_drained(cluster: LocalCluster, timeout_s: float) -> bool:
    queue = cluster.store().queue
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not queue.marked():
            return True
        time.sleep(1)
    return False


def _final_reads(bk: BookKeeper, shared: Shared, history: History) -> None:
    """Read back every acknowledged entry and every ledger's metadata (after healing, nothing in flight)."""
    corrupted = {e["ledger"] for e in history.of_type("damage") if e.get("kind") == "metadata"}
    with shared.lock:
        acks = {ledger: dict(entries) for ledger, entries in shared.acks.items()}
    for ledger, entries in sorted(acks.items()):
        if ledger in corrupted:
            continue
        try:
            md = bk.ledger_metadata(ledger)
            history.record(
                "final_metadata",
                ledger=ledger,
                state=md.state.name,
                last_entry=md.last_entry_id,
                ensembles=[list(seg.ensemble) for seg in md.segments],
            )
            reader = bk.open_ledger(ledger, recover=not md.is_closed)
        except Exception as exc:
            for entry in sorted(entries):
                history.record(
                    "final_read",
                    ledger=ledger,
                    entry=entry,
                    digest=None,
                    detail=f"open: {type(exc).__name__}: {str(exc)[:200]}",
                )
            continue
        for entry in sorted(entries):
            try:
                got = digest(bytes(reader.read_entry(entry).payload))
                history.record("final_read", ledger=ledger, entry=entry, digest=got)
            except Exception as exc:
                history.record(
                    "final_read",
                    ledger=ledger,
                    entry=entry,
                    digest=None,
                    detail=f"{type(exc).__name__}: {str(exc)[:200]}",
                )


BOOKIE_EVENTS = "bookies.events"


def _bookie_args(workdir: Path) -> list[str]:
    """Bookies run with the data-integrity check (the safe configuration for bookies that come back wiped:
    chaos seed 7, docs/bookie.md), its events appended to one file (one JSON line per write)."""
    conf = workdir / "bookie.toml"
    conf.write_text("[bookie]\ndata_integrity_checking = true\n", encoding="utf-8")
    return ["--config", str(conf), "--events", str(workdir / BOOKIE_EVENTS)]


def _import_integrity(history: History, workdir: Path) -> None:
    """A bookie's data-integrity check copying its own entries back is a repair of that bookie's damage."""
    path = workdir / BOOKIE_EVENTS
    if not path.exists():
        return
    wall0 = float(history.of_type("run")[0]["wall0"])
    started: dict[tuple[str, int], float] = {}
    for ev in read_events(path):
        key = (str(ev.get("bookie")), int(ev.get("ledger", -1)))
        if ev.get("event") == "integrity_checking":
            started[key] = float(ev["t"]) - wall0
        elif ev.get("event") == "integrity_checked" and key in started:
            history.record(
                "repair",
                ledger=key[1],
                segment=None,
                bookie=key[0],  # only this bookie's copies were restored
                locked_t=round(started.pop(key), 4),
                done_t=round(float(ev["t"]) - wall0, 4),
                node=f"integrity:{key[0]}",
            )


def _import_autorecovery(
    history: History, cluster: LocalCluster, autorecovery: AutoRecoveryProcesses
) -> None:
    """AutoRecovery's repairs (locked .. replicated, from its event files) and data-loss records."""

    wall0 = float(history.of_type("run")[0]["wall0"])
    for i in range(autorecovery.count):
        path = autorecovery.events_path(i)
        if not path.exists():
            continue
        locked: dict[int, float] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            ledger, kind = ev.get("ledger"), ev.get("event")
            if (
                kind == "locked"
            ):  # the worker emits `replicated` after `unlocking`: keep it until the next lock
                locked[ledger] = float(ev["t"]) - wall0
            elif kind in ("swapped", "replicated") and ledger in locked:
                # swapped: one segment's copies are in and its ensemble names them (done even if marking the
                # ledger replicated fails next); replicated: every segment, including refills in place
                history.record(
                    "repair",
                    ledger=ledger,
                    segment=ev.get("segment") if kind == "swapped" else None,
                    locked_t=round(locked[ledger], 4),
                    done_t=round(float(ev["t"]) - wall0, 4),
                    node=autorecovery.name(i),
                )

    data_loss = cluster.store().data_loss
    for ledger in data_loss.ids():
        record = data_loss.read(ledger)
        if record is not None:
            history.record(
                "data_loss",
                ledger=ledger,
                ranges=[list(r) for r in record.lost_entry_ranges],
                bookies=list(record.bookies),
            )
