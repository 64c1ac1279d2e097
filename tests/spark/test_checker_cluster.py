"""The metadata checker against a real cluster: 6 bookie processes on 3 racks, ledgers written by the client.

Ground truth is what each test injected, never what the checker says: durability categories come from a naive
per-entry model of the injected damage (`truth`), placement / progress / availability / metadata sets are the
ledgers and bookies the test touched. Each fault is checked alone (its own ledgers, removed afterwards so the
next scenario starts clean) and all together; a healthy cluster must give zero findings.

Faults: entries deleted from a stopped bookie's storage (admin function), a bookie wiped + formatted +
restarted empty, a bookie paused with SIGSTOP (registered but unreachable), an ensemble on one rack (metadata
crafted directly), a stale under-replication marker, metadata changed between snapshot and check, a corrupt
znode, and a bookie answering garbage.
"""

from __future__ import annotations

import socketserver
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from bkaudit import config
from bkaudit.bookie.storage import Storage
from bkaudit.client import BookKeeper
from bkaudit.cluster.local import LocalCluster
from bkaudit.formats import records
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.model.quorum import write_set
from bkaudit.zk import ledgers as zk_ledgers
from bkaudit.zk import paths, registry
from bkaudit.zk.underreplication import get_marker, mark_underreplicated
from tests.fixtures.cluster import running_cluster
from tests.promtext import value

pytestmark = [pytest.mark.slow]

DURABILITY = ("no_replica", "below_ack_quorum", "below_write_quorum")
QUORUMS = [(3, 2, 2), (3, 3, 2), (5, 3, 2), (2, 2, 1), (4, 2, 2), (3, 2, 1)]
SESSION_S = "40"  # bookies' ZooKeeper session: a paused bookie stays registered while the check runs


# -- cluster, settings, runs --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory) -> Iterator[LocalCluster]:
    # bookies (also those restarted later) read their session timeout from the environment at spawn time
    env = {"BKAUDIT_ZK__SESSION_TIMEOUT_S": SESSION_S}
    with running_cluster(zk_server, tmp_path_factory, env=env, bookies=6, racks=3) as c:
        yield c


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("warehouse"))


@pytest.fixture(scope="module")
def bk(cluster) -> Iterator[BookKeeper]:
    client = BookKeeper.connect(cluster.zk_settings())
    try:
        yield client
    finally:
        client.close()


def settings_for(cluster: LocalCluster, warehouse: str, **checker: Any) -> config.Settings:
    overrides = {
        "zk.connect": cluster.zk,
        "zk.root": cluster.root,
        "snapshot.warehouse": warehouse,
        "snapshot.validate": False,
        "checker.retry_delay_s": 0.5,
        "checker.call_timeout_s": 2.0,
        "checker.grace_period_s": 3600,
        **{f"checker.{k}": v for k, v in checker.items()},
    }
    return config.load(environ={}, overrides=overrides)


def snapshot_and_check(spark, cluster, warehouse, *, before_check=None, **opts: Any):
    from bkaudit.spark.checker import CheckOptions, run_check
    from bkaudit.spark.snapshot import run_snapshot

    checker = {k: opts.pop(k) for k in list(opts) if k in ("batch_size", "max_in_flight_per_bookie")}
    settings = settings_for(cluster, warehouse, **checker)
    snap = run_snapshot(spark, settings, warehouse=warehouse)
    if before_check is not None:
        before_check()
    return run_check(spark, settings, CheckOptions(warehouse=warehouse, snapshot_id=snap.snapshot_id, **opts))


def found(result, category: str, *, new_only: bool = True) -> set[Any]:
    key = "bookie_id" if category == "bookie_unreachable_but_registered" else "ledger_id"
    return {
        getattr(r.finding, key)
        for r in result.violations
        if r.finding.category.value == category and not (new_only and r.finding.under_repair)
    }


# -- ledgers and ground truth -------------------------------------------------------------------------------


