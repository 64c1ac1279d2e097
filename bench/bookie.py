"""Bookie + ledger client benchmark: acknowledged adds/s and GetListOfEntries ledgers/s on a local cluster.

    .venv/bin/python bench/bookie.py [--quick] [--no-append]

Starts a LocalCluster of 3 bookies (3 racks) with its own ZooKeeper and measures, in the same run:

1. adds: 1 KiB entries, E3/WQ2/AQ2, pipelined (`add_entry_async`, several ledgers written in parallel, by
   one and by two client processes) against a baseline of synchronous one-at-a-time adds; throughput of
   acknowledged adds and p50/p99 latency
   (submit -> acknowledgement, so pipelined latency includes queueing).
2. listing: GetListOfEntriesOfLedger for N ledgers per bookie, through the batch operation vs one message per
   ledger (same pipelining window), ledgers/s per bookie and the ratio. Ledgers are bulk-loaded into each
   bookie's storage (bkaudit.bookie.storage.bulk_load_index) while it is stopped.

Appends a dated section to docs/performance.md (append only) unless --no-append.
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ENTRY = 1024
LIST_BASE_ID = 10_000_000  # bulk-loaded ledger ids start here (far from client-created ones)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


# -- adds ---------------------------------------------------------------------------------------------------
def _write_ledgers(
    bk: Any, ledgers: int, entries: int, window: int, start: Any
) -> tuple[int, list[float], float]:
    """`ledgers` writer threads, each keeping up to `window` adds in flight; (adds, latencies, seconds)."""
    payload = os.urandom(ENTRY)
    latencies: list[list[float]] = [[] for _ in range(ledgers)]
    handles = [bk.create_ledger(3, 2, 2) for _ in range(ledgers)]
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        handle, lat = handles[i], latencies[i]
        in_flight: deque[Future[int]] = deque()
        try:
            for _ in range(entries):
                if len(in_flight) >= window:
                    in_flight.popleft().result(120)
                t0 = time.perf_counter()
                fut = handle.add_entry_async(payload)
                fut.add_done_callback(lambda f, t0=t0: lat.append(time.perf_counter() - t0))
                in_flight.append(fut)
            while in_flight:
                in_flight.popleft().result(120)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(ledgers)]
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    for h in handles:
        h.close()
    if errors:
        raise errors[0]
    lat = [x for per in latencies for x in per]
    return len(lat), lat, elapsed


def _writer_process(
    zk: str, root: str, ledgers: int, entries: int, window: int, start: Any, out: Any
) -> None:
    """One client process (its own BookKeeper, ZooKeeper session and bookie connections)."""
    from bkaudit.client import BookKeeper

    with BookKeeper.connect(zk=zk, root=root) as bk:
        _write_ledgers(bk, 1, 200, window, _Go())  # warm up connections and code paths
        out.put(_write_ledgers(bk, ledgers, entries, window, start))


class _Go:
    def wait(self) -> None:
        return None


def pipelined_adds(
    zk: str, root: str, processes: int, ledgers: int, entries: int, window: int
) -> dict[str, float]:
    """`processes` client processes x `ledgers` ledgers each; acknowledged adds/s over the whole run."""
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_writer_process, args=(zk, root, ledgers, entries, window, start, out))
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    time.sleep(8)  # let every process import, connect and warm up before the gate opens
    t0 = time.perf_counter()
    start.set()
    results = [out.get(timeout=600) for _ in procs]
    elapsed = time.perf_counter() - t0
    for p in procs:
        p.join(60)
    adds = sum(r[0] for r in results)
    lat = [x for r in results for x in r[1]]
    return {
        "adds": adds,
        "seconds": elapsed,
        "rate": adds / elapsed,
        "p50_ms": percentile(lat, 50) * 1e3,
        "p99_ms": percentile(lat, 99) * 1e3,
    }


def synchronous_adds(bk: Any, entries: int) -> dict[str, float]:
    """Baseline: one add at a time, each waiting for its acknowledgement."""
    payload = os.urandom(ENTRY)
    lat: list[float] = []
    with bk.create_ledger(3, 2, 2) as handle:
        t_start = time.perf_counter()
        for _ in range(entries):
            t0 = time.perf_counter()
            handle.add_entry(payload)
            lat.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - t_start
    return {
        "adds": entries,
        "seconds": elapsed,
        "rate": entries / elapsed,
        "p50_ms": percentile(lat, 50) * 1e3,
        "p99_ms": percentile(lat, 99) * 1e3,
    }


# -- listing ------------------------------------------------------------------------------------------------
def populate(cluster: Any, ledgers: int) -> int:
    """Bulk-load `ledgers` ledgers of 10 entries into every bookie (each stopped while loading)."""
    from bkaudit.bookie.storage import bulk_load_index

    total = 0
    ids = range(LIST_BASE_ID, LIST_BASE_ID + ledgers)
    for bookie in cluster.bookies:
        cluster.stop_bookie(bookie.id)
        total += bulk_load_index(bookie.data_dir, ((i, [(0, 4), (6, 10)]) for i in ids))
        cluster.start_bookie(bookie.id)
    return total


def list_batch(client: Any, ids: list[int], batch: int, window: int) -> float:
    """Seconds to list every id with GetListOfEntries batches of `batch` ids, `window` batches in flight."""
    chunks = [ids[i : i + batch] for i in range(0, len(ids), batch)]
    in_flight: deque[Future[Any]] = deque()
    seen = 0
    t0 = time.perf_counter()
    for chunk in chunks:
        if len(in_flight) >= window:
            seen += _count(in_flight.popleft().result(120))
        in_flight.append(client.get_list_of_entries_batch(chunk))
    while in_flight:
        seen += _count(in_flight.popleft().result(120))
    elapsed = time.perf_counter() - t0
    if seen != len(ids):
        raise RuntimeError(f"batch listing returned {seen} availabilities for {len(ids)} ledgers")
    return elapsed


def _count(result: Any) -> int:
    return sum(1 for v in result.values() if isinstance(v, bytes | bytearray))


def list_single(client: Any, ids: list[int], window: int) -> float:
    """Seconds to list every id with one GetListOfEntries message per ledger, `window` in flight."""
    in_flight: deque[Future[Any]] = deque()
    t0 = time.perf_counter()
    for ledger_id in ids:
        if len(in_flight) >= window:
            in_flight.popleft().result(120)
        in_flight.append(client.get_list_of_entries(ledger_id))
    while in_flight:
        in_flight.popleft().result(120)
    return time.perf_counter() - t0


# -- report -------------------------------------------------------------------------------------------------
def _add_row(label: str, r: dict[str, float]) -> str:
    return (
        f"| {label} | {r['adds']:,} | {r['seconds']:.2f} | {r['rate']:,.0f} | {r['p50_ms']:.1f} "
        f"| {r['p99_ms']:.1f} |"
    )


def report(results: dict[str, Any], quick: bool) -> str:
    sync = results["sync"]
    runs = results["pipelined"]
    best = max(r["rate"] for _, r in runs)
    lines = [
        "",
        f"## Bookie + ledger client ({dt.date.today().isoformat()}, "
        f"bench/bookie.py{' --quick' if quick else ''})",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}. LocalCluster of 3 bookie processes (3 racks) + embedded "
        "ZooKeeper on loopback; client processes, bookies and ZooKeeper share the machine's CPUs. "
        f"Load average (1 min) before / after the run: {results['load'][0]:.1f} / {results['load'][1]:.1f} "
        "(other work on the machine competes for the same CPUs).",
        "",
        "### Acknowledged adds (1 KiB entries, E3/WQ2/AQ2, CRC32C)",
        "",
        "| mode | adds | seconds | acked adds/s | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|",
        *(_add_row(label, r) for label, r in runs),
        _add_row("baseline: synchronous, one add at a time", sync),
        "",
        f"Pipelining: {best / sync['rate']:.0f}x the synchronous baseline. Target >= 10,000 acked adds/s: "
        f"{'met' if best >= 10_000 else 'not met'} (best {best:,.0f}/s). Up to {results['window']} adds in "
        "flight per ledger; pipelined latency is submit -> acknowledgement and so includes the time an entry "
        "waits behind the window.",
        "",
        f"### GetListOfEntriesOfLedger ({results['list_ledgers']:,} ledgers per bookie, bulk-loaded)",
        "",
        "| bookie | batch: ledgers/s | one message per ledger: ledgers/s | ratio |",
        "|---|---|---|---|",
    ]
    for row in results["listing"]:
        lines.append(
            f"| {row['bookie']} | {row['batch']:,.0f} | {row['single']:,.0f} | "
            f"{row['batch'] / row['single']:.1f}x |"
        )
    mean_batch = statistics.mean(r["batch"] for r in results["listing"])
    mean_single = statistics.mean(r["single"] for r in results["listing"])
    lines += [
        f"| mean | {mean_batch:,.0f} | {mean_single:,.0f} | {mean_batch / mean_single:.1f}x |",
        "",
        f"Batches of {results['batch']:,} ids with {results['batch_window']} batches in flight; single "
        f"requests with {results['single_window']:,} in flight, same client, same run. "
        "Target >= 50,000 ledgers/s per bookie with batches: "
        f"{'met' if mean_batch >= 50_000 else 'not met'}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run (smoke test)")
    parser.add_argument(
        "--no-append", action="store_true", help="print only; leave docs/performance.md alone"
    )
    args = parser.parse_args(argv)
    from bkaudit.client import BookKeeper
    from bkaudit.cluster.local import LocalCluster

    window = int(os.environ.get("BENCH_WINDOW", "500"))
    total_adds = 16_000 if args.quick else 120_000
    sync_entries = 300 if args.quick else 2_000
    list_ledgers = 2_000 if args.quick else 20_000
    batch, batch_window, single_window = 1_000, 4, 1_000
    shapes = [(1, 4), (2, 2)]  # (client processes, ledgers per process)
    results: dict[str, Any] = {
        "window": window,
        "list_ledgers": list_ledgers,
        "batch": batch,
        "batch_window": batch_window,
        "single_window": single_window,
        "pipelined": [],
    }
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bkaudit-bench-") as tmp:
        cluster = LocalCluster.up(tmp, bookies=3, racks=3)
        try:
            print(f"populating {list_ledgers:,} ledgers per bookie ...", flush=True)
            populate(cluster, list_ledgers)
            with BookKeeper.connect(zk=cluster.zk, root=cluster.root) as bk:
                print("synchronous adds ...", flush=True)
                synchronous_adds(bk, 50)
                results["sync"] = synchronous_adds(bk, sync_entries)
                for procs, ledgers in shapes:
                    per_ledger = total_adds // (procs * ledgers)
                    print(
                        f"pipelined adds: {procs} process(es) x {ledgers} ledgers x {per_ledger:,} ...",
                        flush=True,
                    )
                    r = pipelined_adds(cluster.zk, cluster.root, procs, ledgers, per_ledger, window)
                    label = (
                        f"pipelined: {procs} client process{'es' if procs > 1 else ''} x {ledgers} ledgers"
                    )
                    results["pipelined"].append((label, r))
                    print(f"  {r['rate']:,.0f} acked adds/s", flush=True)
                ids = list(range(LIST_BASE_ID, LIST_BASE_ID + list_ledgers))
                results["listing"] = []
                for bookie in cluster.bookies:
                    client = bk.pool.get(bookie.id)
                    list_batch(client, ids[:batch], batch, 1)  # warm the connection
                    t_batch = list_batch(client, ids, batch, batch_window)
                    t_single = list_single(client, ids, single_window)
                    results["listing"].append(
                        {"bookie": bookie.id, "batch": len(ids) / t_batch, "single": len(ids) / t_single}
                    )
                    print(
                        f"  {bookie.id}: batch {len(ids) / t_batch:,.0f}/s, "
                        f"single {len(ids) / t_single:,.0f}/s",
                        flush=True,
                    )
        finally:
            cluster.down()
    results["load"] = (load_before, os.getloadavg()[0])
    text = report(results, args.quick)
    print(text)
    if not args.no_append:
        with open(ROOT / "docs" / "performance.md", "a", encoding="utf-8") as out:
            out.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
