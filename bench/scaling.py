"""Scaling curve of the bkaudit side (issue 15 item 3): per-phase timings of snapshot and check by size.

    .venv/bin/python -m bench.scaling --sizes 10000,100000,300000,1000000 [--layout uniform|realistic]
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

from bench import checker, harness, layouts, monitor

SNAPSHOT_STEPS = ("ledgers", "cluster_state", "validation", "commit")


def checked(runs: list[dict[str, Any]]) -> bool:
    """Whether a size's runs ran the check (a snapshot-only size's runs say `checked: False`)."""
    return all(r.get("checked", True) for r in runs)


def phase_table(
    sizes: list[int], by_size: dict[int, list[dict[str, Any]]]
) -> list[tuple[str, dict[int, float | None]]]:
    """(phase, {size: median seconds}) rows: session, snapshot steps, checker phases, totals. A checker phase
    that did not run in a checked size counts 0; every check row is None at a snapshot-only size."""
    def median(size: int, get: Any, *, needs_check: bool = False) -> float | None:
        runs = by_size[size]
        if needs_check and not checked(runs):
            return None
        return harness.Spread.of(get(r) for r in runs).median

    rows: list[tuple[str, dict[int, float | None]]] = []
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
            phases.extend(k for k in r.get("phases", {}) if k not in phases)
    for phase in phases:
        rows.append((f"check: {phase}", {
            s: median(s, lambda r, k=phase: r["phases"].get(k, 0.0), needs_check=True) for s in sizes
        }))
    for name, key in (("check (job 2) in all", "check_s"), ("snapshot + check (no start-up)", "seconds"),
                      ("with start-up (spawn to exit)", "wall_s")):
        rows.append((name, {s: median(s, lambda r, k=key: r[k], needs_check=True) for s in sizes}))
    return rows


FIT_FROM = 100_000
"""Sizes the projection fits from: below this the fixed costs (the session, small-job overheads) dominate."""
SPARK_ABOVE = 2_000_000
"""Where the work changes hands by design: above this many ledgers the snapshot validates on Spark
(`validation_pandas_max_ledgers`) and the checker joins on Spark (`DRIVER_INPUT_MAX_LEDGERS`), so the driver
stops growing. Where two sizes above it were measured, only those are fitted."""


def fitted_sizes(points: dict[int, float]) -> dict[int, float]:
    """The points a projection fits: those from FIT_FROM, only those above SPARK_ABOVE if there are two."""
    points = {s: v for s, v in points.items() if s >= FIT_FROM}
    above = {s: v for s, v in points.items() if s > SPARK_ABOVE}
    return above if len(above) >= 2 else points
TOTALS = ("snapshot (job 1) in all", "check (job 2) in all", "snapshot + check (no start-up)",
          "with start-up (spawn to exit)")


def growth(per_ledger: dict[int, float | None], sizes: list[int]) -> str:
    """µs per ledger at the largest size over the smallest where the phase ran: ~1 linear, > 1 super-linear,
    < 1 fixed cost being amortised."""
    ran = [s for s in sizes if per_ledger[s] is not None]
    if len(ran) < 2:
        return "-"
    small, large = per_ledger[ran[0]], per_ledger[ran[-1]]
    assert small is not None and large is not None
    return "-" if small <= 0 else f"{large / small:.2f}x"


def fit(points: dict[int, float]) -> tuple[float, float]:
    """Least squares `seconds = fixed + per_ledger * n` over (n, seconds) points: (fixed, per_ledger)."""
    n = len(points)
    mean_x = sum(points) / n
    mean_y = sum(points.values()) / n
    var = sum((x - mean_x) ** 2 for x in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points.items()) / var
    return mean_y - slope * mean_x, slope


def projection(rows: list[tuple[str, dict[int, float | None]]],
               target: int) -> list[tuple[str, float, float, float, int, int]]:
    """Per row measured at two or more of `fitted_sizes`: (name, fixed s, µs per ledger, seconds projected at
    `target`, the smallest and the largest size fitted). A straight line: the curve above shows no phase
    growing faster than the ledgers, and a phase that did would make this an underestimate, as the table
    says."""
    out = []
    for name, secs in rows:
        points = fitted_sizes({s: v for s, v in secs.items() if v is not None})
        if name == "Spark session start" or len(points) < 2:
            continue
        fixed, per = fit(points)
        out.append((name, fixed, per * 1e6, fixed + per * target, min(points), max(points)))
    return out


CHECKED, SNAPSHOT_ALONE = "snapshot + check", "snapshot alone"


def memory_projection(m: dict[str, Any], target: int) -> list[tuple[str, str, float, float, int, int]]:
    """Peak RSS per role (median over runs) fitted the same way, separately for the sizes that ran the check
    and the snapshot-only ones (their roles hold different work): (work, role, MB per million ledgers, MB
    projected at `target`, the smallest and largest size fitted). The bookies are one role, "each bookie"
    (the median of them); they hold nothing at a snapshot-only size, so that kind has no bookie row."""
    points: dict[tuple[str, str], dict[int, float]] = {}
    for size, runs in m["results"].items():
        kind = CHECKED if checked(runs) else SNAPSHOT_ALONE
        peaks: dict[str, list[float]] = {}
        for r in runs:
            roles = r.get("monitor", {}).get("memory", {}).get("roles", {})
            bookies = [got["peak_sum_mb"] for role, got in roles.items() if role.startswith("bookie")]
            for role, got in roles.items():
                if not role.startswith("bookie"):
                    peaks.setdefault(role, []).append(got["peak_sum_mb"])
            if bookies and kind == CHECKED:
                peaks.setdefault("each bookie", []).append(harness.Spread.of(bookies).median)
        for role, values in peaks.items():
            points.setdefault((kind, role), {})[int(size)] = harness.Spread.of(values).median
    out = []
    for (kind, role), by_size in sorted(points.items(), key=lambda kv: (kv[0][0] != CHECKED,
                                                                          monitor.role_order(kv[0][1]))):
        chosen = fitted_sizes(by_size)
        if len(chosen) >= 2:
            fixed, per = fit(chosen)
            out.append((kind, role, per * 1e6, fixed + per * target, min(chosen), max(chosen)))
    return out


def _cell(secs: float | None, size: int, rate: bool) -> str:
    if secs is None:
        return "-"
    return f"{secs:,.2f} ({size / secs:,.0f}/s)" if rate and secs > 0 else f"{secs:,.2f}"


def report(m: dict[str, Any]) -> str:
    sizes: list[int] = m["sizes"]
    by_size = {int(k): v for k, v in m["results"].items()}
    rows = phase_table(sizes, by_size)
    row = harness.markdown_row
    head = ["phase", *(f"{s:,} ledgers" for s in sizes)]
    only = [s for s in sizes if not checked(by_size[s])]
    lines = [
        f"### Scaling of the bkaudit side, {m['layout']} layout ({m['when']}, `bench/scaling.py --sizes "
        f"{','.join(str(s) for s in sizes)} --layout {m['layout']}"
        + (f" --snapshot-only-above {m['snapshot_only_above']}" if m.get("snapshot_only_above") else "")
        + "`)",
        "",
        harness.machine_line(m["machine_start"], m["machine_end"]),
        f"Per size a fresh LocalCluster ({checker.BOOKIES} bookies on {checker.RACKS} racks, embedded "
        f"ZooKeeper) set up as bench/checker.py does; {m['runs']} run(s) per size of bench/checker.py's "
        "bkaudit side (fresh process, new Spark session, snapshot + check at default settings, bookies "
        "restarted before each run), each asserted to find exactly the injected holes; medians."
        + (f" At {', '.join(f'{s:,}' for s in only)} ledgers the snapshot job alone (the metadata in "
           "ZooKeeper, no entries on the bookies), asserted to count every ledger and segment loaded."
           if only else ""),
        "",
        "Seconds (ledgers/s):",
        "",
        row(head),
        row(["---", *("---:" for _ in sizes)]),
    ]
    for name, secs in rows:
        rate = name != "Spark session start"  # a fixed cost: ledgers/s means nothing there
        lines.append(row([name, *(_cell(secs[s], s, rate) for s in sizes)]))
    lines += [
        "",
        "Microseconds per ledger (flat = linear; growing = super-linear; falling = fixed cost amortised):",
        "",
        row([*head, "largest / smallest"]),
        row(["---", *("---:" for _ in sizes), "---:"]),
    ]
    for name, secs in rows:
        per = {s: None if secs[s] is None else secs[s] / s * 1e6 for s in sizes}
        lines.append(row([name, *("-" if per[s] is None else f"{per[s]:,.1f}" for s in sizes),
                          growth(per, sizes)]))
    labels = {str(s): f"{s:,} ledgers" for s in sizes}
    memory = monitor.memory_table(m["results"], labels)
    if memory:
        lines += ["", *memory, *monitor.zookeeper_table(m["results"], labels)]
    target = m.get("project_to")
    if target:
        lines += projection_lines(rows, m, target)
    lines += [
        "",
        "Ledgers per size: " + "; ".join(f"{s:,}: {m['described'][str(s)]}" for s in sizes) + ".",
        "Setup per size, not timed (s): " + "; ".join(
            f"{s:,}: " + ", ".join(f"{k} {v:.1f}" for k, v in m["setup"][str(s)].items()) for s in sizes
        ) + f". Raw results: `{m['json']}`.",
        "",
    ]
    return "\n".join(lines)


def projection_lines(rows: list[tuple[str, dict[int, float | None]]], m: dict[str, Any],
                     target: int) -> list[str]:
    row = harness.markdown_row
    projected = projection(rows, target)
    phases = [p for p in projected if p[0] not in TOTALS]
    lines = ["", f"Projection to {target:,} ledgers (least squares `fixed + per ledger x n` over the sizes "
             f"from {FIT_FROM:,}, only those above {SPARK_ABOVE:,} where two were measured (the work moves "
             "to Spark there); a phase growing faster than the ledgers would make it an underestimate):",
             "",
             row(["phase", "fixed (s)", "µs per ledger", f"at {target:,} (s)", "sizes fitted"]),
             row(["---", "---:", "---:", "---:", "---:"])]
    for name, fixed, per, at, low, high in projected:
        lines.append(row([name, f"{fixed:,.1f}", f"{per:,.1f}", f"{at:,.0f}", f"{low:,}-{high:,}"]))
    if phases:
        bound = max(phases, key=lambda p: p[3])
        lines += ["", f"The phase that bounds it: **{bound[0]}**, {bound[3]:,.0f} s of the projected "
                  f"{sum(p[3] for p in phases):,.0f} s the phases sum to."]
    mem = memory_projection(m, target)
    if mem:
        lines += ["", row(["work", "role", "MB per million ledgers", f"peak MB at {target:,}",
                           "sizes fitted"]),
                  row(["---", "---", "---:", "---:", "---:"])]
        lines += [row([kind, role, f"{per:,.0f}", f"{at:,.0f}", f"{low:,}-{high:,}"])
                  for kind, role, per, at, low, high in mem]
    return lines


def run_size(
    n: int, layout: str, entries: int, runs: int, tmp: str, *, watch: bool = False,
    snapshot_only: bool = False,
) -> dict[str, Any]:
    """One size on its own fresh cluster: setup, then `runs` runs of the bkaudit side; results and setup."""
    from bkaudit.cluster.local import LocalCluster

    m: dict[str, Any] = {"setup": {"restarts": 0.0}}
    t0 = time.perf_counter()
    cluster = LocalCluster.up(Path(tmp) / f"cluster-{n}", bookies=checker.BOOKIES, racks=checker.RACKS,
                              zk_heap_mb=harness.zookeeper_heap_mb(n))
    m["setup"]["cluster"] = time.perf_counter() - t0
    try:
        watcher = monitor.monitor_factory(lambda: checker.cluster_targets(cluster)) if watch else None
        if snapshot_only:
            return snapshot_size(cluster, n, layout, entries, runs, tmp, m, watcher)
        checker.setup(cluster, layout, n, entries, m)
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


def snapshot_size(cluster: Any, n: int, layout: str, entries: int, runs: int, tmp: str, m: dict[str, Any],
                  watcher: Any) -> dict[str, Any]:
    """A size past what the bookies' memory holds (docs/performance.md): the same plan's metadata in
    ZooKeeper, no entries loaded, and `runs` runs of the snapshot job alone (`checker.snapshot_side`), each
    asserted to count exactly the ledgers and segments loaded, with nothing unparseable or invalid."""
    t0 = time.perf_counter()
    plan, _holes = layouts.plan(layout, n, [b.id for b in cluster.bookies], checker.RACKS, entries=entries)
    m["setup"]["plan"] = time.perf_counter() - t0
    segments = sum(len(lay.segments) for lay in plan.values())
    described = layouts.describe(layout, plan)
    entries_total = sum(lay.length for lay in plan.values())
    print(f"loading {n:,} ledgers' metadata ({segments:,} segments) into ZooKeeper ...", flush=True)
    m["setup"]["metadata"] = checker.load_metadata(cluster, plan)
    del plan
    results = []
    for run in range(runs):
        where = f"{tmp}/warehouse-{n}-{run}"
        side = harness.Side("bkaudit", "checker:snapshot_side",
                            {"zk": cluster.zk, "root": cluster.root, "warehouse": where}, "snapshot")
        r = harness.run_watched(side, monitor=watcher)
        got = (r["status"], r["ledgers"], r["segments"], r["unparseable"], r["validation_failures"])
        if got != ("succeeded", n, segments, 0, 0):
            raise AssertionError(f"snapshot at {n:,}: (status, ledgers, segments, unparseable, validation "
                                 f"failures) {got}, loaded {n:,} ledgers of {segments:,} segments; "
                                 f"{r['error']}")
        r["checked"] = False
        results.append(r)
        print(f"  {n:,} ledgers, run {run + 1}: snapshot {r['seconds']:.2f}s inside, {r['wall_s']:.2f}s with "
              "start-up", flush=True)
    return {"results": results, "setup": m["setup"], "described": described, "holes": 0,
            "entries": entries_total}


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
    parser.add_argument("--snapshot-only-above", type=int, default=0, metavar="N",
                        help="sizes above N run the snapshot job alone (no entries on the bookies, no "
                             "check): the bookies' memory bounds the check before ZooKeeper bounds the "
                             "snapshot")
    parser.add_argument("--project-to", type=int, default=10_000_000, metavar="N",
                        help="project each phase and each role's peak memory to N ledgers (0: no projection)")
    parser.add_argument("--json", help="result file (default bench/results/scaling-<stamp>.json)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still takes its cluster down
    m: dict[str, Any] = {"sizes": args.sizes, "layout": args.layout, "entries": args.entries,
                         "runs": args.runs, "machine_start": harness.machine(),
                         "snapshot_only_above": args.snapshot_only_above, "project_to": args.project_to,
                         "results": {}, "setup": {}, "described": {}, "holes": {}}
    for n in args.sizes:
        with tempfile.TemporaryDirectory(prefix="bkaudit-bench-scaling-") as tmp:
            one = run_size(n, args.layout, args.entries, args.runs, tmp, watch=args.monitor,
                           snapshot_only=0 < args.snapshot_only_above < n)
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
