"""Benchmark: the bkaudit bookie against Apache BookKeeper's Java bookie, under the same Java client load.

    .venv/bin/python -m bench.java_bookie [--storage sorted|interleaved|db] [--ledgers N] [--entries E]
                                          [--size BYTES] [--runs R] [--json PATH]

What a mixed cluster costs: the same load from BookKeeper 4.17.3's own Java client
(tests/java/src/BkDriver.java `loadadd`, `loadread`, `loadlist`) against 3 bookies of one kind at a time,
each run on a fresh cluster (untimed), the kinds alternated:
- adds: N ledgers E3/WQ3/AQ2 (every add goes to all 3 bookies), E entries of `--size` bytes each appended
  round-robin over the ledgers, at most 1,000 adds outstanding, timed in the client's JVM from the first add
  to the last acknowledgement at AQ; then closed;
- reads: every entry read back through no-recovery handles, 100 entries a read, 16 reads outstanding;
- listings: GetListOfEntriesOfLedger of every ledger from each of its 3 bookies, ten rounds, 100 outstanding.
Per phase: operations per second (the client's clock), and the bookies' CPU per operation (user + system time
of the 3 bookie processes from /proc, read around the phase, over its operations). Both kinds run at their
defaults: a Java bookie's journal syncs each group of adds before acknowledging (`journalSyncData` true), and
a bkaudit bookie acknowledges an add only after the fsync that made it durable (group commit,
docs/storage.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import harness

BOOKIES = 3
LIST_ROUNDS = 10
PHASES = ("add", "read", "list")


def load_side(zk: str, root: str, pids: list[int], ledgers: int, entries: int, size: int) -> dict[str, Any]:
    """One run: the Java client's three phases against this cluster's bookies, CPU read around each."""
    from bkaudit.cluster import java as java_bk
    from bkaudit.config import ZkSettings

    hz = os.sysconf("SC_CLK_TCK")
    phases: dict[str, dict[str, float]] = {}
    java = java_bk.JavaBookKeeper.locate()
    with tempfile.TemporaryDirectory(prefix="bkaudit-bench-load-") as tmp, java_bk.JavaClient(
            java, zk=ZkSettings(connect=zk, root=root), log=Path(tmp) / "client.log") as client:

        def phase(name: str, op: str, **args: Any) -> dict[str, Any]:
            before = sum(harness.cpu_ticks(p) for p in pids)
            answer: dict[str, Any] = client.call(op, timeout_s=3600, **args)
            cpu_s = (sum(harness.cpu_ticks(p) for p in pids) - before) / hz
            ops, seconds = int(answer["ops"]), float(answer["seconds"])
            phases[name] = {"ops": ops, "seconds": seconds, "ops_per_s": ops / seconds, "bookie_cpu_s": cpu_s,
                            "cpu_us_per_op": cpu_s / ops * 1e6}
            return answer

        added = phase("add", "loadadd", ledgers=ledgers, entries=entries, size=size, ensemble=3, wq=3, aq=2,
                      inflight=1000, digest="CRC32C", password="bench")
        ids = added["ledgers"]
        phase("read", "loadread", ledgers=ids, batch=100, inflight=16, digest="CRC32C", password="bench")
        phase("list", "loadlist", ledgers=ids * LIST_ROUNDS, inflight=100)
    return {"seconds": sum(p["seconds"] for p in phases.values()), "phases": phases}


def report(m: dict[str, Any]) -> str:
    res = m["results"]
    lines = [
        f"Load: {m['ledgers']} ledgers x {m['entries']:,} entries of {m['size']:,} bytes, E3/WQ3/AQ2, from "
        f"BookKeeper's Java client; 3 bookies of one kind, a fresh cluster per run; {m['runs']} runs per "
        "kind, alternated. Medians (min-max).",
        "",
        harness.markdown_row(["phase", "Java bookie ops/s", "bkaudit bookie ops/s", "ratio",
                              "Java bookie CPU µs/op", "bkaudit bookie CPU µs/op", "ratio"]),
        harness.markdown_row(["---"] * 7),
    ]
    for name in PHASES:
        def spread(side: str, key: str, name: str = name) -> harness.Spread:
            return harness.Spread.of(r["phases"][name][key] for r in res[side])

        jo, bo = spread("java", "ops_per_s"), spread("bkaudit", "ops_per_s")
        jc, bc = spread("java", "cpu_us_per_op"), spread("bkaudit", "cpu_us_per_op")
        lines.append(harness.markdown_row([name, jo.cell(0), bo.cell(0), f"{bo.median / jo.median:.2f}x",
                                           jc.cell(1), bc.cell(1), f"{bc.median / jc.median:.2f}x"]))
    lines += ["", harness.machine_line(m["machine_start"], m["machine_end"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--storage", choices=("sorted", "interleaved", "db"), default="sorted")
    parser.add_argument("--ledgers", type=int, default=200)
    parser.add_argument("--entries", type=int, default=300)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=harness.DEFAULT_RUNS)
    parser.add_argument("--json", help="where the raw results go")
    args = parser.parse_args(argv)
    if min(args.ledgers, args.entries, args.size) < 1:
        parser.error("--ledgers, --entries and --size must be positive")

    from bkaudit.cluster.local import LocalCluster

    tmp = Path(tempfile.mkdtemp(prefix="bkaudit-bench-java-bookie-"))
    m: dict[str, Any] = {"storage": args.storage, "ledgers": args.ledgers, "entries": args.entries,
                         "size": args.size, "runs": args.runs, "machine_start": harness.machine()}
    count = iter(range(10_000))
    current: list[Any] = []
    try:
        kwargs = {"ledgers": args.ledgers, "entries": args.entries, "size": args.size}
        sides = [harness.Side("java", "java_bookie:load_side", kwargs, f"Java bookies ({args.storage})"),
                 harness.Side("bkaudit", "java_bookie:load_side", kwargs, "bkaudit bookies")]

        def before_run(side: harness.Side) -> harness.Side:
            java = {i: args.storage for i in range(BOOKIES)} if side.name == "java" else None
            cluster = LocalCluster.up(tmp / f"run-{next(count)}-{side.name}", bookies=BOOKIES, racks=BOOKIES,
                                      java=java)
            current[:] = [cluster]
            return harness.Side(side.name, side.function, {
                **side.kwargs, "zk": cluster.zk, "root": cluster.root,
                "pids": [b.pid for b in cluster.bookies]}, side.label)

        def after_run(name: str, result: dict[str, Any]) -> None:
            cluster = current.pop()
            cluster.down()
            shutil.rmtree(cluster.directory, ignore_errors=True)
            want = args.ledgers * args.entries
            got = {p: result["phases"][p]["ops"] for p in PHASES}
            if got != {"add": want, "read": want, "list": args.ledgers * BOOKIES * LIST_ROUNDS}:
                raise AssertionError(f"{name}: operations done {got}, expected {want} adds and reads")

        m["results"] = harness.compare(sides, runs=args.runs, before_run=before_run, after_run=after_run,
                                       timeout_s=3600)
        m["machine_end"] = harness.machine()
        print(report(m))
        name = f"java-bookie-{args.storage}"
        print(f"raw results: {harness.write_json(name, m, args.json)}")
    finally:
        for cluster in current:
            cluster.down()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
