"""The checker, fresh, against a cluster that includes a minimal BookKeeper-behaving bookie written here.

The bookie below is built only from BookKeeper's definitions, never from bkaudit's bookie or client:
- the wire: BookieProtoEncoding's framing (a 4-byte big-endian length, then a v3 protobuf `Request` /
  `Response` from BookkeeperProtocol.proto; the message classes are generated from that file, whose fields
  are BookKeeper's), `BKPacketHeader` with `VERSION_THREE`, the txnId echoed in every response, requests
  pipelined on a connection and answered as they complete, frames above 5 MiB closing the channel;
- READ_ENTRY answered from its stored entries: the entry bytes (ledgerId, entryId, lac, length as big-endian
  longs, the CRC32C digest of header and payload as a big-endian int, the payload), ENOENTRY for an entry it
  lacks, ENOLEDGER for a ledger it does not know (ReadEntryProcessorV3);
- GET_LIST_OF_ENTRIES_OF_LEDGER never answered: DbLedgerStorage throws UnsupportedOperationException and
  GetListOfEntriesOfLedgerProcessorV3 only catches NoLedgerException and IOException, so no response is sent;
- other operations answered EBADREQ;
- registration as a Java bookie does it: the cookie text (`5\\n` + CookieFormat TextFormat) under
  `cookies/<id>` and an EPHEMERAL `available/<id>` holding a binary BookieServiceInfoFormat with the default
  endpoint `{id: "bookie", protocol: "bookie-rpc"}` (kazoo, ZooKeeper's client, writes them).

Damage is whatever the test leaves out of the bookie's store: ground truth is a naive per-entry model of it.
"""

from __future__ import annotations

import hashlib
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import google_crc32c
import pytest
from kazoo.client import KazooClient

from bkaudit import config
from bkaudit.cluster.local import LocalCluster
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.formats.proto import DataFormats_pb2 as df
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.zk import ledgers as zk_ledgers
from tests.fixtures.cluster import running_cluster

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.spark,
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
    """Serves READ_ENTRY from `entries`; swallows listing requests; EBADREQ for everything else."""

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
            return None  # UnsupportedOperationException in DbLedgerStorage: no response at all
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
                    bookie.entries[(lid, e)] = body
            else:
                futures.append(pool.get(b).add_entry(lid, e, key, body))
    if knows:
        bookie.ledgers.add(lid)
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
        write_ledger(world, 2, 2, lacking={9}),  # one copy of entry 9 left (write set: indexes 0, 1), AQ 2
        write_ledger(world, 2, 1, lacking={12}),  # one copy left, AQ 1
        write_ledger(world, 2, 2, lacking=set(), knows=False),  # the bookie never got the ledger
        write_ledger(world, 3, 2, lacking=set()),  # healthy
    ]
    categories = [x["category"] for x in ledgers]
    assert categories == ["below_ack_quorum", "below_write_quorum", "below_ack_quorum", None]
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
        r.ledger_id: r
        for r in result.violations
        if r.category in DURABILITY and r.ledger_id in {x["ledger_id"] for x in ledgers}
    }
    for x in ledgers:
        if x["category"] is None:
            assert x["ledger_id"] not in got
            continue
        row = got[x["ledger_id"]]
        assert row.category == x["category"]
        assert row.evidence == "reads" and row.sampled_fraction == 1.0
    checks = {b.bookie_id: b for b in result.bookies}
    assert checks[bookie.bookie_id].evidence == "reads"
    assert all(checks[b].evidence == "listing" for b in cluster.ids())
    assert bookie.counts.get(pb.GET_LIST_OF_ENTRIES_OF_LEDGER, 0) >= 1, "the probe asked and got no answer"
    assert bookie.counts.get(pb.READ_ENTRY, 0) >= 3 * ENTRIES // 2
    assert not [r for r in result.violations if r.category == "ledger_unverifiable"]