@dataclass
class Scenario:
    """Ledgers a test created (removed afterwards) and the damage it injected."""

    ledgers: list[int] = field(default_factory=list)
    lost: dict[str, set[tuple[int, int]] | str] = field(default_factory=dict)  # bookie -> pairs | "ALL"
    unknown: set[str] = field(default_factory=set)  # bookies that cannot answer
    marked: set[int] = field(default_factory=set)
    written: dict[int, int] = field(default_factory=dict)  # open ledger -> entries its writer added

    def lose(self, bookie: str, ledger_id: int, entries) -> None:
        pairs = self.lost.setdefault(bookie, set())
        assert isinstance(pairs, set)
        pairs.update((ledger_id, e) for e in entries)


def write(
    bk: BookKeeper, sc: Scenario, e: int, wq: int, aq: int, *, entries: int = 20, close: bool = True
) -> int:
    handle = bk.create_ledger(e, wq, aq)
    for i in range(entries):
        handle.add_entry(b"entry-%d" % i)
    if close:
        handle.close()
    else:
        sc.written[handle.ledger_id] = entries
    sc.ledgers.append(handle.ledger_id)
    return handle.ledger_id


def metadata(cluster, ledger_id: int) -> tuple[LedgerMetadata, int]:
    md, stat = zk_ledgers.read_ledger_metadata(cluster.zk_client(), ledger_id, root=cluster.root)
    return md, stat.version


def spans(md: LedgerMetadata, written: int | None = None) -> Iterator[tuple[int, int, tuple[str, ...]]]:
    """The checked entries of each segment. An open ledger's last segment, given the `written` entries its
    writer added one at a time (so each carries its predecessor as LAC, the last one `written - 2`), is
    checked as LedgerChecker does: up to that LAC, or its first entry alone when the LAC is below it and that
    entry was written."""
    segs = md.segments
    n = len(segs) if md.is_closed else len(segs) - 1
    for i in range(n):
        last = segs[i + 1].first_entry_id - 1 if i + 1 < len(segs) else md.last_entry_id
        if md.is_closed:
            last = min(last, md.last_entry_id)
        yield segs[i].first_entry_id, last, segs[i].ensemble
    if not md.is_closed and written is not None:
        first, lac = segs[-1].first_entry_id, written - 2
        end = lac if lac >= first else first if written - 1 >= first else None
        if end is not None:
            yield first, end, segs[-1].ensemble


def holders(md: LedgerMetadata, bookie: str) -> dict[int, list[int]]:
    """entry -> nothing; the entries `bookie` must hold (naive, per entry)."""
    out = {}
    for first, last, ens in spans(md):
        for e in range(first, last + 1):
            if any(ens[i] == bookie for i in write_set(e, md.ensemble_size, md.write_quorum)):
                out[e] = []
    return out


def truth(cluster, sc: Scenario) -> dict[str, set[int]]:
    """Expected new durability and unverifiable ledgers from the injected damage (naive per-entry model)."""
    out: dict[str, set[int]] = {c: set() for c in (*DURABILITY, "ledger_unverifiable")}
    for lid in sc.ledgers:
        try:
            md, _ = metadata(cluster, lid)
        except Exception:
            continue
        least = md.write_quorum
        unverified = False
        for first, last, ens in spans(md, sc.written.get(lid)):
            for e in range(first, last + 1):
                copies = 0
                for idx in write_set(e, md.ensemble_size, md.write_quorum):
                    b = ens[idx]
                    gone = sc.lost.get(b)
                    if b in sc.unknown:
                        unverified = True
                        copies += 1
                    elif gone == "ALL" or (isinstance(gone, set) and (lid, e) in gone):
                        continue
                    else:
                        copies += 1
                least = min(least, copies)
        if lid in sc.marked:
            continue
        if least == 0:
            out["no_replica"].add(lid)
        elif least < md.ack_quorum:
            out["below_ack_quorum"].add(lid)
        elif least < md.write_quorum:
            out["below_write_quorum"].add(lid)
        if unverified:
            out["ledger_unverifiable"].add(lid)
    return out


