"""The admin API's token roles, for every route the app declares (enumerated from the FastAPI app, not a list
written here), on a real uvicorn server over the embedded ZooKeeper:

- every changing route (POST/PUT/PATCH/DELETE) refuses a missing token (401), an unknown token (401), a
  malformed Authorization header (401) and a read-only token (403), whatever the body (malformed JSON too:
  the token is checked before the body is read), and the refusals change nothing in ZooKeeper;
- every reading route answers a read-only token (admin-only reads, such as the webhook list whose URLs are
  configuration, answer 403), and with `anonymous_read = false` refuses a missing token.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from kazoo.client import KazooClient

from bkaudit.admin import webhooks
from bkaudit.admin.routes import common as roles
from bkaudit.store import ZkStore
from tests.admin.support import ADMIN, READER, add_cookie, add_ledger, serve, settings

BOOKIE = "10.0.0.1:3181"
CHANGING = {"POST", "PUT", "PATCH", "DELETE"}
REFUSED = {
    "no token": ({}, 401),
    "unknown token": ({"Authorization": "Bearer not-a-configured-token"}, 401),
    "malformed header": ({"Authorization": "Basic b3BzOm9wcw=="}, 401),
    "read-only token": (READER, 403),
}


def _dependencies(route: APIRoute) -> set[Any]:
    out, stack = set(), list(route.dependant.dependencies)
    while stack:
        dep = stack.pop()
        out.add(dep.call)
        stack.extend(dep.dependencies)
    return out


def _tree(zk: KazooClient, base: str) -> dict[str, tuple[bytes, int]]:
    out, stack = {}, [base]
    while stack:
        path = stack.pop()
        data, stat = zk.get(path)
        out[path] = (data, stat.version)
        stack.extend(f"{path}/{c}" for c in zk.get_children(path))
    return out


@pytest.fixture
def served(zk, zk_root):  # type: ignore[no-untyped-def]
    add_cookie(zk, zk_root, BOOKIE)
    add_ledger(zk, zk_root, 7, (BOOKIE,))
    hook = webhooks.register(ZkStore(zk, root=zk_root), url="http://127.0.0.1:9/hook", secret="s3cret-hook",
                             by="test", at="now", allow=settings().allowed_networks())
    server = serve(zk, zk_root, anonymous_read=False)
    try:
        yield server, hook.id
    finally:
        server.stop()


def _routes(server: Any) -> list[APIRoute]:
    app = server._server.config.app  # the app uvicorn serves
    return [r for r in app.routes if isinstance(r, APIRoute)]


def _url(route: APIRoute, values: dict[str, str]) -> str:
    names = re.findall(r"{(\w+)}", route.path)
    unknown = [n for n in names if n not in values]
    assert not unknown, f"{route.path}: give the test a real value for {unknown}"
    return route.path.format(**{n: values[n] for n in names})


def test_every_changing_route_refuses_missing_wrong_and_read_only_tokens(served, zk, zk_root) -> None:  # type: ignore[no-untyped-def]
    server, hook_id = served
    changing = [(m, r) for r in _routes(server) for m in sorted(r.methods & CHANGING)]
    assert len(changing) >= 4  # readonly switch, lifecycle, cookie delete, webhooks (at the time of writing)
    base = zk_root.rsplit("/", 1)[0]
    before = _tree(zk, base)
    bodies = ({}, {"readOnly": True}, {"state": "Draining"},
              {"url": "http://127.0.0.1:9/x", "secret": "0123456789"},
              b'{"state":', b"\xff\xfe not json", b"[" * 10000)  # malformed: refused before parsing
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for method, route in changing:
            assert roles.admin in _dependencies(route), f"{method} {route.path} is not admin-only"
            url = _url(route, {"hook_id": hook_id})
            for why, (headers, status) in REFUSED.items():
                for body in bodies:  # valid bodies too: authorization comes before anything else
                    sent = {"content": body} if isinstance(body, bytes) else {"json": body}
                    r = http.request(method, url, params={"bookie": BOOKIE}, **sent,
                                     headers={"Content-Type": "application/json", **headers})
                    assert r.status_code == status, f"{method} {route.path}, {why}: {r.status_code} {r.text}"
                    assert r.json()["error"]
                    if status == 401:
                        assert r.headers["www-authenticate"] == "Bearer"
        assert _tree(zk, base) == before, "a refused call changed ZooKeeper"
        for method, route in changing:  # the admin token gets past authorization (whatever the body says)
            r = http.request(method, _url(route, {"hook_id": hook_id}), params={"bookie": BOOKIE}, json={},
                             headers=ADMIN)
            assert r.status_code not in (401, 403), f"{method} {route.path} refused the admin token: {r.text}"


def test_read_only_tokens_read_and_anonymous_reads_can_be_switched_off(served) -> None:  # type: ignore[no-untyped-def]
    server, hook_id = served
    reading = [r for r in _routes(server) if "GET" in r.methods]
    protected = [r for r in reading if _dependencies(r) & {roles.reader, roles.admin}]
    assert len(protected) >= 10
    public = [r.path for r in reading if r not in protected]  # liveness and the dashboard page (its data
    assert all(not r.methods & CHANGING for r in reading if r not in protected), public  # needs tokens)
    with httpx.Client(base_url=server.url, timeout=60) as http:
        for route in protected:
            url = _url(route, {"hook_id": hook_id})
            admin_only = roles.admin in _dependencies(route)
            r = http.get(url, params={"bookie": BOOKIE}, headers=READER)
            if admin_only:
                assert r.status_code == 403, f"GET {route.path}: {r.status_code}"
            else:  # an answer (a 404 "no warehouse configured" is one), not an authorization refusal
                assert r.status_code not in (401, 403), f"GET {route.path}, read-only token: {r.text}"
            r = http.get(url, params={"bookie": BOOKIE})
            assert r.status_code == 401, f"GET {route.path}, no token, anonymous_read off: {r.status_code}"
            r = http.get(url, params={"bookie": BOOKIE}, headers=ADMIN)
            assert r.status_code not in (401, 403), f"GET {route.path}, admin token: {r.text}"
