"""One realistic secured run, shared by the security tests: every bkaudit writer against a cluster with
ZooKeeper digest auth + CREATOR_ALL ACLs, mutual TLS to bookies, admin API tokens and a ledger password.

Everything runs as real processes on loopback: bookies (`bookie run`), `cluster init`, `ledger write/read/
recover/metadata`, `autorecovery run` (auditor + workers), `admin serve` (webhook dispatcher included), a
Spark `check --fresh` publishing markers, `report`, `violations`. All output goes to files under the run
directory, so the secret-leak test can grep everything the run wrote. While the services run, a poller walks
the whole ZooKeeper tree and records every znode it sees with its ACL (ephemeral votes, registrations and
locks only exist then), so the ACL test judges every znode the run created, not a list written here.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.security import ACL

from bkaudit.admin.auth import hash_token
from bkaudit.cluster.local import LocalCluster
from bkaudit.config import ZkSettings
from bkaudit.zk import client as zkclient
from bkaudit.zk import paths
from bkaudit.zk.server import ZooKeeperServer, free_port
from tests import helpers
from tests.pki import make_pki

ROOT = Path(__file__).resolve().parents[2]
USER = "bkaudit"
TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Secrets:
    """Distinctive values, so any appearance in output is a leak and not a coincidence."""

    zk_password: str = field(default_factory=lambda: "zkpw" + secrets.token_hex(10))
    ledger_password: str = field(default_factory=lambda: "ledgerpw" + secrets.token_hex(10))
    admin_token: str = field(default_factory=lambda: "admintok" + secrets.token_hex(12))
    read_token: str = field(default_factory=lambda: "readtok" + secrets.token_hex(12))
    webhook_secret: str = field(default_factory=lambda: "hooksecret" + secrets.token_hex(10))


@dataclass
class Seen:
    """Every znode the poller saw: path -> (ACL list, ephemeral owner)."""

    nodes: dict[str, tuple[list[ACL], int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class SecureRun:
    directory: Path
    zk_server: ZooKeeperServer
    chroot: str
    secrets: Secrets
    pki: dict[str, str]
    conf: Path
    cluster: LocalCluster | None = None
    seen: Seen = field(default_factory=Seen)
    baseline: set[str] = field(default_factory=set)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def connect(self) -> str:
        return self.zk_server.connect_string + self.chroot

    @property
    def settings(self) -> ZkSettings:
        return ZkSettings(connect=self.connect, root="/ledgers",
                          auth_digest=f"{USER}:{self.secrets.zk_password}", enable_security=True)

    def env(self) -> dict[str, str]:
        out = dict(os.environ)
        out.update({
            "BKAUDIT_LOG_LEVEL": "DEBUG",  # the most a process ever logs: a leak at any level shows
            "BKAUDIT_ZK__SESSION_TIMEOUT_S": "6",
            "BKAUDIT_AUTORECOVERY__IDLE_POLL_S": "0.2",
            "BKAUDIT_AUTORECOVERY__DATA_LOSS_MAX_ATTEMPTS": "2",
            "BKAUDIT_AUTORECOVERY__LOCK_RELEASE_OF_FAILED_LEDGER_GRACE_S": "4",  # the poller sees locks
            "BKAUDIT_RPC__REQUEST_TIMEOUT_S": "10",
        })
        return out

    # -- processes ------------------------------------------------------------------------------------------
    def cli(self, name: str, *args: str, timeout: float = TIMEOUT_S, check: bool = True,
            zk: bool = True, config: bool = True) -> subprocess.CompletedProcess[str]:
        """`bkaudit ARGS --config conf [--zk ...]`; stdout and stderr kept as <name>.out / <name>.err."""
        extra = ["--zk", self.connect, "--root", "/ledgers"] if zk else []
        if config:
            extra = ["--config", str(self.conf), *extra]
        cmd = [sys.executable, "-m", "bkaudit.cli", "-vv", *args, *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=self.env(), cwd=ROOT,
                              check=False)
        (self.directory / "out" / f"{name}.out").write_text(proc.stdout)
        (self.directory / "out" / f"{name}.err").write_text(proc.stderr)
        if check and proc.returncode != 0:
            raise AssertionError(f"bkaudit {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        return proc

    def background(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "bkaudit.cli", "-vv", *args, "--config", str(self.conf),
               "--zk", self.connect, "--root", "/ledgers"]
        log = (self.directory / "out" / f"{name}.log").open("ab")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env(), cwd=ROOT)
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def close(self) -> None:
        for proc in self.procs:
            self.stop(proc)
        if self.cluster is not None:
            self.cluster.down()

    # -- ZooKeeper -----------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def owner(self) -> Iterator[KazooClient]:
        """A session with the configured digest credentials."""
        zk = zkclient.connect(self.settings)
        try:
            yield zk
        finally:
            zkclient.close(zk)

    def walk(self, zk: KazooClient) -> None:
        """Record every znode under the chroot with its ACL (nodes deleted meanwhile are skipped)."""
        stack = ["/"]
        while stack:
            path = stack.pop()
            try:
                acl, stat = zk.get_acls(path)
                children = zk.get_children(path)
            except NoNodeError:
                continue
            with self.seen.lock:
                self.seen.nodes.setdefault(path, (list(acl), stat.ephemeralOwner))
            stack.extend(f"{path.rstrip('/')}/{c}" for c in children)

    @contextlib.contextmanager
    def polling(self) -> Iterator[None]:
        """Walk the tree over and over in a thread (catches short-lived locks and votes)."""
        stop = threading.Event()

        def loop() -> None:
            with self.owner() as zk:
                while not stop.is_set():
                    with contextlib.suppress(Exception):
                        self.walk(zk)
                    stop.wait(0.1)

        thread = threading.Thread(target=loop, name="acl-poller", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=30)


def wait_for(what: str, probe: Callable[[], Any], timeout_s: float = TIMEOUT_S) -> Any:
    """tests.helpers.wait_for with this flow's (longer) timeout."""
    return helpers.wait_for(probe, timeout_s, what, interval_s=0.2)