def cleanup(cluster, sc: Scenario) -> None:
    """Remove the scenario's ledgers and markers: the next scenario starts from a clean cluster."""
    zk = cluster.zk_client()
    for lid in sc.ledgers:
        for path in (
            paths.ledger_path(lid, root=cluster.root),
            paths.underreplicated_ledger_path(lid, root=cluster.root),
        ):
            try:
                zk.delete(path)
            except Exception:
                pass


def new_ledger_id(cluster) -> int:
    return zk_ledgers.generate_ledger_id(cluster.zk_client(), root=cluster.root)


def craft(cluster, sc: Scenario, ensemble: tuple[str, ...], *, wq: int, aq: int, last: int = -1) -> int:
    """A CLOSED ledger whose metadata is written straight into ZooKeeper."""
    lid = new_ledger_id(cluster)
    md = LedgerMetadata(
        ensemble_size=len(ensemble),
        write_quorum=wq,
        ack_quorum=aq,
        state=LedgerState.CLOSED,
        last_entry_id=last,
        length=max(last + 1, 0) * 10,
        digest_type=DigestType.CRC32C,
        password=b"",
        segments=(Segment(0, ensemble),),
        ctime=int(time.time() * 1000),
    )
    zk_ledgers.create_ledger_metadata(cluster.zk_client(), lid, md, root=cluster.root)
    sc.ledgers.append(lid)
    return lid


def rack_of(cluster, bookie: str) -> str:
    return cluster.bookie(bookie).rack or ""


def stranger_for(cluster, ens: tuple[str, ...], wq: int) -> str:
    """A bookie outside `ens` that can replace its last member without breaking rack-aware placement."""
    from bkaudit.model.placement import Adherence, RackAwarePolicy
    from bkaudit.model.topology import Topology

    topology = Topology.from_mapping({b.id: b.rack for b in cluster.bookies})
    for b in cluster.bookies:
        if b.id in ens:
            continue
        candidate = (*ens[:-1], b.id)
        if RackAwarePolicy().adherence(candidate, wq, 1, topology) is Adherence.MEETS_STRICT:
            return b.id
    raise AssertionError(f"no replacement for {ens} keeps placement")


def delete_entries(cluster, deletions: dict[str, dict[int, list[int]]], sc: Scenario) -> None:
    """Stop each bookie, remove entries with the storage admin function, start it again."""
    for bookie, by_ledger in deletions.items():
        cluster.stop_bookie(bookie)
        with Storage(cluster.bookie(bookie).data_dir) as storage:
            for lid, entries in by_ledger.items():
                assert storage.delete_entries(lid, entries) == len(entries)
                sc.lose(bookie, lid, entries)
        cluster.start_bookie(bookie)


def wipe(cluster, bookie: str, sc: Scenario) -> None:
    cluster.stop_bookie(bookie)
    cluster.wipe_bookie(bookie)
    cluster.format_bookie(bookie)
    cluster.start_bookie(bookie)
    sc.lost[bookie] = "ALL"


# -- the one fake: a bookie answering garbage ------------------------------------------------------------


class GarbageBookie:
    """A TCP server speaking BookKeeper's framing, answering EOK with bytes that are not availability data.

    The one fake in these tests, and justified: a real bookie cannot be made to send malformed
    AvailabilityOfEntriesOfLedger bytes, yet the checker must turn them into `ledger_unverifiable`. It does
    not advertise the batch listing, so it gets standard per-ledger requests only.
    """

    GARBAGE = b"\x00\x00\x00\x05not-an-availability"

    def __init__(self) -> None:
        fake = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock = self.request
                buf = b""
                while True:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                    out = []
                    while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
                        size = struct.unpack(">I", buf[:4])[0]
                        answer = fake._answer(buf[4 : 4 + size])
                        out.append(struct.pack(">I", len(answer)) + answer)
                        buf = buf[4 + size :]
                    sock.sendall(b"".join(out))

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.bookie_id = f"127.0.0.1:{self.port}"
        self.calls = 0
        self.operations: set[int] = set()

    def _answer(self, data: bytes) -> bytes:
        self.calls += 1
        req = pb.Request()
        req.ParseFromString(data)
        self.operations.add(req.header.operation)
        resp = pb.Response()
        resp.header.CopyFrom(req.header)
        resp.status = pb.EOK
        if req.header.operation == pb.GET_LIST_OF_ENTRIES_OF_LEDGER:
            r1 = resp.getListOfEntriesOfLedgerResponse
            r1.status = pb.EOK
            r1.ledgerId = req.getListOfEntriesOfLedgerRequest.ledgerId
            r1.availabilityOfEntriesOfLedger = self.GARBAGE
        else:
            resp.status = pb.EBADREQ
        return resp.SerializeToString()

    def start(self, cluster) -> None:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        zk = cluster.zk_client()
        info = records.bookie_service_info_for(self.bookie_id, "127.0.0.1", self.port)
        registry.register(zk, self.bookie_id, records.encode_bookie_service_info(info), root=cluster.root)
        registry.set_rack(zk, self.bookie_id, "/rack-9")

    def stop(self, cluster) -> None:
        try:
            registry.deregister(cluster.zk_client(), self.bookie_id, root=cluster.root)
        finally:
            self.server.shutdown()
            self.server.server_close()


