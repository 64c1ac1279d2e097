"""Benchmark of the snapshot job against the practical limit: a raw pipelined kazoo read of every znode.

    .venv/bin/python bench/snapshot.py [--ledgers N | --quick] [--no-append]

1. start an embedded ZooKeeper and bulk-populate N ledgers in BookKeeper's format (v3 metadata, short and
   hierarchical paths, Pulsar custom metadata, 1-3 segments; pipelined multi() transactions of creates);
2. (a) raw: one kazoo client reads every ledger znode with a bounded window of async gets (no decoding);
   (a') the same with the job's own read path: pipelined ZooKeeper multiRead batches (no decoding);
3. (b) the snapshot job end to end on local[2] (ZooKeeper scan, decoding, Parquet staging, bookies and
   markers, Great Expectations, Delta commits), timed on a session that already ran a tiny warm-up snapshot
   (JVM and Python workers started: paid once per spark-submit, not per ledger); the first, cold run's time
   and the session start-up are reported too;
4. print ledgers/s and the ratio (b)/(a), and append a dated section to docs/performance.md.

The job runs with the rate limit off (`reads_per_second_per_task = 0`) and `max_zk_sessions = 2` (local[2]),
so it is measured at full speed like the raw read; production keeps the default cap.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

WINDOW = 1000  # outstanding async requests, raw read and job alike
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


def raw_read(connect: str, leaf_paths: list[str]) -> float:
    """Seconds for one kazoo client to get every znode with WINDOW reads outstanding."""
    from bkaudit.zk.client import close
    from bkaudit.zk.client import connect as zk_connect

    zk = zk_connect(connect)
    try:
        t0 = time.perf_counter()
        window: collections.deque[Any] = collections.deque()
        for path in leaf_paths:
            window.append(zk.get_async(path))
            if len(window) >= WINDOW:
                window.popleft().get()
        while window:
            window.popleft().get()
        return time.perf_counter() - t0
    finally:
        close(zk)


def raw_multiread(connect: str, leaf_paths: list[str]) -> float:
    """Seconds for one client to read every znode with the job's batched multiRead path (no decoding)."""
    from bkaudit.zk.client import close
    from bkaudit.zk.client import connect as zk_connect
    from bkaudit.zk.multiread import read_batched

    zk = zk_connect(connect)
    try:
        t0 = time.perf_counter()
        count = sum(1 for _ in read_batched(zk, leaf_paths, max_in_flight=WINDOW))
        assert count == len(leaf_paths)
        return time.perf_counter() - t0
    finally:
        close(zk)


