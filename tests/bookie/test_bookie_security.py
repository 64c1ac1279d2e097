"""Transport and metadata security: TLS, mutual TLS (certificates made here), ZooKeeper digest auth + ACLs."""

from __future__ import annotations

import socket
import ssl
import struct

import pytest
from kazoo.exceptions import NoAuthError

from bkaudit.config import ZkSettings
from bkaudit.errors import BookieError
from bkaudit.formats import records
from bkaudit.formats.proto import BookkeeperProtocol_pb2 as pb
from bkaudit.rpc.client import BookieClient
from bkaudit.rpc.pool import BookieClientPool
from bkaudit.rpc.tls import TlsConfig
from bkaudit.store import ZkStore
from bkaudit.zk import client as zkclient
from bkaudit.zk import paths
from tests.bookkeeper_wire import BOOKIE_KINDS, KEY, V2, Messages, Wire, entry, v2_call
from tests.pki import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _status(client: BookieClient) -> str:
    exc = client.get_bookie_info().exception(timeout=20)
    return "EOK" if exc is None else exc.status  # type: ignore[union-attr]


def test_tls_bookie(cluster_factory, pki, tmp_path) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "tls.toml"
    conf.write_text(f'[bookie]\ntls_cert = "{pki["server_cert"]}"\ntls_key = "{pki["server_key"]}"\n')
    cluster = cluster_factory(bookies=1, racks=1, bookie_args=["--config", str(conf)])
    b = cluster.bookies[0]
    info = records.parse_bookie_service_info(
        cluster.zk_client().get(paths.available_path(b.id, root=cluster.root))[0], b.id)
    assert info.properties_dict()["bkaudit.tls"] == "tls"
    with BookieClient(b.id, b.id, connect_timeout_s=2) as plain:
        assert _status(plain) == "EOK"  # BookKeeper's default auth provider: plaintext is served too
    with BookieClient(b.id, b.id, tls=TlsConfig(ca=pki["other_ca"]), connect_timeout_s=2) as wrong_ca:
        assert _status(wrong_ca) == "UNAVAILABLE"
    with BookieClient(b.id, b.id, tls=TlsConfig(ca=pki["ca"])) as good:
        assert _status(good) == "EOK"
    # as a Java client (tlsHostnameVerificationEnabled = false): the chain is checked, not the name
    elsewhere = TlsConfig(ca=pki["ca"], server_name="not-this-bookie.example")
    with BookieClient(b.id, b.id, tls=elsewhere) as unnamed:
        assert _status(unnamed) == "EOK"
    checked = TlsConfig(ca=pki["ca"], server_name="not-this-bookie.example", hostname_verification=True)
    with BookieClient(b.id, b.id, tls=checked, connect_timeout_s=2) as strict:
        assert _status(strict) == "UNAVAILABLE"


def test_mutual_tls_rejects_clients_without_a_trusted_certificate(cluster_factory, pki, tmp_path) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "mtls.toml"
    conf.write_text(f'[bookie]\ntls_cert = "{pki["server_cert"]}"\ntls_key = "{pki["server_key"]}"\n'
                    f'tls_ca = "{pki["ca"]}"\n')
    cluster = cluster_factory(bookies=1, racks=1, bookie_args=["--config", str(conf)])
    b = cluster.bookies[0]
    anonymous = BookieClient(b.id, b.id, tls=TlsConfig(ca=pki["ca"]), connect_timeout_s=2)
    with anonymous, pytest.raises(BookieError, match="UNAVAILABLE"):
        anonymous.get_bookie_info().result(20)
    rogue_tls = TlsConfig(ca=pki["ca"], cert=pki["rogue_cert"], key=pki["rogue_key"])
    with BookieClient(b.id, b.id, tls=rogue_tls, connect_timeout_s=2) as rogue:
        assert _status(rogue) == "UNAVAILABLE"
    tls = TlsConfig(ca=pki["ca"], cert=pki["client_cert"], key=pki["client_key"])
    registry = ZkStore(cluster.zk_client(), root=cluster.root).registry
    with BookieClientPool(registry=registry, tls=tls) as pool:
        assert _status(pool.get(b.id)) == "EOK"