# -- the scenarios -------------------------------------------------------------------------------------------


def test_healthy_cluster_has_no_findings(spark, cluster, bk, warehouse):
    sc = Scenario()
    try:
        for e, wq, aq in QUORUMS:
            write(bk, sc, e, wq, aq)
            write(bk, sc, e, wq, aq, close=False)  # open: one segment, checked up to its LAC
        opened = write(bk, sc, 3, 2, 2, entries=12, close=False)
        # an open ledger with a closed first segment (what an ensemble change leaves behind)
        md, version = metadata(cluster, opened)
        ens = md.segments[0].ensemble
        zk_ledgers.write_ledger_metadata(
            cluster.zk_client(),
            opened,
            md.evolve(segments=(md.segments[0], Segment(12, ens))),
            expected_version=version,
            root=cluster.root,
        )
        craft(cluster, sc, (cluster.bookies[0].id,), wq=1, aq=1)  # E1 on one rack is fine for WQ=1
        result = snapshot_and_check(spark, cluster, warehouse)
        assert result.status == "succeeded"
        assert result.violations == [], result.violations
        assert set(result.counts.values()) == {0}
        assert result.exit_code == 0
        assert result.ledgers_checked >= len(sc.ledgers)
        # the closed ones, the open ones up to their bookies' LAC (as checkAllLedgers), and the 2-segment open
        # one (its last segment has nothing below the LAC: only the first is checked)
        assert result.ledgers_durability_checked == 2 * len(QUORUMS) + 1
        assert {b.bookie_id for b in result.bookies} <= {b.id for b in cluster.bookies}
        assert all(b.reachable and b.errors == 0 for b in result.bookies)
        assert sum(b.calls for b in result.bookies) == len(result.bookies)  # one batch message per bookie
    finally:
        cleanup(cluster, sc)


def test_entries_removed_from_one_bookie(spark, cluster, bk, warehouse):
    sc = Scenario()
    try:
        a = write(bk, sc, 3, 2, 2)  # lose 2 entries of one copy -> 1 copy < AQ 2
        b = write(bk, sc, 5, 3, 2)  # lose 1 entry of one copy -> 2 copies = AQ < WQ 3
        c = write(bk, sc, 3, 2, 2, close=False)  # open ledger: its closed first segment is checked
        md_c, version = metadata(cluster, c)
        zk_ledgers.write_ledger_metadata(
            cluster.zk_client(),
            c,
            md_c.evolve(segments=(md_c.segments[0], Segment(20, md_c.segments[0].ensemble))),
            expected_version=version,
            root=cluster.root,
        )
        d = write(bk, sc, 3, 2, 1)  # healthy neighbour on the same bookies
        md_a, _ = metadata(cluster, a)
        victim = md_a.segments[0].ensemble[0]
        deletions: dict[int, list[int]] = {a: sorted(holders(md_a, victim))[:2]}
        md_b, _ = metadata(cluster, b)
        vb = md_b.segments[0].ensemble[1]
        md_c, _ = metadata(cluster, c)
        vc = md_c.segments[0].ensemble[2]
        plan: dict[str, dict[int, list[int]]] = {victim: deletions}
        plan.setdefault(vb, {})[b] = sorted(holders(md_b, vb))[:1]
        plan.setdefault(vc, {})[c] = sorted(holders(md_c, vc))[3:5]
        delete_entries(cluster, plan, sc)
        result = snapshot_and_check(spark, cluster, warehouse)
        want = truth(cluster, sc)
        assert want["below_ack_quorum"] == {a, c} and want["below_write_quorum"] == {b}
        for category in DURABILITY:
            assert found(result, category) == want[category], category
        assert d not in found(result, "below_ack_quorum") | found(result, "below_write_quorum")
        row = next(r for r in result.violations if r.finding.ledger_id == a)
        assert row.finding.bookie_id == victim and row.finding.min_replicas == 1
        assert list(row.finding.missing_entries) == _runs(deletions[a])
        assert row.finding.detail["bookies_missing_entries"] == [victim]
        assert sum(result.counts.values()) == 3
    finally:
        cleanup(cluster, sc)


