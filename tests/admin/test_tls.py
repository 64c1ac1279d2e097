"""Optional TLS: with a certificate and key the API serves HTTPS only, verified against the issuing CA."""

from __future__ import annotations

import ssl

import httpx
import pytest

from tests.admin.support import ADMIN, add_cookie, serve
from tests.pki import make_pki


def test_https_with_a_ca_signed_certificate(zk, zk_root, tmp_path) -> None:
    pki = make_pki(tmp_path)
    ca_path, cert, key = pki["ca"], pki["server_cert"], pki["server_key"]
    add_cookie(zk, zk_root, "10.0.0.1:3181")
    server = serve(zk, zk_root, tls_cert=cert, tls_key=key)
    try:
        assert server.url.startswith("https://")
        trust = ssl.create_default_context(cafile=ca_path)
        with httpx.Client(base_url=server.url, verify=trust, timeout=30) as api:
            assert api.get("/heartbeat").json() == {"status": "OK"}
            r = api.put("/api/v1/bookie/lifecycle", params={"bookie": "10.0.0.1:3181"},
                        json={"state": "Draining"}, headers=ADMIN)
            assert r.status_code == 200 and r.json()["state"] == "Draining"
        with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port is not served
            httpx.get(server.url.replace("https://", "http://") + "/heartbeat", timeout=10).raise_for_status()
    finally:
        server.stop()
