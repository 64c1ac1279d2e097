"""Webhooks end to end: a receiver on loopback gets each lifecycle transition exactly once, HMAC-signed;
a failing receiver is retried with backoff and every delivery is recorded; registrations survive a restart
of the admin server (they live in ZooKeeper). And where webhooks may not go (SSRF, issue 32 item 5):
internal addresses, bad ports and credentials are refused at registration and again at every delivery after
resolving the name; delivery records say only a class of error; credentials are never shown or logged."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import socket
import threading
from typing import Any

import httpx
import pytest

from bkaudit.admin import webhooks
from bkaudit.errors import ConfigError
from bkaudit.lifecycle import service
from bkaudit.model import lifecycle as lc
from bkaudit.store import ZkStore
from bkaudit.zk import paths
from tests.admin.support import ADMIN, Receiver, add_cookie, serve, settings
from tests.helpers import wait_for

S = lc.LifecycleState
SECRET = "webhook-secret-42"
A, B = "10.0.0.1:3181", "10.0.0.2:3181"


def verified(headers: dict[str, str], body: bytes) -> dict[str, Any]:
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["X-Bkaudit-Signature"], expected)
    return json.loads(body)


def test_each_transition_is_delivered_once_and_signed(zk, zk_root) -> None:
    add_cookie(zk, zk_root, A)
    add_cookie(zk, zk_root, B)
    # a transition before the webhook exists is not delivered
    cs = ZkStore(zk, root=zk_root)
    service.transition(cs, B, S.DRAINING, actor=lc.Actor.OPERATOR, by="early")
    receiver = Receiver()
    server = serve(zk, zk_root)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as api:
            hook = api.post("/api/v1/webhooks", json={"url": receiver.url, "secret": SECRET},
                            headers=ADMIN).json()["id"]
            done = [(A, S.DRAINING, lc.Actor.OPERATOR), (A, S.DRAINED, lc.Actor.AUDITOR),
                    (B, S.DRAINING_FAILED, lc.Actor.AUDITOR), (A, S.REMOVED, lc.Actor.OPERATOR)]
            for bookie, target, actor in done:
                service.transition(cs, bookie, target, actor=actor, by=actor.value)
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
    assert all(d["attempts"][0]["result"] == "delivered" for d in deliveries)
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
        service.transition(ZkStore(zk, root=zk_root), A, S.DRAINING, actor=lc.Actor.OPERATOR, by="op")
        with httpx.Client(base_url=second.url, timeout=30) as api:
            (delivery,) = wait_for(lambda: [
                d for d in api.get(f"/api/v1/webhooks/{hook}/deliveries", headers=ADMIN).json()
                if d["status"] != "pending"
            ])
    finally:
        second.stop()
        receiver.close()
    assert delivery["status"] == "delivered"
    # a failed attempt says only its class of error (no status code, no error text: see the SSRF tests)
    assert [a["result"] for a in delivery["attempts"]] == ["failed", "failed", "delivered"]
    assert [a.get("error") for a in delivery["attempts"]] == ["http_status", "http_status", None]
    assert all(set(a) <= {"at", "result", "error"} for a in delivery["attempts"])
    gaps = [b["at"] - a["at"] for a, b in zip(delivery["attempts"], delivery["attempts"][1:], strict=False)]
    assert gaps[0] >= 0.3 and gaps[1] >= 0.6  # exponential backoff: 0.3 s, then 0.6 s
    assert len(receiver.received) == 3
    assert all(verified(h, b)["transition"]["state"] == "Draining" for h, b in receiver.received)


# -- SSRF: where webhooks may go (issue 32 item 5) ----------------------------------------------------------
REFUSED_URLS = [
    "http://169.254.169.254/latest/meta-data/",  # cloud metadata: link-local
    "http://10.1.2.3/hook", "http://172.16.0.1/hook", "http://192.168.1.1/hook",  # private
    "http://[fd00::1]/hook", "http://[fe80::1]/hook",  # unique local, link-local IPv6
    "http://127.0.0.1:8080/hook", "http://[::1]/hook", "http://localhost/hook",  # loopback
    "http://127.1/hook", "http://2130706433/hook", "http://0x7f000001/hook",  # loopback, other spellings
    "http://[::ffff:127.0.0.1]/hook", "http://[::ffff:169.254.169.254]/hook",  # IPv4-mapped
    "http://0.0.0.0/hook", "http://[::]/hook",  # unspecified
    "http://224.0.0.1/hook", "http://[ff02::1]/hook",  # multicast
    "http://100.64.0.1/hook",  # shared address space (carrier-grade NAT): not global
    "http://93.184.216.34:99999/hook", "http://93.184.216.34:0/hook", "http://93.184.216.34:x/hook",  # ports
    "http://user:pw@93.184.216.34/hook", "http://token@93.184.216.34/hook",  # credentials
    "ftp://93.184.216.34/hook", "http:///hook", "http://93.184.216.34/ho ok", "http://93.184.216.34/\r\nX: y",
]
ACCEPTED_URLS = ["http://93.184.216.34/hook", "https://93.184.216.34:8443/x?y=1", "http://[2606:4700::1111]/"]


def test_urls_to_internal_addresses_bad_ports_and_credentials_are_refused() -> None:
    for url in REFUSED_URLS:
        with pytest.raises(webhooks.UrlRefused) as refused:
            webhooks.validate_url(url)
        assert "pw" not in str(refused.value), url
    for url in ACCEPTED_URLS:
        assert webhooks.validate_url(url) == url
    # [admin] webhook_allow_networks lets exactly its networks through
    allow = settings(webhook_allow_networks=("127.0.0.0/8", "10.1.0.0/16")).allowed_networks()
    for url in ("http://127.0.0.1:8080/hook", "http://127.1/hook", "http://10.1.2.3/hook",
                "http://[::ffff:127.0.0.1]/hook"):
        assert webhooks.validate_url(url, allow) == url
    for url in ("http://10.2.0.1/hook", "http://169.254.169.254/", "http://[::1]/hook",
                "http://u:pw@127.0.0.1/hook"):
        with pytest.raises(webhooks.UrlRefused):
            webhooks.validate_url(url, allow)
    with pytest.raises(ConfigError):
        settings(webhook_allow_networks=("not-a-network",))


def test_the_api_refuses_them_and_stores_nothing(zk, zk_root) -> None:
    server = serve(zk, zk_root)  # the tests' settings allow 127.0.0.0/8 only
    try:
        with httpx.Client(base_url=server.url, timeout=30, headers=ADMIN) as api:
            loopback_v4 = ("http://127.", "http://2130706433", "http://0x7f", "http://[::ffff:127.", "http://localhost")
            for url in [u for u in REFUSED_URLS if not u.startswith(loopback_v4)]:  # the rest stay refused
                r = api.post("/api/v1/webhooks", json={"url": url, "secret": SECRET})
                assert r.status_code in (400, 422), f"{url}: {r.status_code} {r.text}"
                assert "pw" not in r.text
            assert api.get("/api/v1/webhooks").json() == []
            assert not zk.exists(paths.webhooks_root(root=zk_root)) or not zk.get_children(
                paths.webhooks_root(root=zk_root))
    finally:
        server.stop()


class _Resolver:
    """socket.getaddrinfo with one name answered as the test says (an attacker's DNS), others as usual."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, address: str | None) -> None:
        self.name, self.address, self.asked = name, address, 0
        real = socket.getaddrinfo

        def fake(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            if host != self.name:
                return real(host, port, *args, **kwargs)
            self.asked += 1
            if self.address is None:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (self.address, int(port)))]

        monkeypatch.setattr(socket, "getaddrinfo", fake)


