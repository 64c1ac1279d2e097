"""The checker, fresh, against BookKeeper-behaving bookies written here (issue 30 items 1-4).

The bookie below is built only from BookKeeper's definitions, never from bkaudit's bookie or client:
- the wire: BookieProtoEncoding's framing (a 4-byte big-endian length, then a v3 protobuf `Request` /
  `Response` from BookkeeperProtocol.proto; the message classes are generated from that file, whose fields
  are BookKeeper's), `BKPacketHeader` with `VERSION_THREE`, the txnId echoed in every response, requests
  pipelined on a connection and answered as they complete, frames above 5 MiB closing the channel;
- what it knows as DbLedgerStorage does: a ledger exists once it got an entry (`ledgerExists`), entries are
  stored as added: ledgerId, entryId, lac, length as big-endian longs, the CRC32C digest of header and
  payload as a big-endian int, the payload (DigestManager);
- READ_ENTRY answered from its stored entries: the entry bytes, ENOENTRY for an entry of a ledger it knows,
  ENOLEDGER for a ledger it does not know (ReadEntryProcessorV3; the handle lookup throws NoLedgerException);
- READ_LAC as ReadLacProcessorV3: no explicit LAC (nothing sent WRITE_LAC), the last entry it holds as
  `lastEntryBody`; ENOENTRY when there is neither (an unknown ledger too);
- GET_LIST_OF_ENTRIES_OF_LEDGER: ENOLEDGER for a ledger it does not know (BookieImpl's
  getListOfEntriesOfLedger → HandleFactoryImpl.getReadOnlyHandle → LedgerDescriptor.createReadOnly throws
  NoLedgerException, which GetListOfEntriesOfLedgerProcessorV3 answers), and no answer at all for one it
  knows (DbLedgerStorage throws UnsupportedOperationException, which escapes the processor: nothing is sent);
- other operations answered EBADREQ;
- registration as a Java bookie does it: the cookie text (`5\\n` + CookieFormat TextFormat) under
  `cookies/<id>` and an EPHEMERAL `available/<id>` holding a binary BookieServiceInfoFormat with the default
  endpoint `{id: "bookie", protocol: "bookie-rpc"}` (kazoo, ZooKeeper's client, writes them).

Damage is whatever the test leaves out of the bookies' stores; ground truth is a naive per-entry model of it
(or, for the open segments, the entries the test wrote and the LAC they carry).
"""

from __future__ import annotations

import hashlib
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import google_crc32c
import pytest
from kazoo.client import KazooClient

from bkaudit import config
from bkaudit.cluster.local import LocalCluster
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.formats.proto import DataFormats_pb2 as df
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.model.quorum import write_set
from bkaudit.zk import ledgers as zk_ledgers
from bkaudit.zk import paths as zk_paths
from bkaudit.zk.ledgers import init_cluster
from tests.fixtures.cluster import running_cluster
from tests.helpers import unique_path

pytestmark = [
    pytest.mark.slow,
]

MAX_FRAME = 5 * 1024 * 1024
ENTRIES = 30
DURABILITY = ("no_replica", "below_ack_quorum", "below_write_quorum")


# -- BookKeeper's entry format (DigestManager with CRC32C) ---------------------------------------------------


def crc32c_entry(ledger_id: int, entry_id: int, lac: int, length: int, payload: bytes) -> bytes:
    header = struct.pack(">qqqq", ledger_id, entry_id, lac, length)
    digest = google_crc32c.value(header + payload)
    return header + struct.pack(">I", digest) + payload


# -- the bookie ----------------------------------------------------------------------------------------------


