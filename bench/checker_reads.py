"""Benchmark of read-evidence checking (no bookie can list) against a BookKeeper checkAllLedgers-style check.

    .venv/bin/python -m bench.checker_reads [--ledgers N | --quick] [--layout uniform|realistic] [--runs R]
                                            [--json PATH]

1. a LocalCluster of 9 bookie processes on 3 racks (embedded ZooKeeper), every bookie DbLedgerStorage-like
   (`no_listing`: listing requests are never answered); N closed ledgers laid out by bench/layouts.py:
   `uniform` (default: bench/checker.py's rotation, E3/WQ2/AQ2 and E5/WQ3/AQ2, one segment, 10-100 entries
   per ledger, seeded) or `realistic` (10-50,000 entries, E2/E3/E5, 10% multi-segment); payloads of
   100 B-1 KiB, CRC32C digests, packaged by `formats.entry.DigestManager`;
2. real entry bodies bulk-loaded into each stopped bookie (`bookie.bulkload.bulk_load_entries`), minus
   holes in ~1% of the ledgers, each an entry the first/last-per-segment reads must see, in a random segment
   (`layouts.read_holes`): a bookie's first or last stored entry lost, or the segment's first or last entry
   lost on two of its bookies. The expected category and missing entries come from the naive per-entry
   model of what was deleted (`layouts.truth`);
3. ledger metadata bulk-loaded into ZooKeeper (BookKeeper v3 bytes with every segment, digest CRC32C);
4. through bench/harness.py: alternated, R times each, every run in a fresh process on freshly restarted
   bookies (neither side inherits a warm bookie):
   (a) bkaudit at DEFAULT settings (bench/checker.py's `spark_side`: no key changed; snapshot validation
       and ZooKeeper rate limits on; `[checker]` read defaults: listing probe, verification_percentage 0,
       read_max_in_flight_per_bookie 64): a new Spark session (timed apart), the snapshot, then the check;
   (b) the baseline, shaped as BookKeeper's Auditor.checkAllLedgers (AuditorCheckAllLedgersTask): at most 500
       ledgers in flight (auditorMaxNumberOfConcurrentOpenLedgerOperations), each: its metadata read from
       ZooKeeper (openLedgerNoRecovery), then LedgerChecker.checkLedger: per segment and bookie index the
       first and last stored entry read (auditorLedgerVerificationPercentage 0), all at once
       (inFlightReadEntryNumInLedgerChecker = -1); digests verified with the same code as (a);
   both must find every injected hole with its exact category and entries, and nothing else (asserted);
5. a markdown table on stdout (medians with min-max, with and without start-up, ledgers/s, the ratio of
   medians) and the raw results as JSON (bench/results/checker-reads-N-<stamp>.json or --json).

Size limit: read evidence needs real bodies, so every entry copy is a ~0.7 KiB row in the bookies' SQLite
files. The uniform layout (~55 entries per ledger) takes ~0.1 GiB of bookie storage per 1,000 ledgers;
the realistic layout (~1,100 entries per ledger) ~1.8 GiB and ~1.5 minutes of loading per 1,000 ledgers on
this machine (measured: 500 ledgers, 1,363,567 bodies, 0.9 GiB, 49 s at load average 6-10), so
`--layout realistic` is capped at MAX_REALISTIC = 10,000 ledgers (~18 GiB, ~15 minutes of loading).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import random
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from itertools import accumulate
from pathlib import Path
from typing import Any

from bench import checker as listing_bench
from bench import harness, layouts

BOOKIES, RACKS, SEED = listing_bench.BOOKIES, listing_bench.RACKS, listing_bench.SEED
MIN_ENTRIES, MAX_ENTRIES = 10, 100
MIN_PAYLOAD, MAX_PAYLOAD = 100, 1024
MAX_REALISTIC = 10_000  # real bodies: ~1.8 GiB of bookie storage per 1,000 realistic ledgers
CHECK_ALL_LEDGERS_IN_FLIGHT = 500  # auditorMaxNumberOfConcurrentOpenLedgerOperations (default)
PAYLOAD = random.Random(SEED).randbytes(MAX_PAYLOAD)
DURABILITY = ("no_replica", "below_ack_quorum", "below_write_quorum")

# -- the synthetic cluster ---------------------------------------------------------------------------------


def lengths_for(n: int) -> list[int]:
    rng = random.Random(f"{SEED}:lengths")
    return [rng.randint(MIN_ENTRIES, MAX_ENTRIES) for _ in range(n)]


def plan_for(layout: str, n: int, bookies: list[str]) -> dict[int, layouts.Layout]:
    """`uniform`: bench/checker.py's rotation with 10-100 entries per ledger; `realistic`: bench/layouts.py's
    mix (lengths up to 50,000 entries: see the module docstring for the size this fits)."""
    if layout == "uniform":
        return layouts.uniform(n, bookies, lengths_for(n))
    return layouts.realistic(n, bookies, RACKS)


def payload_sizes(lid: int, length: int) -> list[int]:
    rng = random.Random(f"{SEED}:sizes:{lid}")
    return [rng.randint(MIN_PAYLOAD, MAX_PAYLOAD) for _ in range(length)]


def _bookie_bodies(args: tuple[str, str, list[tuple[int, layouts.Layout]], dict[int, set[int]]]) -> int:
    """Bulk-load one bookie with packaged CRC32C entries (runs in a worker process)."""
    from bkaudit.bookie.bulkload import bulk_load_entries
    from bkaudit.formats.entry import DigestManager
    from bkaudit.model.ledger import DigestType

    bookie, data_dir, mine, lost = args

    def ledgers():
        for lid, lay in mine:
            sizes = payload_sizes(lid, lay.length)
            ends = list(accumulate(sizes))
            dm = DigestManager(lid, b"", DigestType.CRC32C)
            yield lid, (
                (x, dm.package(x, x - 1, ends[x], PAYLOAD[: sizes[x]]))
                for x in layouts.bookie_entries(lay, bookie, lost.get(lid))
            )

    return bulk_load_entries(data_dir, ledgers())


# -- the two sides, each in a fresh process ----------------------------------------------------------------


# -- report ------------------------------------------------------------------------------------------------


def report(m: dict[str, Any]) -> str:
    """Markdown: the conditions, one table (medians with min-max, with and without start-up), the ratio."""
    n = m["ledgers"]
    a, b = m["spark"], m["baseline"]
    a_in, a_wall = harness.spreads(a, "seconds"), harness.spreads(a, "wall_s")
    b_in, b_wall = harness.spreads(b, "seconds"), harness.spreads(b, "wall_s")
    snap, check, session = (harness.spreads(a, k) for k in ("snapshot_s", "check_s", "session_s"))
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = harness.machine_line(
        {**harness.machine(), "load_average": list(m["load_start"])},
        {**harness.machine(), "load_average": list(m["load_end"])},
    )
    median_run = sorted(a, key=lambda r: r["seconds"])[len(a) // 2]
    phases = ", ".join(f"{k} {v:.2f}" for k, v in median_run["phases"].items())
    expected = len(m["expected"])
    setup = m["setup"]
    row = harness.markdown_row
    lines = [
        f"### Read-evidence checking, {n:,} ledgers, {m['layout']} layout, no bookie lists ({when}, "
        f"`bench/checker_reads.py --layout {m['layout']} --ledgers {n}`)",
        "",
        machine,
        f"Spark local[2]; a LocalCluster of {BOOKIES} bookie processes on {RACKS} racks, **all "
        "DbLedgerStorage-like** (`no_listing`: listing requests never answered), and the embedded ZooKeeper, "
        f"on the same machine. Ledgers: {m['described']}; payloads {MIN_PAYLOAD} B-{MAX_PAYLOAD / 1024:.0f} "
        f"KiB, CRC32C digests; {m['loaded']:,} entry bodies ({m['bytes'] / 2**30:.1f} GiB) bulk-loaded with "
        f"holes in {expected:,} ledgers (a bookie's first or last stored entry of a segment, or a segment's "
        f"first or last entry on two bookies). {m['runs']} runs of each side, alternated, each in a fresh "
        "process on freshly restarted bookies; bkaudit at **default settings** (no key changed: snapshot "
        "validation on, ZooKeeper read rate limits on, `[checker]` read defaults: listing probe, "
        "verification_percentage 0, 64 reads in flight per bookie).",
        "",
        row(["measure", "seconds, median (min-max)", "ledgers/s, median (min-max)"]),
        row(["---", "---:", "---:"]),
        row(["(a) bkaudit: snapshot + check, read evidence, timed inside its process (no start-up)",
             a_in.cell(), a_in.rate_cell(n)]),
        row(["  of which the snapshot (job 1)", snap.cell(), snap.rate_cell(n)]),
        row(["  of which the check (job 2)", check.cell(), check.rate_cell(n)]),
        row(["(a) with start-up: process spawn to exit (interpreter, imports, new Spark session, snapshot, "
             "check)", a_wall.cell(), a_wall.rate_cell(n)]),
        row(["  Spark session start inside (a)", session.cell(), ""]),
        row([f"(b) BookKeeper-style checkAllLedgers: 1 process, {CHECK_ALL_LEDGERS_IN_FLIGHT} ledgers in "
             "flight, metadata read per ledger, first + last stored entry per (segment, bookie), reads "
             "unthrottled, digests verified; no start-up", b_in.cell(), b_in.rate_cell(n)]),
        row(["(b) with start-up: process spawn to exit", b_wall.cell(), b_wall.rate_cell(n)]),
        "",
        f"Ratio (b)/(a), median/median: **{harness.ratio(b_in, a_in):.2f}x** without start-up, "
        f"**{harness.ratio(b_wall, a_wall):.2f}x** with start-up. Every run of both sides found all "
        f"{expected:,} damaged ledgers with the exact category and missing entries and no other finding "
        "(asserted); every bkaudit finding rests on `evidence = reads` and every bookie was verified by "
        "reads (the probe found no listing).",
        f"Checker phases of the median (a) run (s): {phases}. Setup, not timed: cluster "
        f"{setup['cluster']:.1f} s, bulk load of the bodies {setup['bookies']:.1f} s, metadata "
        f"{setup['metadata']:.1f} s, bookie restarts {setup['restarts']:.1f} s in all. Raw results: "
        f"`{m['json']}`.",
        "",
        "What differs: the baseline models one Auditor doing checkAllLedgers, reads from one process with "
        "the same client, the same read selection (`bkaudit.audit.reads.plan_reads`) and the same digest "
        "check; bkaudit spreads the ledger pass and the reads over Spark's two cores, reads ids from the "
        "snapshot instead of one ZooKeeper read per ledger, and pays the listing probe once per run.",
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
    parser.add_argument("--quick", action="store_true", help="2,000 ledgers, 2 runs each")
    parser.add_argument("--layout", choices=layouts.LAYOUTS, default="uniform",
                        help=f"uniform (default) or realistic (at most {MAX_REALISTIC:,} ledgers)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each side")
    parser.add_argument("--json", help="result file (default bench/results/checker-reads-<stamp>.json)")
    args = parser.parse_args(argv)
    n = 2_000 if args.quick else args.ledgers
    runs = 2 if args.quick else args.runs
    if args.layout == "realistic" and n > MAX_REALISTIC:
        parser.error(f"--layout realistic loads real bodies (~1.8 GiB per 1,000 ledgers): at most "
                     f"{MAX_REALISTIC:,} ledgers")
    from bkaudit.cluster.local import LocalCluster

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still takes its cluster down
    m: dict[str, Any] = {"ledgers": n, "layout": args.layout, "runs": runs, "setup": {"restarts": 0.0},
                         "load_start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bkaudit-bench-reads-") as tmp:
        t0 = time.perf_counter()
        cluster = LocalCluster.up(
            Path(tmp) / "cluster", bookies=BOOKIES, racks=RACKS, no_listing=list(range(BOOKIES)),
            zk_heap_mb=harness.zookeeper_heap_mb(n),
        )
        m["setup"]["cluster"] = time.perf_counter() - t0
        try:
            plan = plan_for(args.layout, n, [b.id for b in cluster.bookies])
            holes = layouts.read_holes(plan)
            m["expected"] = layouts.truth(plan, holes)
            m["entries"] = sum(lay.length for lay in plan.values())
            m["pairs"] = layouts.pairs(plan)
            m["described"] = layouts.describe(args.layout, plan)
            print(f"bulk-loading {n:,} ledgers ({m['entries']:,} entries) into {BOOKIES} bookies ...",
                  flush=True)
            t0 = time.perf_counter()
            m["loaded"] = listing_bench.load_bookies(cluster, plan, holes, worker=_bookie_bodies)
            m["setup"]["bookies"] = time.perf_counter() - t0
            m["bytes"] = sum(
                (Path(b.data_dir) / "current" / "ledgers.db").stat().st_size for b in cluster.bookies
            )
            m["setup"]["metadata"] = listing_bench.load_metadata(cluster, plan, digest="CRC32C")
            sides = [
                harness.Side("spark", "checker:spark_side",
                             {"zk": cluster.zk, "root": cluster.root, "warehouse": ""}, "snapshot + check"),
                harness.Side("baseline", "checker:baseline_side",
                             {"zk": cluster.zk, "root": cluster.root, "ledgers": n,
                              "in_flight": CHECK_ALL_LEDGERS_IN_FLIGHT, "reads_percentage": 0.0},
                             "checkAllLedgers-style"),
            ]
            warehouses = itertools.count()

            def before(side: harness.Side) -> harness.Side:
                m["setup"]["restarts"] += listing_bench.restart_bookies(cluster)
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
    suffix = "" if args.layout == "uniform" else f"-{args.layout}"
    m["json"] = str(harness.write_json(f"checker-reads-{n}{suffix}", payload, args.json))
    print(report(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
