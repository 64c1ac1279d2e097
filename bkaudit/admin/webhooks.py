"""Webhooks for lifecycle transitions: kept in ZooKeeper, HMAC-signed POSTs, retries, delivery records.

A webhook is `bkaudit/webhooks/<id>` (JSON: url, secret, who registered it). Every transition record in the
lifecycle history created after the webhook (compared by ZooKeeper's creation zxid, not by clocks) is POSTed
once: the dispatcher first claims `bkaudit/webhook-deliveries/<id>/<bookie>~<record>` with a create, so two
admin servers never both deliver it, then POSTs with retries and exponential backoff and records the
outcome in that znode. The body is JSON; `X-Bkaudit-Signature: sha256=<hex HMAC-SHA256(secret, body)>`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kazoo.exceptions import NodeExistsError, NoNodeError

from bkaudit.zk import paths
from bkaudit.zk.client import read_children

if TYPE_CHECKING:
    from kazoo.client import KazooClient

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Bkaudit-Signature"
DELIVERY_HEADER = "X-Bkaudit-Delivery"


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def validate_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"webhook url must be an absolute http(s) URL, got {url!r}")
    return url


@dataclass(frozen=True)
class Webhook:
    id: str
    url: str
    secret: str
    created_by: str
    created_at: str
    czxid: int = 0

    def public(self) -> dict[str, Any]:
        """What the API shows (never the secret)."""
        return {"id": self.id, "url": self.url, "created_by": self.created_by, "created_at": self.created_at}


def register(
    zk: KazooClient, *, url: str, secret: str, by: str, at: str, root: str, state_root: str | None = None
) -> Webhook:
    if not secret:
        raise ValueError("a webhook needs a non-empty secret (its deliveries are signed with it)")
    hook_id = uuid.uuid4().hex[:16]
    data = {"id": hook_id, "url": validate_url(url), "secret": secret, "created_by": by, "created_at": at}
    path = paths.webhook_path(hook_id, root=root, state_root=state_root)
    zk.create(path, json.dumps(data).encode(), makepath=True)
    return get(zk, hook_id, root=root, state_root=state_root) or Webhook(hook_id, url, secret, by, at)


def get(zk: KazooClient, hook_id: str, *, root: str, state_root: str | None = None) -> Webhook | None:
    try:
        data, stat = zk.get(paths.webhook_path(hook_id, root=root, state_root=state_root))
        raw = json.loads(data.decode())
        return Webhook(raw["id"], raw["url"], raw["secret"], raw.get("created_by", ""),
                       raw.get("created_at", ""), stat.czxid)
    except NoNodeError:
        return None
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring malformed webhook %s: %s", hook_id, exc)
        return None


def list_all(zk: KazooClient, *, root: str, state_root: str | None = None) -> list[Webhook]:
    try:
        ids = zk.get_children(paths.webhooks_root(root=root, state_root=state_root))
    except NoNodeError:
        return []
    return [h for h in (get(zk, i, root=root, state_root=state_root) for i in sorted(ids)) if h is not None]


def delete(zk: KazooClient, hook_id: str, *, root: str, state_root: str | None = None) -> bool:
    try:
        zk.delete(paths.webhook_path(hook_id, root=root, state_root=state_root))
    except NoNodeError:
        return False
    try:
        zk.delete(paths.webhook_deliveries_root(hook_id, root=root, state_root=state_root), recursive=True)
    except NoNodeError:
        pass
    return True


def deliveries(
    zk: KazooClient, hook_id: str, *, root: str, state_root: str | None = None
) -> list[dict[str, Any]]:
    base = paths.webhook_deliveries_root(hook_id, root=root, state_root=state_root)
    decode = lambda data: json.loads(data.decode())  # noqa: E731
    return read_children(zk, base, decode, skip=(UnicodeDecodeError, ValueError))


class Dispatcher:
    """Polls the lifecycle history and delivers new transitions to every webhook (one thread)."""

    def __init__(
        self, zk: KazooClient, *, root: str, state_root: str | None = None, poll_s: float = 1.0,
        max_attempts: int = 5, backoff_s: float = 0.5, timeout_s: float = 5.0,
    ) -> None:
        self.zk = zk
        self.root = root
        self.state_root = state_root
        self.poll_s = poll_s
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
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
        """(bookie, record name, czxid, record) of every history record, oldest first."""
        base = f"{paths.lifecycle_root(root=self.root, state_root=self.state_root)}/history"
        try:
            bookies = self.zk.get_children(base)
        except NoNodeError:
            return []
        out = []
        for bookie in bookies:
            try:
                names = self.zk.get_children(f"{base}/{bookie}")
            except NoNodeError:
                continue
            for name in names:
                try:
                    data, stat = self.zk.get(f"{base}/{bookie}/{name}")
                    out.append((bookie, name, stat.czxid, json.loads(data.decode())))
                except (NoNodeError, UnicodeDecodeError, ValueError):
                    continue
        return sorted(out, key=lambda t: t[2])

    def step(self) -> int:
        """Deliver everything new; the number of deliveries attempted."""
        hooks = list_all(self.zk, root=self.root, state_root=self.state_root)
        if not hooks:
            return 0
        attempted = 0
        for bookie, name, czxid, record in self._transitions():
            for hook in hooks:
                key = f"{bookie}~{name}"
                if czxid <= hook.czxid or (hook.id, key) in self._done or self._stop.is_set():
                    continue
                self._done.add((hook.id, key))
                if self._claim(hook, key):
                    attempted += 1
                    self._deliver(hook, key, {"webhook": hook.id, "event": "lifecycle_transition",
                                              "bookie": bookie, "record": name, "transition": record})
        return attempted

    def _claim(self, hook: Webhook, key: str) -> bool:
        path = f"{paths.webhook_deliveries_root(hook.id, root=self.root, state_root=self.state_root)}/{key}"
        try:
            self.zk.create(path, json.dumps({"key": key, "status": "pending"}).encode(), makepath=True)
            return True
        except NodeExistsError:
            return False

    def _deliver(self, hook: Webhook, key: str, payload: dict[str, Any]) -> None:
        import httpx

        body = json.dumps(payload, sort_keys=True).encode()
        headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(hook.secret, body),
                   DELIVERY_HEADER: f"{hook.id}/{key}"}
        attempts: list[dict[str, Any]] = []
        status = "failed"
        for attempt in range(1, self.max_attempts + 1):
            started = time.time()
            try:
                response = httpx.post(hook.url, content=body, headers=headers, timeout=self.timeout_s)
                attempts.append({"at": started, "status_code": response.status_code})
                if 200 <= response.status_code < 300:
                    status = "delivered"
                    break
            except httpx.HTTPError as exc:
                attempts.append({"at": started, "error": f"{type(exc).__name__}: {exc}"})
            if attempt < self.max_attempts and self._stop.wait(self.backoff_s * 2 ** (attempt - 1)):
                break
        record = {"key": key, "webhook": hook.id, "url": hook.url, "status": status, "attempts": attempts,
                  "payload": payload}
        path = f"{paths.webhook_deliveries_root(hook.id, root=self.root, state_root=self.state_root)}/{key}"
        try:
            self.zk.set(path, json.dumps(record).encode())
        except NoNodeError:
            pass  # the webhook was deleted meanwhile
        log.info("webhook %s %s: %s after %d attempts", hook.id, key, status, len(attempts))
