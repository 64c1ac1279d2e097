"""The bookie's wire protocol against real bookie processes: every status, garbage, listings, LAC, info."""

from __future__ import annotations

import itertools
import socket
import struct
from concurrent.futures import wait

import pytest

from bkaudit.cluster.local import LocalCluster
from bkaudit.errors import BookieError, FencedError
from bkaudit.formats import availability
from bkaudit.formats.entry import DigestManager, master_key
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.model.ledger import DigestType
from bkaudit.rpc.client import BookieClient
from bkaudit.rpc.operations import BookieInfo, ReadLacResult
from bkaudit.store import ZkStore

PWD = b"secret"
KEY = master_key(PWD)
_ledgers = itertools.count(1000)


def new_ledger() -> int:
    return next(_ledgers)


def entry(ledger_id: int, entry_id: int, payload: bytes = b"payload") -> bytes:
    return DigestManager(ledger_id, PWD, DigestType.CRC32C).package(entry_id, entry_id - 1, 0, payload)


@pytest.fixture(scope="module")
def bookie(cluster3: LocalCluster) -> str:
    return cluster3.bookies[0].id


@pytest.fixture
def client(cluster3: LocalCluster, bookie: str):
    c = BookieClient(bookie, bookie)
    yield c
    c.close()


def status_of(fut) -> str:  # type: ignore[no-untyped-def]
    exc = fut.exception(timeout=10)
    return "EOK" if exc is None else exc.status


def raw(target: str, *messages: bytes, payload: bytes | None = None) -> list[pb.Response]:
    """Send length-prefixed messages (or a raw `payload`) on one TCP connection, collect the responses
    until the bookie has answered every message or closed the connection."""
    host, port = target.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        if payload is None:
            payload = b"".join(struct.pack(">I", len(m)) + m for m in messages)
        sock.sendall(payload)
        buf, out = b"", []
        while len(out) < len(messages):
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
                size = struct.unpack(">I", buf[:4])[0]
                resp = pb.Response()
                resp.MergeFromString(buf[4 : 4 + size])
                out.append(resp)
                buf = buf[4 + size :]
        return out


def request(op: int, txn: int, *, version: int = pb.VERSION_THREE) -> pb.Request:
    req = pb.Request()
    req.header.version = version  # type: ignore[assignment]
    req.header.operation = op  # type: ignore[assignment]
    req.header.txnId = txn
    return req


# -- adds and reads ---------------------------------------------------------------------------------------
def test_add_read_and_last_entry(client: BookieClient) -> None:
    lid = new_ledger()
    wait([client.add_entry(lid, e, KEY, entry(lid, e)) for e in range(5)])
    assert client.read_entry(lid, 3).result(10) == entry(lid, 3)
    last = client.read_entry(lid, -1).result(10)
    assert DigestManager(lid, PWD, DigestType.CRC32C).verify(last).entry_id == 4
    client.add_entry(lid, 2, KEY, entry(lid, 2)).result(10)  # idempotent re-add


def test_missing_ledger_and_entry(client: BookieClient) -> None:
    lid = new_ledger()
    with pytest.raises(BookieError) as err:
        client.read_entry(lid, 0).result(10)
    assert (err.value.status, err.value.ledger_id) == ("ENOLEDGER", lid)
    assert err.value.bookie_id == client.bookie_id
    client.add_entry(lid, 0, KEY, entry(lid, 0)).result(10)
    assert status_of(client.read_entry(lid, 1)) == "ENOENTRY"
    assert status_of(client.get_list_of_entries(lid + 10_000)) == "ENOLEDGER"


def test_wrong_master_key_is_eua(client: BookieClient) -> None:
    lid = new_ledger()
    client.add_entry(lid, 0, KEY, entry(lid, 0)).result(10)
    assert status_of(client.add_entry(lid, 1, master_key(b"wrong"), entry(lid, 1))) == "EUA"
    assert status_of(client.read_entry(lid, -1, fence=True, master_key=master_key(b"wrong"))) == "EUA"
    lac = DigestManager(lid, PWD, DigestType.CRC32C).package_lac(0)
    assert status_of(client.write_lac(lid, 0, master_key(b"wrong"), lac)) == "EUA"


def test_fence_without_key_is_eua(client: BookieClient) -> None:
    lid = new_ledger()
    client.add_entry(lid, 0, KEY, entry(lid, 0)).result(10)
    assert status_of(client.read_entry(lid, -1, fence=True)) == "EUA"
    client.add_entry(lid, 1, KEY, entry(lid, 1)).result(10)  # not fenced by the refused request


def test_fencing_rejects_writer_but_not_recovery(client: BookieClient) -> None:
    lid = new_ledger()
    wait([client.add_entry(lid, e, KEY, entry(lid, e)) for e in range(3)])
    last = client.read_entry(lid, -1, fence=True, master_key=KEY).result(10)
    assert last == entry(lid, 2)
    with pytest.raises(FencedError) as err:
        client.add_entry(lid, 3, KEY, entry(lid, 3)).result(10)
    assert err.value.status == "EFENCED" and err.value.entry_id == 3
    client.add_entry(lid, 3, KEY, entry(lid, 3), recovery=True).result(10)
    assert client.read_entry(lid, 3).result(10) == entry(lid, 3)