def digest_id(user: str, password: str) -> str:
    """ZooKeeper's DigestAuthenticationProvider id: user:base64(sha1(user:password))."""
    import base64

    return f"{user}:{base64.b64encode(hashlib.sha1(f'{user}:{password}'.encode()).digest()).decode()}"


class _Receiver(http.server.BaseHTTPRequestHandler):
    received: list[bytes] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).received.append(body)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def _config(run: SecureRun, admin_port: int) -> str:
    s, p = run.secrets, run.pki
    return "\n".join([
        "[zk]", f'auth_digest = "{USER}:{s.zk_password}"', "enable_security = true",
        "[bookie]", f'tls_cert = "{p["server_cert"]}"', f'tls_key = "{p["server_key"]}"',
        f'tls_ca = "{p["ca"]}"', "require_tls = true",
        "[rpc]", f'tls_ca = "{p["ca"]}"', f'tls_cert = "{p["client_cert"]}"',
        f'tls_key = "{p["client_key"]}"',
        "[admin]", f'admin_tokens = ["ops:{hash_token(s.admin_token)}"]',
        f'read_tokens = ["viewer:{hash_token(s.read_token)}"]', "anonymous_read = false",
        f"port = {admin_port}", "webhook_poll_s = 0.2",
        'webhook_allow_networks = ["127.0.0.0/8"]',  # the receiver is on loopback
        "[snapshot]", f'warehouse = "{run.directory / "warehouse"}"',
        "[checker]", f'metrics_file = "{run.directory / "metrics" / "checker.prom"}"',
        "[autorecovery]", f'metrics_file = "{run.directory / "metrics" / "autorecovery.prom"}"',
        "",
    ])