def test_delivery_checks_the_address_again_after_resolving_no_dns_rebinding(
    zk, zk_root, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_cookie(zk, zk_root, A)
    receiver = Receiver()
    port = receiver.server.server_address[1]
    name = "hooks.rebind.test"
    dns = _Resolver(monkeypatch, name, "93.184.216.34")  # public when the webhook is registered
    strict = serve(zk, zk_root, webhook_allow_networks=(), webhook_max_attempts=3)
    cs = ZkStore(zk, root=zk_root)
    try:
        with httpx.Client(base_url=strict.url, timeout=30, headers=ADMIN) as api:
            r = api.post("/api/v1/webhooks", json={"url": f"http://{name}:{port}/hook", "secret": SECRET})
            assert r.status_code == 201, r.text
            assert dns.asked == 1  # checked at registration
            hook = r.json()["id"]
            dns.address = "127.0.0.1"  # then the name answers loopback
            service.transition(cs, A, S.DRAINING, actor=lc.Actor.OPERATOR, by="op")
            (delivery,) = wait_for(lambda: [d for d in api.get(f"/api/v1/webhooks/{hook}/deliveries").json()
                                            if d["status"] != "pending"])
    finally:
        strict.stop()
    assert delivery["status"] == "failed"
    assert [(a["result"], a["error"]) for a in delivery["attempts"]] == [("failed", "refused")]  # not retried
    assert receiver.received == []
    # where loopback is allowed, the same name is delivered to: the checked address, with the name as Host
    allowing = serve(zk, zk_root, webhook_allow_networks=("127.0.0.0/8",))
    try:
        service.transition(cs, A, S.DRAINING_FAILED, actor=lc.Actor.AUDITOR, by="auditor")
        wait_for(lambda: receiver.received)
    finally:
        allowing.stop()
        receiver.close()
    ((headers, body),) = receiver.received
    assert headers["Host"] == f"{name}:{port}"
    assert verified(headers, body)["transition"]["state"] == "DrainingFailed"


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


class _TcpService:
    """A loopback port that is not HTTP: it sends `greeting` (an SSH banner, or nothing) and closes."""

    def __init__(self, greeting: bytes) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]

        def serve_forever() -> None:
            while True:
                try:
                    conn, _ = self.sock.accept()
                except OSError:
                    return
                with conn:
                    conn.sendall(greeting)

        threading.Thread(target=serve_forever, daemon=True).start()

    def close(self) -> None:
        self.sock.close()


