"""Webhooks for lifecycle transitions: kept in the cluster store, HMAC-signed POSTs, retries, delivery
records.

A webhook is `bkaudit/webhooks/<id>` (JSON: url, secret, who registered it). Every transition record in the
lifecycle history created after the webhook (compared by ZooKeeper's creation zxid, not by clocks) is POSTed
once: the dispatcher first claims `bkaudit/webhook-deliveries/<id>/<bookie>~<record>` with a create, so two
admin servers never both deliver it, then POSTs with retries and exponential backoff and records the
outcome in that znode. The body is JSON; `X-Bkaudit-Signature: sha256=<hex HMAC-SHA256(secret, body)>`.

The admin API's callers are not trusted with the admin server's network position (no SSRF):
- a URL is refused when it carries credentials (`user:pw@`), has no or an invalid port, or names (or
  resolves to) a loopback, link-local, private, multicast, unspecified or otherwise non-global address,
  unless `[admin] webhook_allow_networks` lists a network holding it;
- the same check runs again at every delivery attempt on the addresses the name resolves to then, and the
  connection goes to one of those checked addresses (a DNS answer that changes between the check and the
  connect, DNS rebinding, cannot slip through); deliveries never use a proxy and never follow redirects;
- a delivery record says only `delivered` or `failed` with a class of error (`refused`,
  `unreachable`, `http_status`), never the error text or status code of the target, so the records cannot
  tell a closed port from a filtered one; the details go to the server's log, without the URL's path.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import json
import logging
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

if TYPE_CHECKING:
    from bkaudit.admin.settings import Network
    from bkaudit.store import ClusterStore

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Bkaudit-Signature"
DELIVERY_HEADER = "X-Bkaudit-Delivery"
REDACTED = "<redacted>"
ANSWER_BYTES = 4096  # at most this much of a receiver's answer is read (then the connection is closed)

# delivery error classes: all a delivery record says about a failure
ADDRESS_REFUSED = "refused"  # the URL, or an address its name resolves to, is refused (see above)
UNREACHABLE = "unreachable"  # no HTTP answer: the name did not resolve, connect/TLS/timeout, not HTTP
HTTP_STATUS = "http_status"  # an HTTP answer other than 2xx (redirects included: they are not followed)


class UrlRefused(ValueError):
    """A webhook URL bkaudit will not send to; the message never holds the URL's credentials."""


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def redact_url(url: str) -> str:
    """`url` without the password or user of its authority (`http://<redacted>@host/...`)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return REDACTED
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=f"{REDACTED}@{parts.netloc.rpartition('@')[2]}"))


def origin(url: str) -> str:
    """scheme://host:port of `url`, what logs name (a URL's path and query can carry a receiver's secret)."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
    except ValueError:
        return REDACTED


def refused_class(address: ipaddress.IPv4Address | ipaddress.IPv6Address,
                  allow: Iterable[Network] = ()) -> str | None:
    """Why a webhook may not go to `address` ("loopback", "private", ...), or None when it may."""
    candidates = [address]
    if isinstance(address, ipaddress.IPv6Address):  # IPv4 carried inside IPv6: judged as that IPv4 too
        embedded = address.ipv4_mapped or address.sixtofour or (address.teredo or (None, None))[1]
        if embedded is None and address in ipaddress.ip_network("64:ff9b::/96"):  # NAT64
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            candidates.append(embedded)
    allow = tuple(allow)
    if any(a in net for a in candidates for net in allow if a.version == net.version):
        return None
    for a in candidates:
        for name, refused in (("unspecified", a.is_unspecified), ("loopback", a.is_loopback),
                              ("link-local", a.is_link_local), ("multicast", a.is_multicast),
                              ("private", a.is_private), ("reserved", a.is_reserved or not a.is_global)):
            if refused:
                return name
    return None


