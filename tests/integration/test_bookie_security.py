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
from bkaudit.zk import client as zkclient
from bkaudit.zk import paths
from tests.pki import make_pki

pytestmark = pytest.mark.cluster


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
        assert _status(plain) == "EUA"  # no START_TLS: not authenticated
    with BookieClient(b.id, b.id, tls=TlsConfig(ca=pki["other_ca"]), connect_timeout_s=2) as wrong_ca:
        assert _status(wrong_ca) == "UNAVAILABLE"
    with BookieClient(b.id, b.id, tls=TlsConfig(ca=pki["ca"])) as good:
        assert _status(good) == "EOK"


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
    with BookieClientPool(zk=cluster.zk_client(), root=cluster.root, tls=tls) as pool:
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
                    f'tls_ca = "{pki["ca"]}"\n')
    cluster = cluster_factory(bookies=1, racks=1, bookie_args=["--config", str(conf)])
    host, port = cluster.bookies[0].id.rsplit(":", 1)
    address = (host, int(port))
    with socket.create_connection(address, timeout=20) as plain:  # before TLS: not authenticated
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
