"""AutoRecovery next to Apache BookKeeper's own: one under-replication queue, one election, Java bookies.

Apache BookKeeper 4.17's bookies (Maven Central's jars) on SortedLedgerStorage, InterleavedLedgerStorage and
DbLedgerStorage hold ledgers written by BookKeeper's Java client. Three scenarios:

- **Queue handoff.** The cluster is damaged where BookKeeper's own Auditor does not look (a bookie's disk
  lost and the bookie restarted empty: still registered, so no audit marks it; entries deleted on another
  bookie); `bkaudit check --publish-underreplicated` marks the damaged ledgers; `bookkeeper shell
  listunderreplicated` lists exactly those; Java's AutoRecoveryMain consumes the markers and re-replicates;
  bkaudit's next check is durability-clean and the Java client reads back every acknowledged entry.
- **bkaudit's worker on Java bookies.** A Java bookie is lost; bkaudit's Auditor marks its ledgers and
  bkaudit's ReplicationWorker copies them onto Java bookies (DbLedgerStorage ones among them, which never
  answer a listing for a ledger they hold); the Java client reads every entry with digest verification, and
  BookKeeper's shell finds no ledger on the lost bookie.
- **One cluster, two kinds of AutoRecovery.** A Java AutoRecoveryMain and `bkaudit autorecovery run` share
  the election (one Auditor at a time, failover both ways; `whoisauditor` and `bkaudit autorecovery status`
  agree), honour each other's markers and locks, never replicate one ledger twice, and a Java Auditor elected
  after bkaudit's runs schedules its periodic checks from what bkaudit wrote, as from its own runs.

Ground truth is the Java side (the Java client's reads and ensembles, BookKeeper's shell, its
ZkLedgerUnderreplicationManager through the client driver, the Java processes' logs) or what the test
injected, never bkaudit's code. Java's behaviour quoted below is from its 4.17.3 source: Auditor,
AuditorElector, ReplicationWorker, LedgerChecker, ZkLedgerUnderreplicationManager.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bkaudit import config
from bkaudit.cluster.java import JavaBookKeeper, JavaClient, JavaProcess, damage
from bkaudit.cluster.local import LocalCluster
from bkaudit.zk import registry
from bkaudit.zk import underreplication as ur
from tests.autorecovery.support import events, run_once, start_run, stop
from tests.fixtures.cluster import running_cluster
from tests.helpers import wait_for

pytestmark = [pytest.mark.slow]

STORAGES = {0: "sorted", 1: "interleaved", 2: "db", 3: "sorted", 4: "interleaved", 5: "db"}
ENTRIES = 20
DIGEST, PASSWORD = "CRC32C", "pw"
DURABILITY = ("no_replica", "below_ack_quorum", "below_write_quorum")

# Java AutoRecoveryMain for a test: BookKeeper's defaults but for the periods (ServerConfiguration keys)
JAVA_AR: dict[str, object] = {
    "lostBookieRecoveryDelay": 0,
    "auditorPeriodicBookieCheckInterval": 0,  # the bookie check at election only
    "auditorPeriodicCheckInterval": 0,  # no checkAllLedgers unless a test asks for it
    "rwRereplicateBackoffMs": 500,
    "lockReleaseOfFailedLedgerGracePeriod": 4000,
    "openLedgerRereplicationGracePeriod": 3000,
}
REPLICATED = re.compile(r"Ledger replicated successfully\. ledger id is: (\d+)")
AUDITOR_STARTED = "I'm starting as Auditor Bookie"


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory, java_bookkeeper) -> Iterator[LocalCluster]:
    with running_cluster(zk_server, tmp_path_factory, bookies=len(STORAGES), racks=3, java=STORAGES) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> JavaClient:
    return cluster.java_client()


# -- the Java side's answers ---------------------------------------------------------------------------------
def write(client: JavaClient, shapes: list[tuple[int, int, int]]) -> dict[int, dict[str, Any]]:
    """Closed ledgers of ENTRIES entries by the Java client; ledger id -> its answer (ensembles, lac)."""
    out = {}
    for e, wq, aq in shapes:
        answer = client.call("create", ensemble=e, wq=wq, aq=aq, digest=DIGEST, password=PASSWORD,
                             entries=ENTRIES, size=100)
        out[int(answer["ledger"])] = answer  # type: ignore[arg-type]
    return out


def ensembles(answer: dict[str, Any]) -> dict[int, list[str]]:
    return {int(k): list(v) for k, v in answer["ensembles"].items()}


def stored(answer: dict[str, Any], wq: int, bookie: str) -> list[int]:
    """Entries `bookie` stores (RoundRobinDistributionSchedule: entry e on indexes (e + i) mod E, i < WQ)."""
    segs = ensembles(answer)
    firsts = sorted(segs)
    last = int(answer["lac"])
    out = []
    for e in range(last + 1):
        ens = segs[max(f for f in firsts if f <= e)]
        if bookie in [ens[(e + i) % len(ens)] for i in range(wq)]:
            out.append(e)
    return out


def names(answer: dict[str, Any], bookie: str) -> bool:
    return any(bookie in ens for ens in ensembles(answer).values())


def answered(listing: dict[str, Any]) -> list[int] | None:
    """The entry ids of a `list` answer; None when the bookie did not answer (just restarted)."""
    return listing["entries"] if listing["answer"] == "entries" else None  # type: ignore[return-value]


def read_back(client: JavaClient, ledger_ids: list[int]) -> dict[int, dict[str, Any]]:
    """The Java client's no-recovery open and read of 0..LAC, each payload checked: ledger -> answer."""
    out = {}
    for ledger in ledger_ids:
        answer = client.call("read", ledger=ledger, digest=DIGEST, password=PASSWORD)
        assert (answer["read"], answer["bad"]) == (ENTRIES, []), answer
        out[ledger] = answer
    return out