def test_wiped_bookie(spark, cluster, bk, warehouse, monkeypatch):
    sc = Scenario()
    try:
        for e, wq, aq in QUORUMS:
            write(bk, sc, e, wq, aq)
        victim = cluster.bookies[1].id
        wipe(cluster, victim, sc)
        result = snapshot_and_check(spark, cluster, warehouse)
        want = truth(cluster, sc)
        assert any(want[c] for c in DURABILITY)
        for category in DURABILITY:
            assert found(result, category) == want[category], category
        assert found(result, "ledger_unverifiable") == set()
        assert {r.finding.bookie_id for r in result.violations
                if r.finding.category.value in DURABILITY} == {victim}
        assert sum(result.counts.values()) == sum(len(want[c]) for c in DURABILITY)

        # the per-ledger combine on Spark (used when many ledgers need it) agrees with the driver's, and the
        # fan-out over requests repartitioned by bookie (clusters above FUSED_FANOUT_MAX_BOOKIES) with the
        # fan-out inside the ledger-pass tasks
        from bkaudit.spark import checker
        from bkaudit.spark.checker import CheckOptions, run_check

        assert len(cluster.bookies) <= checker.FUSED_FANOUT_MAX_BOOKIES  # the first run was fused
        monkeypatch.setattr(checker, "DRIVER_COMBINE_MAX", 0)
        monkeypatch.setattr(checker, "FUSED_FANOUT_MAX_BOOKIES", 0)
        again = run_check(
            spark,
            settings_for(cluster, warehouse),
            CheckOptions(warehouse=warehouse, snapshot_id=result.snapshot_id),
        )

        def key(rows):
            return sorted(
                (r.finding.category.value, r.finding.ledger_id, r.finding.bookie_id, r.finding.min_replicas,
                 r.row()["detail"])
                for r in rows
            )

        assert key(again.violations) == key(result.violations)
    finally:
        cleanup(cluster, sc)


def test_paused_bookie_is_unreachable_but_registered(spark, cluster, bk, warehouse):
    sc = Scenario()
    victim = cluster.bookies[2].id
    try:
        for e, wq, aq in QUORUMS:
            write(bk, sc, e, wq, aq)
        # a bookie the written ensembles name: placement is random, and a fixed bookie may be in none of them
        victim = metadata(cluster, sc.ledgers[0])[0].segments[0].ensemble[0]
        sc.unknown.add(victim)
        result = snapshot_and_check(
            spark, cluster, warehouse, before_check=lambda: cluster.pause_bookie(victim)
        )
        want = truth(cluster, sc)
        assert want["ledger_unverifiable"]
        assert found(result, "bookie_unreachable_but_registered") == {victim}, (
            result.bookies,
            result.violations,
        )
        assert found(result, "ledger_unverifiable") == want["ledger_unverifiable"]
        for category in DURABILITY:
            assert found(result, category) == set()
        row = next(r for r in result.violations
                   if r.finding.category.value == "bookie_unreachable_but_registered")
        assert row.finding.detail["attempts"] == 2  # the delayed re-check happened
        unverifiable = next(r for r in result.violations if r.finding.category.value == "ledger_unverifiable")
        assert unverifiable.finding.detail["reason_code"] == "bookie_unreachable"
        stats = {b.bookie_id: b for b in result.bookies}
        assert stats[victim].reachable is False and stats[victim].registered is True
    finally:
        cluster.resume_bookie(victim)
        cleanup(cluster, sc)


