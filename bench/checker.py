"""Benchmark of the metadata checker (Spark jobs 1 + 2) against a BookKeeper-Auditor-style sequential checker.

    .venv/bin/python bench/checker.py [--ledgers N | --quick] [--entries E] [--runs R] [--monitor]
                                      [--json PATH]

1. a LocalCluster of 9 bookie processes on 3 racks (embedded ZooKeeper); N closed ledgers (ids 0..N-1),
   E3/WQ2/AQ2 and E5/WQ3/AQ2 alternating, ensembles rotating over the 9 bookies (rack-aware placement holds);
2. bookie indexes bulk-loaded (`bookie.storage.bulk_load_index`, each bookie stopped while loading) with
   every entry each bookie must hold, minus a known set of holes in ~1% of the ledgers (one copy of a run of
   entries lost, an entry lost on two of its bookies, ...); the expected category of every damaged ledger
   comes from a naive per-entry model of those holes;
3. ledger metadata bulk-loaded into ZooKeeper (BookKeeper v3 bytes, multi() transactions);
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
import random
import signal
import sys
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import harness  # noqa: E402
import monitor  # noqa: E402

BOOKIES = 9
RACKS = 3
QUORUMS = ((3, 2, 2), (5, 3, 2))
HOLE_FRACTION = 0.01
CREATE_BATCH = 200
BASELINE_IN_FLIGHT = 100  # AuditorReplicasCheckTask.MAX_CONCURRENT_REPLICAS_CHECK_LEDGER_REQUESTS
SEED = 34
DURABILITY = ("no_replica", "below_ack_quorum", "below_write_quorum")


# -- the synthetic cluster ---------------------------------------------------------------------------------


def plan(
    n: int, entries: int, bookies: list[str]
) -> tuple[dict[int, tuple[int, int, int, tuple[str, ...]]], dict[int, dict[str, set[int]]]]:
    """Ledger layouts and the holes: {ledger: (E, WQ, AQ, ensemble)}, {ledger: {bookie: lost entries}}."""
    from bkaudit.model.quorum import write_set

    rng = random.Random(SEED)
    layouts = layouts_for(n, bookies)
    holes: dict[int, dict[str, set[int]]] = {}
    for lid in rng.sample(range(n), max(3, int(n * HOLE_FRACTION))):
        e, wq, _aq, ens = layouts[lid]
        entry = rng.randrange(entries)
        copies = [ens[i] for i in write_set(entry, e, wq)]
        kind = rng.choice(("one", "one", "run", "two"))
        if kind == "two":  # the same entry lost on two of its bookies
            for b in copies[:2]:
                holes.setdefault(lid, {}).setdefault(b, set()).add(entry)
        elif kind == "run":  # a run of a bookie's entries
            b = copies[0]
            idx = ens.index(b)
            mine = [x for x in range(entries) if idx in write_set(x, e, wq)]
            start = rng.randrange(len(mine))
            holes.setdefault(lid, {}).setdefault(b, set()).update(mine[start : start + 3])
        else:
            holes.setdefault(lid, {}).setdefault(copies[-1], set()).add(entry)
    return layouts, holes


def layouts_for(n: int, bookies: list[str]) -> dict[int, tuple[int, int, int, tuple[str, ...]]]:
    """{ledger: (E, WQ, AQ, ensemble)}: E3/WQ2/AQ2 and E5/WQ3/AQ2 alternating, ensembles rotating."""
    layouts: dict[int, tuple[int, int, int, tuple[str, ...]]] = {}
    for i in range(n):
        e, wq, aq = QUORUMS[i % 2]
        k = (i // 2) % len(bookies)
        layouts[i] = (e, wq, aq, tuple(bookies[(k + j) % len(bookies)] for j in range(e)))
    return layouts


def length_of(entries: int | Mapping[int, int], lid: int) -> int:
    """Entries of ledger `lid`: one length for all, or one per ledger."""
    return entries if isinstance(entries, int) else entries[lid]


def truth(
    layouts: dict[int, tuple[int, int, int, tuple[str, ...]]],
    holes: dict[int, dict[str, set[int]]],
    entries: int | Mapping[int, int],
) -> dict[int, tuple[str, list[tuple[int, int]]]]:
    """Expected category and entries below WQ of every damaged ledger (naive, per entry)."""
    from bkaudit.model.quorum import write_set

    out: dict[int, tuple[str, list[tuple[int, int]]]] = {}
    for lid, lost in holes.items():
        e, wq, aq, ens = layouts[lid]
        least, under = wq, []
        for x in range(length_of(entries, lid)):
            copies = sum(1 for i in write_set(x, e, wq) if x not in lost.get(ens[i], ()))
            least = min(least, copies)
            if copies < wq:
                under.append(x)
        if least < wq:
            category = (
                "no_replica" if least == 0 else "below_ack_quorum" if least < aq else "below_write_quorum"
            )
            out[lid] = (category, _runs(under))
    return out


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for x in sorted(ids):
        if out and out[-1][1] + 1 == x:
            out[-1] = (out[-1][0], x)
        else:
            out.append((x, x))
    return out


def _bookie_share(
    args: tuple[str, str, list[tuple[int, int, int, tuple[str, ...]]], dict[int, set[int]], int],
) -> int:
    """Bulk-load one bookie (runs in a worker process)."""
    from bkaudit.bookie.storage import bulk_load_index
    from bkaudit.model.quorum import entries_of_bookie

    bookie, data_dir, layouts, lost, entries = args

    def ledgers():
        for lid, e, wq, ens in layouts:
            idx = ens.index(bookie)
            mine = entries_of_bookie(idx, 0, length_of(entries, lid) - 1, e, wq)
            gone = lost.get(lid)
            if not gone:
                yield lid, list(mine.runs())
            else:
                yield lid, _runs([x for x in mine if x not in gone])

    return bulk_load_index(data_dir, ledgers())


def load_bookies(
    cluster: Any,
    layouts: dict[int, tuple[int, int, int, tuple[str, ...]]],
    holes: dict[int, dict[str, set[int]]],
    entries: int | Mapping[int, int],
    worker: Any = None,
) -> int:
    """Stop every bookie, load its share (`worker`, default `_bookie_share`, 2 processes), restart it."""
    jobs = []
    for b in cluster.bookies:
        mine = [(lid, e, wq, ens) for lid, (e, wq, _aq, ens) in layouts.items() if b.id in ens]
        lost = {lid: h[b.id] for lid, h in holes.items() if b.id in h}
        jobs.append((b.id, b.data_dir, mine, lost, entries))
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
    layouts: dict[int, tuple[int, int, int, tuple[str, ...]]],
    entries: int | Mapping[int, int],
    root: str | None = None,
    digest: str = "DUMMY",
) -> float:
    """Every ledger's metadata (BookKeeper v3) in pipelined multi() transactions; returns seconds."""
    from bkaudit.formats.ledger_metadata import serialize
    from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
    from bkaudit.zk import paths
    from bkaudit.zk.ledgers import init_cluster

    zk = cluster.zk_client()
    root = root or cluster.root
    if root != cluster.root:
        init_cluster(zk, root=root)
    blobs: dict[tuple[int, int, int, tuple[str, ...], int], bytes] = {}
    t0 = time.perf_counter()
    leaf = {lid: paths.ledger_path(lid, root=root) for lid in layouts}
    for parent in sorted({p.rsplit("/", 1)[0] for p in leaf.values()}):
        zk.ensure_path(parent)
    window: collections.deque[Any] = collections.deque()
    ids = sorted(layouts)
    for start in range(0, len(ids), CREATE_BATCH):
        txn = zk.transaction()
        for lid in ids[start : start + CREATE_BATCH]:
            key = (*layouts[lid], length_of(entries, lid))
            if key not in blobs:
                e, wq, aq, ens, length = key
                blobs[key] = serialize(
                    LedgerMetadata(
                        e,
                        wq,
                        aq,
                        LedgerState.CLOSED,
                        length - 1,
                        length * 100,
                        DigestType[digest],
                        b"",
                        (Segment(0, ens),),
                        ctime=1_795_000_000_000,
                    )
                )
            txn.create(leaf[lid], blobs[key])
        window.append(txn.commit_async())
        if len(window) >= 5:
            _ok(window.popleft().get())
    while window:
        _ok(window.popleft().get())
    return time.perf_counter() - t0


