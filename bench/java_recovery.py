"""Benchmark: a lost Java bookie repaired by bkaudit's AutoRecovery and by BookKeeper's, onto Java bookies.

    .venv/bin/python -m bench.java_recovery [--ledgers N] [--storage sorted|db] [--runs R] [--json PATH]

Both sides are real: BookKeeper 4.17.3's AutoRecoveryMain (its Auditor and one ReplicationWorker) and
`bkaudit autorecovery run` (its Auditor and one worker, the default `workers` 1), each at its defaults.

Every run of either side gets a fresh cluster (untimed, before the run):
1. 6 Java bookies on 3 racks (`--storage`, default SortedLedgerStorage, BookKeeper's default);
2. N ledgers (default 400) written by BookKeeper's Java client (tests/java/src/BkDriver.java `bulk`), closed,
   CRC32C, in four equal groups: 200 entries of 1 KiB, 1,000 of 1 KiB, 2,000 of 2 KiB, 500 of 4 KiB;
   E3/WQ2/AQ2 and E2/WQ2/AQ2 alternating by group. About half of them name any one bookie;
3. the bookie named by the most ledgers stopped for good (it deregisters at once: a lost bookie).
Then the side's process starts the side's AutoRecovery and waits until every ledger the lost bookie held is
repaired: no under-replication marker left and no ledger metadata naming the lost bookie (polled every 0.1 s
from ZooKeeper). Its time (`seconds`) runs from the first marker seen to that moment: the Auditor's
detection and the copying, not the JVM's or Python's start (spawn to the end is `to_result_s`).
After each run (untimed) BookKeeper's Java client opens every ledger and reads back every entry, each
payload checked, and no ensemble may name the lost bookie; a run that fails this is not a measurement.

MB/s is the bytes of the copies the lost bookie held (entries it stored x their size, from the write sets
of the Java client's ensembles) over `seconds`; ledgers/min the ledgers it held.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import harness, java_auditor

REPO = Path(__file__).resolve().parent.parent

BOOKIES = 6
RACKS = 3
GROUPS = (((3, 2, 2), 200, 1024), ((2, 2, 2), 1000, 1024), ((3, 2, 2), 2000, 2048), ((2, 2, 2), 500, 4096))
DIGEST, PASSWORD = "CRC32C", "bench"
POLL_S = 0.1


# -- a fresh cluster per run (untimed) ---------------------------------------------------------------------


def build(directory: Path, n: int, storage: str) -> dict[str, Any]:
    """A cluster, N ledgers by the Java client, the most used bookie stopped; what the run must repair."""
    from bkaudit.cluster.local import LocalCluster

    cluster = LocalCluster.up(directory, bookies=BOOKIES, racks=RACKS,
                              java={i: storage for i in range(BOOKIES)})
    ledgers: dict[int, tuple[java_auditor.Ledger, int]] = {}
    client = cluster.java_client()
    try:
        t0 = time.perf_counter()
        for i, (shape, entries, size) in enumerate(GROUPS):
            count = n // len(GROUPS) + (1 if i < n % len(GROUPS) else 0)
            e, wq, aq = shape
            answer: dict[str, Any] = client.call("bulk", count=count, ensemble=e, wq=wq, aq=aq, digest=DIGEST,
                                 password=PASSWORD, entries=entries, size=size,
                                 inflight=java_auditor.in_flight(entries), describe=True, timeout_s=3600)
            for one in answer["ledgers"]:
                ledgers[int(one["ledger"])] = (java_auditor.Ledger.of(one, shape), size)
        write_s = time.perf_counter() - t0
    finally:
        client.close()
    uses = Counter(b for led, _ in ledgers.values() for _, ens in led.ensembles for b in set(ens))
    victim = max(sorted(uses), key=lambda b: uses[b])
    held = {lid: sum(map(len, led.stored_on(victim).values())) * size
            for lid, (led, size) in ledgers.items() if led.stored_on(victim)}
    cluster.stop_bookie(victim)
    changed = sum(len(led.ensembles) > 1 for led, _ in ledgers.values())  # a client add timed out
    return {"cluster": cluster, "victim": victim, "ledgers": sorted(ledgers), "held": held,
            "write_s": write_s, "entries": sum(led.last + 1 for led, _ in ledgers.values()),
            "ensemble_changes": changed}


def verify(cluster: Any, ledgers: list[int], victim: str) -> int:
    """Every entry of every ledger read back by the Java client, payloads checked; no ensemble names the lost
    bookie. Returns the entries read."""
    client = cluster.java_client()
    read = 0
    try:
        for lid in ledgers:
            answer: dict[str, Any] = client.call("read", ledger=lid, digest=DIGEST, password=PASSWORD,
                                                 timeout_s=600)
            if answer["bad"]:
                raise AssertionError(f"ledger {lid}: entries {answer['bad']} read back wrong")
            if int(answer["read"]) != int(answer["lac"]) + 1:
                raise AssertionError(f"ledger {lid}: {answer['read']} entries read, LAC {answer['lac']}")
            named = [b for ens in answer["ensembles"].values() for b in ens]
            if victim in named:
                raise AssertionError(f"ledger {lid} still names the lost bookie {victim}")
            read += int(answer["read"])
    finally:
        client.close()
    return read


# -- the sides (each in a fresh process: bench/harness.py) --------------------------------------------------


def _repaired(zk: Any, root: str, ledgers: list[int], victim: str) -> bool:
    from bkaudit.zk import ledgers as zk_ledgers
    from bkaudit.zk import underreplication as ur

    if next(iter(ur.list_underreplicated(zk, root=root)), None) is not None:
        return False
    return not any(victim in (b for seg in zk_ledgers.read_ledger_metadata(zk, lid, root=root)[0].segments
                              for b in seg.ensemble)
                   for lid in ledgers)


def _wait_repaired(zk_connect: str, root: str, ledgers: list[int], victim: str, alive: Any,
                   timeout_s: float = 7200) -> tuple[float, float]:
    """Poll until the repair is done: (wall time the first marker was seen, wall time it was done)."""
    from bkaudit.zk import client as zkclient
    from bkaudit.zk import underreplication as ur

    zk = zkclient.connect(zk_connect)
    try:
        first = None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not alive():
                raise RuntimeError("the AutoRecovery process exited before the repair was done")
            if first is None:
                if next(iter(ur.list_underreplicated(zk, root=root)), None) is not None:
                    first = time.time()
            elif _repaired(zk, root, ledgers, victim):
                return first, time.time()
            time.sleep(POLL_S)
        raise RuntimeError("the repair did not finish in time")
    finally:
        zkclient.close(zk)


def java_side(zk: str, root: str, directory: str, ledgers: list[int], victim: str) -> dict[str, Any]:
    """BookKeeper's AutoRecoveryMain at its defaults (one ReplicationWorker), until the repair is done."""
    from bkaudit.cluster import java as java_bk
    from bkaudit.config import ZkSettings
    from bkaudit.zk.server import free_port

    work = Path(directory)
    host = "127.0.1.201"
    conf = java_bk.write_conf(work / java_bk.CONF_FILE, java_bk.server_conf(
        zk=ZkSettings(connect=zk, root=root), host=host, port=free_port(host), data_dir=work))
    proc = java_bk.JavaProcess(java_bk.JavaBookKeeper.locate(), java_bk.AUTORECOVERY_MAIN, conf,
                               work / "autorecovery.log", heap_mb=java_auditor.JAVA_HEAP_MB,
                               direct_mb=java_auditor.JAVA_DIRECT_MB)
    try:
        first, done = _wait_repaired(zk, root, ledgers, victim, proc.alive)
    finally:
        proc.stop(timeout_s=30)
    replicated = proc.log_text().count("Ledger replicated successfully")
    return {"seconds": done - first, "done_at": done, "ledgers_replicated": replicated}


