"""A leaving bookie serves reads only, also when it is Apache BookKeeper's own: through its HTTP admin API.

A bkaudit bookie watches its lifecycle state znode and re-registers read-only by itself
(`bkaudit.bookie.lifecycle`). A Java bookie knows nothing of that znode; the one way BookKeeper offers to make
a running bookie read-only from outside is its HTTP admin API, which the Auditor's drain pass uses
(`bkaudit.lifecycle.drain`), every pass, for every Draining, DrainingFailed and Drained bookie that is
registered writable and does not follow its state itself.

What BookKeeper 4.17 does (apache/bookkeeper release-4.17.3, read, not copied):
- `HttpService.publishInfo` adds the endpoint `{id "httpserver", port httpServerPort, host httpServerHost,
  protocol "http"}` to the bookie's registration (`BookieServiceInfo`) when `httpServerEnabled` (default
  off); `httpServerHost` defaults to 0.0.0.0, a wildcard, so the bookie-rpc endpoint's host is used instead.
- `HttpRouter.BOOKIE_STATE_READONLY` = `/api/v1/bookie/state/readonly`, served by
  `BookieStateReadOnlyService`: GET answers 200 `{"readOnly": bool}`; PUT with `{"readOnly": true}` on a
  writable bookie calls `StateManager.transitionToReadOnlyMode(true)` and waits for it (the bookie
  re-registers under `available/readonly`, as `BookieStateManager.doTransitionToReadOnlyMode` does), then
  answers 200 with the new state. It answers 400 when `readOnlyModeEnabled` is false; a handler exception is
  a bare 500 (`VertxAbstractHandler` -> `ErrorHttpService`). The change is "manual"
  (`BookieStatus.isManuallyModifiedToReadOnly`): the bookie does not go writable again by itself when its
  disks recover, but it is held in memory only (unless `persistBookieStatusEnabled`), so a restarted bookie
  comes back writable: hence every pass.
- bkaudit never sends `{"readOnly": false}`: a Java bookie can be read-only for its own reasons (disks full,
  `forceReadOnlyBookie`) that bkaudit cannot see, and the PUT would override them. There is no way back from
  Draining, and a removed bookie should stay read-only until its operator stops it (docs/lifecycle.md).

The HTTP calls bypass any proxy settings (bookies are cluster-internal) and are bounded by a timeout.
"""

from __future__ import annotations

import enum
import http.client
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bkaudit.errors import FormatError
from bkaudit.formats import records

if TYPE_CHECKING:
    from bkaudit.store import ClusterStore

log = logging.getLogger(__name__)

READONLY_PATH = "/api/v1/bookie/state/readonly"  # HttpRouter.BOOKIE_STATE_READONLY
HTTP_PROTOCOL = "http"  # HttpService.publishInfo: EndpointInfo("httpserver", port, host, "http", ...)
BKAUDIT_BOOKIE_PROPERTY = "bkaudit.version"  # published by every bkaudit bookie (bkaudit.bookie.server)
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]", "0:0:0:0:0:0:0:0"})
ANSWER_BYTES = 4096  # what is kept of an answer body for the error text


class Serving(enum.Enum):
    """What one look at (and, where needed, one call to) a leaving bookie found."""

    FOLLOWS_STATE = "follows_state"  # a bkaudit bookie: its own watch of the state znode makes it read-only
    ABSENT = "absent"  # not registered (down): nothing to do until it comes back
    READ_ONLY = "read_only"  # registered under available/readonly already (whatever the reason)
    MADE_READ_ONLY = "made_read_only"  # registered writable; the PUT answered {"readOnly": true}
    WRITABLE = "writable"  # registered writable, and bkaudit could not make it read-only (`error` says why)


@dataclass(frozen=True)
class ServingCheck:
    bookie: str
    serving: Serving
    error: str = ""
    permanent: bool = False  # asking again cannot help until the operator changes the bookie
    url: str = ""  # the readonly endpoint used (or that would be used)

    @property
    def ok(self) -> bool:
        """The bookie takes no new writes (or will, by itself: a bkaudit bookie, or a bookie that is down)."""
        return self.serving is not Serving.WRITABLE

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"serving": self.serving.value}
        if self.url:
            out["serving_url"] = self.url
        if self.error:
            out["serving_error"] = self.error
        return out