def run_flow(directory: Path, zk_server: ZooKeeperServer) -> SecureRun:
    """The whole secured run; returns with the bookies still up (ephemeral registrations stay checkable)."""
    (directory / "out").mkdir(parents=True)
    (directory / "pki").mkdir()
    run = SecureRun(directory, zk_server, f"/sec{secrets.token_hex(6)}", Secrets(),
                    make_pki(directory / "pki"), directory / "bkaudit.toml")
    admin_port = free_port()
    run.conf.write_text(_config(run, admin_port))
    anonymous = zkclient.connect(zk_server.connect_string)
    try:
        anonymous.ensure_path(run.chroot)  # the test harness's chroot, not a bkaudit znode
    finally:
        zkclient.close(anonymous)
    with run.owner() as zk:
        run.walk(zk)
        run.baseline = set(run.seen.nodes)
        run.seen.nodes.clear()
    level = os.environ.get("BKAUDIT_LOG_LEVEL")
    os.environ["BKAUDIT_LOG_LEVEL"] = "DEBUG"  # bookies (started, restarted by LocalCluster) log everything
    try:
        _drive(run, admin_port)
    except BaseException:
        run.close()
        raise
    finally:
        if level is None:
            os.environ.pop("BKAUDIT_LOG_LEVEL", None)
        else:
            os.environ["BKAUDIT_LOG_LEVEL"] = level
    return run


def _drive(run: SecureRun, admin_port: int) -> None:
    s = run.secrets
    run.cli("cluster-init", "cluster", "init")
    run.cluster = LocalCluster.up(run.directory / "cluster", zk_connect=run.connect, bookies=4, racks=2,
                                  bookie_args=["--config", str(run.conf)],
                                  zk_auth=f"{USER}:{s.zk_password}")
    ledgers: dict[str, int] = {}
    for name, shape in (("replicated", ("-e", "3", "-w", "2", "-a", "2")),
                        ("single", ("-e", "1", "-w", "1", "-a", "1")),
                        ("mac", ("-e", "2", "-w", "2", "-a", "2", "--digest", "mac"))):
        out = run.cli(f"write-{name}", "ledger", "write", "-n", "20", "--entry-size", "64", *shape,
                      "--password", s.ledger_password, "--json")
        ledgers[name] = int(json.loads(out.stdout)["ledger_id"])
    out = run.cli("write-open", "ledger", "write", "-n", "5", "--no-close", "--password", s.ledger_password,
                  "--json")
    ledgers["open"] = int(json.loads(out.stdout)["ledger_id"])
    run.facts["ledgers"] = ledgers
    run.cli("read", "ledger", "read", str(ledgers["mac"]), "--last", "3", "--json")
    run.cli("metadata", "ledger", "metadata", str(ledgers["mac"]), "--json")
    znode = run.directory / "inputs" / "mac-ledger.znode"  # the raw znode (it holds the password): an input
    znode.parent.mkdir()
    with run.owner() as zk:
        znode.write_bytes(zk.get(paths.ledger_path(ledgers["mac"], root="/ledgers"))[0])
    run.cli("decode", "decode", "metadata", str(znode), zk=False, config=False)
    run.cli("recover", "ledger", "recover", str(ledgers["open"]), "--json")

    with run.polling():
        receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
        threading.Thread(target=receiver.serve_forever, daemon=True).start()
        try:
            _services(run, admin_port, receiver, ledgers)
        finally:
            receiver.shutdown()
            receiver.server_close()
    run.cli("report", "report", "--out", str(run.directory / "report"), "--json", zk=False)
    run.cli("violations", "violations", "--json", zk=False, check=False)
    run.cli("ur-list", "underreplicated", "list", "--json", check=False)
    run.cli("lifecycle-state", "lifecycle", "state", run.facts["drained"], "--json")
    run.cli("lifecycle-history", "lifecycle", "history", run.facts["drained"], "--json")
    run.cli("ar-disable", "autorecovery", "disable")  # the replication switch znode, seen, then removed
    with run.owner() as zk:
        run.walk(zk)
    run.cli("ar-enable", "autorecovery", "enable")
    with run.owner() as zk:
        run.walk(zk)


