"""AutoRecovery benchmark at a realistic size (issue 15 item 7): every ledger of a lost bookie re-replicated.

    .venv/bin/python -m bench.recovery [--ledgers N | --quick] [--runs R] [--scenarios A,B]
        [--min-entries A --max-entries B] [--seed S] [--json PATH] [--workdir DIR]

The data (set-up, not measured): N CLOSED ledgers (default 200) of 10,000-50,000 entries (seeded, uniform)
of 1-4 KiB payload each (seeded, uniform), E3/WQ2/AQ2, CRC32C digests: every body is a real BookKeeper entry
(`formats.entry.DigestManager.package`). The lost bookie is in every ensemble (at a rotating index), with a
pair of the 4 source bookies. Entries are bulk-loaded straight into the stopped source bookies' storage
(`bookie.bulkload.bulk_load_entries`); the lost bookie's own storage is left empty (it is gone before anything
reads it). Ledger metadata (BookKeeper v3) is created in ZooKeeper.

A fresh cluster per scenario run, every run from the same loaded state. Copying the loaded data (~20 GB at
200 ledgers) per run would take longer than the copy being measured and need a second 20 GB, so instead:
- the 4 source bookies run `--readonly` (they serve reads; placement never picks a read-only bookie), so no
  run writes to them; their `ledgers.db` size and mtime are checked unchanged after every run;
- the copies land on 3 empty target bookies, restored (with the lost bookie's directory and ZooKeeper's data,
  a few MB) from copies saved right after the load, before every run;
- ZooKeeper and every bookie are new processes in every run; the lost bookie is never started (its cookie is
  in ZooKeeper, its registration is not: BookKeeper's Auditor calls that lost), and every ledger is marked
  under-replicated naming it, as the Auditor would (not measured).

Scenarios (the side of each run is a fresh process: bench/harness.py's rules; their order is shuffled with
the seed, recorded, then alternated A B C, C B A, ...; R runs of each; medians with min-max):
- `bkaudit-1`: one ReplicationWorker with the production FragmentCopier (only the entries the lost index
  stores, up to `rereplication_entry_batch_size` = 500 in flight);
- `bk-style-1`: the same worker with a copier that copies as BookKeeper's LedgerFragmentReplicator
  (apache/bookkeeper, bookkeeper-server/src/main/java/org/apache/bookkeeper/client/
  LedgerFragmentReplicator.java: `replicate` splits the fragment with `splitIntoSubFragments` into
  sub-fragments of rereplicationEntryBatchSize (default 10) ids, `replicateNextBatch` runs them one after
  the other, and `replicateFragmentInternal` reads and writes EVERY entry id from the fragment's first to
  last stored entry, concurrently within the batch, whether or not the lost index stored it);
- `bkaudit-2`: two `bkaudit autorecovery run --once --no-auditor` processes (two AutoRecovery nodes).

Time = first ledger locked to last marker resolved (the workers' event logs), so process start-up is not
counted (the harness's wall time, with it, is in the JSON). Reported per worker: MB/s (bytes written to the
targets / seconds / workers; 1 MB = 10^6 bytes) and ledgers/min. After every run, before the cluster stops,
every ledger is checked: the lost bookie is gone from its ensemble, every bookie of the new ensemble lists
every entry its index stores, and EVERY entry is read back (from its new bookie when the new bookie stores
it, else from a source) and must be byte-identical to the loaded body (so its CRC32C digest is the loaded
one); any difference fails the run. Markdown on stdout, raw results as JSON
(bench/results/recovery-N-<stamp>.json or --json).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench import harness
from bkaudit.autorecovery.copier import CopyResult, CopyTask, FragmentCopier

REPO = Path(__file__).resolve().parent.parent

E, WQ, AQ = 3, 2, 2
SOURCES = 4  # bookies holding the surviving copies (read-only during the runs)
TARGETS = 3  # empty writable bookies the copies go to
RACKS = 3
ENTRIES = (10_000, 50_000)  # entries per ledger (inclusive range, uniform)
SIZES = (1024, 4096)  # payload bytes per entry (inclusive range, uniform)
BK_BATCH = 10  # BookKeeper's rereplicationEntryBatchSize default
SEED = 15
QUICK_LEDGERS = 5
PASSWORD = b""
POOL_BYTES = 1 << 20  # payloads are slices of one seeded random megabyte
LOAD_CHUNK = 20_000  # rows per bulk-load transaction (~50 MB of bodies in memory)
VERIFY_WINDOW = 500  # reads in flight while verifying
RUN_TIMEOUT_S = 8 * 3600.0  # one run of a side (the baseline at 200 ledgers takes ~80 min here)
STORAGE_OVERHEAD = 1.5  # bookie storage bytes per payload byte (SQLite pages; 1.37 measured at 1-4 KiB)


@dataclass(frozen=True)
class Scenario:
    name: str
    label: str
    workers: int
    copier: str  # "bkaudit" | "bk-style"


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("bkaudit-1", "bkaudit, 1 worker (production FragmentCopier)", 1, "bkaudit"),
        Scenario(
            "bk-style-1",
            f"BookKeeper-style copier (every id, sequential batches of {BK_BATCH}), 1 worker",
            1,
            "bk-style",
        ),
        Scenario("bkaudit-2", "bkaudit, 2 workers (2 processes)", 2, "bkaudit"),
    )
}


# -- pure: the data plan, the order, the rates -----------------------------------------------------------


@dataclass(frozen=True)
class LedgerSpec:
    """One ledger's shape; its entry sizes follow from (`seed`, `ledger_id`)."""

    ledger_id: int
    entries: int
    seed: int
    min_size: int
    max_size: int

    def sizes(self) -> np.ndarray:
        """Payload bytes of each entry (int64), seeded per ledger."""
        rng = np.random.default_rng([self.seed, self.ledger_id])
        return rng.integers(self.min_size, self.max_size + 1, size=self.entries, dtype=np.int64)

    def payload_bytes(self) -> int:
        return int(self.sizes().sum())


