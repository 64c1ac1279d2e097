"""The lifecycle endpoints (bkaudit's additions): state, operator transitions, history, drain progress and
the cookie, whose removal is the Removed transition."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import Field

from bkaudit.admin import views
from bkaudit.admin.guard import ApiError
from bkaudit.admin.routes.common import Admin, BookieParam, Reader, StrictBody, errors, maybe_bookie
from bkaudit.admin.routes.context import Ctx
from bkaudit.errors import FormatError
from bkaudit.lifecycle import service
from bkaudit.model import lifecycle as lc

router = APIRouter()


class LifecycleBody(StrictBody):
    state: str = Field(min_length=1, max_length=40, description="Draining, Drained or Removed")
    reason: str = Field(default="", max_length=1000)
    force: bool = Field(default=False, description="Removed although the bookie is still registered")


class ReasonBody(StrictBody):
    reason: str = Field(default="", max_length=1000)


@router.get("/api/v1/bookie/lifecycle", tags=["lifecycle"], summary="lifecycle state, who set it, progress",
            responses=errors(400, 404))
def get_lifecycle(_who: Reader, ctx: Ctx, bookie: BookieParam) -> dict[str, Any]:
    ctx.known(bookie)
    return service.describe(ctx.cluster, bookie)


@router.put("/api/v1/bookie/lifecycle", tags=["lifecycle"],
            summary="operator transition: Draining (from Active), Drained (from DrainingFailed), Removed",
            responses=errors(400, 404, 409))
def put_lifecycle(who: Admin, ctx: Ctx, bookie: BookieParam, body: LifecycleBody) -> dict[str, Any]:
    ctx.known(bookie)
    return ctx.change(bookie, body.state, who, body.reason, body.force)


@router.get("/api/v1/bookie/lifecycle/history", tags=["lifecycle"], summary="every transition, oldest first",
            responses=errors(400))
def lifecycle_history(_who: Reader, ctx: Ctx, bookie: BookieParam) -> list[dict[str, Any]]:
    return [h.to_dict() for h in ctx.cluster.lifecycle.history(bookie)]


@router.get("/api/v1/bookie/drain_progress", tags=["lifecycle"],
            summary="per draining / drained / failed bookie: ledgers and bytes left, failures",
            responses=errors(400))
def drain_progress(_who: Reader, ctx: Ctx, bookie: Annotated[str | None, Depends(maybe_bookie)]) -> list[Any]:
    return views.drain_progress(ctx.cluster, bookie=bookie)


@router.get("/api/v1/bookie/cookie", tags=["lifecycle"], summary="a bookie's cookie",
            responses=errors(400, 404, 409))
def get_cookie(_who: Reader, ctx: Ctx, bookie: BookieParam) -> dict[str, Any]:
    ctx.known(bookie)
    try:
        found = ctx.cluster.registry.read_cookie(bookie)
    except FormatError as exc:
        raise ApiError(409, f"the cookie is unreadable: {exc}") from None
    if found is None:
        raise ApiError(404, f"bookie {bookie} has no cookie")
    cookie, version = found
    return {"bookie": bookie, "version": version, "bookieHost": cookie.bookie_host,
            "journalDirs": list(cookie.journal_dirs), "ledgerDirs": list(cookie.ledger_dirs),
            "instanceId": cookie.instance_id}


@router.delete("/api/v1/bookie/cookie", tags=["lifecycle"],
               summary="remove a Drained bookie: cookie and lifecycle state deleted together (refused while "
                       "it is registered, unless force=true)",
               responses=errors(400, 404, 409))
def delete_cookie(
    who: Admin, ctx: Ctx, bookie: BookieParam, body: ReasonBody | None = None,
    force: Annotated[Literal["true", "false"], Query(description="although still registered")] = "false",
) -> dict[str, Any]:
    ctx.known(bookie)
    reason = body.reason if body else ""
    return ctx.change(bookie, lc.LifecycleState.REMOVED.value, who, reason, force == "true")
