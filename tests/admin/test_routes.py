"""The admin app's routes, pinned: the order they are declared in (requests are matched in it; the Guard's
roles and the 405 `Allow` read it), each one's name and the role it needs, and the router (its OpenAPI tag)
that declares it. No ZooKeeper: the app over a MemoryStore."""

from __future__ import annotations

import asyncio

import httpx
from fastapi.routing import APIRoute

from bkaudit.admin.app import create_app, role_of
from bkaudit.admin.auth import Role
from bkaudit.admin.settings import AdminSettings
from bkaudit.store.memory import MemoryStore

OPEN, READ, ADMIN = None, Role.READ, Role.ADMIN
B, A = "/api/v1/bookie", "/api/v1/autorecovery"
ROUTES = [  # (method, path, name, role, router module)
    ("GET", "/heartbeat", "heartbeat", OPEN, "bookkeeper"),
    ("GET", f"{B}/list_bookies", "list_bookies", READ, "bookkeeper"),
    ("GET", f"{B}/list_bookie_info", "list_bookie_info", READ, "bookkeeper"),
    ("GET", f"{B}/state", "bookie_state", READ, "bookkeeper"),
    ("GET", f"{B}/state/readonly", "get_readonly", READ, "bookkeeper"),
    ("PUT", f"{B}/state/readonly", "put_readonly", ADMIN, "bookkeeper"),
    ("GET", f"{A}/list_under_replicated_ledger", "list_under_replicated", READ, "bookkeeper"),
    ("GET", f"{A}/who_is_auditor", "who_is_auditor", READ, "bookkeeper"),
    ("GET", f"{B}/lifecycle", "get_lifecycle", READ, "lifecycle"),
    ("PUT", f"{B}/lifecycle", "put_lifecycle", ADMIN, "lifecycle"),
    ("GET", f"{B}/lifecycle/history", "lifecycle_history", READ, "lifecycle"),
    ("GET", f"{B}/drain_progress", "drain_progress", READ, "lifecycle"),
    ("GET", f"{B}/cookie", "get_cookie", READ, "lifecycle"),
    ("DELETE", f"{B}/cookie", "delete_cookie", ADMIN, "lifecycle"),
    ("GET", f"{A}/data_loss", "data_loss", READ, "audit"),
    ("GET", f"{A}/bad_ledgers", "bad_ledgers", READ, "audit"),
    ("GET", "/api/v1/audit/verdicts", "audit_verdicts", READ, "audit"),
    ("GET", "/api/v1/webhooks", "list_webhooks", ADMIN, "webhooks"),
    ("POST", "/api/v1/webhooks", "add_webhook", ADMIN, "webhooks"),
    ("DELETE", "/api/v1/webhooks/{hook_id}", "delete_webhook", ADMIN, "webhooks"),
    ("GET", "/api/v1/webhooks/{hook_id}/deliveries", "webhook_deliveries", ADMIN, "webhooks"),
    ("GET", "/", "index", OPEN, "pages"),
    ("GET", "/dashboard", "dashboard", READ, "pages"),
    ("GET", "/openapi.json", "openapi_json", READ, "pages"),
]


def test_every_route_in_order_with_its_role_and_router() -> None:
    for anonymous_read in (True, False):  # the role a route needs does not depend on the setting
        app = create_app(MemoryStore(), settings=AdminSettings(anonymous_read=anonymous_read))
        routes = app.router.routes
        assert all(isinstance(r, APIRoute) for r in routes), [type(r).__name__ for r in routes]
        found = [(m, r.path, r.name, role_of(r), r.endpoint.__module__.rsplit(".", 1)[1])
                 for r in routes if isinstance(r, APIRoute) for m in sorted(r.methods)]
        assert found == ROUTES


def test_two_apps_keep_their_own_cluster() -> None:
    """The routes are shared by every app; what they act on comes from the app that serves the request."""
    stores = [MemoryStore(), MemoryStore()]
    stores[1].register("10.0.0.9:3181")

    async def list_bookies(store: MemoryStore) -> object:
        transport = httpx.ASGITransport(app=create_app(store, settings=AdminSettings()))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            return (await http.get("/api/v1/bookie/list_bookies")).json()

    assert [asyncio.run(list_bookies(s)) for s in stores] == [{}, {"10.0.0.9:3181": "10.0.0.9"}]
