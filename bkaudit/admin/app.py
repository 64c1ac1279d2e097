"""The HTTP management API (FastAPI): BookKeeper's `/api/v1/...` names where one exists, cluster level.

BookKeeper's per-bookie endpoints take the bookie from the server they run on; here one server manages the
cluster, so the same paths take `?bookie=<id>`. Everything is read from and written to ZooKeeper, so the API
works while a bookie host is down. Changing calls need an admin bearer token; reads need a read token unless
`[admin] anonymous_read`. Errors are JSON `{"error": ..., ...}`; no request can take the server down.

Every request passes `Guard` (bkaudit.admin.guard) first: the token is checked from the headers alone, before
any byte of the body is read, and bodies are bounded by `[admin] max_body_bytes`; then FastAPI parses and
validates. The route dependencies check the same token again (defence in depth, and what the OpenAPI
document is built from).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from bkaudit import __version__
from bkaudit.admin import guard
from bkaudit.admin.auth import Role, TokenBook
from bkaudit.admin.routes import audit, bookkeeper, lifecycle, pages, webhooks
from bkaudit.admin.routes.common import WHY, ErrorBody, ValidationErrorBody, role_of
from bkaudit.admin.routes.context import Context
from bkaudit.admin.settings import AdminSettings

if TYPE_CHECKING:
    from bkaudit.store import ClusterStore
    from bkaudit.tables.location import Warehouse

log = logging.getLogger(__name__)

ApiError = guard.ApiError

# the order routes are declared, matched and documented in (the Guard's roles and the 405 Allow read it)
ROUTERS = (bookkeeper.router, lifecycle.router, audit.router, webhooks.router, pages.router)


def create_app(
    cluster: ClusterStore, *, settings: AdminSettings, warehouse: Warehouse | str = "", pool: Any = None,
    bookie_http_timeout_s: float = 10.0,
) -> FastAPI:
    """The app over one cluster store (the caller owns it and the optional bookie client pool).

    `bookie_http_timeout_s` (`[lifecycle] bookie_http_timeout_s`) bounds the call to a BookKeeper bookie's
    own HTTP admin API that the read-only switch makes.
    """
    from bkaudit.admin.dashboard import SCRIPT, STYLE
    # no /docs or /redoc: FastAPI's pages load Swagger UI / ReDoc from a CDN; docs/http-api.md is the
    # reference, /openapi.json the machine-readable document (a read: open only with anonymous_read)
    app = FastAPI(title="bkaudit admin API", version=__version__, docs_url=None, redoc_url=None,
                  openapi_url=None,
                  description="Cluster-level BookKeeper management: lifecycle, serving state, cookies, "
                              "webhooks, under-replication, data loss, audit verdicts (docs/http-api.md).")

    tokens = TokenBook(admin=settings.admin_tokens, read=settings.read_tokens)
    app.state.context = Context(cluster=cluster, settings=settings, tokens=tokens,
                                allow=settings.allowed_networks(), warehouse=warehouse, pool=pool,
                                bookie_http_timeout_s=bookie_http_timeout_s)
    roles: list[tuple[Any, Role | None]] = []

    def route_roles() -> list[tuple[Any, Role | None]]:
        if not roles:
            roles.extend((r, role_of(r) if isinstance(r, APIRoute) else None) for r in app.router.routes)
        return roles

    app.add_middleware(guard.Guard, routes=route_roles, tokens=tokens, anonymous_read=settings.anonymous_read,
                       max_body_bytes=settings.max_body_bytes,
                       headers=guard.security_headers((SCRIPT,), (STYLE,)))

    # -- errors: always JSON, never a crash (an escaping exception: guard.Guard answers 500) -----------------
    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse({"error": str(exc), **exc.extra}, status_code=exc.status, headers=exc.headers())

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [{"loc": [p if isinstance(p, str | int) else str(p) for p in e.get("loc", ())],
                   "msg": str(e.get("msg", "")), "type": str(e.get("type", "value_error"))}
                  for e in exc.errors()]
        return JSONResponse({"error": "invalid request", "detail": detail}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # Starlette names the first route's methods; a path can have several
            methods = {m for r in app.router.routes if isinstance(r, APIRoute)
                       and r.path_regex.match(request.url.path) for m in r.methods or ()}
            headers["Allow"] = ", ".join(sorted(methods | {"HEAD"} if "GET" in methods else methods))
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=headers)

    for router in ROUTERS:  # their routes themselves: FastAPI's include_router nests a router, and the Guard,
        app.router.routes.extend(router.routes)  # the 405 Allow and the document read the routes one by one

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _document(app, anonymous_read=settings.anonymous_read)
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]
    return app


def _document(app: FastAPI, *, anonymous_read: bool) -> dict[str, Any]:
    """FastAPI's document, completed: the bearer scheme and who needs it, 401/403/413 where they can be
    answered, and the 422 body this API sends instead of FastAPI's."""
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for model in (ErrorBody, ValidationErrorBody):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    doc["components"]["securitySchemes"] = {"bearer": {
        "type": "http", "scheme": "bearer",
        "description": "a token whose SHA-256 is in [admin] admin_tokens (may change things) or read_tokens "
                       "(may read); checked before the request body is read"}}

    def error(schema: str, why: str) -> dict[str, Any]:
        return {"description": why,
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}

    routes = [r for r in app.routes if isinstance(r, APIRoute)]
    roles = {(m.lower(), r.path): role_of(r) for r in routes for m in r.methods or ()}
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            role = roles.get((method, path))
            responses = op.setdefault("responses", {})
            if role is not None:
                op["security"] = [{"bearer": []}] + ([{}] if role is Role.READ and anonymous_read else [])
                responses["401"] = error("ErrorBody", WHY[401])
                if role is Role.ADMIN:
                    responses["403"] = error("ErrorBody", WHY[403])
            responses["413"] = error("ErrorBody", WHY[413])
            if "422" in responses:
                responses["422"] = error("ValidationErrorBody", "the request's shape: missing or unknown "
                                         "fields, wrong types (no \"yes\" for true), malformed JSON")
            op["responses"] = dict(sorted(responses.items()))
    return doc

