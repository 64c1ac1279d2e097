"""Benchmark: `bkaudit check --fresh` against Apache BookKeeper's own Auditor, on Apache BookKeeper's bookies.

    .venv/bin/python -m bench.java_auditor [--ledgers N | --quick] [--check replicas|all] [--percentage P]
                                           [--runs R] [--json PATH]

Both sides are BookKeeper's or bkaudit's real code; nothing here models either of them.

1. A LocalCluster of 6 Java bookies (Apache BookKeeper 4.17.3, Maven Central's jars: `make bookkeeper`) on 3
   racks, each with BookKeeper's default memory (bin/common.sh: 1 GB heap, 2 GB direct; a test cluster's
   bookies get far less, and on Interleaved or Sorted storage direct memory sets how many ledgers a bookie
   can list before it restarts: docs/compatibility.md, "Listing pins index pages"), all on one ledger
   storage: SortedLedgerStorage for `--check replicas` (BookKeeper's default; its bookies answer
   GetListOfEntriesOfLedger), DbLedgerStorage for `--check all` (Pulsar's default; it never answers a
   listing, so both sides must read).
2. N ledgers written by BookKeeper's Java client (tests/java/src/BkDriver.java `bulk`, pipelined, CRC32C,
   128-byte entries), `layout` below: E/WQ/AQ in (3,2,2) (3,3,2) (2,2,2) (4,3,2) (5,3,2) (3,2,1) in equal
   shares; 60 % of 5 entries, 30 % of 20, 9 % of 100, 1 % of 1,000. Every 4th ledger of the shapes with AQ =
   WQ is left open, then a bookie is stopped and the client adds 10 more entries to each open ledger: those
   whose ensemble held the stopped bookie get a second segment (the client's ensemble change, as in
   production); all are closed but every 5th (~1.7 % of the ledgers stay open). Only AQ = WQ ledgers are
   written around the stopped bookie so that the change loses no copy: an add the client already
   acknowledged at AQ is not resent to the replacement bookie (PendingAddOp.unsetSuccessAndSendWriteRequest
   returns when `callbackTriggered`), so with AQ < WQ the new segment's replacement would lack a copy of
   whichever entries won that race, damage no test could know in advance.
3. Holes on one bookie (stopped cleanly, through BookKeeper's own storage formats: `damage_many`, the
   index file's entry offsets for SortedLedgerStorage, DbLedgerStorage's RocksDB location index) in 1 % of
   the closed ledgers it holds: a fifth lose the whole ledger, the others a run of 1-5 of the entries it
   stores in one segment (`--check replicas`) or its first entry of the ledger (`--check all`: an entry a
   verification percentage of 0 reads, and one DbLedgerStorage's read-ahead cannot serve after the damage,
   `plan_holes`). Open ledgers keep their
   entries: Java's replicasCheck skips them (AuditorReplicasCheckTask: "is not yet closed").
   Ground truth is the injected holes and the Java client's ensembles (RoundRobinDistributionSchedule: entry
   e on ensemble indexes (e + i) mod E, i < WQ), never bkaudit's code.
4. Through bench/harness.py, alternated, R runs each, every run in a fresh process on freshly restarted
   bookies, the ZooKeeper check stamps and under-replication markers of the run before removed:
   (a) bkaudit: a new Spark session (timed apart), then the snapshot and the check over it, every setting at
       its default (`--check all --percentage P` sets `checker.verification_percentage` P; a bookie's
       listings stay within `checker.java_listing_max_pages` as long as it holds under 40,000 ledgers);
   (b) BookKeeper's Auditor (`BkDriver auditor`: `new Auditor(id, conf, NullStatsLogger).start()`, the object
       AuditorElector starts once elected), configured as an operator enables the check and nothing else:
       - replicas: `auditorReplicasCheckInterval` 86400 (0, its default, disables it) and
         `auditorPeriodicCheckInterval` 0 (checkAllLedgers off; it would run first on the Auditor's one
         thread). AuditorReplicasCheckTask's own limits apply: 100 ledgers in flight.
       - all: BookKeeper's defaults (`auditorPeriodicCheckInterval` 604800: the first run is due at once when
         no `checkallledgersctime` exists; 500 ledgers in flight, `inFlightReadEntryNumInLedgerChecker` -1)
         and `auditorLedgerVerificationPercentage` P.
       Its time is the one BookKeeper logs: "Completed ReplicasCheck in N milliSeconds"
       (AuditorReplicasCheckTask.runTask) or "Completed checkAllLedgers in N milliSeconds"
       (AuditorCheckAllLedgersTask.runTask), a Guava Stopwatch around the check alone. Start-up (JVM,
       ZooKeeper session, the Auditor's bookie check) is the time from spawn to that line, less N.
   What each side found must be exactly the injected damage (asserted after every run):
   - replicas: per damaged ledger its category and entries below WQ. bkaudit's from its violations; Java's
     from the lines AuditorReplicasCheckTask.reportLedgersWithMissingEntries logs ("Ledger : L has following
     missing entries : ... following entries [..] are missing in bookie: B" and the category line after it);
   - all: per damaged ledger the bookies that lost entries. bkaudit's from `bookies_missing_entries`; Java's
     from its under-replication markers (listLedgersToRereplicate), which is all checkAllLedgers reports.
5. A markdown table (medians with min-max, with and without start-up, ratios of medians) on stdout and the raw
   results as JSON (bench/results/java-auditor-<check>-N-<stamp>.json or --json).
"""

