"""Benchmark of read-evidence checking (no bookie can list) against a BookKeeper checkAllLedgers-style check.

    .venv/bin/python bench/checker_reads.py [--ledgers N | --quick] [--runs R] [--no-append] [--json PATH]

1. a LocalCluster of 9 bookie processes on 3 racks (embedded ZooKeeper), every bookie DbLedgerStorage-like
   (`no_listing`: listing requests are never answered); N closed ledgers with the layouts of bench/checker.py
   (E3/WQ2/AQ2 and E5/WQ3/AQ2 alternating, rotating ensembles), each 10-100 entries (seeded) of 100 B-1 KiB
   payload, CRC32C digests, packaged by `formats.entry.DigestManager`;
2. real entry bodies bulk-loaded into each stopped bookie (`bookie.storage.bulk_load_entries`), minus
   holes in ~1% of the ledgers, each hole an entry the first/last-per-segment reads must see: a bookie's first
   or last stored entry lost, or the ledger's first or last entry lost on two of its bookies. The expected
   category and missing entries come from bench/checker.py's naive per-entry model of what was deleted;
3. ledger metadata bulk-loaded into ZooKeeper (BookKeeper v3 bytes, digest CRC32C);
4. through bench/harness.py: alternated, R times each, every run in a fresh process:
   (a) bkaudit: a new Spark session (local[2], timed apart), the snapshot, then the check (default `[checker]`
       read settings: listing probe, verification_percentage 0, read_max_in_flight_per_bookie 64);
   (b) the baseline, shaped as BookKeeper's Auditor.checkAllLedgers (AuditorCheckAllLedgersTask): at most 500
       ledgers in flight (auditorMaxNumberOfConcurrentOpenLedgerOperations), each: its metadata read from
       ZooKeeper (openLedgerNoRecovery), then LedgerChecker.checkLedger: per segment and bookie index the
       first and last stored entry read (auditorLedgerVerificationPercentage 0), all at once
       (inFlightReadEntryNumInLedgerChecker = -1); digests verified with the same code as (a);
   both must find every injected hole with its exact category and entries, and nothing else (asserted);
5. medians with min/max, ledgers/s of both and the ratio; a dated section appended to docs/performance.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import platform
import random
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from itertools import accumulate
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import checker as listing_bench
import harness

REPO = listing_bench.REPO
BOOKIES, RACKS, SEED = listing_bench.BOOKIES, listing_bench.RACKS, listing_bench.SEED
MIN_ENTRIES, MAX_ENTRIES = 10, 100
MIN_PAYLOAD, MAX_PAYLOAD = 100, 1024
CHECK_ALL_LEDGERS_IN_FLIGHT = 500  # auditorMaxNumberOfConcurrentOpenLedgerOperations (default)
PAYLOAD = random.Random(SEED).randbytes(MAX_PAYLOAD)
DURABILITY = ("no_replica", "below_ack_quorum", "below_write_quorum")

Layouts = dict[int, tuple[int, int, int, tuple[str, ...]]]


# -- the synthetic cluster ---------------------------------------------------------------------------------


def lengths_for(n: int) -> dict[int, int]:
    rng = random.Random(f"{SEED}:lengths")
    return {lid: rng.randint(MIN_ENTRIES, MAX_ENTRIES) for lid in range(n)}


def payload_sizes(lid: int, length: int) -> list[int]:
    rng = random.Random(f"{SEED}:sizes:{lid}")
    return [rng.randint(MIN_PAYLOAD, MAX_PAYLOAD) for _ in range(length)]


def read_holes(layouts: Layouts, lengths: dict[int, int]) -> dict[int, dict[str, set[int]]]:
    """{ledger: {bookie: lost entries}}: in ~1% of the ledgers, entries that first/last reads must see."""
    from bkaudit.model.quorum import entries_of_bookie, write_set

    rng = random.Random(f"{SEED}:read-holes")
    holes: dict[int, dict[str, set[int]]] = {}
    n = len(layouts)
    for lid in rng.sample(range(n), max(3, int(n * listing_bench.HOLE_FRACTION))):
        e, wq, _aq, ens = layouts[lid]
        last = lengths[lid] - 1
        kind = rng.choice(("first", "last", "two"))
        if kind == "two":  # the ledger's first or last entry lost on two of its bookies
            x = rng.choice((0, last))
            for i in rng.sample(list(write_set(x, e, wq)), 2):
                holes.setdefault(lid, {}).setdefault(ens[i], set()).add(x)
        else:  # one bookie's first or last stored entry
            i = rng.randrange(e)
            mine = list(entries_of_bookie(i, 0, last, e, wq))
            holes.setdefault(lid, {}).setdefault(ens[i], set()).add(mine[0] if kind == "first" else mine[-1])
    return holes


def _bookie_bodies(
    args: tuple[str, str, list[tuple[int, int, int, tuple[str, ...]]], dict[int, set[int]], dict[int, int]],
) -> int:
    """Bulk-load one bookie with packaged CRC32C entries (runs in a worker process)."""
    from bkaudit.bookie.storage import bulk_load_entries
    from bkaudit.formats.entry import DigestManager
    from bkaudit.model.ledger import DigestType
    from bkaudit.model.quorum import entries_of_bookie

    bookie, data_dir, layouts, lost, lengths = args

    def ledgers():
        for lid, e, wq, ens in layouts:
            length = lengths[lid]
            sizes = payload_sizes(lid, length)
            ends = list(accumulate(sizes))
            dm = DigestManager(lid, b"", DigestType.CRC32C)
            gone = lost.get(lid, ())
            mine = entries_of_bookie(ens.index(bookie), 0, length - 1, e, wq)
            yield lid, [
                (x, dm.package(x, x - 1, ends[x], PAYLOAD[: sizes[x]])) for x in mine if x not in gone
            ]

    return bulk_load_entries(data_dir, ledgers())


# -- the two sides, each in a fresh process ----------------------------------------------------------------


def spark_side(zk: str, root: str, warehouse: str) -> dict[str, Any]:
    """(a) in a fresh process (bench/harness.py): new Spark session, snapshot, check; times and findings."""
    from bkaudit.spark.checker import CheckOptions, run_check
    from bkaudit.spark.session import get_session
    from bkaudit.spark.snapshot import run_snapshot

    t0 = time.perf_counter()
    spark = get_session("local[2]", app_name="bkaudit-bench-checker-reads")
    spark.range(1).count()
    session_s = time.perf_counter() - t0
    settings = listing_bench.settings_for(SimpleNamespace(zk=zk, root=root), warehouse, tuned=True)
    t0 = time.perf_counter()
    snap = run_snapshot(spark, settings, warehouse=warehouse)
    snapshot_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = run_check(spark, settings, CheckOptions(warehouse=warehouse, snapshot_id=snap.snapshot_id))
    check_s = time.perf_counter() - t0
    out = {
        "session_s": session_s,
        "snapshot_s": snapshot_s,
        "check_s": check_s,
        "seconds": snapshot_s + check_s,
        "ledgers": result.ledgers_checked,
        "found": listing_bench._found_json(listing_bench.spark_found(result)),
        "violations": [(v.ledger_id, v.category, v.detail.get("evidence")) for v in result.violations],
        "evidence": sorted({b.evidence for b in result.bookies}),
        "phases": result.phase_seconds,
    }
    spark.stop()
    return out


# -- report ------------------------------------------------------------------------------------------------


def spread(xs: list[float]) -> tuple[float, float, float]:
    s = harness.Spread.of(xs)
    return s.median, s.low, s.high


def report(m: dict[str, Any]) -> str:
    n = m["ledgers"]
    a, b = m["spark"], m["baseline"]
    a_med, a_min, a_max = spread([r["seconds"] for r in a])
    b_med, b_min, b_max = spread([r["seconds"] for r in b])
    snap, check, session = (spread([r[k] for r in a]) for k in ("snapshot_s", "check_s", "session_s"))
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load0 = ", ".join(f"{x:.1f}" for x in m["load_start"])
    load1 = ", ".join(f"{x:.1f}" for x in m["load_end"])
    median_run = sorted(a, key=lambda r: r["seconds"])[len(a) // 2]
    phases = ", ".join(f"{k} {v:.2f}" for k, v in median_run["phases"].items())
    expected = len(m["expected"])
    setup = m["setup"]
    runs_a = ", ".join(f"{r['seconds']:.1f} s" for r in a)
    runs_b = ", ".join(f"{r['seconds']:.1f} s" for r in b)

    def rate(med: float, lo: float, hi: float) -> str:
        return f"{n / med:,.0f} ({n / hi:,.0f}-{n / lo:,.0f})"

    lines = [
        f"## Read-evidence checking, {n:,} ledgers, no bookie lists ({when}, bench/checker_reads.py)",
        "",
        f"Machine: {os.cpu_count()} CPUs (load average {load0} at the start, {load1} at the end: shared "
        f"machine), {platform.python_implementation()} {platform.python_version()}, Spark local[2]; a "
        f"LocalCluster of {BOOKIES} bookie processes on {RACKS} racks, **all DbLedgerStorage-like** "
        "(`no_listing`: listing requests never answered), and the embedded ZooKeeper, on the same machine. "
        f"Ledgers: closed, {MIN_ENTRIES}-{MAX_ENTRIES} entries each ({m['entries']:,} in all), payloads "
        f"{MIN_PAYLOAD} B-{MAX_PAYLOAD / 1024:.0f} KiB, CRC32C digests, E3/WQ2/AQ2 and E5/WQ3/AQ2 "
        f"alternating ({m['pairs']:,} (ledger, bookie) pairs); {m['loaded']:,} entry bodies "
        f"({m['bytes'] / 2**30:.1f} GiB) bulk-loaded into the bookies with holes in {expected:,} ledgers "
        "(a bookie's first or last stored entry, or the ledger's first or last entry on two bookies). "
        f"{m['runs']} runs of each side, alternated, every run in a fresh process (bench/harness.py); "
        "medians (min-max).",
        "",
        "| measure | seconds | ledgers/s |",
        "|---|---:|---:|",
        "| (a) bkaudit: snapshot + check (what `bkaudit check --fresh` runs), read evidence with default "
        "`[checker]` read settings (listing probe 5 s, verification_percentage 0, 64 reads in flight per "
        "bookie) | "
        f"{a_med:.1f} ({a_min:.1f}-{a_max:.1f}) | {rate(a_med, a_min, a_max)} |",
        f"| of which the snapshot | {snap[0]:.1f} ({snap[1]:.1f}-{snap[2]:.1f}) | |",
        f"| of which the check | {check[0]:.1f} ({check[1]:.1f}-{check[2]:.1f}) | "
        f"{rate(*check)} |",
        "| (a) with start-up (process spawn to exit: interpreter, imports, Spark session, snapshot, "
        f"check) | {harness.spreads(a, 'wall_s').cell(1)} | {harness.spreads(a, 'wall_s').rate_cell(n)} |",
        f"| (b) BookKeeper-style checkAllLedgers: 1 process, {CHECK_ALL_LEDGERS_IN_FLIGHT} ledgers in "
        "flight, metadata read per ledger, first + last stored entry per (segment, bookie), reads "
        f"unthrottled, digests verified | {b_med:.1f} ({b_min:.1f}-{b_max:.1f}) | "
        f"{rate(b_med, b_min, b_max)} |",
        f"| (b) with start-up (process spawn to exit) | {harness.spreads(b, 'wall_s').cell(1)} | "
        f"{harness.spreads(b, 'wall_s').rate_cell(n)} |",
        "",
        f"Ratio (a)/(b) of the medians: **{b_med / a_med:.1f}x** (snapshot + check against the baseline); "
        f"the check alone {b_med / check[0]:.1f}x. Runs (a): {runs_a}; (b): {runs_b}. Spark session "
        f"start, not in (a): "
        f"{session[0]:.1f} s median.",
        "",
        f"Holes: every run of both sides found all {expected:,} damaged ledgers with the exact category and "
        "missing entries and no other finding (asserted); every bkaudit finding rests on `evidence = reads` "
        "and every bookie was verified by reads (the probe found no listing).",
        "",
        f"Checker phases of the median (a) run (s): {phases}. Setup (not timed above): cluster "
        f"{setup['cluster']:.1f} s, bulk load of the bodies {setup['bookies']:.1f} s, metadata "
        f"{setup['metadata']:.1f} s. Settings as the listing row (bench/checker.py): snapshot validation "
        "off, ZooKeeper read throttles off, 2 snapshot ZooKeeper sessions; every other key at its default.",
        "",
        "What differs: the baseline models one Auditor doing checkAllLedgers, reads from one process with "
        "the same client, the same read selection (`bkaudit.audit.reads.plan_reads`) and the same digest "
        "check; bkaudit spreads the ledger pass and the reads over Spark's two cores, reads ids from the "
        "snapshot instead of one ZooKeeper read per ledger, and pays the 5 s listing probe once per run.",
        "",
    ]
    return "\n".join(lines)


# -- main --------------------------------------------------------------------------------------------------


def check_side(name: str, found: dict[int, Any], expected: dict[int, Any], extra: int) -> None:
    right, wrong, false_pos = listing_bench.verify(found, expected)
    if wrong or false_pos or extra:
        raise AssertionError(
            f"{name}: {right}/{len(expected)} holes right, {wrong} missed or wrong, {false_pos} false "
            f"positives, {extra} other findings"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="2,000 ledgers, 2 runs each (< 3 minutes)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each side")
    parser.add_argument(
        "--no-append", action="store_true", help="print only; leave docs/performance.md alone"
    )
    parser.add_argument("--json", help="result file (default bench/results/checker-reads-<stamp>.json)")
    args = parser.parse_args(argv)
    n = 2_000 if args.quick else args.ledgers
    runs = 2 if args.quick else args.runs
    from bkaudit.cluster.local import LocalCluster

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still takes its cluster down
    m: dict[str, Any] = {"ledgers": n, "runs": runs, "setup": {}, "load_start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bkaudit-bench-reads-") as tmp:
        t0 = time.perf_counter()
        cluster = LocalCluster.up(
            Path(tmp) / "cluster", bookies=BOOKIES, racks=RACKS, no_listing=list(range(BOOKIES))
        )
        m["setup"]["cluster"] = time.perf_counter() - t0
        try:
            ids = [b.id for b in cluster.bookies]
            layouts = listing_bench.layouts_for(n, ids)
            lengths = lengths_for(n)
            holes = read_holes(layouts, lengths)
            m["expected"] = listing_bench.truth(layouts, holes, lengths)
            m["entries"] = sum(lengths.values())
            m["pairs"] = sum(len(set(ens)) for _e, _w, _a, ens in layouts.values())
            print(f"bulk-loading {n:,} ledgers ({m['entries']:,} entries) into {BOOKIES} bookies ...",
                  flush=True)
            t0 = time.perf_counter()
            m["loaded"] = listing_bench.load_bookies(cluster, layouts, holes, lengths, worker=_bookie_bodies)
            m["setup"]["bookies"] = time.perf_counter() - t0
            m["bytes"] = sum(
                (Path(b.data_dir) / "current" / "ledgers.db").stat().st_size for b in cluster.bookies
            )
            m["setup"]["metadata"] = listing_bench.load_metadata(cluster, layouts, lengths, digest="CRC32C")
            sides = [
                harness.Side("spark", "checker_reads:spark_side",
                             {"zk": cluster.zk, "root": cluster.root, "warehouse": ""}, "snapshot + check"),
                harness.Side("baseline", "checker:baseline_side",
                             {"zk": cluster.zk, "root": cluster.root, "ledgers": n,
                              "in_flight": CHECK_ALL_LEDGERS_IN_FLIGHT, "reads_percentage": 0.0},
                             "checkAllLedgers-style"),
            ]
            warehouses = itertools.count()

            def before(side: harness.Side) -> harness.Side:
                if side.name != "spark":
                    return side
                fresh = f"{tmp}/warehouse-{next(warehouses)}"
                return dataclasses.replace(side, kwargs={**side.kwargs, "warehouse": fresh})

            def after(side: str, r: dict[str, Any]) -> None:
                found = listing_bench.found_from_json(r["found"])
                if side == "baseline":
                    check_side("baseline", found, m["expected"], 0)
                    return
                extra = sum(1 for lid, cat, _ev in r["violations"]
                            if lid not in m["expected"] or cat not in DURABILITY)
                check_side("bkaudit", found, m["expected"], extra)
                not_reads = [v for v in r["violations"] if v[2] != "reads"]
                if not_reads or r["evidence"] != ["reads"]:
                    raise AssertionError(f"not all evidence from reads: {not_reads[:3]} {r['evidence']}")

            results = harness.compare(sides, runs=runs, before_run=before, after_run=after)
            m["spark"], m["baseline"] = results["spark"], results["baseline"]
        finally:
            cluster.down()
    m["load_end"] = os.getloadavg()
    payload = {k: v for k, v in m.items() if k != "expected"}
    for side in ("spark", "baseline"):
        payload[side] = [{k: v for k, v in r.items() if k not in ("found", "violations")} for r in m[side]]
    print("results:", harness.write_json(f"checker-reads-{n}", payload, args.json), flush=True)
    text = report(m)
    print(text)
    if not args.no_append:
        with (REPO / "docs" / "performance.md").open("a", encoding="utf-8") as fh:
            fh.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