def _ok(results: list[Any]) -> None:
    bad = [r for r in results if isinstance(r, Exception)]
    if bad:
        raise RuntimeError(f"loading metadata failed: {bad[0]!r}")


# -- (a) the Spark checker -----------------------------------------------------------------------------------


def settings_for(cluster: Any, warehouse: str, root: str | None = None, *, tuned: bool = False) -> Any:
    """Every key at its default (zk.connect, zk.root and the warehouse aside); `tuned` = the settings
    bench/checker_reads.py states in its rows (validation and ZooKeeper throttles off, batches of 1000)."""
    import bkaudit.audit.settings
    import bkaudit.spark.settings  # noqa: F401
    from bkaudit import config

    overrides: dict[str, Any] = {
        "zk.connect": cluster.zk,
        "zk.root": root or cluster.root,
        "snapshot.warehouse": warehouse,
    }
    if tuned:
        overrides.update(
            {
                "snapshot.validate": False,
                "snapshot.max_zk_sessions": 2,
                "snapshot.reads_per_second_per_task": 0,
                "checker.batch_size": 1000,
                "checker.max_in_flight_per_bookie": 4,
                "checker.zk_reads_per_s": 0,
            }
        )
    return config.load(environ={}, overrides=overrides)


def spark_side(zk: str, root: str, warehouse: str) -> dict[str, Any]:
    """(a), in a fresh process (bench/harness.py): a new Spark session (timed apart), then what
    `bkaudit check --fresh` runs: a snapshot and the check over it, at default settings."""
    from types import SimpleNamespace

    from bkaudit.spark.checker import CheckOptions, run_check
    from bkaudit.spark.session import get_session
    from bkaudit.spark.snapshot import run_snapshot

    t0 = time.perf_counter()
    spark = get_session("local[2]", app_name="bkaudit-bench-checker")
    spark.range(1).count()
    session_s = time.perf_counter() - t0
    settings = settings_for(SimpleNamespace(zk=zk, root=root), warehouse)
    wall0, t0 = time.time(), time.perf_counter()
    snap = run_snapshot(spark, settings, warehouse=warehouse)
    snapshot_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = run_check(spark, settings, CheckOptions(warehouse=warehouse, snapshot_id=snap.snapshot_id))
    check_s = time.perf_counter() - t0
    spark.stop()
    return {
        "seconds": snapshot_s + check_s,
        "session_s": session_s,
        "snapshot_s": snapshot_s,
        "check_s": check_s,
        "ledgers": result.ledgers_checked,
        "found": _found_json(spark_found(result)),
        "violations": [(v.ledger_id, v.category) for v in result.violations],
        "phases": result.phase_seconds,
        "calls": sum(b.calls for b in result.bookies),
        "window": [wall0, wall0 + snapshot_s + check_s],  # the work on the wall clock, for bench/monitor.py
    }


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
    out["found"] = _found_json(out["found"])
    return out