def java_check(client: JavaClient, ledger_ids: list[int], percentage: int = 100) -> dict[int, list[Any]]:
    """BookKeeper's LedgerChecker (its Auditor's and ReplicationWorker's check) reading `percentage` of every
    fragment: ledger -> the under-replicated fragments it reports (none: absent)."""
    out = {}
    for ledger in ledger_ids:
        found = client.call("check", ledger=ledger, digest=DIGEST, password=PASSWORD, percentage=percentage)
        if found["fragments"]:
            out[ledger] = found["fragments"]
    return out


def shell_underreplicated(cluster: LocalCluster, *flags: str) -> dict[int, list[str]]:
    """`bookkeeper shell listunderreplicated` (ListUnderReplicatedCommand): ledger -> its detail lines."""
    out: dict[int, list[str]] = {}
    current = None
    for line in cluster.java_shell("listunderreplicated", *flags).stdout.splitlines():
        if line.strip().isdigit():
            current = int(line.strip())
            out[current] = []
        elif line.startswith("\t") and current is not None:
            out[current].append(line.strip())
    return out


def shell_ledgers_on(cluster: LocalCluster, bookie: str) -> list[int]:
    """`bookkeeper shell listledgers -bookieid B`: ledgers whose metadata stores entries on B."""
    text = cluster.java_shell("listledgers", "-bookieid", bookie).stdout
    return [int(m) for m in re.findall(r"ledgerID: (\d+)", text)]


def java_auditor(client: JavaClient) -> str | None:
    """BookKeeperAdmin.getCurrentAuditor (what `shell whoisauditor` prints)."""
    return client.call("auditor")["auditor"]  # type: ignore[return-value]


def ar_id(proc: JavaProcess) -> str:
    """A Java AutoRecoveryMain's vote: its bookie id (BookieImpl.getBookieId: advertisedAddress:port)."""
    conf = dict(line.split("=", 1) for line in proc.conf.read_text().splitlines() if "=" in line)
    return f"{conf['advertisedAddress']}:{conf['bookiePort']}"


