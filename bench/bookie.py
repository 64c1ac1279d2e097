"""Bookie transports compared: BookKeeper's native TCP protocol vs bkaudit's gRPC framed path, same run.

    .venv/bin/python -m bench.bookie [--quick] [--runs 3] [--json PATH]

Starts a LocalCluster of 3 bookies (3 racks) serving both transports (native on bookie-rpc, gRPC on the
optional bkaudit-grpc listener), bulk-loads N ledgers into every bookie for listing, then runs each
transport in a fresh client process, alternating native / gRPC (then gRPC / native) for `--runs` rounds.
Each client process measures:

1. adds: 1 KiB entries, E3/WQ2/AQ2, 4 ledgers written in parallel with up to 500 adds in flight each
   (`add_entry_async`); acknowledged adds/s and p50/p99 submit -> acknowledgement latency;
2. reads: the entries just written, read back through the ledger client (4 ledgers in parallel, digest
   verified), entries/s;
3. listing, per bookie: standard GET_LIST_OF_ENTRIES_OF_LEDGER, one request per ledger, 4,000 in flight
   (what a Java bookie gets), and bkaudit's batch operation (1,000 ids per message, 4 in flight); ledgers/s.

Besides rates it records CPU seconds per operation (client process + bookie processes, from
`time.process_time` and /proc/<pid>/stat): on a shared, overloaded machine rates mostly measure the CPU share
the scheduler grants (a transport with more threads gets more), CPU per operation is what each transport
costs. Reports medians with min-max over the runs as markdown on stdout, and the raw results as JSON
(bench/results/bookie-<stamp>.json or --json); docs/performance.md quotes them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from bench import harness

ROOT = Path(__file__).resolve().parent.parent
ENTRY = 1024
WINDOW = 500
LIST_BASE_ID = 10_000_000  # bulk-loaded ledger ids start here (far from client-created ones)
TRANSPORTS = ("native", "grpc")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


# -- the client process -------------------------------------------------------------------------------
def write_ledgers(bk: Any, ledgers: int, entries: int) -> tuple[list[int], list[float], float]:
    """`ledgers` writer threads, up to WINDOW adds in flight each; (ledger ids, latencies, seconds)."""
    payload = os.urandom(ENTRY)
    latencies: list[list[float]] = [[] for _ in range(ledgers)]
    handles = [bk.create_ledger(3, 2, 2) for _ in range(ledgers)]
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        handle, lat = handles[i], latencies[i]
        in_flight: deque[Future[int]] = deque()
        try:
            for _ in range(entries):
                if len(in_flight) >= WINDOW:
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
    return [h.ledger_id for h in handles], [x for per in latencies for x in per], elapsed


def read_ledgers(bk: Any, ledger_ids: list[int]) -> tuple[int, float]:
    """Read every entry of `ledger_ids` back (one thread per ledger); (entries, seconds)."""
    counts = [0] * len(ledger_ids)
    errors: list[BaseException] = []

    def reader(i: int) -> None:
        try:
            handle = bk.open_ledger(ledger_ids[i], recover=False)
            for _ in handle.iter_entries():
                counts[i] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(len(ledger_ids))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return sum(counts), elapsed


def list_all(client: Any, ids: list[int], batch: int, window: int) -> float:
    """Seconds to list every id, `batch` ids per call, `window` calls in flight; every id must be answered."""
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
        raise RuntimeError(f"listing returned {seen} availabilities for {len(ids)} ledgers")
    return elapsed


def _count(result: Any) -> int:
    return sum(1 for v in result.values() if isinstance(v, bytes | bytearray))


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process used so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Cpu:
    """CPU used by this process and the bookie processes between two points."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.start = self._now()

    def _now(self) -> float:
        return time.process_time() + sum(_proc_cpu(p) for p in self.pids)

    def per_op_us(self, ops: int) -> float:
        return (self._now() - self.start) / ops * 1e6