from __future__ import annotations

import argparse
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import checker, harness, layouts

BOOKIES = 6
# A Java bookie on Interleaved/SortedLedgerStorage keeps the index file of every ledger it lists open until
# it restarts (LedgerCacheImpl.getEntriesIterator never closes its PageEntriesIterable, whose FileInfo
# reference then pins the file: docs/compatibility.md, "Listing pins index pages"). This machine's processes
# may open 20,000 files, a hard limit root cannot raise here, so a bookie answers EIO ("IOException while
# performing getListOfEntriesOfLedger") once it has listed ~19,800 ledgers since its start: measured at
# 100,000 ledgers on 6 bookies (~55,000 ledgers each), where both sides list every ledger of every bookie.
# `--bookies 24` keeps each bookie near 14,000 (100,000 ledgers x 3.33 bookies a ledger on average / 24).
RACKS = 3
SHAPES = ((3, 2, 2), (3, 3, 2), (2, 2, 2), (4, 3, 2), (5, 3, 2), (3, 2, 1))
SIZES = ((0.60, 5), (0.30, 20), (0.09, 100), (0.01, 1000))
ENTRY_BYTES = 128
OPEN_EVERY = 4  # every 4th ledger of an AQ = WQ shape is written in two parts, around a stopped bookie
EXTEND_ENTRIES = 10
KEEP_OPEN_EVERY = 5  # of those, every 5th stays open
ADDS_IN_FLIGHT = 10_000
# A bookie's graceful stop ends with a checkpoint that moves its journal's mark past every entry; one killed
# before it replays its journal on restart and puts back the entries the damage removed. Holding ~55,000
# ledgers a Java bookie's checkpoint takes longer than LocalCluster's 20 s default (measured at 100,000
# ledgers: 702 of 983 injected holes came back), so stops wait up to this long.
STOP_TIMEOUT_S = 600
HOLED_SHARE = 0.01
FORGET_SHARE = 0.2
DIGEST, PASSWORD = "CRC32C", "bench"
SEED = 34
# A Java bookie on SortedLedgerStorage keeps up to `openFileLimit` (default 20,000) ledger index files open,
# besides its entry logs, journal and sockets. This machine's processes may open 20,000 files, a hard limit
# root cannot raise here (no CAP_SYS_RESOURCE): at 100,000 ledgers each of the 6 bookies holds ~55,000 index
# files, and under the default its flushes fail with "Too many open files" and the client's adds time out
# (measured). IndexPersistenceMgr keeps two caches of open index files, up to `openFileLimit` for writes and
# twice that for reads: 4,000 keeps a bookie under 12,000 open index files (10,000 still ran out of its
# 20,000 fds, with the same stalled flushes). Both sides audit the same bookies. Production bookies run with a
# far higher limit and keep the default.
JAVA_BOOKIE = {"openFileLimit": 4_000}
STORAGE = {"replicas": "sorted", "all": "db"}
DURABILITY = checker.DURABILITY
JAVA_HEAP_MB, JAVA_DIRECT_MB = 1024, 2048  # bin/common.sh: BOOKIE_MAX_HEAP_MEMORY 1g, MAX_DIRECT_MEMORY 2g
COMPLETED = {
    "replicas": re.compile(r"Completed ReplicasCheck in (\d+) milliSeconds"),
    "all": re.compile(r"Completed checkAllLedgers in (\d+) milliSeconds"),
}
MISSING_LINE = re.compile(r"Ledger : (\d+) has following missing entries : (.*)$", re.M)
MISSING_PART = re.compile(r"following entries \[([\d, ]*)\] are missing in bookie: ([^\s,]+)")
CATEGORY_LINE = re.compile(
    r"Ledger : (\d+) entryId : \d+ is "
    r"(missing all replicas|having: \d+ replicas, less than (ackQuorum|writeQuorum))"
)