def _services(run: SecureRun, admin_port: int, receiver: http.server.ThreadingHTTPServer,
              ledgers: dict[str, int]) -> None:
    assert run.cluster is not None
    s = run.secrets
    admin = run.background("admin", "admin", "serve", "--warehouse", str(run.directory / "warehouse"))
    auditor = run.background("autorecovery", "autorecovery", "run", "--events",
                             str(run.directory / "out" / "autorecovery.events"))
    base = f"http://127.0.0.1:{admin_port}"
    admin_h = {"Authorization": f"Bearer {s.admin_token}"}
    read_h = {"Authorization": f"Bearer {s.read_token}"}

    def up() -> bool:
        try:
            return httpx.get(f"{base}/heartbeat", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for("the admin API", up)
    hook = httpx.post(f"{base}/api/v1/webhooks", headers=admin_h, timeout=30, json={
        "url": f"http://127.0.0.1:{receiver.server_address[1]}/hook", "secret": s.webhook_secret})
    assert hook.status_code == 201, hook.text
    run.facts["webhook"] = hook.json()["id"]
    with run.owner() as zk:
        wait_for("an elected auditor", lambda: zk.get_children(paths.election_root(root="/ledgers")))
        # damage: the single-copy ledger loses entries on its only bookie (stopped, storage edited, restarted)
        from bkaudit.bookie.storage import Storage
        from bkaudit.zk.ledgers import read_ledger_metadata

        single = ledgers["single"]
        bookie = read_ledger_metadata(zk, single, root="/ledgers")[0].segments[0].ensemble[0]
        run.cluster.stop_bookie(bookie)
        with Storage(run.cluster.bookie(bookie).data_dir) as storage:
            assert storage.delete_entries(single, [3, 4]) == 2
        run.cluster.start_bookie(bookie)
        run.facts["damaged_bookie"] = bookie
    snap = json.loads(run.cli("snapshot", "snapshot", "--json", timeout=600).stdout)
    with run.owner() as zk:  # a new metadata version after the snapshot: the checker re-asks the bookies
        from bkaudit.zk import ledgers as zk_ledgers

        md, stat = zk_ledgers.read_ledger_metadata(zk, ledgers["replicated"], root="/ledgers")
        zk_ledgers.write_ledger_metadata(zk, ledgers["replicated"], md, expected_version=stat.version,
                                         root="/ledgers")
    out = run.cli("check", "check", "--snapshot-id", snap["snapshot_id"], "--publish-underreplicated",
                  "--json", check=False, timeout=600)
    run.facts["check"] = json.loads(out.stdout)
    with run.owner() as zk:
        wait_for("the data-loss record of the wiped ledger", lambda: zk.exists(
            paths.data_loss_path(ledgers["single"], root="/ledgers")))
        others = [b for b in run.cluster.ids() if b != run.facts["damaged_bookie"]]
        drained = others[-1]
        run.facts["drained"], run.facts["readonly"] = drained, others[0]
        r = httpx.put(f"{base}/api/v1/bookie/state/readonly", params={"bookie": others[0]}, headers=admin_h,
                      json={"readOnly": False}, timeout=30)
        assert r.status_code == 200, r.text
        r = httpx.put(f"{base}/api/v1/bookie/lifecycle", params={"bookie": drained}, headers=admin_h,
                      json={"state": "Draining", "reason": "security test"}, timeout=30)
        assert r.status_code == 200, r.text
        wait_for("a webhook delivery", lambda: _Receiver.received)
        for path in ("/api/v1/bookie/list_bookie_info", "/api/v1/autorecovery/data_loss",
                     "/api/v1/audit/verdicts", f"/api/v1/bookie/lifecycle?bookie={drained}",
                     f"/api/v1/webhooks/{run.facts['webhook']}/deliveries", "/api/v1/webhooks"):
            answer = httpx.get(base + path, headers=admin_h if "webhooks" in path else read_h, timeout=60)
            name = path.replace("/", "_").replace("?", "_")
            (run.directory / "out" / f"api{name}.json").write_text(answer.text)
        run.walk(zk)
    run.cli("ar-status", "autorecovery", "status", "--json")
    run.stop(auditor)
    run.stop(admin)