def ledger_plan(
    *,
    ledgers: int,
    seed: int = SEED,
    entries: tuple[int, int] = ENTRIES,
    sizes: tuple[int, int] = SIZES,
) -> tuple[LedgerSpec, ...]:
    """`ledgers` ledgers (ids 1..N), entry counts uniform in `entries` (inclusive), sizes in `sizes`."""
    if ledgers < 1:
        raise ValueError("--ledgers must be >= 1")
    (lo, hi), (smin, smax) = entries, sizes
    if not 1 <= lo <= hi:
        raise ValueError(f"entries per ledger must satisfy 1 <= min <= max, got {entries}")
    if not 1 <= smin <= smax:
        raise ValueError(f"entry sizes must satisfy 1 <= min <= max, got {sizes}")
    rng = random.Random(seed)
    return tuple(LedgerSpec(n, rng.randint(lo, hi), seed, smin, smax) for n in range(1, ledgers + 1))


def ensembles(
    ledger_ids: Sequence[int], *, victim: str, sources: Sequence[str]
) -> dict[int, tuple[str, ...]]:
    """The victim at a rotating index of every ensemble, with each pair of `sources` in turn."""
    pairs = list(itertools.combinations(sources, E - 1))
    out: dict[int, tuple[str, ...]] = {}
    for n, lid in enumerate(ledger_ids):
        ensemble = list(pairs[n % len(pairs)])
        ensemble.insert(n % E, victim)
        out[lid] = tuple(ensemble)
    return out


def scenario_order(names: Sequence[str], *, seed: int) -> list[str]:
    """The scenarios in a random order fixed by `seed` (recorded with the results)."""
    order = list(names)
    random.Random(seed).shuffle(order)
    return order


@dataclass(frozen=True)
class Rates:
    mb_per_s: float
    mb_per_s_per_worker: float
    ledgers_per_min: float
    ledgers_per_min_per_worker: float


