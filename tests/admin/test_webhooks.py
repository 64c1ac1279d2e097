"""Webhooks end to end: a receiver on loopback gets each lifecycle transition exactly once, HMAC-signed;
a failing receiver is retried with backoff and every delivery is recorded; registrations survive a restart
of the admin server (they live in ZooKeeper)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from bkaudit.lifecycle import service
from bkaudit.model import lifecycle as lc
from tests.admin.support import ADMIN, add_cookie, serve
from tests.helpers import wait_for

S = lc.LifecycleState
SECRET = "webhook-secret-42"
A, B = "10.0.0.1:3181", "10.0.0.2:3181"


class Receiver:
    """A loopback HTTP server recording every POST; the first `fail_first` answers are 503."""

    def __init__(self, fail_first: int = 0) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.fail_first = fail_first
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                failing = len(receiver.received) <= receiver.fail_first
                self.send_response(503 if failing else 204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()




def verified(headers: dict[str, str], body: bytes) -> dict[str, Any]:
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["X-Bkaudit-Signature"], expected)
    return json.loads(body)


def test_each_transition_is_delivered_once_and_signed(zk, zk_root) -> None:
    add_cookie(zk, zk_root, A)
    add_cookie(zk, zk_root, B)
    # a transition before the webhook exists is not delivered
    service.transition(zk, B, S.DRAINING, actor=lc.Actor.OPERATOR, by="early", root=zk_root)
    receiver = Receiver()
    server = serve(zk, zk_root)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            hook = api.post("/api/v1/webhooks", json={"url": receiver.url, "secret": SECRET},
                            headers=ADMIN).json()["id"]
            done = [(A, S.DRAINING, lc.Actor.OPERATOR), (A, S.DRAINED, lc.Actor.AUDITOR),
                    (B, S.DRAINING_FAILED, lc.Actor.AUDITOR), (A, S.REMOVED, lc.Actor.OPERATOR)]
            for bookie, target, actor in done:
                service.transition(zk, bookie, target, actor=actor, by=actor.value, root=zk_root)
            wait_for(lambda: len(receiver.received) >= len(done))
            # let the dispatcher make further passes over the same history: nothing is sent again
            passes_seen = server.dispatcher
            assert passes_seen is not None
            for _ in range(3):
                passes_seen.step()
            deliveries = api.get(f"/api/v1/webhooks/{hook}/deliveries", headers=ADMIN).json()
    finally:
        server.stop()
        receiver.close()
    payloads = [verified(h, b) for h, b in receiver.received]
    got = [(p["bookie"], p["transition"]["state"]) for p in payloads]
    assert sorted(got) == sorted((b, t.value) for b, t, _ in done)
    assert len({h["X-Bkaudit-Delivery"] for h, _ in receiver.received}) == len(done)
    assert all(d["status"] == "delivered" and len(d["attempts"]) == 1 for d in deliveries)
    assert len(deliveries) == len(done)


def test_failures_are_retried_with_backoff_and_recorded_and_hooks_survive_restarts(zk, zk_root) -> None:
    add_cookie(zk, zk_root, A)
    receiver = Receiver(fail_first=2)
    first = serve(zk, zk_root)
    try:
        with httpx.Client(base_url=first.url, timeout=30) as api:
            hook = api.post("/api/v1/webhooks", json={"url": receiver.url, "secret": SECRET},
                            headers=ADMIN).json()["id"]
    finally:
        first.stop()
    second = serve(zk, zk_root, webhook_backoff_s=0.3)  # a restarted server: the registration is still there
    try:
        service.transition(zk, A, S.DRAINING, actor=lc.Actor.OPERATOR, by="op", root=zk_root)
        with httpx.Client(base_url=second.url, timeout=30) as api:
            (delivery,) = wait_for(lambda: [
                d for d in api.get(f"/api/v1/webhooks/{hook}/deliveries", headers=ADMIN).json()
                if d["status"] != "pending"
            ])
    finally:
        second.stop()
        receiver.close()
    assert delivery["status"] == "delivered"
    assert [a.get("status_code") for a in delivery["attempts"]] == [503, 503, 204]
    gaps = [b["at"] - a["at"] for a, b in zip(delivery["attempts"], delivery["attempts"][1:], strict=False)]
    assert gaps[0] >= 0.3 and gaps[1] >= 0.6  # exponential backoff: 0.3 s, then 0.6 s
    assert len(receiver.received) == 3
    assert all(verified(h, b)["transition"]["state"] == "Draining" for h, b in receiver.received)