def test_fence_of_unknown_ledger_then_noentry(client: BookieClient) -> None:
    lid = new_ledger()
    assert status_of(client.read_entry(lid, -1, fence=True, master_key=KEY)) == "ENOENTRY"
    assert status_of(client.add_entry(lid, 0, KEY, entry(lid, 0))) == "EFENCED"


def test_add_is_stored_under_the_ids_of_its_body(client: BookieClient) -> None:
    """BookieImpl.addEntry reads the ledger (getLedgerForEntry) and entry (ledger storage) ids from the entry
    itself; the request's ids only name the answer (WriteEntryProcessorV3). A body too short to hold them
    is EBADREQ (the exception reading them)."""
    lid = new_ledger()
    assert status_of(client.add_entry(lid, 0, KEY, b"short")) == "EBADREQ"
    assert status_of(client.read_entry(lid, 0)) == "ENOLEDGER"  # nothing was stored
    assert status_of(client.add_entry(lid, 0, KEY, entry(lid, 1))) == "EOK"
    other = lid + 60_000  # a ledger no other test uses
    assert status_of(client.add_entry(lid, 0, KEY, entry(other, 0))) == "EOK"
    assert status_of(client.read_entry(lid, 0)) == "ENOENTRY"
    assert client.read_entry(lid, 1).result(10) == entry(lid, 1)
    assert client.read_entry(other, 0).result(10) == entry(other, 0)


# -- LAC, info, auth ----------------------------------------------------------------------------------------
def test_write_and_read_lac(client: BookieClient) -> None:
    lid = new_ledger()
    dm = DigestManager(lid, PWD, DigestType.CRC32C)
    assert status_of(client.read_lac(lid)) == "ENOENTRY"  # ReadLacProcessorV3: neither body read
    client.add_entry(lid, 0, KEY, entry(lid, 0)).result(10)
    assert client.read_lac(lid).result(10) == ReadLacResult(None, entry(lid, 0))
    client.write_lac(lid, 0, KEY, dm.package_lac(0)).result(10)
    result = client.read_lac(lid).result(10)
    assert dm.verify_lac(result.lac_body) == 0 and result.last_entry_body == entry(lid, 0)


def test_bookie_info(client: BookieClient) -> None:
    info = client.get_bookie_info().result(10)
    assert isinstance(info, BookieInfo) and 0 < info.free_disk <= info.total_disk


def test_auth_answers_auth_disabled_plugin(bookie: str) -> None:
    req = request(pb.AUTH, 5)
    req.authRequest.authPluginName = "AuthDisabledPlugin"
    req.authRequest.payload = b""
    (resp,) = raw(bookie, req.SerializeToString())
    assert resp.status == pb.EOK and resp.header.txnId == 5
    assert resp.authResponse.authPluginName == "AuthDisabledPlugin"


# -- listings -----------------------------------------------------------------------------------------------
def test_list_of_entries_single_and_batch_match_what_was_written(client: BookieClient) -> None:
    written = {}
    for holes in ([], [3, 4, 9], [0], list(range(10, 20))):
        lid = new_ledger()
        ids = [e for e in range(25) if e not in holes]
        wait([client.add_entry(lid, e, KEY, entry(lid, e)) for e in ids])
        written[lid] = ids
    fenced_only = new_ledger()
    client.read_entry(fenced_only, -1, fence=True, master_key=KEY).exception(10)
    written[fenced_only] = []
    unknown = new_ledger() + 50_000
    for lid, ids in written.items():
        got = availability.decode(client.get_list_of_entries(lid).result(10))
        assert list(got) == ids
        assert client.get_list_of_entries(lid).result(10) == availability.encode(ids)
    # per-ledger requests gathered (any bookie) and the advertised batch operation give the same answer
    with BookieClient(client.bookie_id, client.target, batch_listing=True) as batching:
        for c in (client, batching):
            batch = c.get_list_of_entries_batch([*written, unknown]).result(10)
            assert set(batch) == {*written, unknown}
            for lid, ids in written.items():
                assert batch[lid] == availability.encode(ids)
            assert isinstance(batch[unknown], BookieError) and batch[unknown].status == "ENOLEDGER"


# -- protocol errors ----------------------------------------------------------------------------------------
def test_wrong_version_is_ebadversion(bookie: str) -> None:
    req = request(pb.READ_ENTRY, 7, version=pb.VERSION_TWO)
    req.readRequest.ledgerId = 1
    req.readRequest.entryId = 0
    (resp,) = raw(bookie, req.SerializeToString())
    assert resp.status == pb.EBADVERSION and resp.readResponse.status == pb.EBADVERSION
    assert (resp.header.version, resp.header.txnId) == (pb.VERSION_THREE, 7)  # getHeader()


