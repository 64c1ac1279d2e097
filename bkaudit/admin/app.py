"""The HTTP management API (FastAPI): BookKeeper's `/api/v1/...` names where one exists, cluster level.

BookKeeper's per-bookie endpoints take the bookie from the server they run on; here one server manages the
cluster, so the same paths take `?bookie=<id>`. Everything is read from and written to ZooKeeper, so the API
works while a bookie host is down. Changing calls need an admin bearer token; reads need a read token unless
`[admin] anonymous_read`. Errors are JSON `{"error": ..., ...}`; no request can take the server down.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from bkaudit import __version__
from bkaudit.admin import views, webhooks
from bkaudit.admin.auth import Caller, Role, TokenBook
from bkaudit.admin.settings import AdminSettings
from bkaudit.errors import BkAuditError, FormatError, MetadataConflict
from bkaudit.lifecycle import service
from bkaudit.model import lifecycle as lc
from bkaudit.zk import lifecycle as store
from bkaudit.zk import paths, registry
from bkaudit.zk import underreplication as ur

log = logging.getLogger(__name__)

BookieParam = Annotated[str, Query(min_length=1, max_length=255, description="bookie id, e.g. 10.0.0.1:3181")]


class ApiError(Exception):
    """Answered as JSON `{"error": message, **extra}` with `status`."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.extra = extra


# -- auth: module level, so FastAPI resolves the annotations ---------------------------------------------
def _caller(request: Request) -> Caller | None:
    header = request.headers.get("authorization", "")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "malformed Authorization header (expected 'Bearer <token>')")
    found: Caller | None = request.app.state.tokens.identify(token.strip())
    if found is None:
        raise ApiError(401, "unknown token")
    return found


def _reader(request: Request) -> Caller:
    who = _caller(request)
    if who is None:
        if request.app.state.anonymous_read:
            return Caller("anonymous", Role.READ)
        raise ApiError(401, "a bearer token is required")
    return who


def _admin(request: Request) -> Caller:
    who = _caller(request)
    if who is None:
        raise ApiError(401, "a bearer token is required")
    if who.role < Role.ADMIN:
        raise ApiError(403, f"token {who.name!r} may only read")
    return who


