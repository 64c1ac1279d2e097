"""What every request passes before the API looks at it (issue 32 items 1, 6 and 9), on a real uvicorn server
over the embedded ZooKeeper, with raw sockets where the bytes on the wire matter:

- the token is checked from the headers alone: a malformed body without a token is 401, and a 300 MiB
  body that is announced but never sent is refused at once (nothing waits for it, nothing buffers it);
- bodies are bounded by `[admin] max_body_bytes` on every route, announced (Content-Length) or not
  (chunked);
- an invalid bookie id (a NUL, a '/') is a clean 400 that is never handed to ZooKeeper, and an unexpected
  error is a JSON 500; either way the client's connection stays usable;
- every answer carries the CSP and frame headers; 405 says which methods the path has; /docs and /redoc
  (CDN-loaded pages) are not served and /openapi.json follows the read rule.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from bkaudit.admin import views
from bkaudit.zk import paths
from tests.admin.support import ADMIN, READER, RawConnection, add_cookie, serve

A = "10.0.0.1:3181"
HUGE = 300 * 1024 * 1024


@pytest.fixture
def server(zk, zk_root):  # type: ignore[no-untyped-def]
    add_cookie(zk, zk_root, A)
    zk.ensure_path(paths.readonly_root(root=zk_root))
    served = serve(zk, zk_root, max_body_bytes=4096)
    try:
        yield served
    finally:
        served.stop()


def test_a_malformed_body_without_a_token_is_401_not_422(server) -> None:  # type: ignore[no-untyped-def]
    # the repro: curl -X PUT -H 'content-type: application/json' -d '{"state":' .../lifecycle?bookie=x
    with httpx.Client(base_url=server.url, timeout=30) as api:
        for headers in ({}, {"Authorization": "Bearer nope"}, READER):
            r = api.put("/api/v1/bookie/lifecycle", params={"bookie": "x"}, content=b'{"state":',
                        headers={"Content-Type": "application/json", **headers})
            assert r.status_code == (403 if headers is READER else 401), r.text
            assert r.json()["error"]
        r = api.put("/api/v1/bookie/lifecycle", params={"bookie": A}, content=b'{"state":',
                    headers={"Content-Type": "application/json", **ADMIN})
        assert r.status_code == 422 and r.json()["detail"][0]["type"] == "json_invalid"


def test_the_token_is_checked_before_any_body_is_read(server) -> None:  # type: ignore[no-untyped-def]
    """A 300 MiB PUT is announced and its first bytes sent: the 401 comes at once, before the body (which is
    never sent), and the server closes the connection instead of reading (and buffering) the rest."""
    for headers, status in (({}, 401), ({"Authorization": "Bearer nope"}, 401), (READER, 403)):
        conn = RawConnection(server.url, timeout_s=10)
        try:
            started = time.monotonic()
            conn.send("PUT", f"/api/v1/bookie/lifecycle?bookie={A}",
                      {"Content-Type": "application/json", "Content-Length": str(HUGE), **headers},
                      body=b'{"state": "Draining", "reason": "' + b"x" * 1000)
            got, answer_headers, body = conn.response()
            assert got == status and json.loads(body)["error"]
            assert time.monotonic() - started < 5
            assert answer_headers.get("connection") == "close"
            assert conn.closed_by_server()
        finally:
            conn.close()


def test_bodies_over_the_limit_are_refused_on_every_route(server) -> None:  # type: ignore[no-untyped-def]
    # announced: 413 at once, also with the admin token, also on a route that takes no body
    for method, target in (("PUT", f"/api/v1/bookie/lifecycle?bookie={A}"), ("POST", "/api/v1/webhooks"),
                           ("GET", "/heartbeat"), ("GET", "/api/v1/bookie/list_bookie_info")):
        conn = RawConnection(server.url)
        try:
            conn.send(method, target,
                      {"Content-Type": "application/json", "Content-Length": str(HUGE), **ADMIN})
            status, headers, body = conn.response()
            assert status == 413 and "max_body_bytes" in json.loads(body)["error"], (method, target)
            assert headers["connection"] == "close" and "content-security-policy" in headers
        finally:
            conn.close()
    # not announced (chunked): cut off at the limit (4096 bytes here) while it is read
    conn = RawConnection(server.url)
    try:
        conn.send("PUT", f"/api/v1/bookie/lifecycle?bookie={A}",
                  {"Content-Type": "application/json", "Transfer-Encoding": "chunked", **ADMIN})
        chunk = b"x" * 1024
        try:
            for _ in range(64):
                conn.sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except OSError:
            pass  # the server answered and closed the connection while the client was still sending
        status, _, body = conn.response()
        assert status == 413 and "max_body_bytes" in json.loads(body)["error"]
    finally:
        conn.close()
    # a body within the limit is served as before
    with httpx.Client(base_url=server.url, timeout=30) as api:
        r = api.put("/api/v1/bookie/lifecycle", params={"bookie": A},
                    json={"state": "Draining", "reason": "x" * 500}, headers=ADMIN)
        assert r.status_code == 200, r.text


BOOKIE_ROUTES = [("GET", "/api/v1/bookie/state"), ("GET", "/api/v1/bookie/state/readonly"),
                 ("PUT", "/api/v1/bookie/state/readonly"), ("GET", "/api/v1/bookie/lifecycle"),
                 ("PUT", "/api/v1/bookie/lifecycle"), ("GET", "/api/v1/bookie/lifecycle/history"),
                 ("GET", "/api/v1/bookie/drain_progress"), ("GET", "/api/v1/bookie/cookie"),
                 ("DELETE", "/api/v1/bookie/cookie")]


BAD_IDS = ["a\x00b", "10.0.0.1:3181\x00", "\x01", "a/b", "..", "a b", "readonly", "ü:1"]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_an_invalid_bookie_id_is_a_clean_400_on_every_route(server, bad: str) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=server.url, timeout=30, headers=ADMIN) as api:
        for method, path in BOOKIE_ROUTES:
            body = {"readOnly": True} if "readonly" in path else {"state": "Draining"}
            r = api.request(method, path, params={"bookie": bad}, json=body if method == "PUT" else None)
            assert r.status_code == 400, f"{method} {path} {bad!r}: {r.status_code} {r.text}"
            assert "bookieid" in r.json()["error"].lower().replace(" ", "")


def test_a_nul_in_a_bookie_id_leaves_the_connection_usable(server) -> None:  # type: ignore[no-untyped-def]
    conn = RawConnection(server.url)
    try:
        for _ in range(2):
            conn.send("GET", "/api/v1/bookie/lifecycle/history?bookie=a%00b")
            status, headers, body = conn.response()
            assert status == 400 and "BookieId" in json.loads(body)["error"]
            assert headers.get("connection") != "close"
            conn.send("GET", "/heartbeat")  # the next request on the same connection
            assert conn.response()[0] == 200
    finally:
        conn.close()


def test_an_unexpected_error_is_a_json_500_and_the_connection_stays_usable(
    server, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(views, "data_loss", broken)
    conn = RawConnection(server.url)
    try:
        conn.send("GET", "/api/v1/autorecovery/data_loss")
        status, headers, body = conn.response()
        assert status == 500 and json.loads(body) == {"error": "internal error: RuntimeError"}
        assert "content-security-policy" in headers
        conn.send("GET", "/heartbeat")
        assert conn.response()[0] == 200
    finally:
        conn.close()


def test_every_answer_carries_csp_and_frame_headers(server) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=server.url, timeout=30) as api:
        answers = [api.get("/heartbeat"), api.get("/dashboard"), api.get("/"), api.get("/openapi.json"),
                   api.get("/nothing-here"), api.put("/heartbeat"), api.get("/api/v1/webhooks"),
                   api.get("/api/v1/webhooks", headers=READER), api.get("/api/v1/bookie/state"),
                   api.get("/api/v1/bookie/state", params={"bookie": "a\x00"}),
                   api.put("/api/v1/bookie/lifecycle", params={"bookie": A}, json={}, headers=ADMIN)]
    assert [r.status_code for r in answers] == [200, 200, 307, 200, 404, 405, 401, 403, 422, 400, 422]
    for r in answers:
        csp = r.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp, r.request.url
        assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
    dashboard = answers[1]
    assert "script-src 'sha256-" in dashboard.headers["content-security-policy"]
    assert "http://" not in dashboard.text and "https://" not in dashboard.text  # nothing from elsewhere
    assert "style=" not in dashboard.text  # inline style attributes would need 'unsafe-inline'


def test_405_names_the_allowed_methods(server) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=server.url, timeout=30) as api:
        r = api.post("/api/v1/bookie/lifecycle", params={"bookie": A}, json={})
        assert r.status_code == 405 and r.json()["error"]
        assert set(r.headers["allow"].replace(" ", "").split(",")) >= {"GET", "PUT"}
        r = api.delete("/heartbeat")
        assert r.status_code == 405 and "GET" in r.headers["allow"]


def test_no_cdn_pages_and_the_openapi_document_follows_the_read_rule(zk, zk_root, server) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=server.url, timeout=30) as api:
        assert api.get("/docs").status_code == 404 and api.get("/redoc").status_code == 404
        assert api.get("/docs/oauth2-redirect").status_code == 404
        assert api.get("/openapi.json").json()["openapi"].startswith("3.")  # anonymous reads are on
    closed = serve(zk, zk_root, anonymous_read=False)
    try:
        with httpx.Client(base_url=closed.url, timeout=30) as api:
            r = api.get("/openapi.json")
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert api.get("/openapi.json", headers=READER).status_code == 200
            assert api.get("/heartbeat").status_code == 200  # liveness never needs a token
            assert api.get("/").status_code == 307  # the redirect to /dashboard, which needs one
            assert api.get("/dashboard").status_code == 401
    finally:
        closed.stop()