def _found_json(found: dict[int, tuple[str, list[tuple[int, int]]]]) -> list[Any]:
    return [[lid, cat, [list(r) for r in runs]] for lid, (cat, runs) in sorted(found.items())]


def found_from_json(rows: list[Any]) -> dict[int, tuple[str, list[tuple[int, int]]]]:
    return {int(lid): (cat, [(lo, hi) for lo, hi in runs]) for lid, cat, runs in rows}


def restart_bookies(cluster: Any) -> float:
    """Restart every bookie (untimed): each run starts on cold bookies, no side inherits the listing cache
    the run before it filled. Returns seconds."""
    t0 = time.perf_counter()
    for b in cluster.bookies:  # one at a time: LocalCluster's state file is not thread-safe
        cluster.stop_bookie(b.id)
    for b in cluster.bookies:
        cluster.start_bookie(b.id, wait=False)
    _wait_registered(cluster)
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
    ReadLedgerMetadataCallbackForReplicasCheck, one `asyncGetListOfEntriesOfLedger` per (ledger, bookie) of
    its ensembles; each answer decoded and compared with the bookie's expected entries (the Java side walks
    AvailabilityOfEntriesOfLedger per segment); here the same decoding and comparison code as the Spark job.

    With `reads_percentage`, checkAllLedgers' shape instead (LedgerChecker): per (ledger, bookie) one read per
    entry `bkaudit.audit.reads.plan_reads` picks (first and last stored per segment, plus that percentage),
    all sent at once (inFlightReadEntryNumInLedgerChecker = -1), each entry's digest verified."""
    from bkaudit.audit.durability import assess, expected_by_bookie
    from bkaudit.audit.reads import plan_reads
    from bkaudit.formats.ledger_metadata import parse
    from bkaudit.job.fanout import judge_answer
    from bkaudit.model.shape import LedgerShape
    from bkaudit.rpc.pool import BookieClientPool
    from bkaudit.zk import paths
    from bkaudit.zk.client import close, connect

    zk = connect(zk_connect)
    pool = BookieClientPool(zk=zk, root=root, request_timeout_s=60)
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
        if v.category in ("no_replica", "below_ack_quorum", "below_write_quorum"):
            out[v.ledger_id] = (v.category, [(lo, hi) for lo, hi in v.missing_entries or ()])
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
        f"### Metadata checker, {n:,} ledgers ({m['when']}, `bench/checker.py --ledgers {n}`)",
        "",
        harness.machine_line(m["machine_start"], m["machine_end"]),
        f"Spark local[2]; a LocalCluster of {BOOKIES} bookie processes on {RACKS} racks and the embedded "
        f"ZooKeeper on the same machine. Ledgers: closed, {m['entries']} entries each (one length for all), "
        f"E3/WQ2/AQ2 and E5/WQ3/AQ2 alternating, one segment ({m['pairs']:,} (ledger, bookie) pairs); bookie "
        f"indexes bulk-loaded with holes in {len(m['expected']):,} ledgers. {m['runs']} runs of each side, "
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
        f"bookie restarts {setup['restarts']:.1f} s in all. Raw results: `{m['json']}`.",
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="10,000 ledgers")
    parser.add_argument("--entries", type=int, default=10, help="entries per ledger")
    parser.add_argument("--runs", type=int, default=harness.DEFAULT_RUNS, help="runs of each side")
    parser.add_argument("--monitor", action="store_true",
                        help="memory per process role, ZooKeeper mntr and a 100 getData/s probe per run")
    parser.add_argument("--json", help="result file (default bench/results/checker-<stamp>.json)")
    args = parser.parse_args(argv)
    n = 10_000 if args.quick else args.ledgers
    from bkaudit.cluster.local import LocalCluster

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still takes its cluster down
    m: dict[str, Any] = {
        "ledgers": n, "entries": args.entries, "runs": args.runs, "setup": {"restarts": 0.0},
        "machine_start": harness.machine(),
    }
    with tempfile.TemporaryDirectory(prefix="bkaudit-bench-checker-") as tmp:
        t0 = time.perf_counter()
        cluster = LocalCluster.up(Path(tmp) / "cluster", bookies=BOOKIES, racks=RACKS)
        m["setup"]["cluster"] = time.perf_counter() - t0
        try:
            ids = [b.id for b in cluster.bookies]
            layouts, holes = plan(n, args.entries, ids)
            m["expected"] = truth(layouts, holes, args.entries)
            m["pairs"] = sum(len(set(ens)) for _e, _w, _a, ens in layouts.values())
            print(f"bulk-loading {n:,} ledgers into {BOOKIES} bookies ...", flush=True)
            t0 = time.perf_counter()
            m["loaded"] = load_bookies(cluster, layouts, holes, args.entries)
            m["setup"]["bookies"] = time.perf_counter() - t0
            m["setup"]["metadata"] = load_metadata(cluster, layouts, args.entries)
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
                    extra = sum(1 for lid, cat in r["violations"]
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
    m["json"] = str(harness.write_json(f"checker-{n}", payload, args.json))
    text = report(m)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