class DbLedgerStorageBookie(socketserver.ThreadingTCPServer):
    """A Java bookie on DbLedgerStorage, as far as the checker can see it (the module docstring)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Connection)
        self.port = self.server_address[1]
        self.bookie_id = f"127.0.0.1:{self.port}"
        self.entries: dict[tuple[int, int], bytes] = {}
        self.ledgers: set[int] = set()
        self.counts: dict[int, int] = {}
        self.lock = threading.Lock()

    def store(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        with self.lock:
            self.entries[(ledger_id, entry_id)] = body
            self.ledgers.add(ledger_id)

    def count(self, op: int) -> None:
        with self.lock:
            self.counts[op] = self.counts.get(op, 0) + 1

    def answer(self, req: Any) -> Any | None:
        op = req.header.operation
        self.count(op)
        resp = pb.Response()
        resp.header.version = pb.VERSION_THREE
        resp.header.operation = op
        resp.header.txnId = req.header.txnId
        if op == pb.GET_LIST_OF_ENTRIES_OF_LEDGER:
            lid = req.getListOfEntriesOfLedgerRequest.ledgerId
            if lid in self.ledgers:
                return None  # UnsupportedOperationException in DbLedgerStorage: no response at all
            resp.status = pb.ENOLEDGER  # NoLedgerException from the handle lookup, caught by the processor
            r = resp.getListOfEntriesOfLedgerResponse
            r.status, r.ledgerId = pb.ENOLEDGER, lid
            return resp
        if op == pb.READ_LAC and req.HasField("readLacRequest"):
            lid = req.readLacRequest.ledgerId
            with self.lock:
                held = [e for (lg, e) in self.entries if lg == lid]
                last = self.entries[(lid, max(held))] if held else None
            status = pb.EOK if last is not None else pb.ENOENTRY  # neither body: ENOENTRY
            resp.status = status
            rl = resp.readLacResponse
            rl.status, rl.ledgerId = status, lid
            if last is not None:
                rl.lastEntryBody = last
            return resp
        if op == pb.READ_ENTRY and req.HasField("readRequest"):
            r = req.readRequest
            body = self.entries.get((r.ledgerId, r.entryId))
            if body is not None:
                status = pb.EOK
            else:
                status = pb.ENOENTRY if r.ledgerId in self.ledgers else pb.ENOLEDGER
            resp.status = status
            rr = resp.readResponse
            rr.status, rr.ledgerId, rr.entryId = status, r.ledgerId, r.entryId
            if body is not None:
                rr.body = body
            return resp
        resp.status = pb.EBADREQ
        return resp


class _Connection(socketserver.BaseRequestHandler):
    server: DbLedgerStorageBookie

    def handle(self) -> None:
        sock: socket.socket = self.request
        out = threading.Lock()
        while True:
            head = _read_exactly(sock, 4)
            if head is None:
                return
            (length,) = struct.unpack(">I", head)
            if length > MAX_FRAME:
                return  # TooLongFrameException: the channel is closed
            data = _read_exactly(sock, length)
            if data is None:
                return
            req = pb.Request()
            try:
                req.ParseFromString(data)
            except Exception:
                return
            resp = self.server.answer(req)
            if resp is None:
                continue
            payload = resp.SerializeToString()
            with out:
                sock.sendall(struct.pack(">I", len(payload)) + payload)


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def register(zk: KazooClient, root: str, bookie: DbLedgerStorageBookie) -> None:
    """A cookie and an available znode, with the bytes a Java bookie writes."""
    cookie = (
        f'5\nbookieHost: "{bookie.bookie_id}"\njournalDir: "/tmp/journal"\n'
        'ledgerDirs: "1\\t/tmp/ledgers"\n'
    )
    zk.ensure_path(f"{root}/cookies")
    zk.create(f"{root}/cookies/{bookie.bookie_id}", cookie.encode())
    info = df.BookieServiceInfoFormat()
    ep = info.endpoints.add()
    ep.id, ep.port, ep.host, ep.protocol = "bookie", bookie.port, "127.0.0.1", "bookie-rpc"
    zk.create(f"{root}/available/{bookie.bookie_id}", info.SerializeToString(), ephemeral=True)


# -- the cluster ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(zk_server, tmp_path_factory) -> Iterator[dict[str, Any]]:
    with running_cluster(zk_server, tmp_path_factory, bookies=2, racks=3) as cluster:
        bookie = DbLedgerStorageBookie()
        server = threading.Thread(target=bookie.serve_forever, daemon=True)
        server.start()
        zk = KazooClient(hosts=cluster.zk)
        zk.start(timeout=30)
        try:
            register(zk, cluster.root, bookie)
            yield {"cluster": cluster, "bookie": bookie}
        finally:
            zk.stop()
            zk.close()
            bookie.shutdown()
            bookie.server_close()


def write_ledger(world: dict[str, Any], wq: int, aq: int, *, lacking: set[int], knows: bool = True) -> dict:
    """A closed ledger on (java bookie, bkaudit bookie, bkaudit bookie); the java bookie stores its share
    except the entries in `lacking` (or nothing at all, not even the ledger, when `knows` is False)."""
    cluster: LocalCluster = world["cluster"]
    bookie: DbLedgerStorageBookie = world["bookie"]
    ensemble = (bookie.bookie_id, *cluster.ids())
    zk = cluster.zk_client()
    lid = zk_ledgers.generate_ledger_id(zk, root=cluster.root)
    md = LedgerMetadata(
        ensemble_size=3,
        write_quorum=wq,
        ack_quorum=aq,
        state=LedgerState.CLOSED,
        last_entry_id=ENTRIES - 1,
        length=ENTRIES * 8,
        digest_type=DigestType.CRC32C,
        password=b"",
        segments=(Segment(0, ensemble),),
        ctime=int(time.time() * 1000),
    )
    zk_ledgers.create_ledger_metadata(zk, lid, md, root=cluster.root)
    pool = cluster.client_pool()
    key = hashlib.sha1(b"ledger").digest()  # BookKeeper's master key for an empty password
    futures = []
    holders: dict[int, list[str]] = {}
    for e in range(ENTRIES):
        body = crc32c_entry(lid, e, e - 1, (e + 1) * 8, b"e-%05d" % e)
        holders[e] = [ensemble[(e + k) % 3] for k in range(wq)]
        for b in holders[e]:
            if b == bookie.bookie_id:
                if knows and e not in lacking:
                    bookie.store(lid, e, body)
            else:
                futures.append(pool.get(b).add_entry(lid, e, key, body))
    for f in futures:
        f.result(timeout=60)
    lost = set(range(ENTRIES)) if not knows else set(lacking)
    least = min(
        sum(1 for b in holders[e] if not (b == bookie.bookie_id and e in lost)) for e in range(ENTRIES)
    )
    category = (
        "no_replica" if least == 0 else
        "below_ack_quorum" if least < aq else
        "below_write_quorum" if least < wq else None
    )
    return {"ledger_id": lid, "category": category}


def test_checker_verifies_a_dbledgerstorage_bookie_by_reads(spark, world, tmp_path):
    from bkaudit.spark.checker import CheckOptions, run_check

    bookie: DbLedgerStorageBookie = world["bookie"]
    ledgers = [
        # the bookie never got the lowest ledger: a Java bookie answers its listing ENOLEDGER, on any storage
        # (the handle lookup fails first), so asking about it tells nothing about listing
        write_ledger(world, 2, 2, lacking=set(), knows=False),
        write_ledger(world, 2, 2, lacking={9}),  # one copy of entry 9 left (write set: indexes 0, 1), AQ 2
        write_ledger(world, 2, 1, lacking={12}),  # one copy left, AQ 1
        write_ledger(world, 3, 2, lacking=set()),  # healthy
    ]
    assert min(x["ledger_id"] for x in ledgers) == ledgers[0]["ledger_id"]
    categories = [x["category"] for x in ledgers]
    assert categories == ["below_ack_quorum", "below_ack_quorum", "below_write_quorum", None]
    cluster: LocalCluster = world["cluster"]
    settings = config.load(
        environ={},
        overrides={
            "zk.connect": cluster.zk,
            "zk.root": cluster.root,
            "snapshot.warehouse": str(tmp_path),
            "snapshot.validate": False,
            "checker.call_timeout_s": 5.0,
            "checker.listing_probe_timeout_s": 2.0,
            "checker.retry_delay_s": 0.5,
            "checker.verification_percentage": 100,
        },
    )
    result = run_check(spark, settings, CheckOptions(warehouse=str(tmp_path), fresh=True))
    got = {
        r.finding.ledger_id: r
        for r in result.violations
        if r.finding.category.value in DURABILITY and r.finding.ledger_id in {x["ledger_id"] for x in ledgers}
    }
    for x in ledgers:
        if x["category"] is None:
            assert x["ledger_id"] not in got
            continue
        row = got[x["ledger_id"]]
        assert row.finding.category.value == x["category"]
        assert row.evidence == "reads" and row.sampled_fraction == 1.0
    checks = {b.bookie_id: b for b in result.bookies}
    assert checks[bookie.bookie_id].evidence == "reads"
    assert all(checks[b].evidence == "listing" for b in cluster.ids())
    assert bookie.counts.get(pb.GET_LIST_OF_ENTRIES_OF_LEDGER, 0) >= 1, "the probe asked and got no answer"
    assert bookie.counts.get(pb.READ_ENTRY, 0) >= 3 * ENTRIES // 2
    assert not [r for r in result.violations if r.finding.category.value == "ledger_unverifiable"]


# -- clusters of BookKeeper-behaving bookies only, each test in its own root ---------------------------------


class JavaWorld:
    """A ledgers root of its own whose bookies are all BookKeeper-behaving ones (no bkaudit bookie at all)."""

    def __init__(self, zk_server: Any, n: int) -> None:
        self.connect = zk_server.connect_string
        self.root = unique_path("t", "/ledgers")
        self.zk = KazooClient(hosts=self.connect)
        self.zk.start(timeout=30)
        init_cluster(self.zk, root=self.root)
        self.bookies = [DbLedgerStorageBookie() for _ in range(n)]
        for b in self.bookies:
            threading.Thread(target=b.serve_forever, daemon=True).start()
            register(self.zk, self.root, b)

    def ids(self) -> list[str]:
        return [b.bookie_id for b in self.bookies]

    def by_id(self, bookie_id: str) -> DbLedgerStorageBookie | None:
        return next((b for b in self.bookies if b.bookie_id == bookie_id), None)

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()
        for b in self.bookies:
            b.shutdown()
            b.server_close()

    def ledger(self, segments: list[tuple[int, tuple[str, ...]]], *, closed: bool, entries: int,
               wq: int = 2, aq: int = 2, lacking: dict[str, set[int]] | None = None) -> int:
        """Metadata for a ledger of `entries` entries (E3, CRC32C) and its entries on their write sets, each
        carrying the LAC a writer sends (entry - 1), except what `lacking` leaves out per bookie."""
        lid = zk_ledgers.generate_ledger_id(self.zk, root=self.root)
        md = LedgerMetadata(
            ensemble_size=3, write_quorum=wq, ack_quorum=aq,
            state=LedgerState.CLOSED if closed else LedgerState.OPEN,
            last_entry_id=entries - 1 if closed else -1, length=entries * 8 if closed else 0,
            digest_type=DigestType.CRC32C, password=b"",
            segments=tuple(Segment(first, ens) for first, ens in segments), ctime=int(time.time() * 1000),
        )
        zk_ledgers.create_ledger_metadata(self.zk, lid, md, root=self.root)
        for e in range(entries):
            ensemble = next(ens for first, ens in reversed(segments) if first <= e)
            body = crc32c_entry(lid, e, e - 1, (e + 1) * 8, b"e-%05d" % e)
            for idx in write_set(e, 3, wq):
                holder = self.by_id(ensemble[idx])
                if holder is not None and e not in (lacking or {}).get(holder.bookie_id, set()):
                    holder.store(lid, e, body)
        return lid

    def settings(self, warehouse: str, **checker: Any) -> config.Settings:
        return config.load(environ={}, overrides={
            "zk.connect": self.connect, "zk.root": self.root, "snapshot.warehouse": warehouse,
            "snapshot.validate": False, "checker.call_timeout_s": 3.0, "checker.listing_probe_timeout_s": 2.0,
            "checker.retry_delay_s": 0.5, "checker.verification_percentage": 100,
            **{f"checker.{k}": v for k, v in checker.items()},
        })

    def check(self, spark: Any, warehouse: str, **checker: Any) -> Any:
        from bkaudit.spark.checker import CheckOptions, run_check

        options = CheckOptions(warehouse=warehouse, fresh=True)
        return run_check(spark, self.settings(warehouse, **checker), options)


@pytest.fixture
def java_world(zk_server) -> Iterator[Callable[[int], JavaWorld]]:
    made: list[JavaWorld] = []

    def make(n: int) -> JavaWorld:
        made.append(JavaWorld(zk_server, n))
        return made[-1]

    try:
        yield make
    finally:
        for w in made:
            w.close()


def naive_category(world: JavaWorld, lid: int, ensemble: tuple[str, ...], entries: int, wq: int, aq: int,
                   gone: frozenset[str] = frozenset()) -> str | None:
    """The worst entry of a closed one-segment ledger, counted from what the bookies store (a bookie in
    `gone` holds nothing)."""
    least = wq
    for e in range(entries):
        copies = 0
        for idx in write_set(e, 3, wq):
            holder = world.by_id(ensemble[idx])
            if ensemble[idx] not in gone and holder is not None and (lid, e) in holder.entries:
                copies += 1
        least = min(least, copies)
    return ("no_replica" if least == 0 else "below_ack_quorum" if least < aq
            else "below_write_quorum" if least < wq else None)


def durability(result: Any, ledgers: set[int]) -> dict[int, Any]:
    return {v.finding.ledger_id: v for v in result.violations
            if v.finding.category.value in DURABILITY and v.finding.ledger_id in ledgers}


def test_a_bookie_switches_to_reads_when_listing_goes_unanswered_mid_run(spark, java_world, tmp_path):
    """The probe asks about ledgers j0 should hold; it never got the first three it is asked about, so every
    listing of them is ENOLEDGER and the mode is not told. Its listing of the next ledger, which it holds, is
    never answered while reads are: j0 is verified by reads from then on, in the same run (issue 30 item 1).
    Ground truth: what the test left out of j0's store."""
    w = java_world(3)
    j0, j1, j2 = w.ids()
    ens = (j0, j1, j2)
    never = [w.ledger([(0, ens)], closed=True, entries=ENTRIES, lacking={j0: set(range(ENTRIES))})
             for _ in range(3)]
    holed = w.ledger([(0, ens)], closed=True, entries=ENTRIES, lacking={j0: {3, 9}})
    healthy = w.ledger([(0, ens)], closed=True, entries=ENTRIES)
    assert j0 and not any((lid, e) in w.bookies[0].entries for lid in never for e in range(ENTRIES))
    result = w.check(spark, str(tmp_path))
    got = durability(result, {*never, holed, healthy})
    want = {lid: naive_category(w, lid, ens, ENTRIES, 2, 2) for lid in (*never, holed, healthy)}
    assert {lid: v.finding.category.value for lid, v in got.items()} == {k: v for k, v in want.items() if v}
    assert want[holed] == "below_ack_quorum" and got[holed].evidence == "reads"
    assert got[holed].finding.missing_entries == ((3, 3), (9, 9))
    assert not [v for v in result.violations
                if v.finding.category.value == "ledger_unverifiable"], result.violations
    checks = {b.bookie_id: b for b in result.bookies}
    assert checks[j0].evidence == "reads" and "switched during the run" in (checks[j0].evidence_reason or "")