def rates(*, bytes_copied: int, ledgers: int, seconds: float, workers: int) -> Rates:
    """Throughput of one run; 1 MB = 10^6 bytes; per worker = the total divided by the workers."""
    if seconds <= 0 or workers < 1:
        raise ValueError("seconds must be > 0 and workers >= 1")
    mb_s = bytes_copied / 1e6 / seconds
    per_min = 60.0 * ledgers / seconds
    return Rates(mb_s, mb_s / workers, per_min, per_min / workers)


def disk_needed(plan: Sequence[LedgerSpec]) -> int:
    """Bytes of disk a run needs at most: the sources' copies (WQ of every E entries, minus the lost
    bookie's share) plus the targets after a BookKeeper-style run (every id of every ledger)."""
    payload = sum(s.payload_bytes() for s in plan)
    return int(payload * STORAGE_OVERHEAD * ((WQ * E - WQ) / E + 1))


# -- entry bodies (the ground truth) -----------------------------------------------------------------------


class LedgerBodies:
    """Every entry body of one ledger, as its writer would have sent it (CRC32C, real LAC and length)."""

    def __init__(self, spec: LedgerSpec, pool: bytes) -> None:
        from bkaudit.formats.entry import DigestManager
        from bkaudit.model.ledger import DigestType

        self.spec = spec
        self.sizes = spec.sizes()
        self.lengths = np.cumsum(self.sizes)
        self.pool = pool
        self.digest = DigestManager(spec.ledger_id, PASSWORD, DigestType.CRC32C)

    def body(self, entry_id: int) -> bytes:
        size = int(self.sizes[entry_id])
        offset = (self.spec.ledger_id * 1_000_003 + entry_id * 4_099) % POOL_BYTES
        payload = self.pool[offset : offset + size]
        return self.digest.package(entry_id, entry_id - 1, int(self.lengths[entry_id]), payload)

    @property
    def length(self) -> int:
        return int(self.lengths[-1])


def payload_pool(seed: int) -> bytes:
    return random.Random(seed).randbytes(POOL_BYTES + SIZES[1])


# -- the loaded state ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Golden:
    """The loaded cluster, stopped: where everything is and what every run starts from."""

    directory: str
    zk_port: int
    root: str
    bookies: tuple[dict[str, Any], ...]  # BookieInfo fields
    victim: str
    sources: tuple[str, ...]
    targets: tuple[str, ...]
    ensembles: dict[int, tuple[str, ...]]
    source_files: dict[str, tuple[int, int]]  # ledgers.db (size, mtime_ns) after the load

    @property
    def zk_dir(self) -> Path:
        return Path(self.directory) / "cluster" / "zookeeper"

    def saved(self, name: str) -> Path:
        return Path(self.directory) / "saved" / name


def _load_bookie(job: tuple[str, int, list[tuple[LedgerSpec, int]]]) -> int:
    """Bulk-load one stopped bookie's share (runs in a worker process): the entries its index stores."""
    from bkaudit.bookie.bulkload import bulk_load_entries
    from bkaudit.formats.entry import master_key
    from bkaudit.model.quorum import entries_of_bookie

    data_dir, seed, share = job
    pool = payload_pool(seed)

    def ledgers() -> Iterator[tuple[int, Iterator[tuple[int, bytes]]]]:
        for spec, index in share:
            bodies = LedgerBodies(spec, pool)
            mine = entries_of_bookie(index, 0, spec.entries - 1, E, WQ)
            yield spec.ledger_id, ((e, bodies.body(e)) for e in mine)

    return bulk_load_entries(data_dir, ledgers(), master_key=master_key(PASSWORD), chunk=LOAD_CHUNK)