def _split(url: str) -> tuple[SplitResult, str, int]:
    """(parts, host, port) of an acceptable absolute http(s) URL; UrlRefused otherwise."""
    if not isinstance(url, str) or any(ord(ch) <= 0x20 or ord(ch) == 0x7F for ch in url):
        raise UrlRefused("webhook url must be an absolute http(s) URL without spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise UrlRefused(f"webhook url has an invalid port or host: {redact_url(url)!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UrlRefused(f"webhook url must be an absolute http(s) URL, got {redact_url(url)!r}")
    if "@" in parts.netloc:
        raise UrlRefused("webhook url must not carry credentials (user:password@); receivers check the "
                         f"{SIGNATURE_HEADER} signature instead")
    if port == 0:
        raise UrlRefused(f"webhook url has an invalid port: {redact_url(url)!r}")
    host = parts.hostname
    if "%" in host:
        raise UrlRefused("webhook url must not name an IPv6 zone")
    return parts, host, port or (443 if parts.scheme == "https" else 80)


def _literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def resolve(host: str, port: int, allow: Iterable[Network] = ()) -> list[tuple[int, str]]:
    """(family, address) for every address `host` resolves to, all of them allowed; UrlRefused when any is
    refused (an attacker's DNS answering one public and one private address gets neither), OSError when
    the name does not resolve."""
    allow = tuple(allow)
    literal = _literal(host)
    found: list[tuple[int, str]]
    if literal is not None:
        found = [(socket.AF_INET6 if literal.version == 6 else socket.AF_INET, str(literal))]
    else:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        found = list(dict.fromkeys((family, str(sockaddr[0])) for family, _, _, _, sockaddr in infos))
    for _family, address in found:
        why = refused_class(ipaddress.ip_address(address.split("%", 1)[0]), allow)
        if why is not None:
            raise UrlRefused(f"webhook url's host is refused: {host} is a {why} address "
                             "(allow its network in [admin] webhook_allow_networks)")
    if not found:
        raise OSError(f"{host} resolves to no address")
    return found


def validate_url(url: str, allow: Iterable[Network] = (), *, resolve_names: bool = True) -> str:
    """`url` if webhooks may be sent to it (see the module docstring); UrlRefused otherwise. A name that does
    not resolve now is accepted: it is checked at every delivery."""
    _, host, port = _split(url)
    if _literal(host) is not None or resolve_names:
        try:
            resolve(host, port, allow)
        except OSError:
            pass
    return url


@dataclass(frozen=True)
class Webhook:
    id: str
    url: str
    secret: str
    created_by: str
    created_at: str
    created: int = 0  # its creation sequence in the store (ZooKeeper: czxid), ordered with transitions

    def public(self) -> dict[str, Any]:
        """What the API shows: never the secret, nor credentials in the URL (a record from before they were
        refused)."""
        return {"id": self.id, "url": redact_url(self.url), "created_by": self.created_by,
                "created_at": self.created_at}


def register(
    store: ClusterStore, *, url: str, secret: str, by: str, at: str, allow: Iterable[Network] = (),
) -> Webhook:
    """Store a webhook; UrlRefused (a ValueError) for a URL webhooks may not go to (`allow`: the networks of
    `[admin] webhook_allow_networks`)."""
    if not secret:
        raise ValueError("a webhook needs a non-empty secret (its deliveries are signed with it)")
    hook_id = uuid.uuid4().hex[:16]
    data = {"id": hook_id, "url": validate_url(url, allow), "secret": secret, "created_by": by,
            "created_at": at}
    store.webhooks.create(hook_id, json.dumps(data).encode())
    return get(store, hook_id) or Webhook(hook_id, url, secret, by, at)


def get(store: ClusterStore, hook_id: str) -> Webhook | None:
    try:
        found = store.webhooks.read(hook_id)
    except ValueError:  # not a webhook id at all
        return None
    if found is None:
        return None
    data, created = found
    try:
        raw = json.loads(data.decode())
        return Webhook(raw["id"], raw["url"], raw["secret"], raw.get("created_by", ""),
                       raw.get("created_at", ""), created)
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring malformed webhook %s: %s", hook_id, type(exc).__name__)
        return None


def list_all(store: ClusterStore) -> list[Webhook]:
    return [h for h in (get(store, i) for i in store.webhooks.ids()) if h is not None]


def delete(store: ClusterStore, hook_id: str) -> bool:
    return store.webhooks.delete(hook_id)


def deliveries(store: ClusterStore, hook_id: str) -> list[dict[str, Any]]:
    found = []
    for data in store.webhooks.deliveries(hook_id):
        try:
            found.append(json.loads(data.decode()))
        except (UnicodeDecodeError, ValueError):
            continue
    return [_public_record(r) for r in found if isinstance(r, dict)]


_CLASSES = (ADDRESS_REFUSED, UNREACHABLE, HTTP_STATUS)


def _public_record(record: dict[str, Any]) -> dict[str, Any]:
    """A delivery record as the API shows it: also records an earlier release wrote (with the URL as
    registered, error texts and status codes) say only the URL without credentials and a class."""
    out = dict(record)
    if isinstance(out.get("url"), str):
        out["url"] = redact_url(out["url"])
    attempts = []
    for a in out.get("attempts") or []:
        if not isinstance(a, dict):
            continue
        kept: dict[str, Any] = {"at": a.get("at")}
        if a.get("result") == "delivered" or (isinstance(a.get("status_code"), int)
                                              and 200 <= a["status_code"] < 300):
            kept["result"] = "delivered"
        else:
            kept["result"] = "failed"
            error = a.get("error")
            kept["error"] = error if error in _CLASSES else HTTP_STATUS if "status_code" in a else UNREACHABLE
        attempts.append(kept)
    if "attempts" in out:
        out["attempts"] = attempts
    return out


class _Delivery(Exception):
    """A failed delivery attempt: `kind` is its class (what the record says), `detail` only for the log."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


def post(url: str, body: bytes, headers: dict[str, str], *, timeout_s: float,
         allow: Iterable[Network] = ()) -> int:
    """POST `body` to `url` after checking the URL and every address its name resolves to now, connecting
    only to those checked addresses (no proxy, no redirect); the answer's status. _Delivery on failure."""
    try:
        parts, host, port = _split(url)
        addresses = resolve(host, port, allow)
    except UrlRefused as exc:
        raise _Delivery(ADDRESS_REFUSED, str(exc)) from None
    except OSError as exc:
        raise _Delivery(UNREACHABLE, f"{host} does not resolve: {exc}") from None
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        tls = ssl.create_default_context()
        conn = http.client.HTTPSConnection(host, port, timeout=timeout_s, context=tls)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)

    def connect(_address: Any, timeout: Any = None, source_address: Any = None) -> socket.socket:
        last: OSError | None = None
        for family, address in addresses:  # the checked addresses, never a second lookup of the name
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout_s)
                sock.connect((address, port))
                return sock
            except OSError as exc:
                sock.close()
                last = exc
        raise last or OSError("no address to connect to")

    conn._create_connection = connect  # type: ignore[attr-defined]  # http.client's own hook for connect
    target = urlunsplit(("", "", parts.path or "/", parts.query, ""))
    try:
        conn.request("POST", target, body=body, headers=headers)
        answer = conn.getresponse()
        answer.read(ANSWER_BYTES)
        return answer.status
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise _Delivery(UNREACHABLE, f"{type(exc).__name__}: {exc}") from None
    finally:
        conn.close()


