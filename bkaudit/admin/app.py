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
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from bkaudit import __version__
from bkaudit.admin import guard, views, webhooks
from bkaudit.admin.auth import Caller, Role, TokenBook
from bkaudit.admin.settings import AdminSettings
from bkaudit.errors import BkAuditError, FormatError, MetadataConflict
from bkaudit.formats.bookie_id import invalid_bookie_id_reason
from bkaudit.lifecycle import service, serving
from bkaudit.model import lifecycle as lc

if TYPE_CHECKING:
    from bkaudit.store import ClusterStore
    from bkaudit.tables.location import Warehouse

log = logging.getLogger(__name__)

ApiError = guard.ApiError


# -- auth: module level, so FastAPI resolves the annotations ---------------------------------------------
def _reader(request: Request) -> Caller:
    return guard.authorize(request.headers.get("authorization", ""), Role.READ, request.app.state.tokens,
                           anonymous_read=request.app.state.anonymous_read)


def _admin(request: Request) -> Caller:
    return guard.authorize(request.headers.get("authorization", ""), Role.ADMIN, request.app.state.tokens,
                           anonymous_read=request.app.state.anonymous_read)


Reader = Annotated[Caller, Depends(_reader)]
Admin = Annotated[Caller, Depends(_admin)]


def _valid_bookie(request: Request, bookie: str) -> str:
    reason = invalid_bookie_id_reason(bookie)
    if reason is not None:  # NUL, '/', spaces, ...: never handed to ZooKeeper (BadArgumentsError)
        raise ApiError(400, reason)
    try:
        request.app.state.cluster.check_bookie_id(bookie)  # and no record name the store refuses ('.', '..')
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None
    return bookie


_BOOKIE_DOC = "bookie id, e.g. 10.0.0.1:3181 (BookKeeper's BookieId rule: [a-zA-Z0-9:-_.\\-]+, else 400)"


def _bookie(
    request: Request, bookie: Annotated[str, Query(min_length=1, max_length=255, description=_BOOKIE_DOC)]
) -> str:
    return _valid_bookie(request, bookie)


def _maybe_bookie(
    request: Request,
    bookie: Annotated[str | None, Query(min_length=1, max_length=255, description=_BOOKIE_DOC)] = None,
) -> str | None:
    return None if bookie is None else _valid_bookie(request, bookie)


BookieParam = Annotated[str, Depends(_bookie)]


# -- bodies: strict (no "yes" for true, no 1 for "1"), unknown fields refused ----------------------------
class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ReadOnlyBody(_Body):
    readOnly: bool = Field(description="true or false (JSON booleans only)")


class LifecycleBody(_Body):
    state: str = Field(min_length=1, max_length=40, description="Draining, Drained or Removed")
    reason: str = Field(default="", max_length=1000)
    force: bool = Field(default=False, description="Removed although the bookie is still registered")


class WebhookBody(_Body):
    url: str = Field(min_length=1, max_length=2000,
                     description="absolute http(s) URL without credentials; loopback, private, link-local, "
                                 "multicast and unspecified addresses only inside "
                                 "[admin] webhook_allow_networks")
    secret: str = Field(min_length=8, max_length=500)


class ReasonBody(_Body):
    reason: str = Field(default="", max_length=1000)


# -- error bodies, as the OpenAPI document declares them ---------------------------------------------------
class ErrorBody(BaseModel):
    """Every error: a message, and for some errors more fields (`blockers` of a refused transition, ...)."""

    model_config = ConfigDict(extra="allow")
    error: str


class ValidationIssue(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorBody(BaseModel):
    """422: the request's shape (missing or unknown fields, wrong types, malformed JSON)."""

    error: str
    detail: list[ValidationIssue]


_WHY = {
    400: "a bad value: an invalid bookie id (BookKeeper's BookieId rule), an unknown state, a refused "
         "webhook URL",
    401: "no token, an unknown token or a malformed Authorization header (WWW-Authenticate: Bearer)",
    403: "a read token on a call that needs an admin token",
    404: "an unknown bookie, webhook or run",
    409: "refused in the cluster's current state (a transition's `blockers`, an unreadable znode)",
    413: "the request body is larger than [admin] max_body_bytes (refused before it is read)",
    502: "the bookie's own HTTP admin API did not make it read-only (the switch is recorded)",
}


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorBody, "description": _WHY[code]} for code in codes}


