"""Benchmark of the metadata checker (Spark jobs 1 + 2) against a BookKeeper-Auditor-style sequential checker.

    .venv/bin/python -m bench.checker [--ledgers N | --quick] [--layout uniform|realistic] [--entries E]
                                      [--runs R] [--monitor] [--json PATH]

1. a LocalCluster of 9 bookie processes on 3 racks (embedded ZooKeeper); N closed ledgers (ids 0..N-1) laid
   out by bench/layouts.py: `uniform` (default; E entries each, E3/WQ2/AQ2 and E5/WQ3/AQ2 alternating, one
   segment, ensembles rotating) or `realistic` (98% of 10-1,000 entries, 2% of 13,000-50,000; E2/WQ2,
   E3/WQ2 and E5/WQ3 mixed; 10% with 2-3 segments; rack-aware ensembles);
2. bookie indexes bulk-loaded (each bookie stopped while loading) with every entry each bookie must hold,
   minus a known set of holes in ~1% of the ledgers (one copy of a run of entries lost, an entry lost on two
   of its bookies, in any segment); the expected category and missing entries of every damaged ledger come
   from a naive per-entry model of those holes (`layouts.truth`). A share that lost nothing is stored as one
   striping per segment (`bookie.bulkload.bulk_load_stripings`: index-only entries the bookie lists and reads
   like entry rows, docs/storage.md), a damaged share as one entry row per copy (`bulk_load_index`), so only
   ledgers with holes are expanded entry by entry and a million realistic ledgers fit this machine;
3. ledger metadata bulk-loaded into ZooKeeper (BookKeeper v3 bytes with every segment, multi() transactions);
4. through bench/harness.py, alternated, R runs each, every run in a fresh process and on freshly
   restarted bookies (no warm listing cache on either side):
   (a) bkaudit like for like: a new Spark session (timed apart), a snapshot of the metadata, then the check
       over it (what `bkaudit check --fresh` runs), every setting at its default;
   (b) the baseline, shaped as BookKeeper's AuditorReplicasCheckTask.replicasCheck (see `baseline`);
   both must find every hole with the exact missing entries, and nothing else (asserted after every run);
5. a markdown table (medians with min-max, with and without start-up, ratio median/median) on stdout and
   the raw results as JSON (bench/results/checker-N-<stamp>.json or --json);
6. with `--monitor` (bench/monitor.py), every run watched from this process: peak RSS of the side's process,
   Spark's JVM and Python workers, each bookie and the ZooKeeper JVM at 1 Hz, ZooKeeper's `mntr` each second
   and a 100 getData/s open-loop probe; a memory table and a ZooKeeper table per side in the report.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import itertools
import queue
import shutil
import signal
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import harness, layouts, monitor

BOOKIES = 9
RACKS = 3
CREATE_BATCH = 200
BLOB_CACHE = 10_000
BASELINE_IN_FLIGHT = 100  # AuditorReplicasCheckTask.MAX_CONCURRENT_REPLICAS_CHECK_LEDGER_REQUESTS
SEED = layouts.SEED
DURABILITY = ("no_replica", "below_ack_quorum", "below_write_quorum")


# -- the synthetic cluster (layouts and holes: bench/layouts.py) ---------------------------------------------


def _bookie_share(args: tuple[str, str, list[tuple[int, layouts.Layout]], dict[int, set[int]]]) -> int:
    """Bulk-load one bookie (runs in a worker process): a striping per segment of every ledger it lost
    nothing of, entry rows (its runs, holes removed) of the others."""
    from bkaudit.bookie.bulkload import bulk_load_index, bulk_load_stripings

    bookie, data_dir, mine, lost = args
    striped = bulk_load_stripings(
        data_dir, ((lid, layouts.bookie_stripings(lay, bookie)) for lid, lay in mine if lid not in lost)
    )
    return striped + bulk_load_index(
        data_dir, ((lid, layouts.bookie_runs(lay, bookie, lost[lid])) for lid, lay in mine if lid in lost)
    )


def load_bookies(
    cluster: Any,
    plan: dict[int, layouts.Layout],
    holes: layouts.Holes,
    worker: Any = None,
) -> int:
    """Stop every bookie, load its share (`worker`, default `_bookie_share`, 2 processes), restart it."""
    jobs = []
    for b in cluster.bookies:
        mine = [(lid, lay) for lid, lay in plan.items() if b.id in lay.bookies()]
        lost = {lid: h[b.id] for lid, h in holes.items() if b.id in h}
        jobs.append((b.id, b.data_dir, mine, lost))
    for b in cluster.bookies:
        cluster.stop_bookie(b.id)
    with ProcessPoolExecutor(2) as pool:
        total = sum(pool.map(worker or _bookie_share, jobs))
    for b in cluster.bookies:
        cluster.start_bookie(b.id, wait=False)
    _wait_registered(cluster)
    return total


def _wait_registered(cluster: Any, timeout_s: float = 120.0) -> None:
    from bkaudit.zk import registry

    zk = cluster.zk_client()
    deadline = time.monotonic() + timeout_s
    want = {b.id for b in cluster.bookies}
    while time.monotonic() < deadline:
        if want <= set(registry.list_writable(zk, cluster.root)):
            return
        time.sleep(0.2)
    raise RuntimeError("bookies did not register after the bulk load")


def load_metadata(
    cluster: Any,
    plan: dict[int, layouts.Layout],
    root: str | None = None,
    digest: str = "DUMMY",
) -> float:
    """Every ledger's metadata (BookKeeper v3 bytes, every segment) in pipelined multi() transactions;
    returns seconds."""
    from bkaudit.formats.ledger_metadata import serialize
    from bkaudit.zk import paths
    from bkaudit.zk.ledgers import init_cluster

    zk = cluster.zk_client()
    root = root or cluster.root
    if root != cluster.root:
        init_cluster(zk, root=root)
    blobs: dict[layouts.Layout, bytes] = {}  # uniform layouts repeat: serialize each once
    t0 = time.perf_counter()
    ids = sorted(plan)
    for parent in sorted({paths.ledger_path(lid, root=root).rsplit("/", 1)[0] for lid in ids}):
        zk.ensure_path(parent)
    window: collections.deque[Any] = collections.deque()
    for start in range(0, len(ids), CREATE_BATCH):
        txn = zk.transaction()
        for lid in ids[start : start + CREATE_BATCH]:
            lay = plan[lid]
            blob = blobs.get(lay)
            if blob is None:
                blob = serialize(metadata_for(lay, digest))
                if len(blobs) < BLOB_CACHE:
                    blobs[lay] = blob
            txn.create(paths.ledger_path(lid, root=root), blob)
        window.append(txn.commit_async())
        if len(window) >= 5:
            _ok(window.popleft().get())
    while window:
        _ok(window.popleft().get())
    return time.perf_counter() - t0


def metadata_for(lay: layouts.Layout, digest: str = "DUMMY") -> Any:
    """The closed ledger's LedgerMetadata, one Segment per (first entry id, ensemble) of its layout."""
    from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment

    return LedgerMetadata(
        lay.e,
        lay.wq,
        lay.aq,
        LedgerState.CLOSED,
        lay.last,
        lay.length * 100,
        DigestType[digest],
        b"",
        tuple(Segment(first, ens) for first, ens in lay.segments),
        ctime=1_795_000_000_000,
    )