def build(directory: Path, plan: Sequence[LedgerSpec], *, seed: int) -> tuple[Golden, dict[str, Any]]:
    """Start a cluster once (cookies, ids), create the metadata, stop it, bulk-load the sources, save."""
    from bkaudit.cluster.local import LocalCluster
    from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
    from bkaudit.zk import ledgers as zkledgers

    t0 = time.perf_counter()
    cluster = LocalCluster.up(directory / "cluster", bookies=1 + SOURCES + TARGETS, racks=RACKS)
    try:
        ids = cluster.ids()
        victim, sources, targets = ids[0], tuple(ids[1 : 1 + SOURCES]), tuple(ids[1 + SOURCES :])
        layout = ensembles([s.ledger_id for s in plan], victim=victim, sources=sources)
        zk = cluster.zk_client()
        pool = payload_pool(seed)
        for spec in plan:
            zkledgers.create_ledger_metadata(
                zk,
                spec.ledger_id,
                LedgerMetadata(
                    E,
                    WQ,
                    AQ,
                    LedgerState.CLOSED,
                    spec.entries - 1,
                    LedgerBodies(spec, pool).length,
                    DigestType.CRC32C,
                    PASSWORD,
                    (Segment(0, layout[spec.ledger_id]),),
                ),
                root=cluster.root,
            )
        assert cluster.zookeeper is not None
        zk_port = int(cluster.zookeeper["port"])
        infos = tuple(asdict(b) for b in cluster.bookies)
        root = cluster.root
    finally:
        cluster.down()
    started = time.perf_counter()
    by_id = {b["id"]: b for b in infos}
    jobs = [
        (
            by_id[b]["data_dir"],
            seed,
            [(s, layout[s.ledger_id].index(b)) for s in plan if b in layout[s.ledger_id]],
        )
        for b in sources
    ]
    with ProcessPoolExecutor(2) as workers:
        loaded = sum(workers.map(_load_bookie, jobs))
    load_s = time.perf_counter() - started
    saved = directory / "saved"
    shutil.copytree(directory / "cluster" / "zookeeper", saved / "zookeeper")
    for b in (victim, *targets):
        shutil.copytree(by_id[b]["data_dir"], saved / Path(by_id[b]["data_dir"]).name)
    golden = Golden(
        str(directory), zk_port, root, infos, victim, sources, targets, layout,
        {b: _file_state(by_id[b]["data_dir"]) for b in sources},
    )
    stats = {
        "setup_s": time.perf_counter() - t0,
        "load_s": load_s,
        "entries_loaded": loaded,
        "disk_bytes_sources": sum(golden.source_files[b][0] for b in sources),
    }
    return golden, stats


def _file_state(data_dir: str) -> tuple[int, int]:
    from bkaudit.bookie.ledgerdb import DB_NAME, current_dir

    st = (current_dir(data_dir) / DB_NAME).stat()
    return st.st_size, st.st_mtime_ns


# -- a fresh cluster per run ---------------------------------------------------------------------------------


class Fresh:
    """ZooKeeper and the bookies of one run, started from the saved state; `stop()` ends every process."""

    def __init__(self, golden: Golden) -> None:
        from bkaudit.cluster.local import BookieInfo, LocalCluster
        from bkaudit.zk.server import ZooKeeperServer

        self.golden = golden
        shutil.rmtree(golden.zk_dir, ignore_errors=True)
        shutil.copytree(golden.saved("zookeeper"), golden.zk_dir)
        infos = []
        for b in golden.bookies:
            info = BookieInfo(**{**b, "pid": None})
            if info.id in (golden.victim, *golden.targets):
                shutil.rmtree(info.data_dir, ignore_errors=True)
                shutil.copytree(golden.saved(Path(info.data_dir).name), info.data_dir)
            infos.append(replace(info, readonly=info.id in golden.sources))
        self.server = ZooKeeperServer(port=golden.zk_port, data_dir=golden.zk_dir)
        self.server.start(timeout_s=60)
        self.cluster = LocalCluster(
            Path(golden.directory) / "cluster",
            self.server.connect_string,
            infos,
            None,
            racks=RACKS,
        )
        try:
            for b in (*golden.sources, *golden.targets):
                self.cluster.start_bookie(b, wait=False)
            self._wait_registered()
            self._mark_all()
        except BaseException:
            self.stop()
            raise

    @property
    def zk(self) -> Any:
        return self.cluster.zk_client()

    def _wait_registered(self, timeout_s: float = 120.0) -> None:
        from bkaudit.zk import registry

        deadline = time.monotonic() + timeout_s
        g = self.golden
        while time.monotonic() < deadline:
            if set(g.targets) <= set(registry.list_writable(self.zk, g.root)) and set(g.sources) <= set(
                registry.list_readonly(self.zk, g.root)
            ):
                return
            time.sleep(0.2)
        raise RuntimeError("bookies did not register (targets writable, sources read-only) in time")

    def _mark_all(self) -> None:
        from bkaudit.zk import underreplication as ur

        g = self.golden
        for lid in sorted(g.ensembles):
            ur.mark_underreplicated(self.zk, lid, [g.victim], root=g.root)

    def stop(self) -> None:
        self.cluster.down()
        self.server.stop()