class ReadOnlyCallFailed(Exception):
    """The readonly call did not make the bookie read-only; `permanent` when its answer says it never will."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


def follows_state(info: records.BookieServiceInfo) -> bool:
    """A bkaudit bookie (its registration's properties say so) watches its lifecycle state itself."""
    return BKAUDIT_BOOKIE_PROPERTY in info.properties_dict()


def readonly_url(info: records.BookieServiceInfo) -> str | None:
    """`http://host:port/api/v1/bookie/state/readonly` from the registration's `http` endpoint (the first, as
    endpoints are picked by protocol); a wildcard host means the bookie-rpc endpoint's host. None when the
    bookie publishes no HTTP endpoint (`httpServerEnabled=false`, BookKeeper's default)."""
    http = info.endpoint(HTTP_PROTOCOL)
    if http is None:
        return None
    host = http.host
    if host in WILDCARD_HOSTS:
        rpc = info.endpoint()
        if rpc is None or rpc.host in WILDCARD_HOSTS:
            return None
        host = rpc.host
    host = host.strip("[]")
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{http.port}{READONLY_PATH}"


# -- the HTTP calls ---------------------------------------------------------------------------------------
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy between us and a bookie


def _call(url: str, *, method: str, body: bytes | None, timeout_s: float) -> bool:
    """One call; the `readOnly` of a 200 answer. ReadOnlyCallFailed otherwise (4xx: permanent)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with _OPENER.open(request, timeout=timeout_s) as answer:
            text = answer.read(ANSWER_BYTES).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        detail = _text(exc)
        status = f"{method} {url} answered {exc.code}" + (f": {detail}" if detail else "")
        # 400: BookieStateReadOnlyService refuses (readOnlyModeEnabled=false); 404: no such endpoint there
        raise ReadOnlyCallFailed(status, permanent=400 <= exc.code < 500) from None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ReadOnlyCallFailed(f"{method} {url} failed: {reason}") from None
    try:
        value = json.loads(text)
    except ValueError:
        raise ReadOnlyCallFailed(f"{method} {url} answered 200 without JSON: {text[:200]!r}") from None
    if not isinstance(value, dict) or not isinstance(value.get("readOnly"), bool):
        raise ReadOnlyCallFailed(f"{method} {url} answered 200 without a readOnly flag: {text[:200]!r}")
    return bool(value["readOnly"])


def _text(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read(ANSWER_BYTES).decode("utf-8", "replace").strip()[:500]
    except Exception:
        return ""


def get_read_only(url: str, *, timeout_s: float = 10.0) -> bool:
    """GET: the bookie's own word on whether it serves reads only (`StateManager.isReadOnly`)."""
    return _call(url, method="GET", body=None, timeout_s=timeout_s)


def put_read_only(url: str, *, timeout_s: float = 10.0) -> None:
    """PUT `{"readOnly": true}`; returns once the bookie answered that it is read-only."""
    if not _call(url, method="PUT", body=b'{"readOnly":true}', timeout_s=timeout_s):
        raise ReadOnlyCallFailed(f"PUT {url} answered readOnly false")


# -- the one entry point ----------------------------------------------------------------------------------
def inspect(store: ClusterStore, bookie_id: str) -> ServingCheck:
    """What `ensure_read_only` would do, without calling the bookie: WRITABLE (with the reason) only when it
    is registered writable, does not follow its state and publishes no usable HTTP endpoint; else its state
    (a writable bookie bkaudit can reach is reported WRITABLE without error, with the url)."""
    return _check(store, bookie_id, call=None)


def ensure_read_only(store: ClusterStore, bookie_id: str, *, timeout_s: float = 10.0) -> ServingCheck:
    """Make a registered-writable bookie that does not follow its lifecycle state serve reads only, through
    its HTTP admin API; report what was found or done (never raises for the bookie's answers)."""
    return _check(store, bookie_id, call=lambda url: put_read_only(url, timeout_s=timeout_s))


def _check(store: ClusterStore, bookie_id: str, *, call: Callable[[str], None] | None) -> ServingCheck:
    try:
        where, info = store.registry.registration(bookie_id)
    except FormatError as exc:
        return ServingCheck(bookie_id, Serving.WRITABLE, f"unparseable registration: {exc}", permanent=True)
    if where == "absent" or info is None:
        return ServingCheck(bookie_id, Serving.ABSENT)
    if follows_state(info):
        return ServingCheck(bookie_id, Serving.FOLLOWS_STATE)
    url = readonly_url(info) or ""
    if where == "readonly":
        return ServingCheck(bookie_id, Serving.READ_ONLY, url=url)
    if not url:
        return ServingCheck(
            bookie_id, Serving.WRITABLE, permanent=True,
            error="registered writable with no http endpoint in its registration (a BookKeeper bookie with "
                  "httpServerEnabled=false): bkaudit cannot make it read-only; enable its HTTP server, or "
                  "make it read-only or stop it yourself",
        )
    if call is None:
        return ServingCheck(bookie_id, Serving.WRITABLE, url=url)
    try:
        call(url)
    except ReadOnlyCallFailed as exc:
        return ServingCheck(bookie_id, Serving.WRITABLE, str(exc), permanent=exc.permanent, url=url)
    log.info("bookie %s made read-only through %s", bookie_id, url)
    return ServingCheck(bookie_id, Serving.MADE_READ_ONLY, url=url)