def test_zookeeper_digest_auth_and_creator_acls(cluster_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "zk.toml"
    conf.write_text('[zk]\nauth_digest = "bookie:s3cret"\nenable_security = true\n')
    cluster = cluster_factory(bookies=2, racks=2, bookie_args=["--config", str(conf)])
    cookie = paths.cookie_path(cluster.bookies[0].id, root=cluster.root)
    registration = paths.available_path(cluster.bookies[0].id, root=cluster.root)
    anonymous = cluster.zk_client()
    for path in (cookie, registration, paths.RACKS_PATH):
        with pytest.raises(NoAuthError):
            anonymous.set(path, b"tampered")
    with pytest.raises(NoAuthError):  # deleting needs DELETE on the parent: cookies/ was created secured
        anonymous.delete(cookie)
    stranger = zkclient.connect(ZkSettings(connect=cluster.zk, auth_digest="mallory:guess"))
    try:
        with pytest.raises(NoAuthError):
            stranger.set(cookie, b"tampered")
    finally:
        zkclient.close(stranger)
    owner = zkclient.connect(ZkSettings(connect=cluster.zk, auth_digest="bookie:s3cret"))
    try:
        acl, _ = owner.get_acls(cookie)
        assert [(a.perms, a.id.scheme) for a in acl] == [(31, "digest")]  # CREATOR_ALL_ACL
        data, _ = owner.get(cookie)
        assert records.parse_cookie(data).bookie_host == cluster.bookies[0].id
        assert set(records.parse_rack_config(owner.get(paths.RACKS_PATH)[0])["default"]) == set(cluster.ids())
    finally:
        zkclient.close(owner)


def _frame(req: pb.Request) -> bytes:
    data = req.SerializeToString()
    return struct.pack(">I", len(data)) + data


def _read_frame(sock: socket.socket | ssl.SSLSocket) -> pb.Response | None:
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    return pb.Response.FromString(buf[4:])


def _v3(op: int, txn: int) -> pb.Request:
    req = pb.Request()
    req.header.version = pb.VERSION_THREE
    req.header.operation = op  # type: ignore[assignment]
    req.header.txnId = txn
    return req


def _start_tls_then_info(address: tuple[str, int], context: ssl.SSLContext) -> pb.Response | None:
    """PerChannelBookieClient's sequence on a raw socket: plaintext START_TLS request and EOK answer, then the
    TLS handshake on the same socket, then a request inside TLS (None: the bookie closed the connection)."""
    with socket.create_connection(address, timeout=20) as sock:
        start = _v3(pb.START_TLS, 1)
        start.startTLSRequest.SetInParent()
        sock.sendall(_frame(start))
        answer = _read_frame(sock)
        assert answer is not None and answer.status == pb.EOK and answer.HasField("startTLSResponse")
        assert answer.header.txnId == 1
        with context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
            info = _v3(pb.GET_BOOKIE_INFO, 2)
            info.getBookieInfoRequest.requested = 3
            try:
                tls.sendall(_frame(info))
                return _read_frame(tls)
            except (ssl.SSLError, ConnectionError):
                return None


def test_start_tls_on_a_raw_socket(cluster_factory, pki, tmp_path) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "mtls.toml"
    conf.write_text(f'[bookie]\ntls_cert = "{pki["server_cert"]}"\ntls_key = "{pki["server_key"]}"\n'
                    f'tls_ca = "{pki["ca"]}"\nrequire_tls = true\n')
    cluster = cluster_factory(bookies=1, racks=1, bookie_args=["--config", str(conf)])
    host, port = cluster.bookies[0].id.rsplit(":", 1)
    address = (host, int(port))
    with socket.create_connection(address, timeout=20) as plain:  # require_tls: not authenticated before TLS
        req = _v3(pb.GET_BOOKIE_INFO, 9)
        req.getBookieInfoRequest.requested = 3
        plain.sendall(_frame(req))
        answer = _read_frame(plain)
        assert answer is not None and answer.status == pb.EUA and answer.header.txnId == 9
    trusted = ssl.create_default_context(cafile=pki["ca"])
    trusted.load_cert_chain(pki["client_cert"], pki["client_key"])
    info = _start_tls_then_info(address, trusted)
    assert info is not None and info.status == pb.EOK and info.getBookieInfoResponse.totalDiskCapacity > 0
    untrusted = ssl.create_default_context(cafile=pki["ca"])
    untrusted.load_cert_chain(pki["rogue_cert"], pki["rogue_key"])
    with pytest.raises(ssl.SSLError):  # the bookie refuses a client certificate its CA did not sign
        if _start_tls_then_info(address, untrusted) is None:
            raise ssl.SSLError("connection closed by the bookie after the handshake")
    anonymous = ssl.create_default_context(cafile=pki["ca"])
    with pytest.raises(ssl.SSLError):
        if _start_tls_then_info(address, anonymous) is None:
            raise ssl.SSLError("connection closed by the bookie after the handshake")


@pytest.fixture(scope="module")
def bk(tmp_path_factory: pytest.TempPathFactory) -> Messages:
    return Messages(tmp_path_factory.mktemp("proto"))


def _tls_bookie(cluster_factory, pki, tmp_path, *, require_tls: bool, kind: str = "bkaudit"):  # type: ignore[no-untyped-def]
    """A bookie with mutual TLS: bkaudit's, or Apache BookKeeper's own with the same PEM files
    (TLSContextFactory, tlsClientAuthentication, every other setting BookKeeper's default)."""
    if kind == "java":
        cluster = cluster_factory(bookies=1, racks=1, java={0: "sorted"}, java_settings={
            "tlsProviderFactoryClass": "org.apache.bookkeeper.tls.TLSContextFactory",
            "tlsKeyStoreType": "PEM", "tlsKeyStore": pki["server_key"],
            "tlsCertificatePath": pki["server_cert"], "tlsTrustStoreType": "PEM", "tlsTrustStore": pki["ca"],
            "tlsClientAuthentication": True})
        host, port = cluster.bookies[0].id.rsplit(":", 1)
        return cluster, (host, int(port))
    conf = tmp_path / "tls.toml"
    conf.write_text(f'[bookie]\ntls_cert = "{pki["server_cert"]}"\ntls_key = "{pki["server_key"]}"\n'
                    f'tls_ca = "{pki["ca"]}"\nrequire_tls = {str(require_tls).lower()}\n')
    cluster = cluster_factory(bookies=1, racks=1, bookie_args=["--config", str(conf)])
    host, port = cluster.bookies[0].id.rsplit(":", 1)
    return cluster, (host, int(port))


@pytest.mark.parametrize("kind", BOOKIE_KINDS)
def test_a_tls_bookie_serves_plaintext_v3_and_v2_clients_as_java_does(  # type: ignore[no-untyped-def]
        bk, cluster_factory, pki, tmp_path, kind, request) -> None:
    """Also run against Apache BookKeeper's own bookie with the same certificates (parameter `kind`).
    AuthProviderFactoryFactory's default (AuthenticationDisabledAuthProviderFactory) completes the
    authentication as the channel opens, so AuthHandler.ServerSideHandler passes every request through, with
    or without TLS (here even mutual TLS). BookieService.publishInfo registers the "tls" extension on the
    bookie-rpc endpoint when TLS is configured. Far end: tests/bookkeeper_wire.py (BookKeeper's code)."""
    if kind == "java":
        request.getfixturevalue("java_bookkeeper")  # fails, never skips, without the jars
    cluster, address = _tls_bookie(cluster_factory, pki, tmp_path, require_tls=False, kind=kind)
    b = cluster.bookies[0]
    info = bk.BookieServiceInfoFormat.FromString(
        cluster.zk_client().get(paths.available_path(b.id, root=cluster.root))[0])
    (rpc,) = [e for e in info.endpoints if e.protocol == "bookie-rpc"]
    assert (rpc.id, list(rpc.extensions), rpc.port) == ("bookie", ["tls"], address[1])
    # a Java bookie with httpServerEnabled also registers HttpService's {id: httpserver, protocol: http};
    # a bkaudit bookie runs no HTTP server of its own
    others = {(e.id, e.protocol) for e in info.endpoints} - {("bookie", "bookie-rpc")}
    assert others == ({("httpserver", "http")} if kind == "java" else set())
    lid = 8_000
    plain = Wire(bk, address)
    try:
        (answer,) = plain.call(plain.request("GET_BOOKIE_INFO", getBookieInfoRequest={"requested": 3}))
        assert answer.status == bk.status["EOK"]
        (added,) = v2_call(plain, V2.add(entry(lid, 0, b"plain v2")))
        (read,) = v2_call(plain, V2.read(lid, 0))
        assert (added.rc, read.rc, read.data) == (V2.EOK, V2.EOK, entry(lid, 0, b"plain v2"))
    finally:
        plain.close()
    # a v2 client with TLS: START_TLS (v3, ResponseDecoder expects it), then v2 inside TLS
    trusted = ssl.create_default_context(cafile=pki["ca"])
    trusted.load_cert_chain(pki["client_cert"], pki["client_key"])
    with socket.create_connection(address, timeout=20) as sock:
        start = Wire(bk, address, sock=sock)
        (started,) = start.call(start.request("START_TLS", startTLSRequest={}))
        assert started.status == bk.status["EOK"]
        with trusted.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
            secure = Wire(bk, address, sock=tls)
            (read,) = v2_call(secure, V2.read(lid, 0))
            assert (read.rc, read.data) == (V2.EOK, entry(lid, 0, b"plain v2"))


def test_require_tls_refuses_plaintext_as_an_unauthenticated_channel(  # type: ignore[no-untyped-def]
        bk, cluster_factory, pki, tmp_path) -> None:
    """`[bookie] require_tls` (what a TLS-authenticating bookieAuthProviderFactoryClass does): before the
    handshake AuthHandler answers v3 requests and v2 ADD / READ with EUA and closes on other v2 packets."""
    _, address = _tls_bookie(cluster_factory, pki, tmp_path, require_tls=True)
    plain = Wire(bk, address)
    try:
        (answer,) = plain.call(plain.request("GET_BOOKIE_INFO", getBookieInfoRequest={"requested": 3}))
        assert answer.status == bk.status["EUA"]
        refused = v2_call(plain, V2.add(entry(8_001, 0, b"x")), V2.read(8_001, 0))
        assert sorted((r.op, r.rc) for r in refused) == [(V2.ADDENTRY, V2.EUA), (V2.READENTRY, V2.EUA)]
        plain.sock.sendall(V2.batch_read(8_001, 0, request_id=1, max_count=1, max_size=1 << 20, key=KEY))
        assert plain.closed_by_peer()
    finally:
        plain.close()
