"""BookKeeper's own endpoints (`/heartbeat`, `/api/v1/bookie/...`, `/api/v1/autorecovery/...`), cluster level:
the per-bookie ones take `?bookie=<id>`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import Field

from bkaudit.admin import views
from bkaudit.admin.guard import ApiError
from bkaudit.admin.routes.common import Admin, BookieParam, Reader, StrictBody, errors
from bkaudit.admin.routes.context import Ctx
from bkaudit.errors import FormatError
from bkaudit.lifecycle import service, serving

router = APIRouter()


class ReadOnlyBody(StrictBody):
    readOnly: bool = Field(description="true or false (JSON booleans only)")


@router.get("/heartbeat", tags=["bookkeeper"],
            summary="liveness (BookKeeper: /heartbeat); never needs a token")
def heartbeat() -> dict[str, str]:
    return {"status": "OK"}


@router.get("/api/v1/bookie/list_bookies", tags=["bookkeeper"], summary="registered bookies by type")
def list_bookies(
    _who: Reader, ctx: Ctx, type: Annotated[str, Query(pattern="^(rw|ro|all)$")] = "all"
) -> dict[str, Any]:
    rw = ctx.cluster.registry.writable() if type in ("rw", "all") else []
    ro = ctx.cluster.registry.readonly() if type in ("ro", "all") else []
    return {b: b.rsplit(":", 1)[0] for b in [*rw, *ro]}


@router.get("/api/v1/bookie/list_bookie_info", tags=["bookkeeper"],
            summary="every bookie: rack, registration, lifecycle state, disk use, drain progress")
def list_bookie_info(_who: Reader, ctx: Ctx) -> list[dict[str, Any]]:
    return views.bookies(ctx.cluster, pool=ctx.pool, timeout_s=ctx.settings.disk_info_timeout_s)


@router.get("/api/v1/bookie/state", tags=["bookkeeper"], summary="a bookie's serving and lifecycle state",
            responses=errors(400, 404))
def bookie_state(_who: Reader, ctx: Ctx, bookie: BookieParam) -> dict[str, Any]:
    ctx.known(bookie)
    registration = ctx.cluster.registry.bookie_state(bookie)
    try:
        lifecycle: str | None = service.current(ctx.cluster, bookie)[0].value
    except FormatError:
        lifecycle = None
    return {"bookie": bookie, "running": registration != "absent", "readOnly": registration == "readonly",
            "shuttingDown": False, "availableForHighPriorityWrites": registration == "writable",
            "lifecycleState": lifecycle}


@router.get("/api/v1/bookie/state/readonly", tags=["bookkeeper"], summary="read-only switch and actual mode",
            responses=errors(400, 404))
def get_readonly(_who: Reader, ctx: Ctx, bookie: BookieParam) -> dict[str, Any]:
    ctx.known(bookie)
    return {"bookie": bookie, "readOnly": ctx.cluster.registry.bookie_state(bookie) == "readonly",
            "readOnlyRequested": ctx.cluster.lifecycle.read_serving(bookie),
            **serving.inspect(ctx.cluster, bookie).to_dict()}


@router.put("/api/v1/bookie/state/readonly", tags=["bookkeeper"],
            summary="ask a bookie to serve reads only (or writes again): the switch in ZooKeeper, which "
                    "bkaudit bookies follow; a registered-writable BookKeeper bookie is also made read-only "
                    "through its own HTTP admin API (readOnly true only)",
            responses=errors(400, 404, 409, 502))
def put_readonly(who: Admin, ctx: Ctx, bookie: BookieParam, body: ReadOnlyBody) -> dict[str, Any]:
    ctx.known(bookie)
    cluster = ctx.cluster
    cluster.lifecycle.write_serving(bookie, body.readOnly, by=f"api:{who.name}", at=service.now_iso())
    out: dict[str, Any] = {"bookie": bookie, "readOnlyRequested": body.readOnly}
    if not body.readOnly:  # bkaudit never asks a BookKeeper bookie for writes (serving.py says why)
        return {**out, **serving.inspect(cluster, bookie).to_dict()}
    check = serving.ensure_read_only(cluster, bookie, timeout_s=ctx.bookie_http_timeout_s)
    if not check.ok:
        raise ApiError(409 if check.permanent else 502,
                       f"the switch is recorded, but bookie {bookie} still takes writes: {check.error}",
                       **out, **check.to_dict())
    return {**out, **check.to_dict()}


@router.get("/api/v1/autorecovery/list_under_replicated_ledger", tags=["bookkeeper"],
            summary="the under-replication queue (BookKeeper's printmissingreplica adds the replicas)")
def list_under_replicated(_who: Reader, ctx: Ctx, printmissingreplica: bool = False) -> Any:
    q = views.queue(ctx.cluster)
    if printmissingreplica:
        return {str(r["ledger_id"]): r.get("replicas", []) for r in q["ledgers"]}
    return [r["ledger_id"] for r in q["ledgers"]]


@router.get("/api/v1/autorecovery/who_is_auditor", tags=["bookkeeper"], summary="the elected auditor")
def who_is_auditor(_who: Reader, ctx: Ctx) -> dict[str, Any]:
    return {"Auditor": ctx.cluster.queue.auditor()}