def snapshot(spark: Any, connect: str, root: str, warehouse: str, *, multi_read: bool = True) -> Any:
    import bkaudit.spark.settings  # noqa: F401
    from bkaudit import config
    from bkaudit.spark.snapshot import run_snapshot

    settings = config.load(
        environ={},
        overrides={
            "zk.connect": connect,
            "zk.root": root,
            "snapshot.warehouse": warehouse,
            "snapshot.max_zk_sessions": 2,
            "snapshot.reads_per_second_per_task": 0,
            "snapshot.max_in_flight": WINDOW,
            "snapshot.multi_read": multi_read,
        },
    )
    return run_snapshot(spark, settings)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="10,000 ledgers")
    parser.add_argument("--no-append", action="store_true", help="do not append to docs/performance.md")
    args = parser.parse_args()
    n = 10_000 if args.quick else args.ledgers

    from bkaudit.zk.client import close
    from bkaudit.zk.client import connect as zk_connect
    from bkaudit.zk.ledgers import init_cluster
    from bkaudit.zk.server import ZooKeeperServer

    if n > 200_000:  # the embedded server's default heap (512 MB) does not hold a million znodes
        import bkaudit.zk.server as zk_server

        zk_server.JVM_OPTS = tuple("-Xmx4g" if o.startswith("-Xmx") else o for o in zk_server.JVM_OPTS)
    work = Path(tempfile.mkdtemp(prefix="bkaudit-bench-"))
    server = ZooKeeperServer(data_dir=work / "zk", log_level="WARN").start(timeout_s=60)
    try:
        zk = zk_connect(server.connect_string)
        t0 = time.perf_counter()
        leaf_paths = populate(zk, n)
        populate_s = time.perf_counter() - t0
        init_cluster(zk, root="/warmup/ledgers")
        close(zk)
        print(f"populated {n:,} ledgers in {populate_s:.1f}s ({n / populate_s:,.0f}/s)", flush=True)

        repeats = 2 if n <= 200_000 else 1  # best of two where it is cheap
        raw_s = min(raw_read(server.connect_string, leaf_paths) for _ in range(repeats))
        print(f"(a) raw pipelined kazoo read: {raw_s:.2f}s = {n / raw_s:,.0f} reads/s", flush=True)
        multi_s = min(raw_multiread(server.connect_string, leaf_paths) for _ in range(repeats))
        print(
            f"(a') raw multiRead read (the job's read path, no decoding): {multi_s:.2f}s = "
            f"{n / multi_s:,.0f} reads/s",
            flush=True,
        )

        from bkaudit.spark.session import get_session

        t0 = time.perf_counter()
        spark = get_session("local[2]", app_name="bkaudit-bench")
        session_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        snapshot(spark, server.connect_string, ROOT, str(work / "wh-cold"))
        cold_s = time.perf_counter() - t0
        snapshot(spark, server.connect_string, "/warmup/ledgers", str(work / "wh-warmup"))
        t0 = time.perf_counter()
        result = snapshot(spark, server.connect_string, ROOT, str(work / "wh"))
        job_s = time.perf_counter() - t0
        if result.ledgers != n:
            raise SystemExit(f"job saw {result.ledgers} ledgers, expected {n}")
        ratio = job_s / raw_s
        print(
            f"(b) snapshot job: {job_s:.2f}s = {n / job_s:,.0f} ledgers/s  ratio (b)/(a) = {ratio:.2f}  "
            f"steps {result.timings}",
            flush=True,
        )
        print(
            f"    cold first run {cold_s:.2f}s (ratio {cold_s / raw_s:.2f}), "
            f"session start-up {session_s:.1f}s"
        )
        single_s = None
        if n <= 200_000:  # (c) the job on kazoo's single-read path: what Spark, decoding and Delta add to (a)
            t0 = time.perf_counter()
            snapshot(spark, server.connect_string, ROOT, str(work / "wh-single"), multi_read=False)
            single_s = time.perf_counter() - t0
            print(f"(c) job with multi_read off: {single_s:.2f}s  ratio (c)/(a) = {single_s / raw_s:.2f}")
        spark.stop()
        if not args.no_append:
            append_report(
                n,
                {
                    "populate_s": populate_s,
                    "raw_s": raw_s,
                    "multi_s": multi_s,
                    "job_s": job_s,
                    "cold_s": cold_s,
                    "session_s": session_s,
                    "timings": result.timings,
                },
            )
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def append_report(n: int, m: dict[str, Any]) -> None:
    """Append a dated section to docs/performance.md (append only: earlier results stay for comparison)."""
    path = REPO / "docs" / "performance.md"
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    raw, multi, job, cold = m["raw_s"], m["multi_s"], m["job_s"], m["cold_s"]
    text = (
        f"\n## Snapshot job, {n:,} ledgers ({stamp})\n\n"
        f"Machine: {os.cpu_count()} CPUs (load average {load} at the end: shared machine), "
        f"{platform.python_implementation()} {platform.python_version()}, Spark local[2], embedded ZooKeeper "
        f"on the same machine; `bench/snapshot.py --ledgers {n}`. Job settings: max_zk_sessions 2, "
        f"rate limit off, max_in_flight {WINDOW}.\n\n"
        "| measure | seconds | ledgers/s |\n|---|---:|---:|\n"
        f"| populate (multi() transactions of {CREATE_BATCH} creates) | {m['populate_s']:.1f} | "
        f"{n / m['populate_s']:,.0f} |\n"
        f"| (a) raw pipelined kazoo getData, 1 client, window {WINDOW} | {raw:.2f} | {n / raw:,.0f} |\n"
        f"| (a') raw batched multiRead, 1 client (the job's read path, no decoding) | {multi:.2f} | "
        f"{n / multi:,.0f} |\n"
        f"| (b) snapshot job end to end, warm session | {job:.2f} | {n / job:,.0f} |\n"
        f"| (b) first (cold) run in a new session | {cold:.2f} | {n / cold:,.0f} |\n"
        + (
            f"| (c) job with `multi_read = false` (kazoo single reads, as (a)), warm | {m['single_s']:.2f} | "
            f"{n / m['single_s']:,.0f} |\n"
            if m.get("single_s")
            else ""
        )
        + f"| Spark session start-up (not in (b)) | {m['session_s']:.1f} | |\n\n"
        f"Ratio (b)/(a) = **{job / raw:.2f}** (aim <= 1.5; cold run {cold / raw:.2f}); "
        f"(b)/(a') = {job / multi:.2f}"
        + (f"; (c)/(a) = **{m['single_s'] / raw:.2f}**" if m.get("single_s") else "")
        + ". Job steps (s): "
        f"{', '.join(f'{k} {v}' for k, v in m['timings'].items())}.\n"
    )
    if not path.exists():
        path.write_text("# Performance\n\nResults appended by the benchmarks in bench/ (newest last).\n")
    with path.open("a", encoding="utf-8") as fh:
        fh.write(text)
    print(f"appended to {path}")


if __name__ == "__main__":
    sys.exit(main())
