"""Data loss and the checker's audit verdicts (bkaudit's additions)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from bkaudit.admin import views
from bkaudit.admin.guard import ApiError
from bkaudit.admin.routes.common import Reader, errors
from bkaudit.admin.routes.context import Ctx
from bkaudit.errors import BkAuditError

router = APIRouter()


@router.get("/api/v1/autorecovery/data_loss", tags=["audit"], summary="ledgers with entries no replica has")
def data_loss(_who: Reader, ctx: Ctx) -> list[dict[str, Any]]:
    return views.data_loss(ctx.cluster)


@router.get("/api/v1/autorecovery/bad_ledgers", tags=["audit"],
            summary="ledgers a drain could not move (data loss, repeated failures), per bookie")
def bad_ledgers(_who: Reader, ctx: Ctx) -> dict[str, Any]:
    progress = views.drain_progress(ctx.cluster)
    return {p["bookie"]: {"state": p["state"], "data_loss_ledgers": p.get("data_loss_ledgers", []),
                          "failed_ledgers": p.get("failed_ledgers", [])} for p in progress}


@router.get("/api/v1/audit/verdicts", tags=["audit"], summary="the latest checker run's verdict, violations",
            responses=errors(404))
def audit_verdicts(
    _who: Reader, ctx: Ctx, limit: Annotated[int, Query(ge=0, le=10000)] = 200
) -> dict[str, Any]:
    if not ctx.warehouse:
        raise ApiError(404, "no warehouse configured ([admin] warehouse or [snapshot] warehouse)")
    try:
        return views.audit_verdict(ctx.warehouse, limit=limit)
    except BkAuditError as exc:
        raise ApiError(404, str(exc)) from None