Reader = Annotated[Caller, Depends(_reader)]
Admin = Annotated[Caller, Depends(_admin)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReadOnlyBody(_Body):
    readOnly: bool


class LifecycleBody(_Body):
    state: str = Field(min_length=1, max_length=40, description="Draining, Drained or Removed")
    reason: str = Field(default="", max_length=1000)


class WebhookBody(_Body):
    url: str = Field(min_length=1, max_length=2000)
    secret: str = Field(min_length=8, max_length=500)


class ReasonBody(_Body):
    reason: str = Field(default="", max_length=1000)


def create_app(
    zk: Any, *, root: str, settings: AdminSettings, warehouse: str = "", pool: Any = None,
    state_root: str | None = None,
) -> FastAPI:
    """The app over one started kazoo client (the caller owns it and the optional bookie client pool).

    `state_root` is `[zk] state_root` (None: `/bkaudit<root>`): where lifecycle, webhook, serving and
    data-loss records live.
    """
    paths.bkaudit_state_root(root=root, state_root=state_root)  # validates both
    app = FastAPI(title="bkaudit admin API", version=__version__,
                  description="Cluster-level BookKeeper management: lifecycle, serving state, cookies, "
                              "webhooks, under-replication, data loss, audit verdicts (docs/http-api.md).")

    app.state.tokens = TokenBook(admin=settings.admin_tokens, read=settings.read_tokens)
    app.state.anonymous_read = settings.anonymous_read

    # -- errors: always JSON, never a crash ------------------------------------------------------------------
    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse({"error": str(exc), **exc.extra}, status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in exc.errors()]
        return JSONResponse({"error": "invalid request", "detail": detail}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("request failed")
        return JSONResponse({"error": f"internal error: {type(exc).__name__}: {exc}"}, status_code=500)

    def known(bookie: str) -> str:
        try:
            paths.lifecycle_state_path(bookie, root=root)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        registered = registry.bookie_state(zk, bookie, root) != "absent"
        if not registered and not registry.exists(zk, paths.cookie_path(bookie, root=root)):
            raise ApiError(404, f"unknown bookie {bookie}")
        return bookie

    def change(bookie: str, target: str, who: Caller, reason: str) -> dict[str, Any]:
        try:
            state = lc.LifecycleState.parse(target)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        try:
            record = service.transition(zk, bookie, state, actor=lc.Actor.OPERATOR, by=f"api:{who.name}",
                                        reason=reason, root=root, state_root=state_root)
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
    @app.get("/heartbeat", tags=["bookkeeper"], summary="liveness (BookKeeper: /heartbeat)")
    def heartbeat() -> dict[str, str]:
        return {"status": "OK"}

    @app.get("/api/v1/bookie/list_bookies", tags=["bookkeeper"], summary="registered bookies by type")
    def list_bookies(
        _who: Reader, type: Annotated[str, Query(pattern="^(rw|ro|all)$")] = "all"
    ) -> dict[str, Any]:
        rw = registry.list_writable(zk, root) if type in ("rw", "all") else []
        ro = registry.list_readonly(zk, root) if type in ("ro", "all") else []
        return {b: b.rsplit(":", 1)[0] for b in [*rw, *ro]}

    @app.get("/api/v1/bookie/list_bookie_info", tags=["bookkeeper"],
             summary="every bookie: rack, registration, lifecycle state, disk use, drain progress")
    def list_bookie_info(_who: Reader) -> list[dict[str, Any]]:
        return views.bookies(zk, root=root, state_root=state_root, pool=pool,
                             timeout_s=settings.disk_info_timeout_s)

    @app.get("/api/v1/bookie/state", tags=["bookkeeper"], summary="a bookie's serving and lifecycle state")
    def bookie_state(_who: Reader, bookie: BookieParam) -> dict[str, Any]:
        known(bookie)
        registration = registry.bookie_state(zk, bookie, root)
        try:
            lifecycle: str | None = service.current(zk, bookie, root=root)[0].value
        except FormatError:
            lifecycle = None
        return {"bookie": bookie, "running": registration != "absent", "readOnly": registration == "readonly",
                "shuttingDown": False, "availableForHighPriorityWrites": registration == "writable",
                "lifecycleState": lifecycle}

    @app.get("/api/v1/bookie/state/readonly", tags=["bookkeeper"], summary="read-only switch and actual mode")
    def get_readonly(_who: Reader, bookie: BookieParam) -> dict[str, Any]:
        known(bookie)
        return {"bookie": bookie, "readOnly": registry.bookie_state(zk, bookie, root) == "readonly",
                "readOnlyRequested": store.read_serving(zk, bookie, root=root, state_root=state_root)}

    @app.put("/api/v1/bookie/state/readonly", tags=["bookkeeper"],
             summary="ask a bookie to serve reads only (or writes again); kept in ZooKeeper")
    def put_readonly(who: Admin, bookie: BookieParam, body: ReadOnlyBody) -> dict[str, Any]:
        known(bookie)
        store.write_serving(zk, bookie, body.readOnly, by=f"api:{who.name}", at=service.now_iso(), root=root,
                            state_root=state_root)
        return {"bookie": bookie, "readOnlyRequested": body.readOnly}

    @app.get("/api/v1/autorecovery/list_under_replicated_ledger", tags=["bookkeeper"],
             summary="the under-replication queue (BookKeeper's printmissingreplica adds the replicas)")
    def list_under_replicated(_who: Reader, printmissingreplica: bool = False) -> Any:
        q = views.queue(zk, root=root)
        if printmissingreplica:
            return {str(r["ledger_id"]): r.get("replicas", []) for r in q["ledgers"]}
        return [r["ledger_id"] for r in q["ledgers"]]

    @app.get("/api/v1/autorecovery/who_is_auditor", tags=["bookkeeper"], summary="the elected auditor")
    def who_is_auditor(_who: Reader) -> dict[str, Any]:
        return {"Auditor": ur.current_auditor(zk, root=root)}

    # -- lifecycle (the design's additions) ------------------------------------------------------------------
    @app.get("/api/v1/bookie/lifecycle", tags=["lifecycle"], summary="lifecycle state, who set it, progress")
    def get_lifecycle(_who: Reader, bookie: BookieParam) -> dict[str, Any]:
        known(bookie)
        return service.describe(zk, bookie, root=root, state_root=state_root)

    @app.put("/api/v1/bookie/lifecycle", tags=["lifecycle"],
             summary="operator transition: Draining (from Active), Drained (from DrainingFailed), Removed")
    def put_lifecycle(who: Admin, bookie: BookieParam, body: LifecycleBody) -> dict[str, Any]:
        known(bookie)
        return change(bookie, body.state, who, body.reason)

    @app.get("/api/v1/bookie/lifecycle/history", tags=["lifecycle"], summary="every transition, oldest first")
    def lifecycle_history(_who: Reader, bookie: BookieParam) -> list[dict[str, Any]]:
        try:
            paths.lifecycle_history_root(bookie, root=root, state_root=state_root)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        return [h.to_dict() for h in store.history(zk, bookie, root=root, state_root=state_root)]

    @app.get("/api/v1/bookie/drain_progress", tags=["lifecycle"],
             summary="per draining / drained / failed bookie: ledgers and bytes left, failures")
    def drain_progress(_who: Reader, bookie: str | None = Query(default=None, max_length=255)) -> list[Any]:
        return views.drain_progress(zk, root=root, state_root=state_root, bookie=bookie)

    @app.get("/api/v1/bookie/cookie", tags=["lifecycle"], summary="a bookie's cookie")
    def get_cookie(_who: Reader, bookie: BookieParam) -> dict[str, Any]:
        known(bookie)
        try:
            found = registry.read_cookie(zk, bookie, root)
        except FormatError as exc:
            raise ApiError(409, f"the cookie is unreadable: {exc}") from None
        if found is None:
            raise ApiError(404, f"bookie {bookie} has no cookie")
        cookie, version = found
        return {"bookie": bookie, "version": version, "bookieHost": cookie.bookie_host,
                "journalDirs": list(cookie.journal_dirs), "ledgerDirs": list(cookie.ledger_dirs),
                "instanceId": cookie.instance_id}

    @app.delete("/api/v1/bookie/cookie", tags=["lifecycle"],
                summary="remove a Drained bookie: cookie and lifecycle state deleted together")
    def delete_cookie(who: Admin, bookie: BookieParam, body: ReasonBody | None = None) -> dict[str, Any]:
        known(bookie)
        return change(bookie, lc.LifecycleState.REMOVED.value, who, body.reason if body else "")

    # -- data loss and audits --------------------------------------------------------------------------------
    @app.get("/api/v1/autorecovery/data_loss", tags=["audit"], summary="ledgers with entries no replica has")
    def data_loss(_who: Reader) -> list[dict[str, Any]]:
        return views.data_loss(zk, root=root, state_root=state_root)

    @app.get("/api/v1/autorecovery/bad_ledgers", tags=["audit"],
             summary="ledgers a drain could not move (data loss, repeated failures), per bookie")
    def bad_ledgers(_who: Reader) -> dict[str, Any]:
        progress = views.drain_progress(zk, root=root, state_root=state_root)
        return {p["bookie"]: {"state": p["state"], "data_loss_ledgers": p.get("data_loss_ledgers", []),
                              "failed_ledgers": p.get("failed_ledgers", [])} for p in progress}

    @app.get("/api/v1/audit/verdicts", tags=["audit"], summary="the latest checker run's verdict, violations")
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
        return [h.public() for h in webhooks.list_all(zk, root=root, state_root=state_root)]

    @app.post("/api/v1/webhooks", tags=["webhooks"], status_code=201,
              summary="register a URL for lifecycle transitions (HMAC-SHA256 signed with the secret)")
    def add_webhook(who: Admin, body: WebhookBody) -> dict[str, Any]:
        try:
            hook = webhooks.register(zk, url=body.url, secret=body.secret, by=f"api:{who.name}",
                                     at=service.now_iso(), root=root, state_root=state_root)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        return hook.public()

    @app.delete("/api/v1/webhooks/{hook_id}", tags=["webhooks"], summary="unregister a webhook")
    def delete_webhook(who: Admin, hook_id: Annotated[str, Depends(_hook_id)]) -> dict[str, Any]:
        if not webhooks.delete(zk, hook_id, root=root, state_root=state_root):
            raise ApiError(404, f"no webhook {hook_id}")
        return {"deleted": hook_id}

    @app.get("/api/v1/webhooks/{hook_id}/deliveries", tags=["webhooks"], summary="delivery records")
    def webhook_deliveries(_who: Admin, hook_id: Annotated[str, Depends(_hook_id)]) -> list[dict[str, Any]]:
        if webhooks.get(zk, hook_id, root=root, state_root=state_root) is None:
            raise ApiError(404, f"no webhook {hook_id}")
        return webhooks.deliveries(zk, hook_id, root=root, state_root=state_root)

    # -- dashboard -------------------------------------------------------------------------------------------
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
            bookies=views.bookies(zk, root=root, state_root=state_root, pool=pool,
                                  timeout_s=settings.disk_info_timeout_s),
            queue=views.queue(zk, root=root, limit=200),
            data_loss=views.data_loss(zk, root=root, state_root=state_root),
            verdict=verdict, verdict_error=verdict_error, root=root, version=__version__,
        ))

    return app


def _hook_id(hook_id: str) -> str:
    if not hook_id.isalnum() or len(hook_id) > 64:
        raise ApiError(400, f"bad webhook id {hook_id!r}")
    return hook_id
