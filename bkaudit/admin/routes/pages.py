"""The pages: `/` (a redirect), the dashboard and `/openapi.json` (a read: open only with anonymous_read)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from bkaudit import __version__
from bkaudit.admin import views
from bkaudit.admin.routes.common import Reader
from bkaudit.admin.routes.context import Ctx

router = APIRouter()


@router.get("/", include_in_schema=False)
def index() -> RedirectResponse:
    return RedirectResponse("/dashboard")


@router.get("/dashboard", response_class=HTMLResponse, tags=["dashboard"], summary="the admin dashboard")
def dashboard(_who: Reader, ctx: Ctx) -> HTMLResponse:
    from bkaudit.admin.dashboard import render

    verdict: dict[str, Any] | None = None
    verdict_error = "no warehouse configured"
    if ctx.warehouse:
        try:
            verdict = views.audit_verdict(ctx.warehouse, limit=50)
        except Exception as exc:
            verdict_error = str(exc)
    cluster = ctx.cluster
    return HTMLResponse(render(
        bookies=views.bookies(cluster, pool=ctx.pool, timeout_s=ctx.settings.disk_info_timeout_s),
        queue=views.queue(cluster, limit=200),
        data_loss=views.data_loss(cluster),
        verdict=verdict, verdict_error=verdict_error, cluster_label=cluster.label, version=__version__,
    ))


@router.get("/openapi.json", include_in_schema=False)
def openapi_json(_who: Reader, request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())