def test_ensemble_on_one_rack(spark, cluster, bk, warehouse):
    sc = Scenario()
    try:
        by_rack: dict[str, list[str]] = {}
        for b in cluster.bookies:
            by_rack.setdefault(b.rack or "", []).append(b.id)
        same = tuple(next(v for v in by_rack.values() if len(v) >= 2)[:2])
        bad = craft(cluster, sc, same, wq=2, aq=2)
        write(bk, sc, 3, 2, 2)
        result = snapshot_and_check(spark, cluster, warehouse)
        assert found(result, "placement_fail") == {bad}
        assert sum(result.counts.values()) == 1
        detail = next(r.finding.detail for r in result.violations if r.finding.ledger_id == bad)
        assert detail["segments"][0]["reasons"] and set(detail["locations"]) == set(same)
    finally:
        cleanup(cluster, sc)


def test_stale_marker(spark, cluster, bk, warehouse):
    sc = Scenario()
    try:
        old = write(bk, sc, 3, 2, 2)
        young = write(bk, sc, 3, 2, 2)
        zk = cluster.zk_client()
        now = int(time.time() * 1000)
        mark_underreplicated(zk, old, [cluster.bookies[0].id], root=cluster.root, now_ms=now - 7_200_000)
        mark_underreplicated(zk, young, [cluster.bookies[0].id], root=cluster.root, now_ms=now - 60_000)
        result = snapshot_and_check(spark, cluster, warehouse)
        assert found(result, "underreplicated_too_long") == {old}
        assert sum(result.counts.values()) == 1
    finally:
        cleanup(cluster, sc)


def test_metadata_changed_between_snapshot_and_check_is_no_false_alarm(spark, cluster, bk, warehouse):
    sc = Scenario()
    try:
        lid = write(bk, sc, 3, 2, 2)
        md, version = metadata(cluster, lid)
        ens = md.segments[0].ensemble
        stranger = stranger_for(cluster, ens, md.write_quorum)  # placement stays fine: only durability moves
        zk = cluster.zk_client()
        moved = zk_ledgers.write_ledger_metadata(
            zk,
            lid,
            md.evolve(segments=(Segment(0, (*ens[:2], stranger)),)),
            expected_version=version,
            root=cluster.root,
        )

        def restore() -> None:  # what the snapshot saw is gone by the time the bookies are asked
            zk_ledgers.write_ledger_metadata(zk, lid, md, expected_version=moved, root=cluster.root)

        result = snapshot_and_check(spark, cluster, warehouse, before_check=restore)
        assert result.violations == [], result.violations
        assert result.reevaluated == 1
    finally:
        cleanup(cluster, sc)


def test_corrupt_znode(spark, cluster, bk, warehouse):
    sc = Scenario()
    try:
        lid = new_ledger_id(cluster)
        cluster.zk_client().create(
            paths.ledger_path(lid, root=cluster.root), b"\x08\x96garbage\xff\x00", makepath=True
        )
        sc.ledgers.append(lid)
        write(bk, sc, 3, 2, 2)
        result = snapshot_and_check(spark, cluster, warehouse)
        assert found(result, "metadata_unparseable") == {lid}
        assert sum(result.counts.values()) == 1
        assert result.exit_code == 3  # critical, default --fail-on critical
    finally:
        cleanup(cluster, sc)