class Dispatcher:
    """Polls the lifecycle history and delivers new transitions to every webhook (one thread)."""

    def __init__(
        self, store: ClusterStore, *, poll_s: float = 1.0, max_attempts: int = 5, backoff_s: float = 0.5,
        timeout_s: float = 5.0, allow: Iterable[Network] = (),
    ) -> None:
        self.store = store
        self.poll_s = poll_s
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.allow = tuple(allow)
        self._done: set[tuple[str, str]] = set()  # (webhook, delivery key) claimed or seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="webhooks", daemon=True)

    def start(self) -> Dispatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as exc:
                log.warning("webhook pass failed (retrying): %s", exc)
            self._stop.wait(self.poll_s)

    def _transitions(self) -> list[tuple[str, str, int, dict[str, Any]]]:
        """(bookie, record name, creation sequence, record) of every history record, oldest first."""
        out = []
        for bookie, name, created, data in self.store.lifecycle.transitions():
            try:
                out.append((bookie, name, created, json.loads(data.decode())))
            except (UnicodeDecodeError, ValueError):
                continue
        return out

    def step(self) -> int:
        """Deliver everything new; the number of deliveries attempted."""
        hooks = list_all(self.store)
        if not hooks:
            return 0
        attempted = 0
        for bookie, name, created, record in self._transitions():
            for hook in hooks:
                key = f"{bookie}~{name}"
                if created <= hook.created or (hook.id, key) in self._done or self._stop.is_set():
                    continue
                self._done.add((hook.id, key))
                if self._claim(hook, key):
                    attempted += 1
                    self._deliver(hook, key, {"webhook": hook.id, "event": "lifecycle_transition",
                                              "bookie": bookie, "record": name, "transition": record})
        return attempted

    def _claim(self, hook: Webhook, key: str) -> bool:
        return self.store.webhooks.claim(hook.id, key, json.dumps({"key": key, "status": "pending"}).encode())

    def _deliver(self, hook: Webhook, key: str, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, sort_keys=True).encode()
        headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(hook.secret, body),
                   DELIVERY_HEADER: f"{hook.id}/{key}"}
        attempts: list[dict[str, Any]] = []
        status = "failed"
        for attempt in range(1, self.max_attempts + 1):
            started = time.time()
            try:
                code = post(hook.url, body, headers, timeout_s=self.timeout_s, allow=self.allow)
                if 200 <= code < 300:
                    attempts.append({"at": started, "result": "delivered"})
                    status = "delivered"
                    break
                failure = _Delivery(HTTP_STATUS, f"answered {code}")
            except _Delivery as exc:
                failure = exc
            attempts.append({"at": started, "result": "failed", "error": failure.kind})
            log.warning("webhook %s (%s) %s: attempt %d failed: %s", hook.id, origin(hook.url), key, attempt,
                        failure)
            if failure.kind == ADDRESS_REFUSED:
                break  # asking again cannot help
            if attempt < self.max_attempts and self._stop.wait(self.backoff_s * 2 ** (attempt - 1)):
                break
        record = {"key": key, "webhook": hook.id, "url": redact_url(hook.url), "status": status,
                  "attempts": attempts, "payload": payload}
        self.store.webhooks.finish(hook.id, key, json.dumps(record).encode())
        log.info("webhook %s %s: %s after %d attempts", hook.id, key, status, len(attempts))
