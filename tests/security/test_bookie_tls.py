"""TLS on both bookie listeners of a mutual-TLS bookie (`[bookie] tls_cert/tls_key/tls_ca`, `require_tls`,
`grpc_port`):
only a client that trusts the bookie's CA and presents a certificate that CA signed gets served, on the
native protocol (START_TLS) and on the gRPC listener alike. Refused clients cannot write: an entry one of
them tried to add is not on the bookie afterwards (read back by a trusted client).

tests/bookie/test_bookie_security.py covers the native protocol's other cases (TLS without mTLS, the
raw START_TLS exchange, ZooKeeper digest auth); this file adds the gRPC listener and refused writes.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from bkaudit.errors import BookieError
from bkaudit.formats import records
from bkaudit.formats.entry import DigestManager, master_key
from bkaudit.model.ledger import DigestType
from bkaudit.rpc.client import BookieClient
from bkaudit.rpc.grpcclient import GrpcBookieClient
from bkaudit.rpc.tls import TlsConfig
from bkaudit.zk import paths
from tests.pki import make_pki

PWD = b"tls-test"
_ledgers = itertools.count(5000)


def _entry(ledger_id: int, entry_id: int) -> bytes:
    return DigestManager(ledger_id, PWD, DigestType.CRC32C).package(entry_id, entry_id - 1, 0, b"payload")


@pytest.fixture(scope="module")
def mtls_bookie(zk_server, tmp_path_factory):  # type: ignore[no-untyped-def]
    """One bookie with mutual TLS on the native port and a gRPC listener; its targets and the PKI."""
    from tests.fixtures.cluster import _make

    pki = make_pki(tmp_path_factory.mktemp("pki"))
    conf = tmp_path_factory.mktemp("conf") / "mtls.toml"
    conf.write_text(f'[bookie]\ntls_cert = "{pki["server_cert"]}"\ntls_key = "{pki["server_key"]}"\n'
                    f'tls_ca = "{pki["ca"]}"\nrequire_tls = true\ngrpc_port = 0\n')
    cluster = _make(zk_server, tmp_path_factory, bookies=1, racks=1, bookie_args=["--config", str(conf)])
    try:
        b = cluster.bookies[0]
        info = records.parse_bookie_service_info(
            cluster.zk_client().get(paths.available_path(b.id, root=cluster.root))[0], b.id)
        grpc_endpoint = info.endpoint("bkaudit-grpc")
        assert grpc_endpoint is not None
        yield {"id": b.id, "native": b.id, "grpc": f"{b.host}:{grpc_endpoint.port}", "pki": pki}
    finally:
        cluster.down()


CLIENTS = {
    "plaintext": lambda p: None,
    "untrusted bookie CA": lambda p: TlsConfig(ca=p["other_ca"], cert=p["client_cert"], key=p["client_key"]),
    "no client certificate": lambda p: TlsConfig(ca=p["ca"]),
    "unknown client certificate": lambda p: TlsConfig(ca=p["ca"], cert=p["rogue_cert"], key=p["rogue_key"]),
}
TRANSPORTS = {"native": BookieClient, "grpc": GrpcBookieClient}


def _trusted(p: dict[str, str]) -> TlsConfig:
    return TlsConfig(ca=p["ca"], cert=p["client_cert"], key=p["client_key"])


def _client(transport: str, bookie: dict[str, Any], tls: TlsConfig | None) -> Any:
    return TRANSPORTS[transport](bookie["id"], bookie[transport], tls=tls, connect_timeout_s=3,
                                 request_timeout_s=20)


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_a_trusted_client_certificate_is_served(mtls_bookie, transport) -> None:  # type: ignore[no-untyped-def]
    lid = next(_ledgers)
    with _client(transport, mtls_bookie, _trusted(mtls_bookie["pki"])) as client:
        client.add_entry(lid, 0, master_key(PWD), _entry(lid, 0)).result(20)
        assert client.read_entry(lid, 0).result(20) == _entry(lid, 0)
        assert client.get_bookie_info().result(20).total_disk > 0


@pytest.mark.parametrize("transport", list(TRANSPORTS))
@pytest.mark.parametrize("who", list(CLIENTS))
def test_clients_without_a_trusted_certificate_are_refused(mtls_bookie, transport, who) -> None:  # type: ignore[no-untyped-def]
    lid = next(_ledgers)
    with _client(transport, mtls_bookie, CLIENTS[who](mtls_bookie["pki"])) as refused:
        with pytest.raises(BookieError) as info:
            refused.get_bookie_info().result(30)
        # native plaintext: with require_tls the bookie answers EUA (not authenticated) as BookKeeper's
        # AuthHandler does under a TLS-authenticating auth provider; a failed
        # TLS handshake or a refused gRPC channel is UNAVAILABLE
        expected = "EUA" if (transport, who) == ("native", "plaintext") else "UNAVAILABLE"
        assert info.value.status == expected
        with pytest.raises(BookieError):
            refused.add_entry(lid, 0, master_key(PWD), _entry(lid, 0)).result(30)
    with _client(transport, mtls_bookie, _trusted(mtls_bookie["pki"])) as trusted:
        with pytest.raises(BookieError) as missing:  # the refused write never reached the storage
            trusted.read_entry(lid, 0).result(20)
        assert missing.value.status in ("ENOLEDGER", "ENOENTRY")