def bkaudit_side(zk: str, root: str, directory: str, ledgers: list[int], victim: str) -> dict[str, Any]:
    """`bkaudit autorecovery run` at its defaults (one worker), until the repair is done."""
    work = Path(directory)
    work.mkdir(parents=True, exist_ok=True)
    events = work / "autorecovery.events"
    with (work / "autorecovery.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bkaudit.cli", "autorecovery", "run", "--zk", zk, "--root", root,
             "--id", "bench-bkaudit", "--events", str(events)],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        first, done = _wait_repaired(zk, root, ledgers, victim, lambda: proc.poll() is None)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    from bkaudit.autorecovery.events import read_events

    replicated = sum(1 for e in read_events(events) if e.get("event") == "replicated")
    return {"seconds": done - first, "done_at": done, "ledgers_replicated": replicated}


# -- the run -------------------------------------------------------------------------------------------------


def report(m: dict[str, Any]) -> str:
    lines = [
        f"Ledgers: {m['ledgers']:,} by BookKeeper's Java client on {BOOKIES} Java bookies ({m['storage']}), "
        f"a fresh cluster per run; the lost bookie held {m['held_ledgers']} ledgers, {m['held_mb']:.0f} MB "
        f"of copies (medians over the runs). Runs: {m['runs']} per side, alternated.",
        "",
        harness.markdown_row(["side (1 worker)", "repair (s)", "spawn to done (s)", "MB/s", "ledgers/min"]),
        harness.markdown_row(["---"] * 5),
    ]
    sides = {}
    for name, label in (("bkaudit", "bkaudit autorecovery run"), ("java", "BookKeeper AutoRecoveryMain")):
        rs = m["results"][name]
        secs = harness.spreads(rs, "seconds")
        mbps = harness.Spread.of(r["held_bytes"] / 1e6 / r["seconds"] for r in rs)
        lpm = harness.Spread.of(r["held_ledgers"] * 60 / r["seconds"] for r in rs)
        sides[name] = mbps
        lines.append(harness.markdown_row([label, secs.cell(), harness.spreads(rs, "to_result_s").cell(),
                                           mbps.cell(1), lpm.cell(1)]))
    ratio = sides["bkaudit"].median / sides["java"].median
    lines += ["", f"MB/s, bkaudit / BookKeeper (medians): {ratio:.2f}x.",
              harness.machine_line(m["machine_start"], m["machine_end"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=400)
    parser.add_argument("--storage", choices=("sorted", "interleaved", "db"), default="sorted")
    parser.add_argument("--runs", type=int, default=harness.DEFAULT_RUNS)
    parser.add_argument("--json", help="where the raw results go")
    args = parser.parse_args(argv)
    if args.ledgers < len(GROUPS):
        parser.error(f"--ledgers must be at least {len(GROUPS)}")
    tmp = Path(tempfile.mkdtemp(prefix="bkaudit-bench-java-recovery-"))
    m: dict[str, Any] = {"ledgers": args.ledgers, "storage": args.storage, "runs": args.runs,
                         "groups": GROUPS, "machine_start": harness.machine()}
    count = iter(range(10_000))
    current: dict[str, Any] = {}
    try:
        sides = [harness.Side("bkaudit", "java_recovery:bkaudit_side", {}, "bkaudit autorecovery run"),
                 harness.Side("java", "java_recovery:java_side", {}, "BookKeeper AutoRecoveryMain")]

        def before_run(side: harness.Side) -> harness.Side:
            run_dir = tmp / f"run-{next(count)}-{side.name}"
            current.clear()
            current.update(build(run_dir / "cluster", args.ledgers, args.storage))
            cluster = current["cluster"]
            print(f"  {side.name}: fresh cluster, {len(current['held'])} ledgers on {current['victim']} "
                  f"(written in {current['write_s']:.0f} s)", flush=True)
            return harness.Side(side.name, side.function, {
                "zk": cluster.zk, "root": cluster.root, "directory": str(run_dir / "side"),
                "ledgers": sorted(current["held"]), "victim": current["victim"]}, side.label)

        def after_run(name: str, result: dict[str, Any]) -> None:
            cluster = current.pop("cluster")
            try:
                result["entries_read_back"] = verify(cluster, current["ledgers"], current["victim"])
            finally:
                cluster.down()
                shutil.rmtree(cluster.directory.parent, ignore_errors=True)
            result.update(held_ledgers=len(current["held"]), held_bytes=sum(current["held"].values()),
                          write_s=current["write_s"], entries=current["entries"],
                          ensemble_changes_while_written=current["ensemble_changes"])

        m["results"] = harness.compare(sides, runs=args.runs, before_run=before_run, after_run=after_run,
                                       timeout_s=7200)
        every = [r for rs in m["results"].values() for r in rs]
        m["held_ledgers"] = harness.Spread.of(r["held_ledgers"] for r in every).median
        m["held_mb"] = harness.Spread.of(r["held_bytes"] / 1e6 for r in every).median
        m["machine_end"] = harness.machine()
        print(report(m))
        name = f"java-recovery-{args.storage}-{args.ledgers}"
        print(f"raw results: {harness.write_json(name, m, args.json)}")
    finally:
        if current.get("cluster") is not None:
            current["cluster"].down()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
