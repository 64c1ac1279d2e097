"""Benchmark of the snapshot job (Spark job 1) against raw reads of the same znodes, through bench/harness.py.

    .venv/bin/python -m bench.snapshot [--ledgers N | --quick] [--runs R] [--sides a,a2,b,b2,c] [--monitor]
                                       [--zk-load] [--json PATH]

1. start an embedded ZooKeeper and bulk-populate N ledgers in BookKeeper's format (v3 metadata, hierarchical
   paths, Pulsar custom metadata, 1-3 segments; pipelined multi() transactions of creates);
2. alternated, R runs each, every run in a fresh process (bench/harness.py), no process reused:
   (a)  raw: one kazoo client reads every ledger znode, pipelined single getData, window 1000, no decoding;
   (a2) raw: the job's own read path, pipelined ZooKeeper multiRead batches of 100
        (`zk.multiread.read_chunks`, window 1000, answers column-wise as the job's tasks take them), one
        client, no listing, no decoding ((a') in docs/performance.md);
   (b)  the snapshot job end to end on local[2] (ZooKeeper scan, decoding, Parquet staging, bookies and
        markers, Great Expectations, Delta commits), every setting at its default (the `[snapshot]`
        rate limit per task, 4 sessions);
   (b2) the same with only the rate limit off (`reads_per_second_per_task = 0`);
   (c)  the same as (b2) but on kazoo's single-read path (`multi_read = false`): the job on (a)'s read path;
   each job side starts its own Spark session, timed apart; `seconds` is the job alone, `wall_s` includes
   the interpreter, imports and the JVM;
3. a markdown table (medians with min-max, ratio median/median) on stdout and the raw results as JSON
   (bench/results/snapshot-N-<stamp>.json or --json).

`--monitor` watches every run from this process (bench/monitor.py): peak RSS of the side's process, Spark's
JVM and Python workers and the ZooKeeper JVM at 1 Hz; ZooKeeper's `mntr` each second; an open-loop probe
client doing 100 getData/s on a ledger znode from its own session. The report then adds a memory table and
a ZooKeeper table per side. `--zk-load` (issue 15, item 5) is `--sides b,b2 --monitor`: the job at the
default rate limit and with it off, and the probe's p99 under each.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import itertools
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import harness, monitor

WINDOW = 1000  # outstanding async requests of the raw reads (the job keeps its default, 500)
CREATE_BATCH = 200  # creates per multi() transaction when populating
ROOT = "/bench/ledgers"


def templates() -> list[bytes]:
    """A few realistic metadata blobs (the bytes do not contain the ledger id, so they can be reused)."""
    from bkaudit.formats.ledger_metadata import serialize
    from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment

    bookies = [f"10.0.{i // 250}.{i % 250}:3181" for i in range(12)]
    blobs = []
    for k in range(12):
        segs = tuple(
            Segment(s * 1000, tuple(bookies[(k + s + j) % 12] for j in range(3))) for s in range(1 + k % 3)
        )
        closed = k % 4 != 0
        blobs.append(
            serialize(
                LedgerMetadata(
                    3,
                    2,
                    2,
                    LedgerState.CLOSED if closed else LedgerState.OPEN,
                    len(segs) * 1000 - 1 if closed else -1,
                    len(segs) * 1_000_000 if closed else 0,
                    DigestType.CRC32C,
                    b"pulsar",
                    segs,
                    ctime=1_795_000_000_000 + k,
                    custom_metadata={
                        "application": b"pulsar",
                        "component": b"managed-ledger",
                        "pulsar/managed-ledger": f"public/default/persistent/topic-{k}".encode(),
                    },
                )
            )
        )
    return blobs


def populate(zk: Any, n: int) -> list[str]:
    """N ledger znodes (ids 0..N-1, hierarchical layout) in pipelined multi() transactions of CREATE_BATCH."""
    from bkaudit.zk import paths
    from bkaudit.zk.ledgers import init_cluster

    init_cluster(zk, root=ROOT)
    blobs = templates()
    leaf_paths = [paths.ledger_path(i, root=ROOT) for i in range(n)]
    for parent in sorted({p.rsplit("/", 1)[0] for p in leaf_paths}):
        zk.ensure_path(parent)
    window: collections.deque[Any] = collections.deque()
    for start in range(0, n, CREATE_BATCH):
        txn = zk.transaction()
        for i in range(start, min(n, start + CREATE_BATCH)):
            txn.create(leaf_paths[i], blobs[i % len(blobs)])
        window.append(txn.commit_async())
        if len(window) >= WINDOW // CREATE_BATCH:
            _check(window.popleft().get())
    while window:
        _check(window.popleft().get())
    return leaf_paths


def _check(results: list[Any]) -> None:
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        raise RuntimeError(f"populating failed: {failed[0]!r}")


def leaf_paths_for(n: int) -> list[str]:
    from bkaudit.zk import paths

    return [paths.ledger_path(i, root=ROOT) for i in range(n)]


def raw_side(connect: str, ledgers: int, multi_read: bool) -> dict[str, Any]:
    """(a) or (a2), in a fresh process: seconds for one client to read every znode, no decoding."""
    from bkaudit.zk.client import close
    from bkaudit.zk.client import connect as zk_connect
    from bkaudit.zk.multiread import MULTI_READ_BATCH, read_chunks

    leaf_paths = leaf_paths_for(ledgers)
    step = MULTI_READ_BATCH
    zk = zk_connect(connect)
    try:
        wall0, t0 = time.time(), time.perf_counter()
        if multi_read:  # the job's read primitive, chunks of 100 in and column-wise answers out
            chunks = ((None, leaf_paths[at : at + step]) for at in range(0, len(leaf_paths), step))
            count = sum(len(a.stats) - a.gone for _, _, a in read_chunks(zk, chunks, max_in_flight=WINDOW))
        else:
            count = 0
            window: collections.deque[Any] = collections.deque()
            for path in leaf_paths:
                window.append(zk.get_async(path))
                if len(window) >= WINDOW:
                    window.popleft().get()
                    count += 1
            while window:
                window.popleft().get()
                count += 1
        seconds = time.perf_counter() - t0
    finally:
        close(zk)
    if count != ledgers:
        raise RuntimeError(f"read {count} znodes, expected {ledgers}")
    return {"seconds": seconds, "ledgers": count, "window": [wall0, wall0 + seconds]}


def job_side(connect: str, warehouse: str, ledgers: int, overrides: dict[str, Any]) -> dict[str, Any]:
    """(b), (b2) or (c), in a fresh process: a new Spark session (timed apart), then the snapshot job with
    every setting at its default except `overrides`."""
    import bkaudit.spark.settings  # noqa: F401
    from bkaudit import config
    from bkaudit.spark.session import get_session
    from bkaudit.spark.snapshot import run_snapshot

    t0 = time.perf_counter()
    spark = get_session("local[2]", app_name="bkaudit-bench-snapshot")
    spark.range(1).count()
    session_s = time.perf_counter() - t0
    settings = config.load(
        environ={},
        overrides={"zk.connect": connect, "zk.root": ROOT, "snapshot.warehouse": warehouse, **overrides},
    )
    wall0, t0 = time.time(), time.perf_counter()
    result = run_snapshot(spark, settings)
    seconds = time.perf_counter() - t0
    spark.stop()
    if result.ledgers != ledgers:
        raise RuntimeError(f"the job saw {result.ledgers} ledgers, expected {ledgers}")
    return {"seconds": seconds, "session_s": session_s, "ledgers": result.ledgers, "steps": result.timings,
            "window": [wall0, wall0 + seconds]}  # the work on the wall clock, for bench/monitor.py


SIDES: dict[str, tuple[str, str]] = {  # name: (row label, what it runs)
    "a": ("(a) raw pipelined kazoo getData, 1 client, window 1000, no decoding", "raw"),
    "a2": ("(a') raw batched multiRead (the job's read path), 1 client, window 1000, no decoding", "raw"),
    "b": ("(b) snapshot job end to end, default settings (the default rate limit per task)", "job"),
    "b2": ("(b') snapshot job, default settings but `reads_per_second_per_task = 0`", "job"),
    "c": ("(c) snapshot job, rate limit off and `multi_read = false` (single getData, (a)'s path)", "job"),
}
JOB_OVERRIDES: dict[str, dict[str, Any]] = {
    "b": {},
    "b2": {"snapshot.reads_per_second_per_task": 0},
    "c": {"snapshot.reads_per_second_per_task": 0, "snapshot.multi_read": False},
}


def side_for(name: str, connect: str, n: int) -> harness.Side:
    label, kind = SIDES[name]
    if kind == "raw":
        return harness.Side(name, "snapshot:raw_side",
                            {"connect": connect, "ledgers": n, "multi_read": name == "a2"}, label)
    return harness.Side(name, "snapshot:job_side",
                        {"connect": connect, "warehouse": "", "ledgers": n, "overrides": JOB_OVERRIDES[name]},
                        label)


def report(m: dict[str, Any]) -> str:
    n = m["ledgers"]
    res = m["results"]
    inside = {k: harness.spreads(v, "seconds") for k, v in res.items()}
    wall = {k: harness.spreads(v, "wall_s") for k, v in res.items()}
    row = harness.markdown_row
    lines = [
        f"### Snapshot job, {n:,} ledgers ({m['when']}, `bench/snapshot.py --ledgers {n}`)",
        "",
        harness.machine_line(m["machine_start"], m["machine_end"]),
        f"Spark local[2] and the embedded ZooKeeper on the same machine. {m['runs']} runs of each side, "
        "alternated, each in a fresh process; no side warmed (each job run starts its own JVM and Spark "
        f"session). Populate, not timed: {m['populate_s']:.1f} s.",
        "",
        row(["measure", "seconds, no start-up", "ledgers/s, no start-up", "seconds with start-up"]),
        row(["---", "---:", "---:", "---:"]),
    ]
    for name in res:
        lines.append(row([SIDES[name][0], inside[name].cell(), inside[name].rate_cell(n),
                          wall[name].cell()]))
    for name in ("b", "b2", "c"):
        if name in res:
            lines.append(row([f"  Spark session start inside {SIDES[name][0].split()[0]}",
                              harness.spreads(res[name], "session_s").cell(), "", ""]))
    lines.append("")
    ratios = []

    def rate_ratio(ours: str, base: str, what: str) -> None:
        if ours in res and base in res:  # our rate / the base's rate = base seconds / our seconds
            ratios.append(f"{what} = **{harness.ratio(inside[base], inside[ours]):.3g}**")

    rate_ratio("b", "a2", "(b)/(a') rate")
    rate_ratio("b2", "a2", "(b')/(a') rate (aim >= 0.5 at 1M)")
    rate_ratio("b", "a", "(b)/(a) rate")
    rate_ratio("c", "a", "(c)/(a) rate")
    lines.append("Ratios of rates, median/median, no start-up: " + "; ".join(ratios) + ".")
    if "b" in res:
        steps = {k: harness.Spread.of(r["steps"][k] for r in res["b"]) for k in res["b"][0]["steps"]}
        lines.append("Job steps of (b), median (s): "
                     + ", ".join(f"{k} {v.median:.2f}" for k, v in steps.items()) + ".")
    lines.append(f"Raw results: `{m['json']}`.")
    lines.append("")
    labels = {name: SIDES[name][0].split()[0] for name in res}
    lines += monitor.memory_table(res, labels)
    lines += monitor.zookeeper_table(res, labels)
    if "probe_idle" in m:
        lines += [monitor.idle_line(m["probe_idle"]), ""]
    probes = {k: [r["monitor"]["probe"] for r in v if "probe" in r.get("monitor", {})]
              for k, v in res.items()}
    p99 = {k: [p for pr in v if (p := pr.get("work", pr).get("p99_ms")) is not None]
           for k, v in probes.items()}
    if p99.get("b") and p99.get("b2"):
        at_default, off = (harness.Spread.of(p99[k]).median for k in ("b", "b2"))
        lines.append(f"Probe p99 during the job (ms, median over runs): {at_default:.1f} at the default rate "
                     f"limit (b), {off:.1f} with it off (b').")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="10,000 ledgers")
    parser.add_argument("--runs", type=int, default=harness.DEFAULT_RUNS, help="runs of each side")
    parser.add_argument("--sides", default="a,a2,b,b2,c", help=f"comma-separated, of {','.join(SIDES)}")
    parser.add_argument("--monitor", action="store_true",
                        help="memory per process role, ZooKeeper mntr and a 100 getData/s probe per run")
    parser.add_argument("--zk-load", action="store_true",
                        help="ZooKeeper protection (issue 15, item 5): --sides b,b2 --monitor")
    parser.add_argument("--json", help="result file (default bench/results/snapshot-<stamp>.json)")
    args = parser.parse_args()
    if args.zk_load:
        args.sides, args.monitor = "b,b2", True
    n = 10_000 if args.quick else args.ledgers
    names = [s for s in args.sides.split(",") if s]
    unknown = [s for s in names if s not in SIDES]
    if unknown or not names:
        parser.error(f"unknown sides {unknown}; choose from {','.join(SIDES)}")

    from bkaudit.zk.client import close
    from bkaudit.zk.client import connect as zk_connect
    from bkaudit.zk.server import ZooKeeperServer

    m: dict[str, Any] = {"ledgers": n, "runs": args.runs, "machine_start": harness.machine()}
    work = Path(tempfile.mkdtemp(prefix="bkaudit-bench-"))
    server = ZooKeeperServer(data_dir=work / "zk", log_level="WARN", heap_mb=harness.zookeeper_heap_mb(n))
    server.start(timeout_s=60)
    try:
        zk = zk_connect(server.connect_string)
        t0 = time.perf_counter()
        populate(zk, n)
        m["populate_s"] = time.perf_counter() - t0
        close(zk)
        print(f"populated {n:,} ledgers in {m['populate_s']:.1f}s", flush=True)
        warehouses = itertools.count()

        def before(side: harness.Side) -> harness.Side:
            if "warehouse" not in side.kwargs:
                return side
            fresh = str(work / f"warehouse-{next(warehouses)}")  # every job run writes an empty warehouse
            return dataclasses.replace(side, kwargs={**side.kwargs, "warehouse": fresh})

        sides = [side_for(name, server.connect_string, n) for name in names]
        watch = None
        if args.monitor:
            from bkaudit.zk import paths

            assert server.pid is not None
            targets = monitor.zk_targets(server.connect_string, paths.ledger_path(0, root=ROOT),
                                         {"zookeeper": server.pid})
            watch = monitor.monitor_factory(lambda: targets)
            m["probe_idle"] = monitor.idle_reference(targets)
        m["results"] = harness.compare(sides, runs=args.runs, before_run=before, monitor=watch)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    m["machine_end"] = harness.machine()
    m["when"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    m["labels"] = {name: SIDES[name][0] for name in names}
    m["json"] = str(harness.write_json(f"snapshot-{n}", m, args.json))
    print(report(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
