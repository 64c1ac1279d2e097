"""What the routers share: the token dependencies (`Reader`, `Admin`, and `role_of` that reads them back),
the `?bookie=` parameter, strict request bodies and the documented error bodies."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Query, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict

from bkaudit.admin import guard
from bkaudit.admin.auth import Caller, Role
from bkaudit.admin.guard import ApiError
from bkaudit.admin.routes.context import context
from bkaudit.formats.bookie_id import invalid_bookie_id_reason


# -- auth: module level, so FastAPI resolves the annotations ---------------------------------------------
def reader(request: Request) -> Caller:
    ctx = context(request)
    return guard.authorize(request.headers.get("authorization", ""), Role.READ, ctx.tokens,
                           anonymous_read=ctx.settings.anonymous_read)


def admin(request: Request) -> Caller:
    ctx = context(request)
    return guard.authorize(request.headers.get("authorization", ""), Role.ADMIN, ctx.tokens,
                           anonymous_read=ctx.settings.anonymous_read)


Reader = Annotated[Caller, Depends(reader)]
Admin = Annotated[Caller, Depends(admin)]


def role_of(route: APIRoute) -> Role | None:
    """The role a route needs (from its dependencies), None for an open route."""
    found: set[Any] = set()
    stack = list(route.dependant.dependencies)
    while stack:
        dep = stack.pop()
        found.add(dep.call)
        stack.extend(dep.dependencies)
    return Role.ADMIN if admin in found else Role.READ if reader in found else None


# -- ?bookie= ----------------------------------------------------------------------------------------------
def _valid_bookie(request: Request, bookie: str) -> str:
    reason = invalid_bookie_id_reason(bookie)
    if reason is not None:  # NUL, '/', spaces, ...: never handed to ZooKeeper (BadArgumentsError)
        raise ApiError(400, reason)
    try:
        context(request).cluster.check_bookie_id(bookie)  # and no record name the store refuses ('.', '..')
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None
    return bookie


_BOOKIE_DOC = "bookie id, e.g. 10.0.0.1:3181 (BookKeeper's BookieId rule: [a-zA-Z0-9:-_.\\-]+, else 400)"


def _bookie(
    request: Request, bookie: Annotated[str, Query(min_length=1, max_length=255, description=_BOOKIE_DOC)]
) -> str:
    return _valid_bookie(request, bookie)


def maybe_bookie(
    request: Request,
    bookie: Annotated[str | None, Query(min_length=1, max_length=255, description=_BOOKIE_DOC)] = None,
) -> str | None:
    return None if bookie is None else _valid_bookie(request, bookie)


BookieParam = Annotated[str, Depends(_bookie)]


# -- bodies: strict (no "yes" for true, no 1 for "1"), unknown fields refused ----------------------------
class StrictBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


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


WHY = {
    400: "a bad value: an invalid bookie id (BookKeeper's BookieId rule), an unknown state, a refused "
         "webhook URL",
    401: "no token, an unknown token or a malformed Authorization header (WWW-Authenticate: Bearer)",
    403: "a read token on a call that needs an admin token",
    404: "an unknown bookie, webhook or run",
    409: "refused in the cluster's current state (a transition's `blockers`, an unreadable znode)",
    413: "the request body is larger than [admin] max_body_bytes (refused before it is read)",
    502: "the bookie's own HTTP admin API did not make it read-only (the switch is recorded)",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The `responses` of a route that can answer these error statuses."""
    return {code: {"model": ErrorBody, "description": WHY[code]} for code in codes}