# -- one run of a scenario (a fresh process, through bench/harness.py) -------------------------------------


class BookKeeperStyleCopier(FragmentCopier):
    """LedgerFragmentReplicator's copy: every id from the fragment's first to last stored entry, in
    sub-fragments of `BK_BATCH` ids, one after the other (reads and writes of a sub-fragment concurrent)."""

    def copy(self, task: CopyTask, *, should_stop: Callable[[], bool] | None = None) -> CopyResult:
        total = CopyResult()
        if not task.ranges:
            return total
        first, last = task.ranges[0][0], task.ranges[-1][1]
        for start in range(first, last + 1, BK_BATCH):
            ids = range(start, min(last, start + BK_BATCH - 1) + 1)
            total.merge(self.copy_ids(task, ids, BK_BATCH, should_stop=should_stop))
        return total


def run_scenario(*, zk: str, root: str, scenario: str, events_dir: str) -> dict[str, Any]:
    """The side of one run: drain the queue with the scenario's workers; seconds from the event logs."""
    s = SCENARIOS[scenario]
    events = [Path(events_dir) / f"{scenario}-w{i}.events" for i in range(s.workers)]
    if s.workers == 1:
        written = _in_process(zk, root, events[0], bk_style=s.copier == "bk-style")
    else:
        written = _processes(zk, root, events)
    seconds, replicated = _span(events)
    return {"seconds": seconds, "ledgers": replicated, **written}


def _in_process(zk: str, root: str, events: Path, *, bk_style: bool) -> dict[str, int]:
    from bkaudit import config
    from bkaudit.autorecovery.service import AutoRecoveryService
    from bkaudit.autorecovery.worker import ReplicationWorker

    settings = config.load(
        environ={}, overrides={"zk.connect": zk, "zk.root": root, "autorecovery.idle_poll_s": 0.05}
    )
    svc = AutoRecoveryService(
        settings, node_id=events.stem, workers=0, auditor=False, events_path=str(events)
    ).start()
    try:
        assert svc.shared is not None
        copier = None
        if bk_style:
            copier = BookKeeperStyleCopier(svc.shared.pool, window=BK_BATCH, metrics=svc.metrics)
        worker = ReplicationWorker(svc.shared, f"{events.stem}/w0", copier=copier)
        svc.workers.append(worker)
        threading.Thread(target=worker.run, daemon=True).start()
        summary = svc.drain(timeout_s=RUN_TIMEOUT_S)
        if summary.exit_code != 0:
            raise RuntimeError(f"the worker did not drain the queue: {summary.data['left'][:5]}")
        return {k: int(summary.data[k]) for k in ("entries_written", "bytes_written")}
    finally:
        svc.stop()