def java_replicated(proc: JavaProcess) -> list[int]:
    """Ledgers a Java ReplicationWorker marked replicated, from its log, in order."""
    return [int(m) for m in REPLICATED.findall(proc.log_text())]


def bk_replicated(tmp: Path, name: str) -> list[int]:
    return [e["ledger"] for e in events(tmp, name) if e["event"] == "replicated"]


def lose(cluster: LocalCluster, bookie: str) -> None:
    """Kill a bookie and wait until its registration expired: a lost bookie."""
    cluster.kill_bookie(bookie)
    wait_for(lambda: registry.bookie_state(cluster.zk_client(), bookie, cluster.root) == "absent",
             timeout_s=60, what=f"{bookie}'s registration to expire")


def queue(cluster: LocalCluster) -> set[int]:
    return set(ur.list_underreplicated(cluster.zk_client(), root=cluster.root))


def most_used(written: dict[int, dict[str, Any]], among: list[str]) -> str:
    counts = Counter(b for a in written.values() for ens in ensembles(a).values() for b in set(ens))
    return max(among, key=lambda b: counts[b])


# -- the checker ---------------------------------------------------------------------------------------------
def check(spark: Any, cluster: LocalCluster, warehouse: Path, *, publish: bool) -> Any:
    from bkaudit.spark.checker import CheckOptions, run_check
    from bkaudit.spark.snapshot import run_snapshot

    settings = config.load(environ={}, overrides={
        "zk.connect": cluster.zk, "zk.root": cluster.root,
        "snapshot.warehouse": str(warehouse), "snapshot.validate": False,
        "checker.retry_delay_s": 1.0, "checker.call_timeout_s": 5.0,
        "checker.listing_probe_timeout_s": 3.0, "checker.grace_period_s": 3600,
        # a Java bookie on DbLedgerStorage never answers a listing for a ledger it holds: read every entry
        "checker.listing_unsupported": [b.id for b in cluster.bookies if b.storage == "db"],
        "checker.verification_percentage": 100,
    })
    snap = run_snapshot(spark, settings, warehouse=str(warehouse))
    result = run_check(spark, settings, CheckOptions(warehouse=str(warehouse), snapshot_id=snap.snapshot_id,
                                                     publish_underreplicated=publish))
    assert result.status == "succeeded"
    return result


def durability(result: Any) -> dict[int, str]:
    return {v.finding.ledger_id: v.finding.category.value for v in result.violations
            if v.finding.category.value in DURABILITY}