def _ok(results: list[Any]) -> None:
    bad = [r for r in results if isinstance(r, Exception)]
    if bad:
        raise RuntimeError(f"loading metadata failed: {bad[0]!r}")


# -- (a) the Spark checker -----------------------------------------------------------------------------------


def settings_for(cluster: Any, warehouse: str, root: str | None = None,
                 overrides: dict[str, Any] | None = None) -> Any:
    """Every key at its default (zk.connect, zk.root and the warehouse aside, and `overrides`, which a row
    that changes a setting names)."""
    import bkaudit.audit.settings
    import bkaudit.spark.settings  # noqa: F401
    from bkaudit import config

    keys: dict[str, Any] = {
        "zk.connect": cluster.zk,
        "zk.root": root or cluster.root,
        "snapshot.warehouse": warehouse,
        **(overrides or {}),
    }
    return config.load(environ={}, overrides=keys)


def spark_side(zk: str, root: str, warehouse: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """(a), in a fresh process (bench/harness.py): a new Spark session (timed apart), then what
    `bkaudit check --fresh` runs: a snapshot and the check over it, at default settings (but `overrides`)."""
    from bkaudit.spark.checker import CheckOptions, run_check

    spark, settings, snap, t = _session_and_snapshot(zk, root, warehouse, overrides)
    snapshot_s, wall0 = t["snapshot_s"], t["wall0"]
    t0 = time.perf_counter()
    result = run_check(spark, settings, CheckOptions(warehouse=warehouse, snapshot_id=snap.snapshot_id))
    check_s = time.perf_counter() - t0
    done_at = time.time()
    spark.stop()
    return {
        "seconds": snapshot_s + check_s,
        "session_s": t["session_s"],
        "snapshot_s": snapshot_s,
        "check_s": check_s,
        "ledgers": result.ledgers_checked,
        "found": found_json(spark_found(result)),
        "violations": [(v.finding.ledger_id, v.finding.category.value, v.finding.detail.get("evidence"))
                       for v in result.violations],
        "bookies_missing": [(v.finding.ledger_id, list(v.finding.detail.get("bookies_missing_entries", ())))
                            for v in result.violations if v.finding.category.value in DURABILITY],
        "evidence": sorted({b.evidence for b in result.bookies}),
        "phases": result.phase_seconds,
        "snapshot_steps": snap.timings,
        "calls": sum(b.calls for b in result.bookies),
        "window": [wall0, wall0 + snapshot_s + check_s],  # the work on the wall clock, for bench/monitor.py
        "done_at": done_at,
    }


def _session_and_snapshot(zk: str, root: str, warehouse: str,
                          overrides: dict[str, Any] | None = None) -> tuple[Any, Any, Any, dict[str, Any]]:
    """A new Spark session (timed apart), then the snapshot at default settings (but `overrides`): the
    session, the settings, the SnapshotResult and the timings both sides report."""
    from types import SimpleNamespace

    from bkaudit.spark.session import get_session
    from bkaudit.spark.snapshot import run_snapshot

    t0 = time.perf_counter()
    spark = get_session("local[2]", app_name="bkaudit-bench-checker")
    spark.range(1).count()
    session_s = time.perf_counter() - t0
    settings = settings_for(SimpleNamespace(zk=zk, root=root), warehouse, overrides=overrides)
    wall0, t0 = time.time(), time.perf_counter()
    snap = run_snapshot(spark, settings, warehouse=warehouse)
    timing = {"session_s": session_s, "snapshot_s": time.perf_counter() - t0, "wall0": wall0}
    return spark, settings, snap, timing


def snapshot_side(zk: str, root: str, warehouse: str) -> dict[str, Any]:
    """The snapshot job alone, in a fresh process (bench/scaling.py's sizes past the bookies' memory); what
    it counted, for the caller to check against what it loaded."""
    spark, _settings, snap, t = _session_and_snapshot(zk, root, warehouse)
    spark.stop()
    return {"seconds": t["snapshot_s"], "session_s": t["session_s"], "snapshot_s": t["snapshot_s"],
            "snapshot_steps": snap.timings, "status": snap.status, "error": snap.error,
            "ledgers": snap.ledgers, "segments": snap.segments, "unparseable": snap.unparseable,
            "validation_failures": snap.validation_failures,
            "window": [t["wall0"], t["wall0"] + t["snapshot_s"]]}


def baseline_side(
    zk: str,
    root: str,
    ledgers: int,
    in_flight: int = BASELINE_IN_FLIGHT,
    reads_percentage: float | None = None,
) -> dict[str, Any]:
    """(b), in a fresh process: the baseline over ledgers 0..ledgers-1 (replicas-check shaped, or
    checkAllLedgers shaped with `reads_percentage`, as bench/checker_reads.py runs it)."""
    wall0 = time.time()
    out = baseline(zk, root, list(range(ledgers)), in_flight=in_flight, reads_percentage=reads_percentage)
    out["window"] = [wall0, time.time()]  # the work (and the connect), wall clock, for bench/monitor.py
    out["found"] = found_json(out["found"])
    return out


def found_json(found: dict[int, tuple[str, list[tuple[int, int]]]]) -> list[Any]:
    """What a side found, as JSON rows sorted by ledger (also java_auditor's, so both sides compare)."""
    return [[lid, cat, [list(r) for r in runs]] for lid, (cat, runs) in sorted(found.items())]


def found_from_json(rows: list[Any]) -> dict[int, tuple[str, list[tuple[int, int]]]]:
    return {int(lid): (cat, [(lo, hi) for lo, hi in runs]) for lid, cat, runs in rows}


def restart_bookies(cluster: Any) -> float:
    """Restart every bookie (untimed): each run starts on cold bookies, no side inherits the listing cache
    the run before it filled. Returns seconds."""
    t0 = time.perf_counter()
    cluster.restart_bookies()
    return time.perf_counter() - t0


# -- (b) the sequential, BookKeeper-style baseline -----------------------------------------------------------


def baseline(
    zk_connect: str,
    root: str,
    ledger_ids: list[int],
    in_flight: int = BASELINE_IN_FLIGHT,
    reads_percentage: float | None = None,
) -> dict[str, Any]:
    """BookKeeper's replicas check, in one process (AuditorReplicasCheckTask.replicasCheck): a semaphore of
    MAX_CONCURRENT_REPLICAS_CHECK_LEDGER_REQUESTS = 100 ledgers in flight; per ledger
    `ledgerManager.readLedgerMetadata` (one ZooKeeper read), then, in
    ReadLedgerMetadataCallbackForReplicasCheck.accept, the entries striped to each bookie are collected per
    segment of `metadata.getAllEnsembles()` into one list per bookie (bookiesSegmentInfoMap; a bookie with
    no entry striped to it in a segment is skipped for that segment) and ONE
    `admin.asyncGetListOfEntriesOfLedger` is sent per (ledger, bookie), covering all its segments;
    GetListOfEntriesOfLedgerCallbackForReplicasCheck then compares the answer with each segment's striped
    entries (getUnavailableEntries). A multi-segment ledger thus costs one request per distinct bookie of
    all its ensembles, which is what `bkaudit.audit.expected.expected_by_bookie` yields (apache/bookkeeper,
    bookkeeper-server/src/main/java/org/apache/bookkeeper/replication/AuditorReplicasCheckTask.java). The
    decoding and comparison are the Spark job's own code.

    With `reads_percentage`, checkAllLedgers' shape instead (LedgerChecker): per (ledger, bookie) one read per
    entry `bkaudit.audit.reads.plan_reads` picks (first and last stored per segment, plus that percentage),
    all sent at once (inFlightReadEntryNumInLedgerChecker = -1), each entry's digest verified."""
    from bkaudit.audit.durability import assess
    from bkaudit.audit.expected import expected_by_bookie
    from bkaudit.audit.reads import plan_reads
    from bkaudit.formats.ledger_metadata import parse
    from bkaudit.job.fanout import judge_answer
    from bkaudit.model.shape import LedgerShape
    from bkaudit.rpc.pool import BookieClientPool
    from bkaudit.store.zookeeper import ZkStore
    from bkaudit.zk import paths
    from bkaudit.zk.client import close, connect

    zk = connect(zk_connect)
    pool = BookieClientPool(registry=ZkStore(zk, root=root).registry, request_timeout_s=60)
    events: queue.SimpleQueue[tuple[str, int, Any]] = queue.SimpleQueue()
    found: dict[int, tuple[str, list[tuple[int, int]]]] = {}
    state: dict[int, dict[str, Any]] = {}
    todo = iter(ledger_ids)
    active = 0
    done = 0
    t0 = time.perf_counter()

    def start(lid: int) -> None:
        result = zk.get_async(paths.ledger_path(lid, root=root))
        result.rawlink(lambda r, lid=lid: events.put(("meta", lid, r)))

    for _ in range(in_flight):
        lid = next(todo, None)
        if lid is None:
            break
        start(lid)
        active += 1
    while active:
        kind, lid, payload = events.get()
        if kind == "meta":
            data, stat = payload.get()
            md = parse(data)
            shape = LedgerShape.from_metadata(lid, md, version=stat.version)
            wanted = list(expected_by_bookie(shape))
            if reads_percentage is None:
                calls = [(b, pool.get(b).get_list_of_entries(lid)) for b in wanted]
            else:
                calls = [
                    ((b, x), pool.get(b).read_entry(lid, x))
                    for b, wants in expected_by_bookie(shape).items()
                    for x in plan_reads(shape, b, reads_percentage, expected=wants).entries
                ]
            state[lid] = {"shape": shape, "digest": md.digest_type.name, "waiting": len(calls), "answers": {}}
            for key, fut in calls:
                fut.add_done_callback(lambda f, lid=lid, k=key: events.put(("ans", lid, (k, f))))
            continue
        key, fut = payload
        st = state[lid]
        exc = fut.exception()
        st["answers"][key] = exc if exc is not None else fut.result()
        st["waiting"] -= 1
        if st["waiting"]:
            continue
        shape = st["shape"]
        if reads_percentage is None:
            evidence = [judge_answer(shape, b, v) for b, v in st["answers"].items()]
        else:
            evidence = _read_evidence(shape, st["digest"], st["answers"])
        a = assess(shape, evidence)
        if a.category is not None:
            found[lid] = (a.category.value, list(a.under_replicated))
        del state[lid]
        done += 1
        active -= 1
        nxt = next(todo, None)
        if nxt is not None:
            start(nxt)
            active += 1
    elapsed = time.perf_counter() - t0
    pool.close()
    close(zk)
    return {"seconds": elapsed, "ledgers": done, "found": found}


def _read_evidence(shape: Any, digest_type: str, answers: dict[tuple[str, int], Any]) -> list[Any]:
    """One BookieEvidence per bookie from its entry reads: failures by status, bodies by their digest."""
    from bkaudit.audit.reads import read_evidence, summarise_reads, verify_entry
    from bkaudit.audit.statuses import STATUS_CORRUPT, STATUS_OK
    from bkaudit.errors import BookieError

    outcomes: dict[str, dict[int, str]] = {}
    errors: dict[str, dict[int, str]] = {}
    for (bookie, entry), value in answers.items():
        mine = outcomes.setdefault(bookie, {})
        if isinstance(value, BaseException):
            mine[entry] = value.status if isinstance(value, BookieError) else "UNAVAILABLE"
            errors.setdefault(bookie, {})[entry] = str(value)
        else:
            problem = verify_entry(shape.ledger_id, entry, bytes(value), digest_type)
            mine[entry] = STATUS_OK if problem is None else STATUS_CORRUPT
    return [read_evidence(shape, b, summarise_reads(o, errors.get(b))) for b, o in outcomes.items()]


# -- report --------------------------------------------------------------------------------------------------


def verify(
    found: dict[int, tuple[str, list[tuple[int, int]]]],
    expected: dict[int, tuple[str, list[tuple[int, int]]]],
) -> tuple[int, int, int]:
    """(holes found with exact category and entries, missed or wrong, false positives)."""
    right = sum(1 for lid, want in expected.items() if found.get(lid) == want)
    wrong = len(expected) - right
    extra = len(set(found) - set(expected))
    return right, wrong, extra


def spark_found(result: Any) -> dict[int, tuple[str, list[tuple[int, int]]]]:
    out: dict[int, tuple[str, list[tuple[int, int]]]] = {}
    for v in result.violations:
        if v.finding.category.value in ("no_replica", "below_ack_quorum", "below_write_quorum"):
            f = v.finding
            out[f.ledger_id] = (f.category.value, [(lo, hi) for lo, hi in f.missing_entries or ()])
    return out


def report(m: dict[str, Any]) -> str:
    """Markdown: the conditions, one table (medians with min-max), the ratios."""
    n = m["ledgers"]
    a, b = m["results"]["bkaudit"], m["results"]["baseline"]
    a_in, a_wall = harness.spreads(a, "seconds"), harness.spreads(a, "wall_s")
    b_in, b_wall = harness.spreads(b, "seconds"), harness.spreads(b, "wall_s")
    snap, check, session = (harness.spreads(a, k) for k in ("snapshot_s", "check_s", "session_s"))
    median_run = sorted(a, key=lambda r: r["seconds"])[len(a) // 2]
    phases = ", ".join(f"{k} {v:.2f}" for k, v in median_run["phases"].items())
    setup = m["setup"]
    row = harness.markdown_row
    lines = [
        f"### Metadata checker, {n:,} ledgers, {m['layout']} layout ({m['when']}, `bench/checker.py "
        f"--layout {m['layout']} --ledgers {n}`)",
        "",
        harness.machine_line(m["machine_start"], m["machine_end"]),
        f"Spark local[2]; a LocalCluster of {BOOKIES} bookie processes on {RACKS} racks and the embedded "
        f"ZooKeeper on the same machine. Ledgers: {m['described']}; bookie indexes bulk-loaded with holes "
        f"in {len(m['expected']):,} ledgers. {m['runs']} runs of each side, "
        "alternated, each in a fresh process; every bookie restarted before every run (no side inherits a "
        "warm listing cache); bkaudit at default settings (`[snapshot]` and `[checker]` untouched: "
        "validation on, ZooKeeper read rate limits on, listing batches sized by bytes).",
        "",
        row(["measure", "seconds, median (min-max)", "ledgers/s, median (min-max)"]),
        row(["---", "---:", "---:"]),
        row(["(a) bkaudit: snapshot + check (what `bkaudit check --fresh` runs), timed inside its process "
             "(no start-up)", a_in.cell(), a_in.rate_cell(n)]),
        row(["  of which the snapshot (job 1)", snap.cell(), snap.rate_cell(n)]),
        row(["  of which the check (job 2)", check.cell(), check.rate_cell(n)]),
        row(["(a) with start-up: process spawn to exit (interpreter, imports, new Spark session, snapshot, "
             "check)", a_wall.cell(), a_wall.rate_cell(n)]),
        row(["  Spark session start inside (a)", session.cell(), ""]),
        row([f"(b) BookKeeper-style replicas check: 1 process, {BASELINE_IN_FLIGHT} ledgers in flight, "
             "metadata read per ledger, one GetListOfEntriesOfLedger per (ledger, bookie); timed inside "
             "its process (no start-up)", b_in.cell(), b_in.rate_cell(n)]),
        row(["(b) with start-up: process spawn to exit (interpreter, imports, ZooKeeper connect, check)",
             b_wall.cell(), b_wall.rate_cell(n)]),
        "",
        f"Ratio (b)/(a), median/median: **{harness.ratio(b_in, a_in):.2f}x** without start-up, "
        f"**{harness.ratio(b_wall, a_wall):.2f}x** with start-up (aim >= 10x). Every run of both sides "
        "found every injected hole with its exact category and missing entries and nothing else (asserted).",
        f"Checker phases of the median (a) run (s): {phases}. Setup, not timed: cluster "
        f"{setup['cluster']:.1f} s, bulk load {setup['bookies']:.1f} s, metadata {setup['metadata']:.1f} s, "
        f"bookie restarts {setup['restarts']:.1f} s in all ({m['loaded']:,} entry copies loaded). "
        f"Raw results: `{m['json']}`.",
        "",
    ]
    labels = {"bkaudit": "(a) bkaudit", "baseline": "(b) baseline"}
    lines += monitor.memory_table(m["results"], labels)
    lines += monitor.zookeeper_table(m["results"], labels)
    if "probe_idle" in m:
        lines += [monitor.idle_line(m["probe_idle"]), ""]
    return "\n".join(lines)


def cluster_targets(cluster: Any) -> Any:
    """What `--monitor` watches: each bookie's current pid (they restart before every run), the ZooKeeper
    JVM, and the probe's znode (the ledgers root, which always exists)."""
    fixed = {f"bookie-{i}": b.pid for i, b in enumerate(cluster.bookies) if b.pid is not None}
    if cluster.zookeeper and cluster.zookeeper.get("pid"):
        fixed["zookeeper"] = cluster.zookeeper["pid"]
    return monitor.zk_targets(cluster.zk, cluster.root, fixed)


def check_side(name: str, found: dict[int, Any], expected: dict[int, Any], extra: int) -> None:
    right, wrong, false_pos = verify(found, expected)
    if wrong or false_pos or extra:
        raise AssertionError(
            f"{name}: {right}/{len(expected)} holes right, {wrong} missed or wrong, {false_pos} false "
            f"positives, {extra} other findings"
        )


def setup(cluster: Any, layout: str, n: int, entries: int, m: dict[str, Any]) -> None:
    """Plan, bulk-load the bookies and ZooKeeper; fills m["expected"] (ground truth), m["setup"] (seconds) and
    what the report says about the ledgers. Shared by bench/scaling.py."""
    t0 = time.perf_counter()
    plan, holes = layouts.plan(layout, n, [b.id for b in cluster.bookies], RACKS, entries=entries)
    m["expected"] = layouts.truth(plan, holes)
    m["setup"]["plan"] = time.perf_counter() - t0
    m["described"] = layouts.describe(layout, plan)
    m["entries_total"] = sum(lay.length for lay in plan.values())
    m["pairs"] = layouts.pairs(plan)
    fits(layouts.footprint(plan, holes), cluster.directory)
    print(f"bulk-loading {n:,} ledgers ({m['entries_total']:,} entries) into {BOOKIES} bookies ...",
          flush=True)
    t0 = time.perf_counter()
    m["loaded"] = load_bookies(cluster, plan, holes)
    m["setup"]["bookies"] = time.perf_counter() - t0
    m["setup"]["metadata"] = load_metadata(cluster, plan)


def fits(need: layouts.Footprint, directory: Any) -> None:
    """Refuse, before loading anything, a plan the disk or the memory of this machine cannot hold."""
    free_disk = shutil.disk_usage(directory).free
    free_memory = _available_memory()
    problems = []
    if need.disk_bytes > 0.8 * free_disk:
        problems.append(f"~{need.disk_bytes / 1e9:.1f} GB of bookie storage ({need.copies:,} entry rows, "
                        f"{need.stripings:,} stripings) "
                        f"against {free_disk / 1e9:.1f} GB free")
    if free_memory is not None and need.memory_bytes > 0.6 * free_memory:
        problems.append(f"~{need.memory_bytes / 1e9:.1f} GB of bookie index memory ({need.runs:,} runs, "
                        f"{need.stripings:,} stripings) "
                        f"against {free_memory / 1e9:.1f} GB available")
    if problems:
        raise SystemExit("this layout does not fit this machine: " + "; ".join(problems)
                         + " (see docs/performance.md, Reproducing)")


def _available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="10,000 ledgers")
    parser.add_argument("--layout", choices=layouts.LAYOUTS, default="uniform",
                        help="uniform (default, `make bench-quick`) or realistic (bench/layouts.py)")
    parser.add_argument("--entries", type=int, default=10, help="entries per ledger (uniform layout)")
    parser.add_argument("--runs", type=int, default=harness.DEFAULT_RUNS, help="runs of each side")
    parser.add_argument("--monitor", action="store_true",
                        help="memory per process role, ZooKeeper mntr and a 100 getData/s probe per run")
    parser.add_argument("--json", help="result file (default bench/results/checker-<stamp>.json)")
    args = parser.parse_args(argv)
    n = 10_000 if args.quick else args.ledgers
    from bkaudit.cluster.local import LocalCluster

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still takes its cluster down
    m: dict[str, Any] = {
        "ledgers": n, "layout": args.layout, "entries": args.entries, "runs": args.runs,
        "setup": {"restarts": 0.0}, "machine_start": harness.machine(),
    }
    with tempfile.TemporaryDirectory(prefix="bkaudit-bench-checker-") as tmp:
        t0 = time.perf_counter()
        cluster = LocalCluster.up(Path(tmp) / "cluster", bookies=BOOKIES, racks=RACKS,
                                  zk_heap_mb=harness.zookeeper_heap_mb(n))
        m["setup"]["cluster"] = time.perf_counter() - t0
        try:
            setup(cluster, args.layout, n, args.entries, m)
            sides = [
                harness.Side("bkaudit", "checker:spark_side",
                             {"zk": cluster.zk, "root": cluster.root, "warehouse": ""},
                             "snapshot + check"),
                harness.Side("baseline", "checker:baseline_side",
                             {"zk": cluster.zk, "root": cluster.root, "ledgers": n},
                             "BookKeeper-style replicas check"),
            ]
            warehouses = itertools.count()

            def before(side: harness.Side) -> harness.Side:
                m["setup"]["restarts"] += restart_bookies(cluster)
                if side.name != "bkaudit":
                    return side
                fresh = f"{tmp}/warehouse-{next(warehouses)}"  # every bkaudit run writes an empty warehouse
                return dataclasses.replace(side, kwargs={**side.kwargs, "warehouse": fresh})

            def after(name: str, r: dict[str, Any]) -> None:
                extra = 0
                if name == "bkaudit":
                    extra = sum(1 for lid, cat, _evidence in r["violations"]
                                if lid not in m["expected"] or cat not in DURABILITY)
                check_side(name, found_from_json(r["found"]), m["expected"], extra)

            watch = None
            if args.monitor:
                watch = monitor.monitor_factory(lambda: cluster_targets(cluster))
                m["probe_idle"] = monitor.idle_reference(cluster_targets(cluster))
            m["results"] = harness.compare(sides, runs=args.runs, before_run=before, after_run=after,
                                           monitor=watch)
        finally:
            cluster.down()
    m["machine_end"] = harness.machine()
    m["when"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    payload = {k: v for k, v in m.items() if k != "expected"}
    payload["holes"] = len(m["expected"])
    for runs in payload["results"].values():
        for r in runs:
            r.pop("found", None)
            r.pop("violations", None)
    suffix = "" if args.layout == "uniform" else f"-{args.layout}"
    m["json"] = str(harness.write_json(f"checker-{n}{suffix}", payload, args.json))
    text = report(m)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