# -- the cluster, as the Java client wrote it ----------------------------------------------------------------


@dataclass(frozen=True)
class Ledger:
    """One ledger as the Java client answered it."""

    ledger_id: int
    e: int
    wq: int
    aq: int
    ensembles: tuple[tuple[int, tuple[str, ...]], ...]  # (first entry, bookies), ascending
    last: int
    closed: bool

    @classmethod
    def of(cls, answer: dict[str, Any], shape: tuple[int, int, int]) -> Ledger:
        segs = tuple(sorted((int(k), tuple(v)) for k, v in answer["ensembles"].items()))
        e, wq, aq = shape
        return cls(int(answer["ledger"]), e, wq, aq, segs, int(answer["lac"]), bool(answer["closed"]))

    def stored_on(self, bookie: str) -> dict[int, list[int]]:
        """Segment index -> the entries `bookie` stores there (RoundRobinDistributionSchedule)."""
        out: dict[int, list[int]] = {}
        for i, (first, ens) in enumerate(self.ensembles):
            end = self.ensembles[i + 1][0] - 1 if i + 1 < len(self.ensembles) else self.last
            mine = [x for x in range(first, end + 1)
                    if bookie in (ens[(x + k) % self.e] for k in range(self.wq))]
            if mine:
                out[i] = mine
        return out


def shares(n: int) -> list[tuple[tuple[int, int, int], int, int]]:
    """(shape, entries, ledgers) groups summing to n."""
    groups = [(shape, entries, int(n * w / len(SHAPES))) for shape in SHAPES for w, entries in SIZES]
    short = n - sum(c for _, _, c in groups)
    shape, entries, count = groups[0]
    groups[0] = (shape, entries, count + short)
    return [g for g in groups if g[2] > 0]


Lost = dict[int, dict[str, set[int]]]  # ledger -> bookie -> the entries it should hold and does not