def test_open_ledgers_last_segment_is_checked_up_to_the_lac(spark, java_world, tmp_path):
    """BookKeeper's checkAllLedgers opens every ledger (without recovery) and LedgerChecker checks the last
    segment of an open one up to the LAC its bookies report; below that segment's first entry it reads the
    first entry from its write set (issue 30 item 2). Ground truth: the entries written (entry e carries LAC
    e - 1, so the bookies report the LAC of the last entry) and what each bookie was left without."""
    w = java_world(3)
    j0, j1, j2 = w.ids()
    ens, moved = (j0, j1, j2), (j2, j0, j1)
    # a: one open segment, 30 entries (LAC 28): j1 lacks entry 12; j0 lacks entry 29, past the LAC
    a = w.ledger([(0, ens)], closed=False, entries=ENTRIES, lacking={j1: {12}, j0: {29}})
    assert {ens[i] for i in write_set(12, 3, 2)} == {j0, j1} and j0 in {ens[i] for i in write_set(29, 3, 2)}
    # b: entries 0-9 in the first segment (j0 lacks entry 3), nothing written to the second (LAC 8 < 10,
    # entry 10 on nobody): only the first segment has something to check
    b = w.ledger([(0, ens), (10, moved)], closed=False, entries=10, lacking={j0: {3}})
    # c: entry 10 written to one bookie of its write set only (LAC 9 < 10, entry 10 may exist): checked alone
    first, second = (moved[i] for i in write_set(10, 3, 2))
    c = w.ledger([(0, ens), (10, moved)], closed=False, entries=11, lacking={second: {10}})
    # d: healthy open ledger
    d = w.ledger([(0, ens)], closed=False, entries=ENTRIES)
    result = w.check(spark, str(tmp_path))
    got = durability(result, {a, b, c, d})
    assert set(got) == {a, b, c}, result.violations
    assert got[a].finding.category.value == "below_ack_quorum"
    assert got[a].finding.detail["open_segment"]["checked_to"] == ENTRIES - 2  # the LAC entry 29 carries
    assert got[a].finding.missing_entries == ((12, 12),)
    assert got[b].finding.category.value == "below_ack_quorum" and "open_segment" not in got[b].finding.detail
    assert got[b].finding.missing_entries == ((3, 3),)
    assert got[c].finding.category.value == "below_ack_quorum" and got[c].finding.detail["open_segment"] == {
        "segment": 1, "first_entry": 10, "checked_to": 10}
    assert got[c].finding.detail["bookies_missing_entries"] == [second] and first != second
    assert not [v for v in result.violations
                if v.finding.category.value == "ledger_unverifiable"], result.violations
    # every bookie of every open ledger's last ensemble was asked its LAC
    assert all(bk.counts.get(pb.READ_LAC, 0) >= 4 for bk in w.bookies)


