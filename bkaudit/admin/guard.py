"""What every request of the admin API passes before FastAPI looks at it (a pure ASGI middleware).

In this order, from the request line and headers alone:
1. the route is matched; a route that needs a token gets it checked (`authorize`): a refusal is answered
   401/403 at once, with `Connection: close` when a body was announced, and no byte of the body is read, so
   an unauthenticated request can neither make the server parse JSON nor buffer a large body;
2. a `Content-Length` above `[admin] max_body_bytes` is answered 413 at once; a body without one (chunked)
   is counted while the app reads it and cut off with 413 at the limit;
3. every answer gets the security headers (`SECURITY_HEADERS`: CSP, X-Frame-Options, ...);
4. an exception escaping the app is logged and answered as a JSON 500 on the same connection, which stays
   usable (Starlette's own handler re-raises it to the server, which then drops the connection).
Unknown paths (404) and a method a path does not have (405, with `Allow`) are answered by the app itself,
without a token and without reading a body.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.routing import Match

from bkaudit.admin.auth import Caller, Role, TokenBook

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class ApiError(Exception):
    """Answered as JSON `{"error": message, **extra}` with `status`."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.extra = extra

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"} if self.status == 401 else {}


def authorize(header: str, needed: Role, tokens: TokenBook, *, anonymous_read: bool) -> Caller:
    """Who presents the `Authorization` header `header`, if that role may make a call needing `needed`;
    ApiError 401 (no, unknown or malformed token) or 403 (a read token where admin is needed) otherwise."""
    caller: Caller | None = None
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "malformed Authorization header (expected 'Bearer <token>')")
        caller = tokens.identify(token.strip())
        if caller is None:
            raise ApiError(401, "unknown token")
    if caller is None:
        if needed is Role.READ and anonymous_read:
            return Caller("anonymous", Role.READ)
        raise ApiError(401, "a bearer token is required")
    if caller.role < needed:
        raise ApiError(403, f"token {caller.name!r} may only read")
    return caller


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def security_headers(
    inline_scripts: tuple[str, ...] = (), inline_styles: tuple[str, ...] = ()
) -> dict[str, str]:
    """The headers every answer carries. The CSP allows no source but this server (`connect-src` for the
    dashboard's calls) and, by their hashes, the dashboard's own inline script and style; nothing may frame
    a page (CSP frame-ancestors and X-Frame-Options, for older browsers)."""
    scripts = " ".join(_sha256(s) for s in inline_scripts) or "'none'"
    styles = " ".join(_sha256(s) for s in inline_styles) or "'none'"
    csp = (f"default-src 'none'; script-src {scripts}; style-src {styles}; connect-src 'self'; "
           "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
    return {"Content-Security-Policy": csp, "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


class _TooLarge(Exception):
    """Raised into the app's body read at the limit."""


class Guard:
    """The ASGI middleware described in the module docstring, wrapped around the FastAPI app's inner stack.

    `routes` are (route, role needed or None) in the app's order; `tokens`/`anonymous_read` as configured.
    """

    def __init__(self, app: ASGIApp, *, routes: Callable[[], list[tuple[Any, Role | None]]],
                 tokens: TokenBook, anonymous_read: bool, max_body_bytes: int,
                 headers: dict[str, str]) -> None:
        self.app = app
        self.routes = routes
        self.tokens = tokens
        self.anonymous_read = anonymous_read
        self.max_body_bytes = max_body_bytes
        self.extra_headers = [(k.lower().encode(), v.encode()) for k, v in headers.items()]

    def _role(self, scope: Scope) -> Role | None:
        for route, role in self.routes():  # as Starlette's router: the first full match (path and method)
            match, _ = route.matches(scope)
            if match is Match.FULL:
                return role
        return None  # no route, or the path with other methods only: the app answers 404 or 405

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = {"started": False, "answered": False, "body_done": False, "too_large": False}
        limit = self.max_body_bytes
        too_large = {"error": f"request body larger than {limit} bytes ([admin] max_body_bytes)"}

        async def emit(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
                have = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []),
                                      *((k, v) for k, v in self.extra_headers if k not in have)]
            await send(message)

        async def answer(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                   *((k.lower().encode(), v.encode()) for k, v in (headers or {}).items())]
            if not state["body_done"]:  # the rest of the body is not read: the connection cannot be reused
                raw.append((b"connection", b"close"))
            state["answered"] = True
            await emit({"type": "http.response.start", "status": status, "headers": raw})
            await emit({"type": "http.response.body", "body": data})

        async def app_send(message: Message) -> None:
            if state["too_large"] and not state["answered"]:
                await answer(413, too_large)  # whatever the app made of the cut-off body
            if state["answered"]:
                return
            await emit(message)

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        length_text = headers.get("content-length")
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        state["body_done"] = not chunked and length_text in (None, "0")
        role = self._role(scope)
        if role is not None:
            try:
                authorize(headers.get("authorization", ""), role, self.tokens,
                          anonymous_read=self.anonymous_read)
            except ApiError as exc:
                await answer(exc.status, {"error": str(exc), **exc.extra}, exc.headers())
                return
        if length_text is not None and not chunked:
            if not length_text.isdigit():
                await answer(400, {"error": "malformed Content-Length header"})
                return
            if int(length_text) > self.max_body_bytes:
                await answer(413, too_large)
                return
        received = 0

        async def bounded_receive() -> Message:
            nonlocal received
            if state["answered"] or state["too_large"]:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if not message.get("more_body", False):
                    state["body_done"] = True
                if received > self.max_body_bytes:
                    state["too_large"] = True
                    raise _TooLarge
            return message

        try:
            await self.app(scope, bounded_receive, app_send)
        except Exception as exc:
            if state["too_large"]:
                if not state["answered"] and not state["started"]:
                    await answer(413, too_large)
                return
            log.exception("request %s %s failed", scope.get("method"), scope.get("path"))
            if not state["started"]:
                await answer(500, {"error": f"internal error: {type(exc).__name__}"})