# -- 1. queue handoff ----------------------------------------------------------------------------------------
def test_queue_handoff_bkaudit_marks_java_autorecovery_repairs(
        spark, cluster: LocalCluster, client: JavaClient, java_bookkeeper: JavaBookKeeper, tmp_path) -> None:
    """Damage Java's Auditor does not see, published by bkaudit's checker, repaired by Java's AutoRecovery.

    Java's ReplicationWorker re-checks a marked ledger with LedgerChecker at
    `auditorLedgerVerificationPercentage` (default 0): per fragment and bookie it reads the first and the last
    entry that bookie stores. Entries deleted there are repaired; one deleted in between is invisible to it,
    so it resolves that marker unrepaired (ReplicationWorker.rereplicate): the next check finds that ledger
    again, and Java AutoRecovery set to read every entry (auditorLedgerVerificationPercentage=100) repairs it.
    """
    shapes = [(3, 2, 2), (3, 2, 2), (3, 3, 2), (3, 2, 2), (4, 2, 2), (3, 2, 2), (3, 2, 2), (3, 3, 2)] + [
        (3, 2, 2)] * 2
    written = write(client, shapes)
    wq = {lid: s[1] for lid, s in zip(written, shapes, strict=True)}
    # a bookie that loses its disk, and another that loses entries in ledgers the first is not in (no entry
    # loses every copy); that one lists its entries (not DbLedgerStorage), so the deletion is confirmed
    wiped, holed_bookie, holed = max(
        ((w, h, [lid for lid, a in written.items() if names(a, h) and not names(a, w)][:3])
         for w in cluster.ids() for h in cluster.ids() if h != w and cluster.bookie(h).storage != "db"),
        key=lambda c: (len(c[2]), sum(names(a, c[0]) for a in written.values())))
    assert len(holed) >= 2, "the scenario needs ledgers without the wiped bookie"
    info = cluster.bookie(holed_bookie)
    holes: dict[int, tuple[int, ...]] = {}
    cluster.stop_bookie(holed_bookie)
    for n, lid in enumerate(holed):  # the first stored entry, one in the middle, the last stored entry
        mine = stored(written[lid], wq[lid], holed_bookie)
        holes[lid] = (mine[(0, len(mine) // 2, -1)[n]],)
        damage(java_bookkeeper, storage=info.storage, data_dir=Path(info.data_dir), ledger_id=lid,
               entries=holes[lid])
    middle = holed[1]  # where Java's LedgerChecker does not read at its default percentage
    cluster.start_bookie(holed_bookie)
    for lid, lost in holes.items():  # what the bookie itself now lists (BookKeeperAdmin's request)
        listed = wait_for(lambda lid=lid: answered(client.call("list", bookie=holed_bookie, ledger=lid,
                                                                upto=ENTRIES, timeout_ms=5000)),
                          timeout_s=30, what=f"{holed_bookie}'s listing of ledger {lid}")
        assert set(listed) == set(stored(written[lid], wq[lid], holed_bookie)) - set(lost)
    cluster.stop_bookie(wiped)
    cluster.wipe_bookie(wiped)
    cluster.format_bookie(wiped)
    cluster.start_bookie(wiped)
    damaged = {lid for lid, a in written.items() if names(a, wiped)} | set(holed)

    before_ms = time.time() * 1000
    first = check(spark, cluster, tmp_path / "w1", publish=True)
    assert set(durability(first)) == damaged, (wiped, holes, first.violations)
    assert {v.finding.ledger_id for v in first.violations if v.published} == damaged
    marked = shell_underreplicated(cluster, "-printmissingreplica")
    assert set(marked) == damaged
    for lid in damaged:  # the replicas named are the bookies that lost entries
        want = {b for b, lost in ((wiped, names(written[lid], wiped)), (holed_bookie, lid in holed)) if lost}
        assert {line.removeprefix("MissingReplica : ") for line in marked[lid]
                if line.startswith("MissingReplica")} == want
        (ctime,) = [int(line.removeprefix("Ctime : ")) for line in marked[lid] if line.startswith("Ctime")]
        assert before_ms <= ctime <= time.time() * 1000  # epoch ms, as UnderreplicatedLedger.getCtime

    ar = cluster.start_java_autorecovery(JAVA_AR)
    try:
        wait_for(lambda: not queue(cluster), timeout_s=90, what="Java AutoRecovery to empty the queue")
        assert set(java_replicated(ar)) == damaged
    finally:
        ar.stop()
    assert shell_underreplicated(cluster) == {}
    # Java's own check, reading every entry, agrees: only the hole between the entries it reads is left
    assert set(java_check(client, sorted(written))) == {middle}

    second = check(spark, cluster, tmp_path / "w2", publish=True)
    assert set(durability(second)) == {middle}, second.violations
    assert [v.finding.ledger_id for v in second.violations if v.published] == [middle]
    assert not [v for v in second.violations
                if v.finding.category.value == "ledger_unverifiable"], second.violations
    # Java AutoRecovery reading every entry (auditorLedgerVerificationPercentage=100) sees that hole too
    ar = cluster.start_java_autorecovery({**JAVA_AR, "auditorLedgerVerificationPercentage": 100})
    try:
        wait_for(lambda: not queue(cluster) and middle in java_replicated(ar), timeout_s=90,
                 what="Java AutoRecovery at 100% to repair the last ledger")
    finally:
        ar.stop()
    third = check(spark, cluster, tmp_path / "w3", publish=False)
    assert durability(third) == {}, third.violations
    assert not [v for v in third.violations
                if v.finding.category.value == "ledger_unverifiable"], third.violations
    answers = read_back(client, sorted(written))
    assert java_check(client, sorted(written)) == {}
    for lid in damaged:  # Java replaced the bookie that lost entries (it never refills in place)
        assert not names(answers[lid], wiped if names(written[lid], wiped) else holed_bookie)


# -- 2. bkaudit's worker on Java bookies --------------------------------------------------------------------
def test_bkaudit_worker_repairs_java_bookies(cluster: LocalCluster, client: JavaClient,
                                             java_bookkeeper: JavaBookKeeper, tmp_path) -> None:
    """A lost Java bookie's ledgers, and a hole on a DbLedgerStorage bookie that a marker names, repaired by
    bkaudit's Auditor and worker onto Java bookies.

    A Java bookie on DbLedgerStorage answers no listing for a ledger it holds: the worker judges it from
    reads, as BookKeeper's LedgerChecker does (the first and last entry it stores per fragment, every entry
    when the marker names it), after one unanswered listing per bookie, not one per ledger.
    """
    shapes = [(3, 2, 2)] * 6 + [(3, 3, 2), (4, 2, 2)]
    written = write(client, shapes)
    wq = {lid: s[1] for lid, s in zip(written, shapes, strict=True)}
    # the first entry a DbLedgerStorage bookie stores in a ledger without the victim (an entry after it could
    # still be served: the bookie's read-ahead reads the entry log past the index, so only the first entry of
    # a run is a hole its reads show). Placement is random: where no such ledger came out, write more.
    for _ in range(10):
        victim = most_used(written, [b.id for b in cluster.bookies if b.storage != "db"])
        found = next(((b.id, lid) for b in cluster.bookies if b.storage == "db"
                      for lid, a in written.items() if names(a, b.id) and not names(a, victim)), None)
        if found is not None:
            break
        more = write(client, [(3, 2, 2)])
        written.update(more)
        wq.update({lid: 2 for lid in more})
    assert found is not None, written
    holed_bookie, holed = found
    lost_ledgers = {lid for lid, a in written.items() if names(a, victim)}
    assert len(lost_ledgers) >= 3
    mine = stored(written[holed], wq[holed], holed_bookie)
    info = cluster.bookie(holed_bookie)
    cluster.stop_bookie(holed_bookie)
    damage(java_bookkeeper, storage="db", data_dir=Path(info.data_dir), ledger_id=holed, entries=(mine[0],))
    cluster.start_bookie(holed_bookie)
    assert holed in java_check(client, [holed])  # Java's own check sees the hole
    # marked naming that bookie, as a Java Auditor's checkAllLedgers (auditorLedgerVerificationPercentage=100)
    # or bkaudit's checker would
    client.call("urmark", ledger=holed, replicas=[holed_bookie])
    lose(cluster, victim)
    try:
        started = time.monotonic()
        code, summary = run_once(cluster, tmp_path, "bk-worker", timeout=180)
        took = time.monotonic() - started
        assert code == 0, summary
        assert set(bk_replicated(tmp_path, "bk-worker")) >= lost_ledgers | {holed}
        answers = read_back(client, sorted(written))
        assert not [lid for lid, a in answers.items() if names(a, victim)]
        assert shell_ledgers_on(cluster, victim) == []
        assert java_check(client, sorted(written)) == {}
        assert names(answers[holed], holed_bookie)  # refilled in place
        # one unanswered listing per DbLedgerStorage bookie (FAST: 5 s), not one per ledger
        silent = [e["bookie"] for e in events(tmp_path, "bk-worker") if e["event"] == "listing_unanswered"]
        assert len(silent) == len(set(silent)) and set(silent) <= {b.id for b in cluster.bookies
                                                                    if b.storage == "db"}
        assert took < 30, f"run --once took {took:.1f}s"
    finally:
        cluster.start_bookie(victim)


# -- 3. one cluster, two kinds of AutoRecovery ---------------------------------------------------------------
def status_auditor(cluster: LocalCluster) -> str | None:
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "bkaudit.cli", "autorecovery", "status", "--json", "--zk",
                           cluster.zk, "--root", cluster.root], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["auditor"]


def test_one_auditor_at_a_time_and_failover_both_ways(cluster: LocalCluster, client: JavaClient,
                                                      tmp_path) -> None:
    zk = cluster.zk_client()
    j1 = cluster.start_java_autorecovery(JAVA_AR)
    bk = None
    j2 = None
    try:
        wait_for(lambda: java_auditor(client) == ar_id(j1), timeout_s=60, what="the Java AutoRecovery")
        bk = start_run(cluster, tmp_path, "bk-mixed")
        wait_for(lambda: any(e["event"] == "voted" for e in events(tmp_path, "bk-mixed")), timeout_s=60,
                 what="bkaudit's vote")
        assert len(ur.list_votes(zk, root=cluster.root)) == 2
        assert java_auditor(client) == status_auditor(cluster) == ar_id(j1)
        assert "elected" not in [e["event"] for e in events(tmp_path, "bk-mixed")]

        j1.stop()  # SIGTERM: AutoRecoveryMain's shutdown deletes its vote
        wait_for(lambda: any(e["event"] == "elected" for e in events(tmp_path, "bk-mixed")), timeout_s=30,
                 what="bkaudit elected after the Java auditor stopped")
        assert java_auditor(client) == status_auditor(cluster) == "bk-mixed"
        assert "Auditor: bk-mixed" in cluster.java_shell("whoisauditor").stdout

        j2 = cluster.start_java_autorecovery(JAVA_AR)
        wait_for(lambda: len(ur.list_votes(zk, root=cluster.root)) == 2, timeout_s=60, what="the Java vote")
        time.sleep(1)
        assert java_auditor(client) == "bk-mixed"
        assert AUDITOR_STARTED not in j2.log_text()

        stop(bk)
        wait_for(lambda: java_auditor(client) == ar_id(j2), timeout_s=30, what="the Java AutoRecovery")
        wait_for(lambda: AUDITOR_STARTED in j2.log_text(), timeout_s=30, what="the Java Auditor to start")
        assert status_auditor(cluster) == ar_id(j2)
        kinds = [e["event"] for e in events(tmp_path, "bk-mixed") if e["event"] in ("elected", "demoted")]
        assert kinds == ["elected", "demoted"]
        assert j1.log_text().count(AUDITOR_STARTED) == 1 and j2.log_text().count(AUDITOR_STARTED) == 1
    finally:
        if bk is not None:
            stop(bk)
        for j in (j1, j2):
            if j is not None:
                j.stop()


def test_only_a_bookie_id_stands_in_the_election(cluster: LocalCluster, client: JavaClient) -> None:
    """BookKeeper parses the elected vote with BookieId.parse (ZkLedgerAuditorManager.getCurrentAuditor): a
    vote it cannot parse breaks `whoisauditor` for as long as it leads, so bkaudit refuses such an --id."""
    import subprocess
    import sys

    from bkaudit.formats import records

    zk = cluster.zk_client()
    election = f"{cluster.root}/underreplication/auditorelection"
    vote = zk.create(f"{election}/V_", records.encode_auditor_vote("ar 1"), ephemeral=True, sequence=True)
    try:
        answer = client.call("auditor", check=False)
        assert not answer["ok"] and "BookieId ar 1 is not valid" in str(answer["error"]), answer
    finally:
        zk.delete(vote)
    done = subprocess.run([sys.executable, "-m", "bkaudit.cli", "autorecovery", "run", "--once", "--id",
                           "ar 1", "--zk", cluster.zk, "--root", cluster.root],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "BookieId 'ar 1' is not valid" in done.stderr, done.stderr
    assert ur.list_votes(zk, root=cluster.root) == []


def test_markers_and_locks_are_honoured_across_kinds(cluster: LocalCluster, client: JavaClient,
                                                      tmp_path) -> None:
    """Java writes markers and a lock (through its own ZkLedgerUnderreplicationManager, as its Auditor and
    ReplicationWorker do); bkaudit's worker consumes the markers and leaves the lock alone. Then bkaudit
    writes its disable switch, markers and a lock; Java's ReplicationWorker waits until the switch goes, then
    it and bkaudit's, running at once, consume the markers without ever replicating one ledger twice, and
    both leave bkaudit's lock alone. A vote of the test's own holds the election, so no Auditor marks
    anything meanwhile."""
    zk = cluster.zk_client()
    written = write(client, [(3, 2, 2)] * 12)
    victim = most_used(written, cluster.ids())
    lost = sorted(lid for lid, a in written.items() if names(a, victim))
    assert len(lost) >= 5
    java_locked, java_marked = lost[0], lost[:2]
    bk_locked, bk_marked = lost[2], lost[2:]
    vote = ur.create_vote(zk, "the-test-holds-the-election", root=cluster.root)
    lose(cluster, victim)
    ja = bk = None
    try:
        # 1. Java's markers and lock, bkaudit's worker
        for lid in java_marked:
            client.call("urmark", ledger=lid, replicas=[victim])
        client.call("urlock", ledger=java_locked)
        java_holder = client.call("urinfo", ledger=java_locked)["worker"]
        assert java_holder
        code, summary = run_once(cluster, tmp_path, "bk-1", "--no-auditor", "--timeout", "5",
                                 BKAUDIT_RPC__REQUEST_TIMEOUT_S="2")
        assert code == 1, summary
        assert [(x["ledger_id"], x["reason"], x["detail"]) for x in summary["left"]] == [
            (java_locked, "locked_elsewhere", java_holder)]
        assert set(bk_replicated(tmp_path, "bk-1")) == set(java_marked) - {java_locked}
        assert java_locked not in [e.get("ledger") for e in events(tmp_path, "bk-1")
                                   if e["event"] == "locked"]
        assert names(read_back(client, [java_locked])[java_locked], victim)  # untouched

        # 2. Java's worker idle (the one marked ledger is locked); bkaudit's `autorecovery disable` switch,
        # markers and lock; Java's lock released; nothing moves until `enable`; then Java's worker and
        # bkaudit's at work at once
        ja = cluster.start_java_autorecovery({**JAVA_AR, "replicationRateByBytes": 3000})
        wait_for(lambda: len(ur.list_votes(zk, root=cluster.root)) == 2, timeout_s=60, what="Java's vote")
        assert ur.disable_replication(zk, root=cluster.root)
        for lid in bk_marked:
            assert ur.mark_underreplicated(zk, lid, [victim], root=cluster.root)
        assert ur.acquire_lock(zk, bk_locked, root=cluster.root, holder="bkaudit-test-worker") is not None
        client.call("urrelease", ledger=java_locked)
        pending = (set(bk_marked) | {java_locked}) - {bk_locked}
        time.sleep(1.5)
        assert "Replicating fragment" not in ja.log_text()
        assert queue(cluster) == pending | {bk_locked}
        assert ur.enable_replication(zk, root=cluster.root)
        wait_for(lambda: "Replicating fragment" in ja.log_text(), timeout_s=60, what="Java's worker at work")
        bk = start_run(cluster, tmp_path, "bk-2", "--no-auditor",
                       BKAUDIT_AUTORECOVERY__REPLICATION_RATE_BY_BYTES="3000")

        def done() -> list[int]:  # what each says it replicated (a worker says so just after the marker went)
            return java_replicated(ja) + bk_replicated(tmp_path, "bk-2")

        wait_for(lambda: queue(cluster) == {bk_locked} and set(done()) >= pending, timeout_s=90,
                 what="every unlocked marker consumed")
        by_java, by_bk = set(java_replicated(ja)), set(bk_replicated(tmp_path, "bk-2"))
        assert not by_java & by_bk, (by_java, by_bk)
        assert by_java | by_bk == pending
        info = client.call("urinfo", ledger=bk_locked)
        assert (info["marked"], info["worker"]) == (True, "bkaudit-test-worker")  # Java reads bkaudit's lock
        assert names(read_back(client, [bk_locked])[bk_locked], victim)  # untouched by both

        ur.release_lock(zk, bk_locked, root=cluster.root)
        wait_for(lambda: not queue(cluster) and bk_locked in done(), timeout_s=60,
                 what="the released ledger consumed")
        time.sleep(0.5)
        assert sorted(done()) == sorted(pending | {bk_locked})  # each ledger exactly once
    finally:
        if bk is not None:
            stop(bk)
        if ja is not None and ja.alive():  # not the auditor: its elector's shutdown task waits 10 s behind
            os.kill(ja.pid, signal.SIGTERM)  # the election (AuditorElector.shutdown); the rest goes meanwhile
        zk.delete(vote)
        cluster.start_bookie(victim)
        if ja is not None:
            ja.stop()
    answers = read_back(client, sorted(written))
    assert not [lid for lid, a in answers.items() if names(a, victim)]


CHECKS = {"checkallledgers": "checkAllLedgers", "placementpolicycheck": "placementPolicyCheck",
          "replicascheck": "replicasCheck"}
SCHEDULED = re.compile(r"(\w+) scheduling info\.\s+\w+LastExecutedCTime: (-?\d+)\s+"
                       r"durationSinceLastExecutionInSecs: (-?\d+) initialDelay: (\d+) interval: (\d+)")


def test_java_auditor_schedules_its_checks_from_what_bkaudit_wrote(spark, cluster: LocalCluster,
                                                                   tmp_path) -> None:
    """What a Java Auditor elected after bkaudit's runs does with what they wrote.

    Auditor.scheduleCheckAllLedgersTask (and the placement and replicas checks alike) reads the task's
    `*ctime` znode and waits `interval - (now - ctime)` seconds (0 when the znode is absent), then runs at
    the fixed rate. bkaudit's checker stamps the three znodes after a complete run (docs/compatibility.md),
    so the Java Auditor schedules from bkaudit's run exactly as from its own: not later. bkaudit's
    AutoRecovery (its Auditor's term) writes none of them."""
    zk = cluster.zk_client()
    check(spark, cluster, tmp_path / "w", publish=False)
    stamps = {k: ur.read_check_ctime(zk, k, root=cluster.root) for k in CHECKS}
    now_ms = time.time() * 1000
    assert all(0 < now_ms - v < 120_000 for v in stamps.values()), stamps

    code, _ = run_once(cluster, tmp_path, "bk-term")  # elected; its bookie check; nothing to repair
    assert code == 0
    assert "elected" in [e["event"] for e in events(tmp_path, "bk-term")]
    assert {k: ur.read_check_ctime(zk, k, root=cluster.root) for k in CHECKS} == stamps

    interval = 10
    ar = cluster.start_java_autorecovery({**JAVA_AR, "auditorPeriodicCheckInterval": interval,
                                          "auditorPeriodicPlacementPolicyCheckInterval": 3600,
                                          "auditorReplicasCheckInterval": 3600})
    try:
        logged = wait_for(lambda: (found := {m[0]: m[1:] for m in SCHEDULED.findall(ar.log_text())})
                          and len(found) == 3 and found, timeout_s=60, what="the Java Auditor's schedule")
        started = time.time() * 1000
        for kind, task in CHECKS.items():
            ctime, since, delay, every = (int(x) for x in logged[task])
            assert ctime == stamps[kind]  # bkaudit's stamp, read by Java as its own last run
            assert abs(since - (started - ctime) / 1000) < 15
            assert delay == max(0, every - since)
        # the periodic check then runs from bkaudit's run, not later, and stamps its own run
        wait_for(lambda: "Completed checkAllLedgers" in ar.log_text(), timeout_s=interval + 30,
                 what="Java's checkAllLedgers")
        ran = ur.read_check_ctime(zk, "checkallledgers", root=cluster.root)
        assert stamps["checkallledgers"] + interval * 1000 <= ran + 1000
        assert ran <= stamps["checkallledgers"] + (interval + 20) * 1000
    finally:
        ar.stop()