def test_a_lost_bookies_copies_are_missing_and_only_a_covering_run_stamps(spark, java_world, tmp_path):
    """A bookie that is not registered and never answers is lost: its copies count missing with
    detail.cause = lost_bookie (issue 30 item 3); a registered bookie that does not answer keeps its ledgers
    unverifiable. A run with an unverifiable ledger stamps only placementpolicycheckctime; one that covered
    every ledger with no bookie unverified stamps all three (item 4)."""
    w = java_world(3)
    j0, j1, dead = w.ids()
    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        lost = f"127.0.0.1:{s.getsockname()[1]}"
    w.bookies[2].shutdown()
    w.bookies[2].server_close()  # still registered, no longer answering
    on_lost = w.ledger([(0, (j0, j1, lost))], closed=True, entries=ENTRIES)
    on_dead = w.ledger([(0, (j0, j1, dead))], closed=True, entries=ENTRIES)
    ctimes = {n: f"{w.root}/underreplication/{n}"
              for n in ("checkallledgersctime", "placementpolicycheckctime", "replicascheckctime")}

    result = w.check(spark, str(tmp_path / "one"))
    got = durability(result, {on_lost, on_dead})
    assert set(got) == {on_lost}
    want = naive_category(w, on_lost, (j0, j1, lost), ENTRIES, 2, 2, gone=frozenset({lost}))
    assert got[on_lost].finding.category.value == want == "below_ack_quorum"
    assert got[on_lost].finding.detail["cause"] == "lost_bookie"
    assert got[on_lost].finding.detail["lost_bookies"] == [lost]
    unverifiable = [v for v in result.violations if v.finding.category.value == "ledger_unverifiable"]
    assert [v.finding.ledger_id for v in unverifiable] == [on_dead]
    assert unverifiable[0].finding.detail["reason_code"] == "bookie_unreachable"
    unreachable = "bookie_unreachable_but_registered"
    assert [v.finding.bookie_id for v in result.violations
            if v.finding.category.value == unreachable] == [dead]
    assert {n: bool(w.zk.exists(p)) for n, p in ctimes.items()} == {
        "checkallledgersctime": False, "placementpolicycheckctime": True, "replicascheckctime": False}

    # the dead bookie's ledger is deleted and the bookie unregistered: nothing is left unverified
    w.zk.delete(zk_paths.ledger_path(on_dead, root=w.root))
    w.zk.delete(f"{w.root}/available/{dead}")
    before = int(time.time() * 1000)
    again = w.check(spark, str(tmp_path / "two"))
    assert not [v for v in again.violations
                if v.finding.category.value == "ledger_unverifiable"], again.violations
    assert durability(again, {on_lost})[on_lost].finding.detail["cause"] == "lost_bookie"
    for node, path in ctimes.items():
        data, _stat = w.zk.get(path)
        assert df.CheckAllLedgersFormat.FromString(data).checkAllLedgersCTime >= before, node