def in_flight(entries: int) -> int:
    """Ledgers the client writes at once (each with all its adds outstanding): at most ~10,000 adds in flight.
    More (200 ledgers of 1,000 entries) overloads six bookies on two CPUs past the client's add timeout (5 s),
    and the timeouts change ensembles mid-ledger, leaving copies short that no test injected (measured:
    171,072 timed-out adds at 100,000 ledgers)."""
    return max(2, min(200, ADDS_IN_FLIGHT // entries))


def write_ledgers(cluster: Any, n: int) -> tuple[dict[int, Ledger], Lost]:
    """N ledgers by the Java client, some written around a stopped bookie (module docstring, step 2); also
    what that bookie lacks: every entry added while it was down and assigned to it by the segment holding
    it. With AQ = WQ that is none (every add needs the replaced index's ack, so the client resends it to the
    replacement); the bench counts rather than assumes it."""
    client = cluster.java_client()
    shape_of: dict[int, tuple[int, int, int]] = {}
    ledgers: dict[int, Ledger] = {}
    try:
        for shape, entries, count in shares(n):
            e, wq, aq = shape
            answer = client.call("bulk", count=count, ensemble=e, wq=wq, aq=aq, digest=DIGEST,
                                 password=PASSWORD, entries=entries, size=ENTRY_BYTES,
                                 open_every=OPEN_EVERY if wq == aq else 0, inflight=in_flight(entries),
                                 describe=True, timeout_s=3600)
            for one in answer["ledgers"]:
                shape_of[int(one["ledger"])] = shape
                ledgers[int(one["ledger"])] = Ledger.of(one, shape)
        unplanned = sorted(lid for lid, led in ledgers.items() if len(led.ensembles) > 1)
        if unplanned:  # an add timed out while writing: which copies it left short, nothing here knows
            raise RuntimeError(f"{len(unplanned)} ledgers changed ensembles while written (client timeouts), "
                               f"e.g. {unplanned[:5]}; write with fewer adds in flight")
        stopped = cluster.bookies[1].id
        cluster.stop_bookie(stopped, timeout_s=STOP_TIMEOUT_S)
        answer = client.call("extend", entries=EXTEND_ENTRIES, size=ENTRY_BYTES,
                             keep_open_every=KEEP_OPEN_EVERY, inflight=200, timeout_s=3600)
        lost: Lost = {}
        for one in answer["ledgers"]:
            lid = int(one["ledger"])
            before = ledgers[lid].last
            ledgers[lid] = Ledger.of(one, shape_of[lid])
            missed = {x for seg in ledgers[lid].stored_on(stopped).values() for x in seg if x > before}
            if missed:
                lost[lid] = {stopped: missed}
        cluster.start_bookie(stopped)
    finally:
        client.close()
    return ledgers, lost


Holes = dict[int, tuple[int, ...] | None]  # ledger -> entries lost on the victim, None: the whole ledger


def plan_holes(ledgers: dict[int, Ledger], victim: str, check: str,
               rng: random.Random) -> dict[int, list[int]]:
    """Which closed ledgers lose what on `victim`: ledger -> the entries it no longer has (module step 3).

    For reads (`all`, DbLedgerStorage) a hole is the victim's whole ledger or its first entry of the ledger:
    DbLedgerStorage's read-ahead fills its cache from the entry log past a read entry, where the entries the
    damage removed from the location index still are, so once an earlier entry of the ledger was read from
    the bookie a later "lost" one is served anyway (measured: 13 of 98 last-entry holes at 10,000 ledgers)."""
    candidates = sorted(lid for lid, led in ledgers.items() if led.closed and led.stored_on(victim))
    k = max(1, round(HOLED_SHARE * sum(led.closed for led in ledgers.values())))
    out: dict[int, list[int]] = {}
    for lid in rng.sample(candidates, min(k, len(candidates))):
        stored = ledgers[lid].stored_on(victim)
        if rng.random() < FORGET_SHARE:
            out[lid] = [x for seg in stored.values() for x in seg]
            continue
        mine = stored[rng.choice(sorted(stored))]
        if check == "replicas":
            length = rng.randint(1, min(5, len(mine)))
            start = rng.randrange(len(mine) - length + 1)
            out[lid] = mine[start:start + length]
        else:  # the ledger's first entry on the victim: what reads can see (`plan_holes`)
            out[lid] = [stored[min(stored)][0]]
    return out


def forgotten(ledgers: dict[int, Ledger], victim: str, lost: dict[int, list[int]]) -> Holes:
    """The damage plan: None where the victim lost every entry it stored of the ledger."""
    return {lid: None if len(x) == sum(map(len, ledgers[lid].stored_on(victim).values())) else tuple(x)
            for lid, x in lost.items()}


def confirm_damage(cluster: Any, victim: str, holes: dict[int, list[int]]) -> None:
    """The injected holes, read from the restarted victim by BookKeeper's own BookieClient: every one must be
    gone (a hole the bookie still serves was undone, and the truth would be wrong)."""
    client = cluster.java_client()
    try:
        reads = [[lid, x] for lid, xs in sorted(holes.items()) for x in xs]
        failed = client.call("readbookie", bookie=victim, reads=reads, timeout_s=600)["failed"]
    finally:
        client.close()
    served = {(lid, x) for lid, x in map(tuple, reads)} - {(lid, x) for lid, x, _ in failed}
    if served:
        raise RuntimeError(f"{len(served)} of {len(reads)} injected holes are still served by {victim}, e.g. "
                           f"{sorted(served)[:5]}")


def truth(ledgers: dict[int, Ledger], lost: Lost) -> dict[int, tuple[str, list[tuple[int, int]]]]:
    """Each damaged ledger's category (from its least-copied entry) and entries below WQ, counted entry by
    entry from which bookies lost it (each lost entry was in that bookie's write set)."""
    out = {}
    for lid, by_bookie in lost.items():
        led = ledgers[lid]
        short = Counter(x for xs in by_bookie.values() for x in xs)
        copies = led.wq - max(short.values())
        category = ("no_replica" if copies == 0 else
                    "below_ack_quorum" if copies < led.aq else "below_write_quorum")
        out[lid] = (category, layouts.as_runs(list(short)))
    return out


# -- the sides (each in a fresh process: bench/harness.py) ---------------------------------------------------


def java_conf(zk: str, root: str, directory: str, check: str, percentage: int) -> dict[str, str]:
    from bkaudit.cluster import java as java_bk
    from bkaudit.config import ZkSettings
    from bkaudit.zk.server import free_port

    if check == "replicas":
        extra: dict[str, object] = {"auditorReplicasCheckInterval": 86400, "auditorPeriodicCheckInterval": 0}
    else:
        extra = {"auditorLedgerVerificationPercentage": percentage}
    host = "127.0.1.200"
    return java_bk.server_conf(zk=ZkSettings(connect=zk, root=root), host=host, port=free_port(host),
                               data_dir=Path(directory), extra=extra)


def java_side(zk: str, root: str, directory: str, check: str, percentage: int) -> dict[str, Any]:
    """(b): BookKeeper's Auditor in a JVM of its own, until it logs the check done; its findings."""
    from bkaudit.cluster import java as java_bk

    java = java_bk.JavaBookKeeper.locate()
    work = Path(directory)
    work.mkdir(parents=True, exist_ok=True)
    conf = java_bk.write_conf(work / java_bk.CONF_FILE, java_conf(zk, root, directory, check, percentage))
    log = work / "auditor.log"
    cmd = java.command(java_bk.DRIVER_MAIN, "auditor", "--conf", str(conf), "--id", "bench-auditor:3181",
                       heap_mb=JAVA_HEAP_MB, direct_mb=JAVA_DIRECT_MB, tmp_dir=work / "tmp")
    spawned = time.time()
    with log.open("w", encoding="utf-8") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        found = None
        deadline = time.monotonic() + 7200
        while found is None:
            if proc.poll() is not None:
                raise RuntimeError(f"the Java Auditor exited {proc.returncode}:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Java Auditor did not finish its check:\n{log.read_text()[-3000:]}")
            found = COMPLETED[check].search(log.read_text(encoding="utf-8", errors="replace"))
            if found is None:
                time.sleep(0.02)
        done_at = time.time()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    text = log.read_text(encoding="utf-8", errors="replace")
    seconds = int(found.group(1)) / 1000
    result: dict[str, Any] = {"seconds": seconds, "session_s": done_at - spawned - seconds,
                              "done_at": done_at,
                              "errors": len(re.findall(r" ERROR ", text)) - len(MISSING_LINE.findall(text))
                              - len(CATEGORY_LINE.findall(text))}
    if check == "replicas":
        reported, by_bookie = replicas_found(text)
        result["found"] = checker.found_json(reported)
        result["missing"] = by_bookie
        result["summary"] = re.search(r"Completed ReplicasCheck in .*", text).group(0)  # type: ignore[union-attr]
    else:
        result["bookies_missing"] = sorted(marked(zk, root).items())
    return result


def replicas_found(log: str) -> tuple[dict[int, tuple[str, list[tuple[int, int]]]], list[Any]]:
    """What AuditorReplicasCheckTask logged: ledger -> (category, entries some bookie misses, as runs), and
    [ledger, bookie, [entries]] for each bookie it names."""
    missing: dict[int, set[int]] = {}
    by_bookie: list[Any] = []
    for lid, parts in MISSING_LINE.findall(log):
        for ids, bookie in MISSING_PART.findall(parts):
            xs = [int(x) for x in ids.split(",") if x.strip()]
            missing.setdefault(int(lid), set()).update(xs)
            by_bookie.append([int(lid), bookie, xs])
    category = {}
    for lid, text, quorum in CATEGORY_LINE.findall(log):
        category[int(lid)] = ("no_replica" if text.startswith("missing") else
                              "below_ack_quorum" if quorum == "ackQuorum" else "below_write_quorum")
    found = {lid: (category.get(lid, "unknown"), layouts.as_runs(sorted(ids)))
             for lid, ids in missing.items()}
    return found, by_bookie


def marked(zk: str, root: str) -> dict[int, list[str]]:
    """Every under-replication marker and its missing bookies, read by BookKeeper's own manager."""
    from bkaudit.cluster import java as java_bk
    from bkaudit.config import ZkSettings

    java = java_bk.JavaBookKeeper.locate()
    with tempfile.TemporaryDirectory(prefix="bkaudit-bench-urlist-") as tmp, java_bk.JavaClient(
            java, zk=ZkSettings(connect=zk, root=root), log=Path(tmp) / "client.log") as client:
        answer = client.call("urlist")
    ledgers: dict[str, list[str]] = answer["ledgers"]  # type: ignore[assignment]
    return {int(k): sorted(v) for k, v in ledgers.items()}


# -- between runs (untimed) ----------------------------------------------------------------------------------


def reset(cluster: Any) -> None:
    """No run inherits the last one's work: bookies restarted (cold caches), the Auditor's check stamps (a
    stamp delays the next scheduled check) and under-replication markers gone."""
    zk = cluster.zk_client()
    base = f"{cluster.root}/underreplication"
    for node in ("checkallledgersctime", "placementpolicycheckctime", "replicascheckctime"):
        if zk.exists(f"{base}/{node}"):
            zk.delete(f"{base}/{node}")
    if zk.exists(f"{base}/ledgers"):
        for child in zk.get_children(f"{base}/ledgers"):
            zk.delete(f"{base}/ledgers/{child}", recursive=True)
    cluster.restart_bookies(timeout_s=STOP_TIMEOUT_S)


# -- the run -------------------------------------------------------------------------------------------------


def verify(name: str, result: dict[str, Any], check: str, expected: dict[int, Any], lost: Lost,
           ledgers: dict[int, Ledger], cluster: Any) -> None:
    """Raise unless `name` found every injected hole exactly (a wrong answer is not a measurement); adds the
    tally as `verdict`. bkaudit must report nothing else; BookKeeper's Auditor may (`java_replicas_verdict`,
    `java_all_verdict`), and each extra it names is read back from its bookie."""
    if name == "java":
        verdict = java_replicas_verdict if check == "replicas" else java_all_verdict
        result["verdict"] = verdict(result, lost, ledgers, cluster)
        return
    unverified = [lid for lid, category, _ev in result["violations"] if category == "ledger_unverifiable"]
    if unverified:  # "found nothing else" must mean every ledger was checked
        raise AssertionError(f"{name}: {len(unverified)} ledgers left unverified, e.g. {unverified[:5]}")
    got: dict[int, Any]
    if check == "all":
        got = {int(lid): sorted(b) for lid, b in result["bookies_missing"]}
        want: dict[int, Any] = {lid: sorted(by_bookie) for lid, by_bookie in lost.items()}
    else:
        got, want = checker.found_from_json(result["found"]), expected
    if got != want:
        diff = sorted(lid for lid in set(got) | set(want) if got.get(lid) != want.get(lid))
        raise AssertionError(f"{name}: {len(diff)} of {len(want)} damaged ledgers wrong or extra; e.g. "
                             f"{[(lid, want.get(lid), got.get(lid)) for lid in diff[:5]]}")
    result["verdict"] = {"damaged": len(want), "found": len(want), "false_ledgers": 0, "false_copies": 0}


def java_replicas_verdict(result: dict[str, Any], lost: Lost, ledgers: dict[int, Ledger],
                          cluster: Any) -> dict[str, int]:
    """replicasCheck trusts GetListOfEntriesOfLedger, and a Java bookie's listing leaves out entries past its
    index pages in memory (docs/compatibility.md, "a Java bookie's listing on InterleavedLedgerStorage"), so
    it may name more (bookie, entry) copies than were lost: each extra must be served by its bookie."""
    named = {(int(lid), bookie, x) for lid, bookie, xs in result.pop("missing") for x in xs}
    return _extras_served("replicasCheck", named, lost, cluster)


def java_all_verdict(result: dict[str, Any], lost: Lost, ledgers: dict[int, Ledger],
                     cluster: Any) -> dict[str, int]:
    """checkAllLedgers marks (ledger, bookie) and not entries. LedgerChecker.ReadManyEntriesCallback fails a
    bookie's fragment on any read error, a timed-out read as much as a missing entry, so on loaded bookies it
    may mark healthy ones: each extra (ledger, bookie) must serve every entry the Java client's ensembles
    stored on it."""
    marked = {(int(lid), bookie) for lid, bookies in result["bookies_missing"] for bookie in bookies}
    injected = {(lid, bookie) for lid, by_bookie in lost.items() for bookie in by_bookie}
    missed = injected - marked
    if missed:
        raise AssertionError(f"java: {len(missed)} damaged (ledger, bookie) not marked, e.g. "
                             f"{sorted(missed)[:5]}")
    named = {(lid, bookie, x) for lid, bookie in marked - injected
             for seg in ledgers[lid].stored_on(bookie).values() for x in seg}
    named |= {(lid, bookie, x) for lid, by_bookie in lost.items() for bookie, xs in by_bookie.items()
              for x in xs}
    return _extras_served("checkAllLedgers", named, lost, cluster)


def _extras_served(check: str, named: set[tuple[int, str, int]], lost: Lost, cluster: Any) -> dict[str, int]:
    """Every injected (ledger, bookie, entry) must be among `named`; every other named copy is read from its
    bookie by BookKeeper's own BookieClient and counted a false report only if the bookie returns it. One it
    cannot read means the injected truth is incomplete, and the run fails."""
    injected = {(lid, bookie, x) for lid, by_bookie in lost.items() for bookie, xs in by_bookie.items()
                for x in xs}
    missed = injected - named
    if missed:
        raise AssertionError(f"java {check}: {len(missed)} lost copies not reported, e.g. "
                             f"{sorted(missed)[:5]}")
    extra = sorted(named - injected)
    client = cluster.java_client()
    try:
        unreadable = []
        for bookie in sorted({b for _, b, _ in extra}):
            reads = [[lid, x] for lid, b, x in extra if b == bookie]
            unreadable += client.call("readbookie", bookie=bookie, reads=reads, timeout_s=600)["failed"]
    finally:
        client.close()
    if unreadable:
        raise AssertionError(f"java {check}: {len(unreadable)} reported copies are really missing and were "
                             f"not injected, e.g. {unreadable[:5]}")
    return {"damaged": len(lost), "found": len(lost), "false_ledgers": len({lid for lid, _, _ in extra}),
            "false_copies": len(extra)}


def tally(results: list[dict[str, Any]]) -> str:
    """What every run of a side found, against the injected damage (`verify`'s verdicts)."""
    seen = {(v["found"], v["damaged"], v["false_ledgers"], v["false_copies"])
            for v in (r["verdict"] for r in results)}
    return "; ".join(f"{found:,} of {damaged:,} damaged ledgers"
                     + (f", {fl:,} healthy ledgers reported ({fc:,} copies their bookies return)" if fl else
                        ", nothing else")
                     for found, damaged, fl, fc in sorted(seen))


def cpu(results: list[dict[str, Any]], key: str) -> str:
    return f"{harness.Spread.of(r['cpu'][key] for r in results).median:,.1f}"


def report(m: dict[str, Any]) -> str:
    res = m["results"]
    b, j = res["bkaudit"], res["java"]
    n = m["ledgers"]
    java_name = {"replicas": "BookKeeper Auditor replicasCheck",
                 "all": f"BookKeeper Auditor checkAllLedgers ({m['percentage']} %)"}[m["check"]]
    work_b, work_j = harness.spreads(b, "seconds"), harness.spreads(j, "seconds")
    full_b, full_j = harness.spreads(b, "to_result_s"), harness.spreads(j, "to_result_s")
    lines = [
        f"Ledgers: {n:,} written by BookKeeper's Java client ({m['entries']:,} entries, {m['open']:,} open, "
        f"{m['multi_segment']:,} with 2 segments) on {m.get('bookies', BOOKIES)} Java bookies "
        f"({STORAGE[m['check']]}); "
        f"{len(m['expected']):,} damaged: {m['holed']:,} holed on {m['victim']}, {m['stalled']['ledgers']:,} "
        f"short on {m['stalled']['bookie']} (written while it was down). Runs: {m['runs']} per side, "
        "alternated.",
        "",
        harness.markdown_row(["side", "check (s)", "spawn to answer (s)", "ledgers/s (check)", "found"]),
        harness.markdown_row(["---"] * 5),
        harness.markdown_row(["bkaudit check --fresh (snapshot + check)", work_b.cell(), full_b.cell(),
                              work_b.rate_cell(n), tally(b)]),
        harness.markdown_row([java_name, work_j.cell(), full_j.cell(), work_j.rate_cell(n), tally(j)]),
        "",
        f"Ratio (Java / bkaudit, medians): {harness.ratio(work_j, work_b):.2f}x on the check alone, "
        f"{harness.ratio(full_j, full_b):.2f}x spawn to answer. Spark session start-up: "
        f"{harness.spreads(b, 'session_s').cell()} s; the Auditor's JVM and start-up: "
        f"{harness.spreads(j, 'session_s').cell()} s.",
        "",
        "CPU seconds per run, from spawn to exit (median): "
        + "; ".join(f"{label}: bookie JVMs {cpu(rs, 'bookies_s')}, ZooKeeper {cpu(rs, 'zookeeper_s')}, the "
                    f"side's processes (and anything else) {cpu(rs, 'rest_s')}"
                    for label, rs in (("bkaudit", b), ("Java", j))) + ".",
        harness.machine_line(m["machine_start"], m["machine_end"]),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="10,000 ledgers")
    parser.add_argument("--check", choices=("replicas", "all"), default="replicas")
    parser.add_argument("--percentage", type=int, default=0, help="auditorLedgerVerificationPercentage (all)")
    parser.add_argument("--runs", type=int, default=harness.DEFAULT_RUNS)
    parser.add_argument("--bookies", type=int, default=BOOKIES,
                        help="Java bookies (each lists at most ~19,800 ledgers here: see BOOKIES)")
    parser.add_argument("--json", help="where the raw results go")
    parser.add_argument("--keep", action="store_true",
                        help="keep the cluster's directory, and each bkaudit run's log in it")
    parser.add_argument("--call-timeout-s", type=float,
                        help="bkaudit's [checker] call_timeout_s for this row (default: bkaudit's, 15 s; "
                             "BookKeeper's replicasCheck waits REPLICAS_CHECK_TIMEOUT_IN_SECS, 120 s)")
    args = parser.parse_args(argv)
    n = 10_000 if args.quick else args.ledgers
    if n < 100:
        parser.error("--ledgers must be at least 100")
    if not 0 <= args.percentage <= 100:
        parser.error("--percentage must be 0-100")

    from bkaudit.cluster import java as java_bk
    from bkaudit.cluster.local import LocalCluster

    storage = STORAGE[args.check]
    m: dict[str, Any] = {"ledgers": n, "bookies": args.bookies, "check": args.check,
                         "percentage": args.percentage, "runs": args.runs,
                         "storage": storage, "machine_start": harness.machine(), "setup": {},
                         "open_files_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                         "java_settings": JAVA_BOOKIE, "java_memory_mb": [JAVA_HEAP_MB, JAVA_DIRECT_MB]}
    tmp = Path(tempfile.mkdtemp(prefix="bkaudit-bench-java-"))
    try:
        t0 = time.perf_counter()
        cluster = LocalCluster.up(tmp / "cluster", bookies=args.bookies, racks=RACKS,
                                  java={i: storage for i in range(args.bookies)}, java_settings=JAVA_BOOKIE,
                                  java_memory_mb=(JAVA_HEAP_MB, JAVA_DIRECT_MB),
                                  zk_heap_mb=harness.zookeeper_heap_mb(n))
        m["setup"]["cluster_s"] = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            ledgers, lost = write_ledgers(cluster, n)
            m["setup"]["write_s"] = time.perf_counter() - t0
            assert len(ledgers) == n, (len(ledgers), n)
            m["entries"] = sum(led.last + 1 for led in ledgers.values())
            m["open"] = sum(not led.closed for led in ledgers.values())
            m["multi_segment"] = sum(len(led.ensembles) > 1 for led in ledgers.values())
            print(f"wrote {n:,} ledgers, {m['entries']:,} entries in {m['setup']['write_s']:.0f} s "
                  f"({m['open']:,} open, {m['multi_segment']:,} with 2 segments)", flush=True)

            victim = cluster.bookies[0]
            holes = plan_holes(ledgers, victim.id, args.check, random.Random(SEED))
            t0 = time.perf_counter()
            cluster.stop_bookie(victim.id, timeout_s=STOP_TIMEOUT_S)
            plan = forgotten(ledgers, victim.id, holes)
            java_bk.damage_many(java_bk.JavaBookKeeper.locate(), storage=storage,
                                data_dir=Path(victim.data_dir), plan=plan)
            cluster.start_bookie(victim.id)
            confirm_damage(cluster, victim.id, holes)
            m["setup"]["damage_s"] = time.perf_counter() - t0
            m["stalled"] = {"bookie": cluster.bookies[1].id, "ledgers": len(lost)}
            for lid, xs in holes.items():
                lost.setdefault(lid, {})[victim.id] = set(xs)
            expected = truth(ledgers, lost)
            m["victim"] = victim.id
            m["holed"] = len(holes)
            m["expected"] = checker.found_json(expected)
            m["forgotten"] = sum(v is None for v in plan.values())
            m["categories"] = dict(Counter(cat for cat, _ in expected.values()))

            overrides: dict[str, Any] = (
                {"checker.verification_percentage": args.percentage} if args.check == "all" else {})
            if args.call_timeout_s is not None:
                overrides["checker.call_timeout_s"] = args.call_timeout_s
            m["bkaudit_overrides"] = overrides
            sides = [
                harness.Side("bkaudit", "checker:spark_side",
                             {"zk": cluster.zk, "root": cluster.root, "warehouse": "",
                              "overrides": overrides},
                             "bkaudit check --fresh"),
                harness.Side("java", "java_auditor:java_side",
                             {"zk": cluster.zk, "root": cluster.root, "directory": "", "check": args.check,
                              "percentage": args.percentage}, "BookKeeper's Auditor"),
            ]
            count = iter(range(10_000))
            meter = harness.CpuMeter(cluster)

            def before_run(side: harness.Side) -> harness.Side:
                reset(cluster)
                confirm_damage(cluster, victim.id, holes)  # still gone after the restart (verify's premise)
                meter.start()
                place = str(tmp / f"run-{next(count)}-{side.name}")
                key = "warehouse" if side.name == "bkaudit" else "directory"
                return harness.Side(side.name, side.function, {**side.kwargs, key: place}, side.label)

            def after_run(name: str, result: dict[str, Any]) -> None:
                result["cpu"] = meter.stop()
                verify(name, result, args.check, expected, lost, ledgers, cluster)

            m["results"] = harness.compare(sides, runs=args.runs, before_run=before_run, after_run=after_run,
                                           timeout_s=7200, log_dir=tmp / "logs" if args.keep else None)
        finally:
            cluster.down()
        m["machine_end"] = harness.machine()
        print(report(m))
        name = f"java-auditor-{args.check}{'-' + str(args.percentage) if args.check == 'all' else ''}-{n}"
        print(f"raw results: {harness.write_json(name, m, args.json)}")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
