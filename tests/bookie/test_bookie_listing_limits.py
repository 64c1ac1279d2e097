"""Listing at scale against real bookie processes: byte-sized calls, frames within the limit, storage loss.

- Large ledgers: 3 bookies hold 16 ledgers of 50,000 entries each (E3/WQ2: about 400 KB of listing per ledger
  and bookie, 6.4 MB per bookie, above BookKeeper's 5 MiB frame), loaded into their storage before they start;
  some ledgers have holes on one bookie. The checker's fan-out function (what each Spark task runs) lists them
  with the default batch size: no call may fail or open the breaker, and every (ledger, bookie) gets a
  verified answer equal to what the test wrote. A raw BookKeeper-framed request for everything at once gets
  one frame within the limit, and the client completes it by asking again for what did not fit.
- Storage loss: entries removed from a running bookie's `ledgers.db` by another process are listed missing
  after the next storage check; a bookie whose ledger directory is deleted while it runs stops (as a Java
  bookie does on a disk failure), deregisters, and is never again reported as holding anything.

Ground truth is what the test wrote and deleted, never the code under test.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from bkaudit.bookie.bulkload import bulk_load_index
from bkaudit.bookie.ledgerdb import connect_db, current_dir
from bkaudit.client import BookKeeper
from bkaudit.cluster.local import LocalCluster
from bkaudit.formats import availability
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.job.expected import ExpectedDigests
from bkaudit.job.fanout import (
    REQUEST_SCHEMA,
    RESPONSE_SCHEMA,
    FanoutConfig,
    evidence_of_row,
)
from bkaudit.job.fanout_task import fanout_partition
from bkaudit.model.ledger import Segment
from bkaudit.model.quorum import entries_of_bookie
from bkaudit.model.shape import LedgerShape
from bkaudit.rpc.client import BookieClient
from bkaudit.zk import registry
from tests.helpers import wait_for

pytestmark = [pytest.mark.slow]

LEDGERS = range(1, 17)
ENTRIES = 50_000
FRAME = 5 * 1024 * 1024  # BookKeeper's nettyMaxFrameSizeBytes default; the bookies' and clients' default too
HOLES = {3: range(100, 160), 9: range(0, 40_000, 7), 16: range(49_000, 50_000)}  # entries lost on bookie 0


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for e in ids:
        if runs and runs[-1][1] == e - 1:
            runs[-1] = (runs[-1][0], e)
        else:
            runs.append((e, e))
    return runs


@pytest.fixture(scope="module")
def large(zk_server, tmp_path_factory) -> Iterator[tuple[LocalCluster, dict[tuple[int, int], list[int]]]]:
    """A 3-bookie cluster whose storage holds the large ledgers; yields (cluster, held[(ledger, index)])."""
    import uuid

    cluster = LocalCluster.up(tmp_path_factory.mktemp("large"), bookies=3, racks=3,
                              zk_connect=f"{zk_server.connect_string}/l{uuid.uuid4().hex[:12]}")
    try:
        held: dict[tuple[int, int], list[int]] = {}
        for b in cluster.ids():
            cluster.stop_bookie(b)
        for index, b in enumerate(cluster.bookies):
            loads = []
            for lid in LEDGERS:
                ids = list(entries_of_bookie(index, 0, ENTRIES - 1, 3, 2))
                if index == 0 and lid in HOLES:
                    lost = set(HOLES[lid])
                    ids = [e for e in ids if e not in lost]
                held[(lid, index)] = ids
                loads.append((lid, _runs(ids)))
            bulk_load_index(b.data_dir, loads)
        for b in cluster.ids():
            cluster.start_bookie(b)
        yield cluster, held
    finally:
        cluster.down()


def _shape(cluster: LocalCluster, lid: int) -> LedgerShape:
    return LedgerShape(lid, 3, 2, 2, True, ENTRIES - 1, (Segment(0, tuple(cluster.ids())),), version=0)


def test_fanout_lists_large_ledgers_without_failures_and_verifies_every_one(large) -> None:
    cluster, held = large
    shapes = {lid: _shape(cluster, lid) for lid in LEDGERS}
    digests = ExpectedDigests()
    rows = []
    for s in shapes.values():
        wanted, n = digests.expected_requests(s)
        for k, (bookie, (expected, size, _)) in enumerate(wanted.items()):
            rows.append({"bookie_id": bookie, "ledger_id": s.ledger_id, "expected_digest": expected,
                         "ledger_entries": n if k == 0 else 0, "answer_bytes": size})
    per_bookie = sum(len(availability.encode_runs(_runs(held[(lid, 1)]))) for lid in LEDGERS)
    assert per_bookie > FRAME  # what one count-sized call (500 ledgers) would have had to carry
    config = FanoutConfig(targets={b.id: f"{b.host}:{b.port}" for b in cluster.bookies},
                          batch_listing=frozenset(cluster.ids()), call_timeout_s=60.0)
    assert config.batch_size >= len(LEDGERS)
    out = pa.Table.from_batches(
        list(fanout_partition(config)(iter([pa.RecordBatch.from_pylist(rows, schema=REQUEST_SCHEMA)]))),
        schema=RESPONSE_SCHEMA,
    ).to_pylist()
    assert len(out) == 3 * len(LEDGERS)
    index = {b: i for i, b in enumerate(cluster.ids())}
    calls: dict[str, set[str]] = {}
    for r in out:
        lid, bookie = r["ledger_id"], r["bookie_id"]
        assert r["status"] == "OK", r  # no UNAVAILABLE, no CIRCUIT_OPEN: every answer arrived
        calls.setdefault(bookie, set()).add(r["call_id"])
        written = held[(lid, index[bookie])]
        lost = set(HOLES[lid]) if index[bookie] == 0 and lid in HOLES else set()
        should = set(entries_of_bookie(index[bookie], 0, ENTRIES - 1, 3, 2))
        if written == sorted(should):  # the digest of the expected encoding matched: no bytes travel
            assert r["answer"] is None
        else:  # anything else keeps its bytes for the detailed comparison
            assert r["answer"] is not None and list(availability.decode(r["answer"])) == written
        ev = evidence_of_row(shapes[lid], r)
        assert ev.status == "OK" and ev.missing_count == len(lost & should) and not ev.extra
    assert all(len(c) >= 3 for c in calls.values())  # cut by bytes: several calls per bookie, not one


def test_a_batch_for_everything_gets_one_frame_within_the_limit_and_the_client_completes_it(large) -> None:
    cluster, held = large
    b = cluster.bookies[1]
    # a peer built from BookKeeper's definitions: length-prefixed v3 Request, read one Response frame
    req = pb.Request()
    req.header.version = pb.VERSION_THREE
    req.header.operation = pb.GET_LIST_OF_ENTRIES_OF_LEDGERS
    req.header.txnId = 77
    req.getListOfEntriesOfLedgersRequest.ledgerId.extend(LEDGERS)
    data = req.SerializeToString()
    with socket.create_connection((b.host, b.port), timeout=30) as sock:
        sock.sendall(struct.pack(">I", len(data)) + data)
        (size,) = struct.unpack(">I", _read(sock, 4))
        assert size <= FRAME
        resp = pb.Response()
        resp.ParseFromString(_read(sock, size))
    assert resp.header.txnId == 77 and resp.status == pb.EOK
    items = resp.getListOfEntriesOfLedgersResponse.ledgers
    assert [i.ledgerId for i in items] == list(LEDGERS)
    answered = [i for i in items if i.status == pb.EOK]
    assert 0 < len(answered) < len(LEDGERS)  # answered in order while they fit ...
    assert all(i.status == pb.ETOOMANYREQUESTS for i in items[len(answered):])  # ... the rest: ask again
    for i in answered:
        assert list(availability.decode(i.availabilityOfEntriesOfLedger)) == held[(i.ledgerId, 1)]
    client = BookieClient(b.id, f"{b.host}:{b.port}", batch_listing=True, request_timeout_s=60)
    try:
        got = client.get_list_of_entries_batch(list(LEDGERS)).result(timeout=120)
    finally:
        client.close()
    assert sorted(got) == list(LEDGERS)
    for lid, value in got.items():
        assert isinstance(value, bytes), value
        assert list(availability.decode(value)) == held[(lid, 1)]


def _read(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


# -- storage loss while running ------------------------------------------------------------------------------


@pytest.fixture
def fast_disk_checks() -> Iterator[None]:
    old = os.environ.get("BKAUDIT_BOOKIE__DISK_CHECK_INTERVAL_S")
    os.environ["BKAUDIT_BOOKIE__DISK_CHECK_INTERVAL_S"] = "0.2"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("BKAUDIT_BOOKIE__DISK_CHECK_INTERVAL_S", None)
        else:
            os.environ["BKAUDIT_BOOKIE__DISK_CHECK_INTERVAL_S"] = old


def test_storage_changes_and_loss_while_running_are_never_hidden(cluster_factory, fast_disk_checks) -> None:
    cluster = cluster_factory(bookies=3, racks=3)
    bk = BookKeeper.connect(cluster.zk_settings())
    try:
        handles = [bk.create_ledger(3, 3, 2) for _ in range(2)]
        for h in handles:
            for i in range(40):
                h.add_entry(b"entry-%d" % i)
            h.close()
    finally:
        bk.close()
    first, second = (h.ledger_id for h in handles)
    victim = cluster.bookies[0]
    clients = {b.id: BookieClient(b.id, f"{b.host}:{b.port}", batch_listing=True) for b in cluster.bookies}
    try:
        def listed(bookie: str, lid: int) -> list[int]:
            return list(availability.decode(clients[bookie].get_list_of_entries(lid).result(timeout=20)))

        assert listed(victim.id, first) == list(range(40))
        # 1. another process deletes entries 10..19 of one ledger in the running bookie's ledgers.db
        db = connect_db(current_dir(victim.data_dir) / "ledgers.db")
        try:
            db.execute("DELETE FROM entries WHERE ledger_id = ? AND entry_id BETWEEN 10 AND 19", (first,))
        finally:
            db.close()
        expected = [e for e in range(40) if not 10 <= e <= 19]
        wait_for(
            lambda: listed(victim.id, first) == expected, 30, what="the deleted entries to be listed missing"
        )
        assert listed(victim.id, second) == list(range(40))
        # 2. the whole ledger directory disappears under the running bookie
        import shutil

        shutil.rmtree(Path(victim.data_dir) / "current")
        proc = cluster._procs[victim.id]
        wait_for(lambda: proc.poll() is not None, 60, what="the bookie to stop")
        assert proc.returncode == 1
        zk = cluster.zk_client()
        wait_for(
            lambda: registry.bookie_state(zk, victim.id, cluster.root) == "absent",
            60,
            what="the bookie to deregister",
        )
        with pytest.raises(Exception) as failed:  # nothing answers for it any more: never "holds everything"
            clients[victim.id].get_list_of_entries(second).result(timeout=20)
        assert getattr(failed.value, "status", "UNAVAILABLE") in ("UNAVAILABLE", "EIO")
        log = (Path(victim.data_dir) / "bookie.log").read_text(errors="replace")
        assert "storage lost" in log and f"bookie {victim.id} stopped" in log  # a full stop, deregistered
        for b in cluster.bookies[1:]:  # the others are untouched
            assert listed(b.id, second) == list(range(40))
    finally:
        for c in clients.values():
            c.close()
