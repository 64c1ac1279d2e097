"""Every endpoint of the admin API on a real uvicorn server over the embedded ZooKeeper: answers, auth
refusals (401/403), bad input (4xx JSON) and state changes verified in ZooKeeper itself."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from bkaudit.formats import records
from bkaudit.model import lifecycle as lc
from bkaudit.model.dataloss import DataLossRecord, now_iso
from bkaudit.store import ZkStore
from bkaudit.zk import dataloss, paths, registry
from bkaudit.zk import lifecycle as store
from bkaudit.zk import underreplication as ur
from tests.admin.support import ADMIN, READER, add_cookie, add_ledger, serve, write_audit_run

A, B, C = "10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181"


@pytest.fixture
def api(zk, zk_root, tmp_path):
    for b in (A, B, C):
        add_cookie(zk, zk_root, b)
    zk.ensure_path(paths.readonly_root(root=zk_root))
    registry.register(zk, A, bkaudit_registration(A), root=zk_root)  # follows the switch itself
    registry.register(zk, B, b"", readonly=True, root=zk_root)
    warehouse = str(tmp_path / "wh")
    server = serve(zk, zk_root, warehouse=warehouse)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            client.warehouse = warehouse  # type: ignore[attr-defined]
            yield client
    finally:
        server.stop()


def bkaudit_registration(bookie: str) -> bytes:
    host, port = bookie.rsplit(":", 1)
    info = records.bookie_service_info_for(bookie, host, int(port), properties={"bkaudit.version": "test"})
    return records.encode_bookie_service_info(info)


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert isinstance(body.get("error"), str) and body["error"]
    return body


def test_heartbeat_and_listings(api: httpx.Client) -> None:
    assert api.get("/heartbeat").json() == {"status": "OK"}
    assert api.get("/api/v1/bookie/list_bookies", params={"type": "rw"}).json() == {A: "10.0.0.1"}
    assert api.get("/api/v1/bookie/list_bookies", params={"type": "ro"}).json() == {B: "10.0.0.2"}
    assert set(api.get("/api/v1/bookie/list_bookies").json()) == {A, B}
    error_of(api.get("/api/v1/bookie/list_bookies", params={"type": "x"}), 422)
    info = {row["bookie"]: row for row in api.get("/api/v1/bookie/list_bookie_info").json()}
    assert {b: (r["registration"], r["state"]) for b, r in info.items()} == {
        A: ("writable", "Active"), B: ("readonly", "Active"), C: ("absent", "Active")}


def test_bookie_state_and_read_only_switch(api: httpx.Client, zk, zk_root) -> None:
    state = api.get("/api/v1/bookie/state", params={"bookie": B}).json()
    assert state["readOnly"] is True and state["running"] is True and state["lifecycleState"] == "Active"
    assert api.get("/api/v1/bookie/state/readonly", params={"bookie": A}).json()["readOnly"] is False
    # changing needs the admin token
    body = {"readOnly": True}
    error_of(api.put("/api/v1/bookie/state/readonly", params={"bookie": A}, json=body), 401)
    error_of(api.put("/api/v1/bookie/state/readonly", params={"bookie": A}, json=body, headers=READER), 403)
    bad = {"Authorization": "Bearer nope"}
    error_of(api.put("/api/v1/bookie/state/readonly", params={"bookie": A}, json=body, headers=bad), 401)
    error_of(api.put("/api/v1/bookie/state/readonly", params={"bookie": A}, json=body,
                     headers={"Authorization": "Basic x"}), 401)
    assert not store.read_serving(zk, A, root=zk_root)
    # bad input
    error_of(api.put("/api/v1/bookie/state/readonly", params={"bookie": A}, json={"readOnly": "maybe"},
                     headers=ADMIN), 422)
    error_of(api.put("/api/v1/bookie/state/readonly", params={"bookie": A}, content=b"{not json",
                     headers={**ADMIN, "Content-Type": "application/json"}), 422)
    put = "/api/v1/bookie/state/readonly"
    error_of(api.put(put, params={"bookie": "nobody:1"}, json=body, headers=ADMIN), 404)
    error_of(api.put(put, params={"bookie": "a/b"}, json=body, headers=ADMIN), 400)
    error_of(api.put("/api/v1/bookie/state/readonly", json=body, headers=ADMIN), 422)
    r = api.put("/api/v1/bookie/state/readonly", params={"bookie": A}, json=body, headers=ADMIN)
    assert r.status_code == 200 and store.read_serving(zk, A, root=zk_root)


def test_the_read_only_switch_takes_json_booleans_only(api: httpx.Client, zk, zk_root) -> None:
    put = "/api/v1/bookie/state/readonly"
    for value in ("yes", "true", "on", 1, 0, "1", None, [], {}):
        r = api.put(put, params={"bookie": A}, json={"readOnly": value}, headers=ADMIN)
        body = error_of(r, 422)
        assert body["detail"][0]["loc"] == ["body", "readOnly"], value
    assert not store.read_serving(zk, A, root=zk_root)  # none of them switched it on
    assert api.put(put, params={"bookie": A}, json={"readOnly": True}, headers=ADMIN).status_code == 200
    assert store.read_serving(zk, A, root=zk_root)


class JavaBookieHttp:
    """BookKeeper's BookieStateReadOnlyService on loopback: GET answers the mode, PUT {"readOnly": true}
    re-registers the bookie read-only (BookieStateManager.doTransitionToReadOnlyMode) and answers it;
    `refuse` answers 400 as a bookie with readOnlyModeEnabled=false does."""

    def __init__(self, zk, root: str, bookie: str) -> None:  # type: ignore[no-untyped-def]
        import http.server
        import threading

        self.puts: list[bytes] = []
        self.refuse = False
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _reply(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self) -> None:
                outer.puts.append(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if outer.refuse:
                    self._reply(400, b"Bookie is disabled ReadOnly mode, cannot transit to readOnly mode")
                    return
                registry.register(zk, bookie, outer.registration, readonly=True, root=root)
                self._reply(200, b'{"readOnly" : true}')

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        host, port = bookie.rsplit(":", 1)
        http_endpoint = records.Endpoint("httpserver", self.server.server_address[1], "0.0.0.0", "http")
        self.registration = records.encode_bookie_service_info(
            records.bookie_service_info_for(bookie, host, int(port), extra_endpoints=(http_endpoint,)))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_read_only_switch_makes_a_java_bookie_read_only_through_its_http_api(
    api: httpx.Client, zk, zk_root
) -> None:
    java = "127.0.0.1:3181"  # a stand-in Apache BookKeeper bookie: no bkaudit property, an http endpoint
    add_cookie(zk, zk_root, java)
    bookie_api = JavaBookieHttp(zk, zk_root, java)
    try:
        registry.register(zk, java, bookie_api.registration, root=zk_root)
        put = "/api/v1/bookie/state/readonly"
        assert api.get(put, params={"bookie": java}).json()["serving"] == "writable"
        r = api.put(put, params={"bookie": java}, json={"readOnly": True}, headers=ADMIN)
        assert r.status_code == 200, r.text
        assert r.json()["serving"] == "made_read_only" and r.json()["serving_url"].endswith(put)
        assert bookie_api.puts == [b'{"readOnly":true}']
        assert registry.bookie_state(zk, java, zk_root) == "readonly"
        assert api.get(put, params={"bookie": java}).json()["readOnly"] is True
        # {"readOnly": false} is recorded but never sent to a BookKeeper bookie (lifecycle/serving.py)
        r = api.put(put, params={"bookie": java}, json={"readOnly": False}, headers=ADMIN)
        assert r.status_code == 200 and r.json()["serving"] == "read_only" and len(bookie_api.puts) == 1
        # a bookie that refuses, or publishes no http endpoint, still takes writes: the caller is told so
        registry.register(zk, java, bookie_api.registration, root=zk_root)
        bookie_api.refuse = True
        body = error_of(api.put(put, params={"bookie": java}, json={"readOnly": True}, headers=ADMIN), 409)
        assert "still takes writes" in body["error"] and body["serving"] == "writable"
        assert store.read_serving(zk, java, root=zk_root)  # the switch itself is recorded
        registry.register(zk, java, b"", root=zk_root)  # no http endpoint (httpServerEnabled=false)
        body = error_of(api.put(put, params={"bookie": java}, json={"readOnly": True}, headers=ADMIN), 409)
        assert "httpServerEnabled" in body["error"]
        # the bookie's API is down: a transient failure, 502
        registry.register(zk, java, bookie_api.registration, root=zk_root)
    finally:
        bookie_api.close()
    error_of(api.put(put, params={"bookie": java}, json={"readOnly": True}, headers=ADMIN), 502)


def test_lifecycle_endpoints_change_zookeeper_by_the_rules(api: httpx.Client, zk, zk_root) -> None:
    add_ledger(zk, zk_root, 5, (A, B), length=4096)
    assert api.get("/api/v1/bookie/lifecycle", params={"bookie": A}).json()["state"] == "Active"
    drain = {"state": "Draining", "reason": "scale down"}
    error_of(api.put("/api/v1/bookie/lifecycle", params={"bookie": A}, json=drain), 401)
    error_of(api.put("/api/v1/bookie/lifecycle", params={"bookie": A}, json=drain, headers=READER), 403)
    error_of(api.put("/api/v1/bookie/lifecycle", params={"bookie": A}, json={"state": "Sleeping"},
                     headers=ADMIN), 400)
    error_of(api.put("/api/v1/bookie/lifecycle", params={"bookie": A}, json={"state": "Draining", "x": 1},
                     headers=ADMIN), 422)
    r = api.put("/api/v1/bookie/lifecycle", params={"bookie": A}, json=drain, headers=ADMIN)
    assert r.status_code == 200 and r.json()["by"] == "api:ops"
    record, _ = store.read_state(zk, A, root=zk_root)
    assert record is not None and record.state is lc.LifecycleState.DRAINING and record.reason == "scale down"
    # not an operator transition: refused with 409
    body = error_of(api.put("/api/v1/bookie/lifecycle", params={"bookie": A}, json={"state": "Drained"},
                            headers=ADMIN), 409)
    assert "auditor" in body["error"]
    history = api.get("/api/v1/bookie/lifecycle/history", params={"bookie": A}).json()
    assert [(h["previous"], h["state"], h["by"]) for h in history] == [("Active", "Draining", "api:ops")]
    # the auditor gives up on it; the operator cannot accept while ledger 5 references it
    from bkaudit.lifecycle import service
    service.transition(ZkStore(zk, root=zk_root), A, lc.LifecycleState.DRAINING_FAILED,
                       actor=lc.Actor.AUDITOR, by="auditor")
    progress = {"ledgers_left": 1, "bytes_left": 4096, "data_loss_ledgers": [5]}
    store.write_progress(zk, A, progress, root=zk_root)
    body = error_of(api.put("/api/v1/bookie/lifecycle", params={"bookie": A}, json={"state": "Drained"},
                            headers=ADMIN), 409)
    assert body["blockers"] == ["ledger 5"]
    progress = api.get("/api/v1/bookie/drain_progress").json()
    assert [(p["bookie"], p["state"], p["ledgers_left"], p["bytes_left"]) for p in progress] == [
        (A, "DrainingFailed", 1, 4096)]
    assert api.get("/api/v1/autorecovery/bad_ledgers").json()[A]["data_loss_ledgers"] == [5]
    # cookie: readable; deletion refused unless Drained
    cookie = api.get("/api/v1/bookie/cookie", params={"bookie": A}).json()
    assert cookie["bookieHost"] == A and cookie["instanceId"] == "inst"
    error_of(api.delete("/api/v1/bookie/cookie", params={"bookie": A}, headers=ADMIN), 409)
    error_of(api.delete("/api/v1/bookie/cookie", params={"bookie": A}, headers=READER), 403)
    zk.delete(paths.ledger_path(5, root=zk_root))
    assert api.put("/api/v1/bookie/lifecycle", params={"bookie": A}, json={"state": "Drained"},
                   headers=ADMIN).status_code == 200
    # A is still registered (running): removal needs force, as BookKeeper's decommissionbookie
    body = error_of(api.delete("/api/v1/bookie/cookie", params={"bookie": A}, headers=ADMIN), 409)
    assert body["blockers"] == ["registered writable"]
    error_of(api.delete("/api/v1/bookie/cookie", params={"bookie": A, "force": "yes"}, headers=ADMIN), 422)
    r = api.request("DELETE", "/api/v1/bookie/cookie", params={"bookie": A, "force": "true"},
                    json={"reason": "retired"}, headers=ADMIN)
    assert r.status_code == 200 and r.json()["state"] == "Removed"
    assert registry.read_cookie(zk, A, zk_root) is None
    assert not zk.exists(paths.lifecycle_state_path(A, root=zk_root))
    error_of(api.get("/api/v1/bookie/cookie", params={"bookie": C + "0"}), 404)


def test_queue_auditor_data_loss(api: httpx.Client, zk, zk_root) -> None:
    ur.mark_underreplicated(zk, 42, [C], root=zk_root)
    assert api.get("/api/v1/autorecovery/list_under_replicated_ledger").json() == [42]
    assert api.get("/api/v1/autorecovery/list_under_replicated_ledger",
                   params={"printmissingreplica": "true"}).json() == {"42": [C]}
    assert api.get("/api/v1/autorecovery/who_is_auditor").json() == {"Auditor": None}
    ur.create_vote(zk, "auditor-1:3181", root=zk_root)
    assert api.get("/api/v1/autorecovery/who_is_auditor").json() == {"Auditor": "auditor-1:3181"}
    record = DataLossRecord(42, ((3, 7),), now_iso(), (C,), 3, "w")
    dataloss.write(zk, record, root=zk_root)
    (got,) = api.get("/api/v1/autorecovery/data_loss").json()
    assert got["ledger_id"] == 42 and got["lost_entries"] == 5 and got["bookies"] == [C]


def test_audit_verdicts_from_the_violation_tables(api: httpx.Client) -> None:
    error_of(api.get("/api/v1/audit/verdicts"), 404)  # no run yet
    t0 = datetime(2026, 11, 20, 6, 0, tzinfo=UTC)
    write_audit_run(api.warehouse, "run-1", t0, [  # type: ignore[attr-defined]
        {"ledger_id": 1, "category": "no_replica", "severity": "critical", "detail": "{}"},
        {"ledger_id": 2, "category": "placement_fail", "severity": "warning", "detail": "{}"},
        {"ledger_id": 3, "category": "placement_fail", "severity": "warning", "detail": "{}"},
    ])
    got = api.get("/api/v1/audit/verdicts").json()
    assert got["run_id"] == "run-1" and got["verdict"] == "critical" and got["violations_total"] == 3
    assert got["categories"] == {"no_replica": {"count": 1, "severity": "critical"},
                                 "placement_fail": {"count": 2, "severity": "warning"}}
    assert len(api.get("/api/v1/audit/verdicts", params={"limit": 1}).json()["violations"]) == 1
    error_of(api.get("/api/v1/audit/verdicts", params={"limit": -1}), 422)
    write_audit_run(api.warehouse, "run-2", t0.replace(day=21), [])  # type: ignore[attr-defined]
    assert api.get("/api/v1/audit/verdicts").json()["verdict"] == "clean"


def test_webhook_endpoints(api: httpx.Client, zk, zk_root) -> None:
    body = {"url": "http://127.0.0.1:9/hook", "secret": "s3cret-value"}
    error_of(api.post("/api/v1/webhooks", json=body), 401)
    error_of(api.post("/api/v1/webhooks", json=body, headers=READER), 403)
    error_of(api.get("/api/v1/webhooks", headers=READER), 403)
    error_of(api.post("/api/v1/webhooks", json={**body, "url": "ftp://x"}, headers=ADMIN), 400)
    error_of(api.post("/api/v1/webhooks", json={**body, "secret": "short"}, headers=ADMIN), 422)
    r = api.post("/api/v1/webhooks", json=body, headers=ADMIN)
    assert r.status_code == 201 and "secret" not in r.json()
    hook = r.json()["id"]
    assert zk.exists(paths.webhook_path(hook, root=zk_root))
    assert [h["id"] for h in api.get("/api/v1/webhooks", headers=ADMIN).json()] == [hook]
    assert api.get(f"/api/v1/webhooks/{hook}/deliveries", headers=ADMIN).json() == []
    error_of(api.get("/api/v1/webhooks/nope/deliveries", headers=ADMIN), 404)
    error_of(api.delete("/api/v1/webhooks/bad-id!", headers=ADMIN), 400)
    assert api.delete(f"/api/v1/webhooks/{hook}", headers=ADMIN).status_code == 200
    error_of(api.delete(f"/api/v1/webhooks/{hook}", headers=ADMIN), 404)


def test_reads_need_a_token_when_anonymous_reads_are_off(zk, zk_root) -> None:
    add_cookie(zk, zk_root, A)
    server = serve(zk, zk_root, anonymous_read=False)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            error_of(api.get("/api/v1/bookie/list_bookie_info"), 401)
            error_of(api.get("/dashboard"), 401)
            assert api.get("/api/v1/bookie/list_bookie_info", headers=READER).status_code == 200
            assert api.get("/heartbeat").status_code == 200
    finally:
        server.stop()


def test_garbage_in_zookeeper_gives_json_errors_not_a_crash(api: httpx.Client, zk, zk_root) -> None:
    zk.create(paths.lifecycle_state_path(C, root=zk_root), b"\x00garbage")
    got = api.get("/api/v1/bookie/lifecycle", params={"bookie": C}).json()
    assert got["state"] is None and "lifecycle state" in got["error"]
    error_of(api.put("/api/v1/bookie/lifecycle", params={"bookie": C}, json={"state": "Draining"},
                     headers=ADMIN), 409)
    zk.set(paths.cookie_path(B, root=zk_root), b"not a cookie")
    error_of(api.get("/api/v1/bookie/cookie", params={"bookie": B}), 409)
    assert api.get("/api/v1/bookie/list_bookie_info").status_code == 200
    assert api.get("/heartbeat").status_code == 200


def test_openapi_document_lists_every_endpoint(api: httpx.Client) -> None:
    doc = api.get("/openapi.json").json()
    assert {"/api/v1/bookie/state", "/api/v1/bookie/state/readonly",
            "/api/v1/autorecovery/list_under_replicated_ledger", "/api/v1/bookie/lifecycle",
            "/api/v1/webhooks"} <= set(doc["paths"])