def test_unknown_operation_is_ebadreq_without_sub_message(bookie: str) -> None:
    known_unsupported = request(pb.RANGE_READ_ENTRY, 8)
    known_unsupported.header.priority = 100
    (resp,) = raw(bookie, known_unsupported.SerializeToString())
    assert resp.status == pb.EBADREQ and resp.header == known_unsupported.header  # the request's, copied
    assert resp.ListFields()[0][0].name == "header" and len(resp.ListFields()) == 2  # header + status
    # operation 77 is not in the enum: proto2 keeps it as an unknown field, so the required `operation` is
    # missing and protobuf-java's parseFrom throws; the v2 decoder then reads op code 6 and throws too
    header = b"\x08\x03\x10\x4d\x18\x09"
    unknown = b"\x0a" + bytes([len(header)]) + header
    again = known_unsupported.SerializeToString()
    assert raw(bookie, again, unknown, again) == [resp]  # answered up to the unknown operation, then closed


def test_garbage_closes_the_connection_and_the_bookie_keeps_serving(bookie: str,
                                                                    client: BookieClient) -> None:
    ok = request(pb.GET_BOOKIE_INFO, 11)
    ok.getBookieInfoRequest.requested = 3
    # as a Java bookie: bytes that are not a v3 Request close the connection, nothing after them is answered
    assert raw(bookie, ok.SerializeToString(), b"\xff\xfe garbage \x00", ok.SerializeToString()) != []
    assert [r.header.txnId for r in raw(bookie, b"\xff\xfe garbage \x00", ok.SerializeToString())] == []
    assert raw(bookie, b"", ok.SerializeToString()) == []  # an empty frame has no header
    assert client.get_bookie_info().result(10).total_disk > 0  # and other clients are unaffected


def test_request_missing_required_fields_closes_the_connection(bookie: str) -> None:
    """parseFrom refuses an uninitialized Request, the v2 decoder cannot read it either (its first int
    0x0a060803 is version 10, op code 6): a Java bookie closes the connection."""
    req = request(pb.ADD_ENTRY, 12)
    req.addRequest.ledgerId = 1  # no entryId, masterKey, body
    info = request(pb.GET_BOOKIE_INFO, 13)
    info.getBookieInfoRequest.requested = 3
    assert raw(bookie, req.SerializePartialToString(), info.SerializeToString()) == []


def test_long_poll_read_is_refused(bookie: str) -> None:
    req = request(pb.READ_ENTRY, 13)
    req.readRequest.ledgerId = 1
    req.readRequest.entryId = -1
    req.readRequest.previousLAC = 0
    (resp,) = raw(bookie, req.SerializeToString())
    assert resp.status == pb.EBADREQ


def test_pipelined_requests_are_matched_by_txn(client: BookieClient) -> None:
    """Adds, reads and listings interleaved on one stream complete in any order; each future gets its own."""
    lid = new_ledger()
    adds = [client.add_entry(lid, e, KEY, entry(lid, e)) for e in range(300)]
    infos = [client.get_bookie_info() for _ in range(20)]
    wait(adds + infos)
    assert all(f.exception() is None for f in adds + infos)
    reads = {e: client.read_entry(lid, e) for e in range(0, 300, 7)}
    lists = [client.get_list_of_entries(lid) for _ in range(10)]
    wait([*reads.values(), *lists])
    assert all(f.result() == entry(lid, e) for e, f in reads.items())
    assert all(f.result() == availability.encode(range(300)) for f in lists)


def test_optional_grpc_listener_serves_the_same_bookie(cluster_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`[bookie] grpc_port` adds a `bkaudit-grpc` endpoint (never bookie-rpc); transport="grpc" uses it."""
    from bkaudit.formats import records
    from bkaudit.rpc.pool import BookieClientPool
    from bkaudit.zk import paths

    conf = tmp_path / "grpc.toml"
    conf.write_text("[bookie]\ngrpc_port = 0\n")
    cluster = cluster_factory(bookies=1, racks=1, bookie_args=["--config", str(conf)])
    b = cluster.bookies[0]
    info = records.parse_bookie_service_info(
        cluster.zk_client().get(paths.available_path(b.id, root=cluster.root))[0], b.id)
    native, grpc_endpoint = info.endpoint("bookie-rpc"), info.endpoint("bkaudit-grpc")
    assert native is not None and native.port == b.port
    assert grpc_endpoint is not None and grpc_endpoint.port not in (0, b.port)
    lid = new_ledger()
    registry = ZkStore(cluster.zk_client(), root=cluster.root).registry
    with BookieClientPool(registry=registry, transport="grpc") as pool:
        client = pool.get(b.id)
        assert client.target.endswith(f":{grpc_endpoint.port}")
        wait([client.add_entry(lid, e, KEY, entry(lid, e)) for e in range(3)])
        assert client.read_entry(lid, 2).result(10) == entry(lid, 2)
        assert client.get_list_of_entries_batch([lid]).result(10)[lid] == availability.encode([0, 1, 2])
    with BookieClientPool(registry=registry) as pool:  # and natively, the same data
        assert pool.get(b.id).read_entry(lid, 1).result(10) == entry(lid, 1)