def _processes(zk: str, root: str, events: list[Path]) -> dict[str, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BKAUDIT_")}
    env["BKAUDIT_AUTORECOVERY__IDLE_POLL_S"] = "0.05"
    env["BKAUDIT_LOG_LEVEL"] = "WARNING"
    cmd = [sys.executable, "-m", "bkaudit.cli", "autorecovery", "run", "--once", "--no-auditor"]
    procs = [
        subprocess.Popen(
            [*cmd, "--zk", zk, "--root", root, "--id", p.stem, "--events", str(p), "--json"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
        )
        for p in events
    ]
    outputs = [p.communicate(timeout=RUN_TIMEOUT_S)[0] for p in procs]
    if any(p.returncode != 0 for p in procs):
        raise RuntimeError(f"autorecovery processes exited {[p.returncode for p in procs]}")
    docs = [json.loads(out.decode().strip().splitlines()[-1]) for out in outputs]
    return {k: sum(int(d[k]) for d in docs) for k in ("entries_written", "bytes_written")}


def _span(events: list[Path]) -> tuple[float, int]:
    """(seconds from the first lock to the last marker resolved, ledgers replicated)."""
    from bkaudit.autorecovery.events import read_events

    evs = [e for path in events for e in read_events(path)]
    locks = [e["t"] for e in evs if e["event"] == "locked"]
    ends = [e["t"] for e in evs if e["event"] == "replicated"]
    if not locks or not ends:
        raise RuntimeError("no ledger was replicated (no locked/replicated events)")
    return max(ends) - min(locks), len(ends)


# -- verification (the parent, after every run, on the run's cluster) --------------------------------------


def verify(fresh: Fresh, plan: Sequence[LedgerSpec], *, seed: int) -> int:
    """Every ledger fully replicated on its new ensemble and every entry byte-identical to the loaded body;
    raises on any difference. Returns the entries read."""
    from bkaudit.formats import availability
    from bkaudit.model.quorum import entries_of_bookie, write_set
    from bkaudit.zk import ledgers as zkledgers

    g = fresh.golden
    zk = fresh.zk
    client = fresh.cluster.client_pool()
    pool = payload_pool(seed)
    problems: list[str] = []
    read = 0
    for spec in plan:
        md, _ = zkledgers.read_ledger_metadata(zk, spec.ledger_id, root=g.root)
        if len(md.segments) != 1 or g.victim in md.bookies():
            problems.append(f"ledger {spec.ledger_id}: ensembles {[s.ensemble for s in md.segments]}")
            continue
        ensemble = md.segments[0].ensemble
        lost_index = g.ensembles[spec.ledger_id].index(g.victim)
        if ensemble[lost_index] not in g.targets:
            problems.append(f"ledger {spec.ledger_id}: index {lost_index} is {ensemble[lost_index]}")
            continue
        last = spec.entries - 1
        for index, bookie in enumerate(ensemble):
            want = entries_of_bookie(index, 0, last, E, WQ)
            held = availability.decode(client.get(bookie).get_list_of_entries(spec.ledger_id).result(60))
            gaps = held.missing(0, last, want)
            if gaps:
                problems.append(f"ledger {spec.ledger_id}: {bookie} lists gaps {gaps[:3]}")
        bodies = LedgerBodies(spec, pool)
        window: list[tuple[int, Future[bytes]]] = []
        for e in range(spec.entries):
            indexes = write_set(e, E, WQ)
            index = lost_index if lost_index in indexes else indexes[0]
            window.append((e, client.get(ensemble[index]).read_entry(spec.ledger_id, e)))
            if len(window) >= VERIFY_WINDOW:
                _compare(window, bodies, problems)
                window = []
            if len(problems) > 20:
                break
        _compare(window, bodies, problems)
        read += spec.entries
        if len(problems) > 20:
            break
    for b in g.sources:
        data_dir = next(x["data_dir"] for x in g.bookies if x["id"] == b)
        if _file_state(data_dir) != g.source_files[b]:
            problems.append(f"source bookie {b}: ledgers.db changed during the run")
    if problems:
        raise RuntimeError("verification failed:\n  " + "\n  ".join(problems[:20]))
    return read


def _compare(window: list[tuple[int, Future[bytes]]], bodies: LedgerBodies, problems: list[str]) -> None:
    """Each read's body against the loaded one; differences and failures go to `problems`."""
    lid = bodies.spec.ledger_id
    for e, fut in window:
        try:
            if fut.result(120) != bodies.body(e):
                problems.append(f"ledger {lid} entry {e}: body differs from the loaded one")
        except Exception as exc:
            problems.append(f"ledger {lid} entry {e}: unreadable: {exc}")


# -- the benchmark -------------------------------------------------------------------------------------------


def run(
    *, plan: Sequence[LedgerSpec], names: Sequence[str], runs: int, seed: int, workdir: Path
) -> dict[str, Any]:
    golden, stats = build(workdir, plan, seed=seed)
    print(
        f"loaded {stats['entries_loaded']:,} entries ({stats['disk_bytes_sources'] / 1e9:.2f} GB on the "
        f"sources) in {stats['load_s']:.0f}s; set-up {stats['setup_s']:.0f}s",
        flush=True,
    )
    order = scenario_order(names, seed=seed)
    current: dict[str, Any] = {}
    verifications: dict[str, list[dict[str, float]]] = {n: [] for n in order}
    events_root = workdir / "events"

    def before(side: harness.Side) -> harness.Side:
        t0 = time.perf_counter()
        current["fresh"] = Fresh(golden)
        current["start_s"] = time.perf_counter() - t0
        events = events_root / f"{side.name}-{len(verifications[side.name])}"
        events.mkdir(parents=True)
        return replace(side, kwargs={**side.kwargs, "zk": current["fresh"].server.connect_string,
                                     "events_dir": str(events)})

    def after(name: str, result: dict[str, Any]) -> None:
        fresh: Fresh = current.pop("fresh")
        try:
            if result["ledgers"] != len(plan):
                raise RuntimeError(f"{name}: {result['ledgers']} of {len(plan)} ledgers replicated")
            t0 = time.perf_counter()
            entries = verify(fresh, plan, seed=seed)
            verifications[name].append(
                {"entries_read": entries, "verify_s": time.perf_counter() - t0, "start_s": current["start_s"]}
            )
        finally:
            fresh.stop()

    sides = [
        harness.Side(n, "recovery:run_scenario", {"root": golden.root, "scenario": n}, SCENARIOS[n].label)
        for n in order
    ]
    start = harness.machine()
    try:
        results = harness.compare(
            sides, runs=runs, before_run=before, after_run=after, timeout_s=RUN_TIMEOUT_S
        )
    finally:
        if "fresh" in current:  # a side failed: its cluster still runs
            current.pop("fresh").stop()
    end = harness.machine()
    total_bytes = sum(s.payload_bytes() for s in plan)
    return {
        "bench": "recovery",
        "seed": seed,
        "ledgers": len(plan),
        "entries": sum(s.entries for s in plan),
        "payload_bytes": total_bytes,
        "plan": [asdict(s) for s in plan],
        "quorum": {"E": E, "WQ": WQ, "AQ": AQ},
        "bookies": {"sources": SOURCES, "targets": TARGETS, "racks": RACKS},
        "order": order,
        "execution": [list(x) for x in harness.alternation(order, runs)],
        "runs": runs,
        "setup": stats,
        "results": results,
        "verification": verifications,
        "machine_start": start,
        "machine_end": end,
    }


def summarize(payload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per scenario: spreads of seconds and of the per-worker rates, median bytes copied."""
    out: dict[str, dict[str, Any]] = {}
    for name, runs in payload["results"].items():
        workers = SCENARIOS[name].workers
        per_run = [
            rates(
                bytes_copied=r["bytes_written"], ledgers=r["ledgers"], seconds=r["seconds"], workers=workers
            )
            for r in runs
        ]
        out[name] = {
            "seconds": harness.spreads(runs, "seconds"),
            "wall_s": harness.spreads(runs, "wall_s"),
            "mb_per_s_per_worker": harness.Spread.of(x.mb_per_s_per_worker for x in per_run),
            "ledgers_per_min_per_worker": harness.Spread.of(x.ledgers_per_min_per_worker for x in per_run),
            "bytes_written": harness.Spread.of(r["bytes_written"] for r in runs),
            "entries_written": harness.Spread.of(r["entries_written"] for r in runs),
        }
    return out


def report(payload: dict[str, Any], summary: dict[str, dict[str, Any]]) -> str:
    setup = payload["setup"]
    lines = [
        f"### AutoRecovery, {payload['ledgers']} ledgers ({payload['entries']:,} entries, "
        f"{payload['payload_bytes'] / 1e9:.2f} GB of payload), `bench/recovery.py`",
        "",
        f"E{E}/WQ{WQ}/AQ{AQ} CLOSED ledgers, CRC32C, seed {payload['seed']}; the lost bookie in every "
        "ensemble; "
        f"{SOURCES} read-only source bookies, {TARGETS} empty targets, {RACKS} racks, one ZooKeeper, a fresh "
        f"cluster per run. Load (not measured): {setup['entries_loaded']:,} entries, "
        f"{setup['disk_bytes_sources'] / 1e9:.2f} GB, {setup['load_s']:.0f} s. Order (seeded): "
        f"{', '.join(payload['order'])}, alternated, {payload['runs']} run(s) each; median (min-max).",
        "",
        "| scenario | workers | seconds | MB/s per worker | ledgers/min per worker | MB written | "
        "entries written | seconds with start-up |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in payload["order"]:
        s = summary[name]
        lines.append(
            harness.markdown_row(
                [
                    SCENARIOS[name].label,
                    str(SCENARIOS[name].workers),
                    s["seconds"].cell(1),
                    s["mb_per_s_per_worker"].cell(2),
                    s["ledgers_per_min_per_worker"].cell(1),
                    f"{s['bytes_written'].median / 1e6:,.1f}",
                    f"{s['entries_written'].median:,.0f}",
                    s["wall_s"].cell(1),
                ]
            )
        )
    if "bkaudit-1" in summary and "bk-style-1" in summary:
        r = harness.ratio(summary["bk-style-1"]["seconds"], summary["bkaudit-1"]["seconds"])
        lines += [
            "",
            f"bkaudit 1 worker vs the BookKeeper-style copier, 1 worker, same data: {r:.2f}x faster "
            "(seconds, median / median); the BookKeeper-style copier writes every id of the fragment, "
            f"bkaudit only the ids the lost index stores ({WQ}/{E} of them with E{E}/WQ{WQ}).",
        ]
    lines += ["", harness.machine_line(payload["machine_start"], payload["machine_end"]), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ledgers", type=int, default=200, help="ledgers of the lost bookie (default 200)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_LEDGERS} ledgers (the quick row)")
    parser.add_argument("--runs", type=int, default=harness.DEFAULT_RUNS, help="runs of each scenario")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated, of: "
                        + ", ".join(SCENARIOS))
    parser.add_argument("--min-entries", type=int, default=ENTRIES[0])
    parser.add_argument("--max-entries", type=int, default=ENTRIES[1])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--json", default=None, help="where the raw results go")
    parser.add_argument("--workdir", default=None, help="where the cluster lives (default: a temp dir)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not names:
        parser.error(f"unknown scenario(s) {unknown}; choose from {', '.join(SCENARIOS)}")
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    ledgers = QUICK_LEDGERS if args.quick else args.ledgers
    try:
        plan = ledger_plan(ledgers=ledgers, seed=args.seed, entries=(args.min_entries, args.max_entries))
    except ValueError as exc:
        parser.error(str(exc))
    with contextlib.ExitStack() as stack:
        if args.workdir:
            workdir = Path(args.workdir).resolve()
            if workdir.exists() and any(workdir.iterdir()):
                parser.error(f"--workdir {workdir} is not empty")
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bkaudit-bench-recovery-")))
        need, free = disk_needed(plan), shutil.disk_usage(workdir).free
        if need > free:
            parser.error(
                f"{len(plan)} ledgers need about {need / 1e9:.1f} GB of disk under {workdir}, "
                f"{free / 1e9:.1f} GB are free: use fewer --ledgers or a --workdir on a larger disk"
            )
        payload = run(plan=plan, names=names, runs=args.runs, seed=args.seed, workdir=workdir)
    summary = summarize(payload)
    payload["summary"] = summary
    path = harness.write_json(f"recovery-{ledgers}", payload, args.json)
    print(report(payload, summary))
    print(f"raw results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