def role_of(route: APIRoute) -> Role | None:
    """The role a route needs (from its dependencies), None for an open route."""
    found: set[Any] = set()
    stack = list(route.dependant.dependencies)
    while stack:
        dep = stack.pop()
        found.add(dep.call)
        stack.extend(dep.dependencies)
    return Role.ADMIN if _admin in found else Role.READ if _reader in found else None


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
    app.state.tokens = tokens
    app.state.cluster = cluster
    app.state.anonymous_read = settings.anonymous_read
    allow = settings.allowed_networks()
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

    def known(bookie: str) -> str:
        registered = cluster.registry.bookie_state(bookie) != "absent"
        if not registered and not cluster.registry.has_cookie(bookie):
            raise ApiError(404, f"unknown bookie {bookie}")
        return bookie

    def change(bookie: str, target: str, who: Caller, reason: str, force: bool = False) -> dict[str, Any]:
        try:
            state = lc.LifecycleState.parse(target)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        try:
            record = service.transition(cluster, bookie, state, actor=lc.Actor.OPERATOR, by=f"api:{who.name}",
                                        reason=reason, force=force)
        except service.UnknownBookie as exc:
            raise ApiError(404, str(exc)) from None
        except lc.TransitionRefused as exc:
            raise ApiError(409, str(exc), blockers=list(exc.blockers)) from None
        except MetadataConflict as exc:
            raise ApiError(409, str(exc)) from None
        except FormatError as exc:
            raise ApiError(409, f"the state znode is unreadable: {exc}") from None
        return {"bookie": bookie, **record.to_dict()}

    # -- BookKeeper's endpoints ------------------------------------------------------------------------------
    @app.get("/heartbeat", tags=["bookkeeper"],
             summary="liveness (BookKeeper: /heartbeat); never needs a token")
    def heartbeat() -> dict[str, str]:
        return {"status": "OK"}

    @app.get("/api/v1/bookie/list_bookies", tags=["bookkeeper"], summary="registered bookies by type")
    def list_bookies(
        _who: Reader, type: Annotated[str, Query(pattern="^(rw|ro|all)$")] = "all"
    ) -> dict[str, Any]:
        rw = cluster.registry.writable() if type in ("rw", "all") else []
        ro = cluster.registry.readonly() if type in ("ro", "all") else []
        return {b: b.rsplit(":", 1)[0] for b in [*rw, *ro]}

    @app.get("/api/v1/bookie/list_bookie_info", tags=["bookkeeper"],
             summary="every bookie: rack, registration, lifecycle state, disk use, drain progress")
    def list_bookie_info(_who: Reader) -> list[dict[str, Any]]:
        return views.bookies(cluster, pool=pool, timeout_s=settings.disk_info_timeout_s)

    @app.get("/api/v1/bookie/state", tags=["bookkeeper"], summary="a bookie's serving and lifecycle state",
             responses=_errors(400, 404))
    def bookie_state(_who: Reader, bookie: BookieParam) -> dict[str, Any]:
        known(bookie)
        registration = cluster.registry.bookie_state(bookie)
        try:
            lifecycle: str | None = service.current(cluster, bookie)[0].value
        except FormatError:
            lifecycle = None
        return {"bookie": bookie, "running": registration != "absent", "readOnly": registration == "readonly",
                "shuttingDown": False, "availableForHighPriorityWrites": registration == "writable",
                "lifecycleState": lifecycle}

    @app.get("/api/v1/bookie/state/readonly", tags=["bookkeeper"], summary="read-only switch and actual mode",
             responses=_errors(400, 404))
    def get_readonly(_who: Reader, bookie: BookieParam) -> dict[str, Any]:
        known(bookie)
        return {"bookie": bookie, "readOnly": cluster.registry.bookie_state(bookie) == "readonly",
                "readOnlyRequested": cluster.lifecycle.read_serving(bookie),
                **serving.inspect(cluster, bookie).to_dict()}

    @app.put("/api/v1/bookie/state/readonly", tags=["bookkeeper"],
             summary="ask a bookie to serve reads only (or writes again): the switch in ZooKeeper, which "
                     "bkaudit bookies follow; a registered-writable BookKeeper bookie is also made read-only "
                     "through its own HTTP admin API (readOnly true only)",
             responses=_errors(400, 404, 409, 502))
    def put_readonly(who: Admin, bookie: BookieParam, body: ReadOnlyBody) -> dict[str, Any]:
        known(bookie)
        cluster.lifecycle.write_serving(bookie, body.readOnly, by=f"api:{who.name}", at=service.now_iso())
        out: dict[str, Any] = {"bookie": bookie, "readOnlyRequested": body.readOnly}
        if not body.readOnly:  # bkaudit never asks a BookKeeper bookie for writes (serving.py says why)
            return {**out, **serving.inspect(cluster, bookie).to_dict()}
        check = serving.ensure_read_only(cluster, bookie, timeout_s=bookie_http_timeout_s)
        if not check.ok:
            raise ApiError(409 if check.permanent else 502,
                           f"the switch is recorded, but bookie {bookie} still takes writes: {check.error}",
                           **out, **check.to_dict())
        return {**out, **check.to_dict()}

    @app.get("/api/v1/autorecovery/list_under_replicated_ledger", tags=["bookkeeper"],
             summary="the under-replication queue (BookKeeper's printmissingreplica adds the replicas)")
    def list_under_replicated(_who: Reader, printmissingreplica: bool = False) -> Any:
        q = views.queue(cluster)
        if printmissingreplica:
            return {str(r["ledger_id"]): r.get("replicas", []) for r in q["ledgers"]}
        return [r["ledger_id"] for r in q["ledgers"]]

    @app.get("/api/v1/autorecovery/who_is_auditor", tags=["bookkeeper"], summary="the elected auditor")
    def who_is_auditor(_who: Reader) -> dict[str, Any]:
        return {"Auditor": cluster.queue.auditor()}

    # -- lifecycle (the design's additions) ------------------------------------------------------------------
    @app.get("/api/v1/bookie/lifecycle", tags=["lifecycle"], summary="lifecycle state, who set it, progress",
             responses=_errors(400, 404))
    def get_lifecycle(_who: Reader, bookie: BookieParam) -> dict[str, Any]:
        known(bookie)
        return service.describe(cluster, bookie)

    @app.put("/api/v1/bookie/lifecycle", tags=["lifecycle"],
             summary="operator transition: Draining (from Active), Drained (from DrainingFailed), Removed",
             responses=_errors(400, 404, 409))
    def put_lifecycle(who: Admin, bookie: BookieParam, body: LifecycleBody) -> dict[str, Any]:
        known(bookie)
        return change(bookie, body.state, who, body.reason, body.force)

    @app.get("/api/v1/bookie/lifecycle/history", tags=["lifecycle"], summary="every transition, oldest first",
             responses=_errors(400))
    def lifecycle_history(_who: Reader, bookie: BookieParam) -> list[dict[str, Any]]:
        return [h.to_dict() for h in cluster.lifecycle.history(bookie)]

    @app.get("/api/v1/bookie/drain_progress", tags=["lifecycle"],
             summary="per draining / drained / failed bookie: ledgers and bytes left, failures",
             responses=_errors(400))
    def drain_progress(_who: Reader, bookie: Annotated[str | None, Depends(_maybe_bookie)]) -> list[Any]:
        return views.drain_progress(cluster, bookie=bookie)

    @app.get("/api/v1/bookie/cookie", tags=["lifecycle"], summary="a bookie's cookie",
             responses=_errors(400, 404, 409))
    def get_cookie(_who: Reader, bookie: BookieParam) -> dict[str, Any]:
        known(bookie)
        try:
            found = cluster.registry.read_cookie(bookie)
        except FormatError as exc:
            raise ApiError(409, f"the cookie is unreadable: {exc}") from None
        if found is None:
            raise ApiError(404, f"bookie {bookie} has no cookie")
        cookie, version = found
        return {"bookie": bookie, "version": version, "bookieHost": cookie.bookie_host,
                "journalDirs": list(cookie.journal_dirs), "ledgerDirs": list(cookie.ledger_dirs),
                "instanceId": cookie.instance_id}

    @app.delete("/api/v1/bookie/cookie", tags=["lifecycle"],
                summary="remove a Drained bookie: cookie and lifecycle state deleted together (refused while "
                        "it is registered, unless force=true)",
                responses=_errors(400, 404, 409))
    def delete_cookie(
        who: Admin, bookie: BookieParam, body: ReasonBody | None = None,
        force: Annotated[Literal["true", "false"], Query(description="although still registered")] = "false",
    ) -> dict[str, Any]:
        known(bookie)
        reason = body.reason if body else ""
        return change(bookie, lc.LifecycleState.REMOVED.value, who, reason, force == "true")

    # -- data loss and audits --------------------------------------------------------------------------------
    @app.get("/api/v1/autorecovery/data_loss", tags=["audit"], summary="ledgers with entries no replica has")
    def data_loss(_who: Reader) -> list[dict[str, Any]]:
        return views.data_loss(cluster)

    @app.get("/api/v1/autorecovery/bad_ledgers", tags=["audit"],
             summary="ledgers a drain could not move (data loss, repeated failures), per bookie")
    def bad_ledgers(_who: Reader) -> dict[str, Any]:
        progress = views.drain_progress(cluster)
        return {p["bookie"]: {"state": p["state"], "data_loss_ledgers": p.get("data_loss_ledgers", []),
                              "failed_ledgers": p.get("failed_ledgers", [])} for p in progress}

    @app.get("/api/v1/audit/verdicts", tags=["audit"], summary="the latest checker run's verdict, violations",
             responses=_errors(404))
    def audit_verdicts(_who: Reader, limit: Annotated[int, Query(ge=0, le=10000)] = 200) -> dict[str, Any]:
        if not warehouse:
            raise ApiError(404, "no warehouse configured ([admin] warehouse or [snapshot] warehouse)")
        try:
            return views.audit_verdict(warehouse, limit=limit)
        except BkAuditError as exc:
            raise ApiError(404, str(exc)) from None

    # -- webhooks --------------------------------------------------------------------------------------------
    @app.get("/api/v1/webhooks", tags=["webhooks"], summary="registered webhooks (secrets never shown)")
    def list_webhooks(_who: Admin) -> list[dict[str, Any]]:
        return [h.public() for h in webhooks.list_all(cluster)]

    @app.post("/api/v1/webhooks", tags=["webhooks"], status_code=201, responses=_errors(400),
              summary="register a URL for lifecycle transitions (HMAC-SHA256 signed with the secret)")
    def add_webhook(who: Admin, body: WebhookBody) -> dict[str, Any]:
        try:
            hook = webhooks.register(cluster, url=body.url, secret=body.secret, by=f"api:{who.name}",
                                     at=service.now_iso(), allow=allow)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        return hook.public()

    @app.delete("/api/v1/webhooks/{hook_id}", tags=["webhooks"], summary="unregister a webhook",
                responses=_errors(400, 404))
    def delete_webhook(who: Admin, hook_id: Annotated[str, Depends(_hook_id)]) -> dict[str, Any]:
        if not webhooks.delete(cluster, hook_id):
            raise ApiError(404, f"no webhook {hook_id}")
        return {"deleted": hook_id}

    @app.get("/api/v1/webhooks/{hook_id}/deliveries", tags=["webhooks"], responses=_errors(400, 404),
             summary="delivery records: delivered or failed, with a class of error per attempt")
    def webhook_deliveries(_who: Admin, hook_id: Annotated[str, Depends(_hook_id)]) -> list[dict[str, Any]]:
        if webhooks.get(cluster, hook_id) is None:
            raise ApiError(404, f"no webhook {hook_id}")
        return webhooks.deliveries(cluster, hook_id)

    # -- dashboard and the OpenAPI document ------------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    def index() -> RedirectResponse:
        return RedirectResponse("/dashboard")

    @app.get("/dashboard", response_class=HTMLResponse, tags=["dashboard"], summary="the admin dashboard")
    def dashboard(_who: Reader) -> HTMLResponse:
        from bkaudit.admin.dashboard import render

        verdict: dict[str, Any] | None = None
        verdict_error = "no warehouse configured"
        if warehouse:
            try:
                verdict = views.audit_verdict(warehouse, limit=50)
            except Exception as exc:
                verdict_error = str(exc)
        return HTMLResponse(render(
            bookies=views.bookies(cluster, pool=pool, timeout_s=settings.disk_info_timeout_s),
            queue=views.queue(cluster, limit=200),
            data_loss=views.data_loss(cluster),
            verdict=verdict, verdict_error=verdict_error, cluster_label=cluster.label, version=__version__,
        ))

    @app.get("/openapi.json", include_in_schema=False)
    def openapi_json(_who: Reader) -> JSONResponse:
        return JSONResponse(app.openapi())

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
                responses["401"] = error("ErrorBody", _WHY[401])
                if role is Role.ADMIN:
                    responses["403"] = error("ErrorBody", _WHY[403])
            responses["413"] = error("ErrorBody", _WHY[413])
            if "422" in responses:
                responses["422"] = error("ValidationErrorBody", "the request's shape: missing or unknown "
                                         "fields, wrong types (no \"yes\" for true), malformed JSON")
            op["responses"] = dict(sorted(responses.items()))
    return doc


def _hook_id(hook_id: str) -> str:
    if not (hook_id.isascii() and hook_id.isalnum()) or len(hook_id) > 64:
        raise ApiError(400, f"bad webhook id {hook_id!r}")
    return hook_id
