"""Scaling curve of the bkaudit side (issue 15 item 3): per-phase timings of snapshot and check by size.

    .venv/bin/python bench/scaling.py --sizes 10000,100000,300000,1000000 [--layout uniform|realistic]
                                      [--entries E] [--runs R] [--json PATH]

For each size, in order: a fresh LocalCluster (9 bookies on 3 racks, embedded ZooKeeper) set up exactly as
bench/checker.py sets it up (`checker.setup`: the same layouts, holes, bulk loads and metadata), then R runs
of bench/checker.py's bkaudit side (`checker.spark_side`: a fresh process, a new Spark session timed apart,
the snapshot, then the check, every setting at its default) on freshly restarted bookies, each run asserted
to find exactly the injected holes. Recorded per run: the snapshot job's steps (`ledgers`, `cluster_state`,
`validation`, `commit`) and the checker's phases (`CheckResult.phase_seconds`).

Printed: one markdown table with a column per size and a row per phase (median seconds, ledgers/s), and the
same table as microseconds per ledger, with the growth of that cost from the smallest to the largest size:
a phase whose µs per ledger grows with the size is super-linear and stands out there. The raw results go to
JSON (bench/results/scaling-<stamp>.json or --json).

The BookKeeper-style baseline is not run per size: its cost is one metadata read and one listing request per
(ledger, bookie), linear by construction, and bench/checker.py measures it against bkaudit at any one size.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import checker
import harness
import layouts
import monitor

SNAPSHOT_STEPS = ("ledgers", "cluster_state", "validation", "commit")


def phase_table(
    sizes: list[int], by_size: dict[int, list[dict[str, Any]]]
) -> list[tuple[str, dict[int, float]]]:
    """(phase, {size: median seconds}) rows: session, snapshot steps, checker phases, totals; phases missing
    at a size (a checker phase that did not run) count 0."""
    def median(size: int, get: Any) -> float:
        return harness.Spread.of(get(r) for r in by_size[size]).median

    rows: list[tuple[str, dict[int, float]]] = []
    rows.append(("Spark session start", {s: median(s, lambda r: r["session_s"]) for s in sizes}))
    steps = list(SNAPSHOT_STEPS) + sorted(
        {k for s in sizes for r in by_size[s] for k in r["snapshot_steps"]} - set(SNAPSHOT_STEPS)
    )
    for step in steps:
        rows.append((f"snapshot: {step}", {
            s: median(s, lambda r, k=step: r["snapshot_steps"].get(k, 0.0)) for s in sizes
        }))
    rows.append(("snapshot (job 1) in all", {s: median(s, lambda r: r["snapshot_s"]) for s in sizes}))
    phases: list[str] = []
    for s in sizes:
        for r in by_size[s]:
            phases.extend(k for k in r["phases"] if k not in phases)
    for phase in phases:
        rows.append((f"check: {phase}", {
            s: median(s, lambda r, k=phase: r["phases"].get(k, 0.0)) for s in sizes
        }))
    rows.append(("check (job 2) in all", {s: median(s, lambda r: r["check_s"]) for s in sizes}))
    rows.append(("snapshot + check (no start-up)", {s: median(s, lambda r: r["seconds"]) for s in sizes}))
    rows.append(("with start-up (spawn to exit)", {s: median(s, lambda r: r["wall_s"]) for s in sizes}))
    return rows


def growth(per_ledger: dict[int, float], sizes: list[int]) -> str:
    """µs per ledger at the largest size over the smallest: ~1 linear, > 1 super-linear, < 1 fixed cost
    being amortised."""
    small, large = per_ledger[sizes[0]], per_ledger[sizes[-1]]
    return "-" if small <= 0 else f"{large / small:.2f}x"


def report(m: dict[str, Any]) -> str:
    sizes: list[int] = m["sizes"]
    by_size = {int(k): v for k, v in m["results"].items()}
    rows = phase_table(sizes, by_size)
    row = harness.markdown_row
    head = ["phase", *(f"{s:,} ledgers" for s in sizes)]
    lines = [
        f"### Scaling of the bkaudit side, {m['layout']} layout ({m['when']}, `bench/scaling.py --sizes "
        f"{','.join(str(s) for s in sizes)} --layout {m['layout']}`)",
        "",
        harness.machine_line(m["machine_start"], m["machine_end"]),
        f"Per size a fresh LocalCluster ({checker.BOOKIES} bookies on {checker.RACKS} racks, embedded "
        f"ZooKeeper) set up as bench/checker.py does; {m['runs']} run(s) per size of bench/checker.py's "
        "bkaudit side (fresh process, new Spark session, snapshot + check at default settings, bookies "
        "restarted before each run), each asserted to find exactly the injected holes; medians.",
        "",
        "Seconds (ledgers/s):",
        "",
        row(head),
        row(["---", *("---:" for _ in sizes)]),
    ]
    for name, secs in rows:
        rate = name != "Spark session start"  # a fixed cost: ledgers/s means nothing there
        lines.append(row([name, *(f"{secs[s]:,.2f} ({s / secs[s]:,.0f}/s)" if rate and secs[s] > 0
                                  else f"{secs[s]:,.2f}" for s in sizes)]))
    lines += [
        "",
        "Microseconds per ledger (flat = linear; growing = super-linear; falling = fixed cost amortised):",
        "",
        row([*head, f"{sizes[-1]:,} / {sizes[0]:,}"]),
        row(["---", *("---:" for _ in sizes), "---:"]),
    ]
    for name, secs in rows:
        per = {s: secs[s] / s * 1e6 for s in sizes}
        lines.append(row([name, *(f"{per[s]:,.1f}" for s in sizes), growth(per, sizes)]))
    labels = {str(s): f"{s:,} ledgers" for s in sizes}
    memory = monitor.memory_table(m["results"], labels)
    if memory:
        lines += ["", *memory, *monitor.zookeeper_table(m["results"], labels)]
    lines += [
        "",
        "Ledgers per size: " + "; ".join(f"{s:,}: {m['described'][str(s)]}" for s in sizes) + ".",
        "Setup per size, not timed (s): " + "; ".join(
            f"{s:,}: " + ", ".join(f"{k} {v:.1f}" for k, v in m["setup"][str(s)].items()) for s in sizes
        ) + f". Raw results: `{m['json']}`.",
        "",
    ]
    return "\n".join(lines)


def run_size(
    n: int, layout: str, entries: int, runs: int, tmp: str, *, watch: bool = False
) -> dict[str, Any]:
    """One size on its own fresh cluster: setup, then `runs` runs of the bkaudit side; results and setup."""
    from bkaudit.cluster.local import LocalCluster

    m: dict[str, Any] = {"setup": {"restarts": 0.0}}
    t0 = time.perf_counter()
    cluster = LocalCluster.up(Path(tmp) / f"cluster-{n}", bookies=checker.BOOKIES, racks=checker.RACKS,
                              zk_heap_mb=harness.zookeeper_heap_mb(n))
    m["setup"]["cluster"] = time.perf_counter() - t0
    try:
        checker.setup(cluster, layout, n, entries, m)
        watcher = monitor.monitor_factory(lambda: checker.cluster_targets(cluster)) if watch else None
        results = []
        for run in range(runs):
            m["setup"]["restarts"] += checker.restart_bookies(cluster)
            side = harness.Side("bkaudit", "checker:spark_side",
                                {"zk": cluster.zk, "root": cluster.root,
                                 "warehouse": f"{tmp}/warehouse-{n}-{run}"}, "snapshot + check")
            r = harness.run_watched(side, monitor=watcher)
            extra = sum(1 for lid, cat, _ev in r["violations"]
                        if lid not in m["expected"] or cat not in checker.DURABILITY)
            checker.check_side("bkaudit", checker.found_from_json(r["found"]), m["expected"], extra)
            for key in ("found", "violations"):
                r.pop(key, None)
            results.append(r)
            print(f"  {n:,} ledgers, run {run + 1}: {r['seconds']:.2f}s inside, {r['wall_s']:.2f}s with "
                  "start-up", flush=True)
    finally:
        cluster.down()
    return {"results": results, "setup": m["setup"], "described": m["described"],
            "holes": len(m["expected"]), "entries": m["entries_total"]}


def parse_sizes(text: str) -> list[int]:
    sizes = [int(x.replace("_", "")) for x in text.split(",") if x.strip()]
    if not sizes or any(s < 100 for s in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be ledger counts >= 100: {text!r}")
    return sorted(set(sizes))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes("10000,100000,300000,1000000"),
                        help="comma-separated ledger counts")
    parser.add_argument("--layout", choices=layouts.LAYOUTS, default="uniform")
    parser.add_argument("--entries", type=int, default=10, help="entries per ledger (uniform layout)")
    parser.add_argument("--runs", type=int, default=1, help="runs per size (medians over them)")
    parser.add_argument("--monitor", action="store_true",
                        help="peak memory per role and ZooKeeper load of every run (bench/monitor.py)")
    parser.add_argument("--json", help="result file (default bench/results/scaling-<stamp>.json)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still takes its cluster down
    m: dict[str, Any] = {"sizes": args.sizes, "layout": args.layout, "entries": args.entries,
                         "runs": args.runs, "machine_start": harness.machine(),
                         "results": {}, "setup": {}, "described": {}, "holes": {}}
    for n in args.sizes:
        with tempfile.TemporaryDirectory(prefix="bkaudit-bench-scaling-") as tmp:
            one = run_size(n, args.layout, args.entries, args.runs, tmp, watch=args.monitor)
        m["results"][str(n)] = one["results"]
        m["setup"][str(n)] = one["setup"]
        m["described"][str(n)] = one["described"]
        m["holes"][str(n)] = one["holes"]
    m["machine_end"] = harness.machine()
    m["when"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    m["json"] = str(harness.write_json(f"scaling-{args.layout}", m, args.json))
    print(report(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
