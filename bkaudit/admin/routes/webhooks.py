"""The webhook endpoints: admin-only, reads included (their URLs are configuration)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import Field

from bkaudit.admin import webhooks
from bkaudit.admin.guard import ApiError
from bkaudit.admin.routes.common import Admin, StrictBody, errors
from bkaudit.admin.routes.context import Ctx
from bkaudit.lifecycle import service

router = APIRouter()


class WebhookBody(StrictBody):
    url: str = Field(min_length=1, max_length=2000,
                     description="absolute http(s) URL without credentials; loopback, private, link-local, "
                                 "multicast and unspecified addresses only inside "
                                 "[admin] webhook_allow_networks")
    secret: str = Field(min_length=8, max_length=500)


def _hook_id(hook_id: str) -> str:
    if not (hook_id.isascii() and hook_id.isalnum()) or len(hook_id) > 64:
        raise ApiError(400, f"bad webhook id {hook_id!r}")
    return hook_id


HookId = Annotated[str, Depends(_hook_id)]


@router.get("/api/v1/webhooks", tags=["webhooks"], summary="registered webhooks (secrets never shown)")
def list_webhooks(_who: Admin, ctx: Ctx) -> list[dict[str, Any]]:
    return [h.public() for h in webhooks.list_all(ctx.cluster)]


@router.post("/api/v1/webhooks", tags=["webhooks"], status_code=201, responses=errors(400),
             summary="register a URL for lifecycle transitions (HMAC-SHA256 signed with the secret)")
def add_webhook(who: Admin, ctx: Ctx, body: WebhookBody) -> dict[str, Any]:
    try:
        hook = webhooks.register(ctx.cluster, url=body.url, secret=body.secret, by=f"api:{who.name}",
                                 at=service.now_iso(), allow=ctx.allow)
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None
    return hook.public()


@router.delete("/api/v1/webhooks/{hook_id}", tags=["webhooks"], summary="unregister a webhook",
               responses=errors(400, 404))
def delete_webhook(who: Admin, ctx: Ctx, hook_id: HookId) -> dict[str, Any]:
    if not webhooks.delete(ctx.cluster, hook_id):
        raise ApiError(404, f"no webhook {hook_id}")
    return {"deleted": hook_id}


@router.get("/api/v1/webhooks/{hook_id}/deliveries", tags=["webhooks"], responses=errors(400, 404),
            summary="delivery records: delivered or failed, with a class of error per attempt")
def webhook_deliveries(_who: Admin, ctx: Ctx, hook_id: HookId) -> list[dict[str, Any]]:
    if webhooks.get(ctx.cluster, hook_id) is None:
        raise ApiError(404, f"no webhook {hook_id}")
    return webhooks.deliveries(ctx.cluster, hook_id)