def test_delivery_records_say_failed_and_a_class_only_no_port_scanner(
    zk, zk_root, caplog, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_cookie(zk, zk_root, A)
    _Resolver(monkeypatch, "nothing.invalid", None)  # a name that does not resolve (without asking a DNS)
    ssh, silent = _TcpService(b"SSH-2.0-OpenSSH_9.6\r\n"), _TcpService(b"")
    failing = Receiver(fail_first=100)
    targets = {"closed": f"http://127.0.0.1:{_closed_port()}/hook", "ssh": f"http://127.0.0.1:{ssh.port}/",
               "silent": f"http://127.0.0.1:{silent.port}/", "http 503": failing.url,
               "unresolvable": "http://nothing.invalid/hook"}
    ids = {why: webhooks.register(ZkStore(zk, root=zk_root), url=url, secret=SECRET, by="t", at="now",
                                  allow=settings().allowed_networks()).id for why, url in targets.items()}
    # registered before the rules (an earlier release): refused at delivery, never connected to
    legacy = {"metadata": "http://169.254.169.254/latest/meta-data/", "credentials": "http://u:pw@127.0.0.1:9/h"}
    for why, url in legacy.items():
        ids[why] = why
        zk.create(paths.webhook_path(why, root=zk_root), json.dumps(
            {"id": why, "url": url, "secret": SECRET, "created_by": "old", "created_at": "then"}).encode(),
            makepath=True)
    caplog.set_level(logging.DEBUG)
    server = serve(zk, zk_root, webhook_max_attempts=2)
    try:
        service.transition(ZkStore(zk, root=zk_root), A, S.DRAINING, actor=lc.Actor.OPERATOR, by="op")
        with httpx.Client(base_url=server.url, timeout=30, headers=ADMIN) as api:
            records = {why: wait_for(lambda hook=hook: [  # type: ignore[misc]
                d for d in api.get(f"/api/v1/webhooks/{hook}/deliveries").json() if d["status"] != "pending"
            ])[0] for why, hook in ids.items()}
            listed = {h["id"]: h["url"] for h in api.get("/api/v1/webhooks").json()}
    finally:
        server.stop()
        ssh.close()
        silent.close()
        failing.close()
    classes = {why: [a.get("error") for a in r["attempts"]] for why, r in records.items()}
    unreachable = ["unreachable"] * 2  # a closed port, an SSH server, a silent one, no name: all the same
    assert classes == {"closed": unreachable, "ssh": unreachable, "silent": unreachable,
                       "unresolvable": unreachable, "http 503": ["http_status"] * 2,
                       "metadata": ["refused"], "credentials": ["refused"]}
    for why, record in records.items():
        assert record["status"] == "failed"
        assert all(set(a) == {"at", "result", "error"} and a["result"] == "failed"
                   for a in record["attempts"])
        assert "pw" not in json.dumps(record), why
    # credentials are never shown nor logged (httpx logged whole URLs at INFO)
    assert listed["credentials"] == "http://<redacted>@127.0.0.1:9/h"
    assert ":pw@" not in caplog.text and "u:pw" not in caplog.text