def test_bookie_answering_garbage(spark, cluster, bk, warehouse):
    sc = Scenario()
    fake = GarbageBookie()
    try:
        fake.start(cluster)
        lid = craft(cluster, sc, (fake.bookie_id,), wq=1, aq=1, last=9)
        write(bk, sc, 3, 2, 2)
        result = snapshot_and_check(spark, cluster, warehouse)
        assert found(result, "ledger_unverifiable") == {lid}
        assert sum(result.counts.values()) == 1
        detail = next(r.finding.detail for r in result.violations if r.finding.ledger_id == lid)
        assert detail["reason_code"] == "invalid_response"
        # the listing probe (a listing and a read: the garbage listing answer keeps it on the listing path),
        # then asked, then asked again after the delay
        assert fake.calls == 4
        assert fake.operations <= {pb.GET_LIST_OF_ENTRIES_OF_LEDGER, pb.READ_ENTRY}  # never op 1000
        stats = {b.bookie_id: b for b in result.bookies}
        assert stats[fake.bookie_id].reachable is True  # it answers: not an unreachable bookie
    finally:
        fake.stop(cluster)
        cleanup(cluster, sc)


def test_all_faults_together_then_publish(spark, cluster, bk, warehouse, tmp_path):
    from bkaudit.tables.read import read_arrow

    sc = Scenario()
    fake = GarbageBookie()
    ids = [b.id for b in cluster.bookies]
    wiped, paused, holed = ids[3], ids[4], ids[5]
    try:
        for e, wq, aq in QUORUMS * 2:
            write(bk, sc, e, wq, aq)
        write(bk, sc, 3, 2, 2, close=False)
        changed = write(bk, sc, 3, 2, 2)  # its metadata moves between snapshot and check (below)
        # entries removed from one bookie
        plan: dict[str, dict[int, list[int]]] = {}
        for lid in sc.ledgers:
            md, _ = metadata(cluster, lid)
            if md.is_closed and holed in md.bookies() and len(plan.get(holed, {})) < 3:
                plan.setdefault(holed, {})[lid] = sorted(holders(md, holed))[1:3]
        delete_entries(cluster, plan, sc)
        wipe(cluster, wiped, sc)
        one_rack = craft(cluster, sc, (ids[0], ids[3]), wq=2, aq=2)  # racks: index 0 and 3 share /rack-1
        corrupt = new_ledger_id(cluster)
        cluster.zk_client().create(paths.ledger_path(corrupt, root=cluster.root), b"\xff\xfe", makepath=True)
        sc.ledgers.append(corrupt)
        fake.start(cluster)  # registered only now: the client must not pick it for the ledgers above
        garbage = craft(cluster, sc, (fake.bookie_id,), wq=1, aq=1, last=4)
        stale = sc.ledgers[0]
        mark_underreplicated(
            cluster.zk_client(), stale, [wiped], root=cluster.root, now_ms=int(time.time() * 1000) - 7_200_000
        )
        sc.marked.add(stale)
        md, version = metadata(cluster, changed)
        ens = md.segments[0].ensemble
        stranger = stranger_for(cluster, ens, md.write_quorum)
        zk = cluster.zk_client()
        moved = zk_ledgers.write_ledger_metadata(
            zk,
            changed,
            md.evolve(segments=(Segment(0, (*ens[:2], stranger)),)),
            expected_version=version,
            root=cluster.root,
        )

        def before_check() -> None:
            zk_ledgers.write_ledger_metadata(zk, changed, md, expected_version=moved, root=cluster.root)
            cluster.pause_bookie(paused)

        sc.unknown.add(paused)
        metrics = tmp_path / "checker.prom"
        result = snapshot_and_check(
            spark,
            cluster,
            warehouse,
            before_check=before_check,
            publish_underreplicated=True,
            metrics_file=str(metrics),
        )
        cluster.resume_bookie(paused)
        want = truth(cluster, sc)
        want["ledger_unverifiable"].add(garbage)
        for category in (*DURABILITY, "ledger_unverifiable"):
            diff = found(result, category) ^ want[category]
            assert not diff, (category, [r for r in result.violations if r.finding.ledger_id in diff])
        assert found(result, "placement_fail") == {one_rack}
        assert found(result, "placement_soft") == set()
        assert found(result, "metadata_unparseable") == {corrupt}
        assert found(result, "underreplicated_too_long") == {stale}
        assert found(result, "bookie_unreachable_but_registered") == {paused}
        assert found(result, "extra_entries") == set()
        # the moved ledger was judged on its current metadata: nothing blames the bookie the snapshot named
        moved_rows = [r for r in result.violations if r.finding.ledger_id == changed]
        assert all(r.finding.detail.get("reevaluated") for r in moved_rows)
        assert all(stranger not in r.row()["detail"] for r in moved_rows)
        assert result.reevaluated >= 1
        # the stale-marked ledger's own findings are reported as already under repair, not counted
        assert all(
            r.finding.under_repair
            for r in result.violations
            if r.finding.ledger_id == stale and r.finding.category.value != "underreplicated_too_long"
        )
        counted = {c: len(found(result, c)) for c in result.counts}
        assert result.counts == counted

        # publishing: BookKeeper-format markers for every new durability ledger, replicas = bookies missing
        published = [r for r in result.violations
                     if r.finding.category.value in DURABILITY and not r.finding.under_repair]
        assert published and all(r.published for r in published)
        for r in published:
            got = get_marker(cluster.zk_client(), r.finding.ledger_id, root=cluster.root)
            assert got is not None
            data, _ = cluster.zk_client().get(
                paths.underreplicated_ledger_path(r.finding.ledger_id, root=cluster.root)
            )
            marker = records.parse_underreplicated_marker(data)
            missing = r.finding.detail["bookies_missing_entries"]
            assert set(marker.replicas) == set(missing) and marker.ctime is not None
        table = read_arrow(warehouse, "violations")
        rows = [r for r in table.to_pylist() if r["run_id"] == result.run_id]
        assert len(rows) == len(result.violations)
        assert sum(1 for r in rows if r["published"]) == len(published)

        # publishing again from the finished run (job 3) writes nothing new: idempotent
        from jobs.publish_underreplicated import main as publish_main

        stamps = {
            r.finding.ledger_id:
                get_marker(cluster.zk_client(), r.finding.ledger_id, root=cluster.root)[1].version
            for r in published
        }
        assert (
            publish_main(
                [
                    "--run-id",
                    result.run_id,
                    "--zk",
                    cluster.zk,
                    "--root",
                    cluster.root,
                    "--warehouse",
                    warehouse,
                ]
            )
            == 0
        )
        assert {
            lid: get_marker(cluster.zk_client(), lid, root=cluster.root)[1].version for lid in stamps
        } == stamps

        text = metrics.read_text()
        placement_fail = result.counts["placement_fail"]
        assert value(text, "auditor_NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY") == placement_fail
        no_replica = result.counts["no_replica"]
        assert value(text, "auditor_NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY") == no_replica
        assert value(text, "auditor_NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD") == 1
    finally:
        cluster.resume_bookie(paused)
        fake.stop(cluster)
        cleanup(cluster, sc)


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for e in sorted(ids):
        if out and out[-1][1] + 1 == e:
            out[-1] = (out[-1][0], e)
        else:
            out.append((e, e))
    return out


def test_bookies_checked_is_recorded_in_audit_runs(spark, cluster, bk, warehouse):
    """A ledger whose ensemble is every bookie the test started: each one is asked, and audit_runs says so."""
    from bkaudit.tables.read import read_arrow

    sc = Scenario()
    started = {b.id for b in cluster.bookies}
    try:
        write(bk, sc, len(started), 2, 2)
        result = snapshot_and_check(spark, cluster, warehouse)
        assert result.status == "succeeded" and not result.violations, result.violations
        runs = read_arrow(warehouse, "audit_runs")
        (row,) = [r for r in runs.to_pylist() if r["run_id"] == result.run_id]
        assert row["bookies_checked"] == len(started) == result.bookies_checked
        assert {b.bookie_id for b in result.bookies} == started
        checks = read_arrow(warehouse, "bookie_checks")
        assert {r["bookie_id"] for r in checks.to_pylist() if r["run_id"] == result.run_id} == started
    finally:
        cleanup(cluster, sc)