def worker(transport: str, zk: str, root: str, adds: int, list_ledgers: int,
           pids: list[int]) -> dict[str, float]:
    """One fresh client process on one transport: adds, reads, listing (per-ledger and batch)."""
    from bkaudit import config
    from bkaudit.client import BookKeeper
    from bkaudit.config import ZkSettings
    from bkaudit.rpc.pool import BookieAddress, make_client
    from bkaudit.store import zookeeper

    settings = config.load(overrides={"rpc.transport": transport, "zk.connect": zk, "zk.root": root})
    out: dict[str, float] = {}
    with BookKeeper.connect(settings=settings) as bk:
        write_ledgers(bk, 2, 300)  # warm up connections and code paths
        cpu = _Cpu(pids)
        ids, lat, seconds = write_ledgers(bk, 4, adds // 4)
        out["add_cpu_us"] = cpu.per_op_us(len(lat))
        out["adds_per_s"] = len(lat) / seconds
        out["add_p50_ms"] = percentile(lat, 50) * 1e3
        out["add_p99_ms"] = percentile(lat, 99) * 1e3
        cpu = _Cpu(pids)
        entries, seconds = read_ledgers(bk, ids)
        out["read_cpu_us"] = cpu.per_op_us(entries)
        out["reads_per_s"] = entries / seconds
        ledger_ids = list(range(LIST_BASE_ID, LIST_BASE_ID + list_ledgers))
        single, batch = [], []
        cpu_single, cpu_batch = [], []
        store = zookeeper.connect(settings.get(ZkSettings))  # a session of its own: the client's is private
        try:
            writable = store.registry.writable()
        finally:
            zookeeper.close(store)
        for bookie in writable:
            address = bk.pool.lookup(bookie)
            for batch_listing, rates, cpus in ((False, single, cpu_single), (True, batch, cpu_batch)):
                client = make_client(bookie, BookieAddress(address.target, batch_listing),
                                     transport=transport, request_timeout_s=120)
                try:
                    list_all(client, ledger_ids[:1000], 1000, 1)  # warm the connection
                    cpu = _Cpu(pids)
                    rates.append(list_ledgers / list_all(client, ledger_ids, 1000, 4))
                    cpus.append(cpu.per_op_us(list_ledgers))
                finally:
                    client.close()
        out["list_single_per_s"] = statistics.mean(single)
        out["list_single_cpu_us"] = statistics.mean(cpu_single)
        out["list_batch_per_s"] = statistics.mean(batch)
        out["list_batch_cpu_us"] = statistics.mean(cpu_batch)
    return out


# -- the driver ---------------------------------------------------------------------------------------
def populate(cluster: Any, ledgers: int) -> None:
    """Bulk-load `ledgers` ledgers of 10 entries into every bookie (each stopped while loading)."""
    from bkaudit.bookie.bulkload import bulk_load_index

    ids = range(LIST_BASE_ID, LIST_BASE_ID + ledgers)
    for bookie in cluster.bookies:
        cluster.stop_bookie(bookie.id)
        bulk_load_index(bookie.data_dir, ((i, [(0, 4), (6, 10)]) for i in ids))
        cluster.start_bookie(bookie.id)


def run_client(transport: str, zk: str, root: str, adds: int, list_ledgers: int,
               pids: list[int]) -> dict[str, float]:
    pid_list = ",".join(map(str, pids))
    cmd = [sys.executable, "-m", "bench.bookie", "--worker", transport, "--zk", zk, "--root", root,
           "--adds", str(adds), "--list-ledgers", str(list_ledgers), "--bookie-pids", pid_list]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{transport} client failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


METRICS = [
    ("adds_per_s", "acked adds/s (4 ledgers x 500 in flight)", True),
    ("add_p50_ms", "add latency p50, ms", False),
    ("add_p99_ms", "add latency p99, ms", False),
    ("add_cpu_us", "CPU per acked add, µs (client + bookies)", False),
    ("reads_per_s", "entries read/s (ledger client, 4 ledgers)", True),
    ("read_cpu_us", "CPU per entry read, µs (client + bookies)", False),
    ("list_single_per_s", "listing, one GET_LIST_OF_ENTRIES_OF_LEDGER per ledger: ledgers/s per bookie",
     True),
    ("list_single_cpu_us", "CPU per ledger listed one request per ledger, µs (client + bookie)", False),
    ("list_batch_per_s", "listing, batch op 1000: ledgers/s per bookie", True),
    ("list_batch_cpu_us", "CPU per ledger listed by batch, µs (client + bookie)", False),
]


def _cell(values: list[float], digits: int) -> str:
    s = harness.Spread.of(values)
    return f"**{s.median:,.{digits}f}** ({s.low:,.{digits}f}-{s.high:,.{digits}f})"


def report(results: dict[str, list[dict[str, float]]], meta: dict[str, Any]) -> str:
    lines = [
        "",
        f"## Bookie transports: native BookKeeper TCP vs gRPC framed ({dt.date.today().isoformat()}, "
        f"bench/bookie.py{' --quick' if meta['quick'] else ''})",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}. LocalCluster of 3 bookie processes (3 racks, each "
        "serving both transports) + embedded ZooKeeper on loopback; the client process, bookies and "
        "ZooKeeper share the CPUs. Load average (1 min) before / after: "
        f"{meta['load'][0]:.1f} / {meta['load'][1]:.1f} "
        "(other work on the machine competes for the same CPUs). Each transport ran in a fresh client "
        f"process, alternating, {meta['runs']} runs each; cells are median (min-max). "
        f"{meta['adds']:,} adds per run, {meta['list_ledgers']:,} bulk-loaded ledgers listed per bookie "
        "per mode.",
        "",
        "| measure | native | gRPC framed | native / gRPC |",
        "|---|---|---|---|",
    ]
    for key, label, higher in METRICS:
        nat = [r[key] for r in results["native"]]
        grp = [r[key] for r in results["grpc"]]
        digits = 1 if key.endswith(("_ms", "_us")) else 0
        ratio = harness.Spread.of(nat).median / harness.Spread.of(grp).median
        lines.append(f"| {label} | {_cell(nat, digits)} | {_cell(grp, digits)} | {ratio:.2f}x"
                     f"{'' if higher else ' (lower is better)'} |")
    adds = harness.Spread.of(r["adds_per_s"] for r in results["native"]).median
    single = harness.Spread.of(r["list_single_per_s"] for r in results["native"]).median
    lines += [
        "",
        f"Aims: >= 10,000 acked adds/s pipelined over native: {'met' if adds >= 10_000 else 'not met'} "
        f"(median {adds:,.0f}/s); per-ledger listing over native >= 20,000 ledgers/s per bookie: "
        f"{'met' if single >= 20_000 else 'not met'} (median {single:,.0f}/s).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run (smoke test)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", help="result file (default bench/results/bookie-<stamp>.json)")
    parser.add_argument("--worker", choices=TRANSPORTS, help=argparse.SUPPRESS)
    parser.add_argument("--zk", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--adds", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--list-ledgers", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--bookie-pids", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        pids = [int(p) for p in args.bookie_pids.split(",") if p]
        result = worker(args.worker, args.zk, args.root, args.adds, args.list_ledgers, pids)
        print(json.dumps(result), flush=True)
        return 0
    from bkaudit.cluster.local import LocalCluster

    adds = 8_000 if args.quick else 60_000
    list_ledgers = 2_000 if args.quick else 20_000
    os.environ["BKAUDIT_BOOKIE__GRPC_PORT"] = "0"  # the bookies also serve the gRPC transport
    load_before = os.getloadavg()[0]
    results: dict[str, list[dict[str, float]]] = {t: [] for t in TRANSPORTS}
    with tempfile.TemporaryDirectory(prefix="bkaudit-bench-") as tmp:
        cluster = LocalCluster.up(tmp, bookies=3, racks=3)
        try:
            print(f"populating {list_ledgers:,} ledgers per bookie ...", flush=True)
            populate(cluster, list_ledgers)
            for run, transport in harness.alternation(TRANSPORTS, args.runs):
                pids = [b.pid for b in cluster.bookies if b.pid]
                r = run_client(transport, cluster.zk, cluster.root, adds, list_ledgers, pids)
                results[transport].append(r)
                print(f"run {run + 1} {transport}: " + ", ".join(f"{k} {v:,.1f}" for k, v in r.items()),
                      flush=True)
        finally:
            cluster.down()
    meta = {"quick": args.quick, "runs": args.runs, "adds": adds, "list_ledgers": list_ledgers,
            "load": (load_before, os.getloadavg()[0])}
    print(report(results, meta))
    path = harness.write_json("bookie", {**meta, "results": results, "machine": harness.machine()}, args.json)
    print(f"Raw results: `{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
