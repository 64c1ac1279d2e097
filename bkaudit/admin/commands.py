"""`bkaudit admin serve` (the HTTP management API and dashboard) and `bkaudit admin hash-token`."""

from __future__ import annotations

import logging
import secrets
import sys
import threading
from typing import Any

import click

from bkaudit.cli_common import ZkTarget, fail, zk_target
from bkaudit.errors import BkAuditError
from bkaudit.exitcodes import ExitCode
from bkaudit.shutdown import STOP_GRACE_S, StopWatchdog, stop_signals


@click.group()
def admin() -> None:
    """Cluster-level HTTP management API and dashboard (docs/http-api.md)."""


@admin.command()
@zk_target
@click.option("--listen", default=None, help="address to bind ([admin] listen, default 127.0.0.1)")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="[admin] port (default 8000)")
@click.option("--warehouse", default=None, help="Delta tables for the audit verdicts ([admin] warehouse)")
@click.option("--tls-cert", default=None, type=click.Path(dir_okay=False, exists=True), help="PEM cert")
@click.option("--tls-key", default=None, type=click.Path(dir_okay=False, exists=True), help="PEM private key")
def serve(target: ZkTarget, listen: str | None, port: int | None, warehouse: str | None, tls_cert: str | None,
          tls_key: str | None) -> None:
    """Serve the API and dashboard until SIGTERM / SIGINT; works with any bookie host down."""
    from bkaudit import config
    from bkaudit.admin.server import AdminServer
    from bkaudit.admin.settings import AdminSettings
    from bkaudit.config import ZkSettings
    from bkaudit.lifecycle.settings import LifecycleSettings
    from bkaudit.rpc.pool import BookieClientPool
    from bkaudit.rpc.tls import TlsConfig
    from bkaudit.store import bind
    from bkaudit.tables.settings import TablesSettings
    from bkaudit.zk import client as zkclient

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # its INFO lines carry whole URLs
    overrides: dict[str, Any] = {"admin.listen": listen, "admin.port": port, "admin.tls_cert": tls_cert,
                                 "admin.tls_key": tls_key, "admin.warehouse": warehouse}
    settings = target.settings(**overrides)
    conf = settings.get(AdminSettings)
    zk_settings = settings.get(ZkSettings)
    try:
        client = zkclient.connect(zk_settings)
    except BkAuditError as exc:
        fail(str(exc), code=2)
    timeout = conf.disk_info_timeout_s
    cluster = bind(client, zk_settings)
    pool = BookieClientPool(registry=cluster.registry, tls=TlsConfig.from_settings(settings),
                            request_timeout_s=timeout, connect_timeout_s=timeout)
    warehouse_at = settings.get(TablesSettings).warehouse(config.warehouse(settings, admin=True))  # "": none
    server = AdminServer(cluster, conf, warehouse=warehouse_at, pool=pool,
                         bookie_http_timeout_s=settings.get(LifecycleSettings).bookie_http_timeout_s)
    scheme = "https" if conf.tls_cert else "http"
    stop = threading.Event()
    watchdog = StopWatchdog(STOP_GRACE_S, "admin serve")
    released = False
    # our signal handlers, not uvicorn's: uvicorn re-raises the signal once it has stopped, which kills the
    # process before the session is closed; the stop is bounded whatever ZooKeeper's state (bkaudit.shutdown)
    with stop_signals(stop.set, watchdog):
        try:
            try:
                host, bound = server.listen()
            except OSError as exc:  # a taken port, an address not on this host: one line, exit 1
                fail(f"cannot listen on {conf.listen}:{conf.port}: {exc.strerror or exc}",
                     code=ExitCode.ERROR)
            server.start()
            click.echo(f"bkaudit admin API on {scheme}://{host}:{bound}/ (dashboard /dashboard, "
                       f"OpenAPI document /openapi.json)", err=True)
            while not stop.wait(0.5) and server.serving:
                pass
        finally:
            watchdog.arm()
            released = _stop(server, pool, client, watchdog)
    if not stop.is_set():
        fail("the HTTP server stopped on its own (see the log above)")
    if not released:
        fail(f"stopped with ZooKeeper ({zk_settings.connect}) unreachable: its session was not closed "
             "cleanly")


def _stop(server: Any, pool: Any, client: Any, watchdog: Any) -> bool:
    """Stop serving, the webhook dispatcher, the pool and the session within the watchdog's grace; True when
    ZooKeeper answered to the end (with it unreachable the session is closed first, so a dispatcher waiting
    on it fails at once)."""
    from bkaudit.shutdown import within
    from bkaudit.zk import client as zkclient

    reachable = bool(client.connected)
    if not reachable:
        within(2.0, lambda: zkclient.close(client), name="admin-zk-close")

    def stop_all() -> bool:
        server.stop()
        pool.close()
        zkclient.close(client)
        return True

    finished, _ = within(watchdog.grace_s - 3.0, stop_all, name="admin-stop")
    watchdog.done()
    return reachable and finished


@admin.command("hash-token")
@click.argument("token", required=False)
@click.option("--name", default="admin", help="the name the entry carries (shown as who made a change)")
def hash_token(token: str | None, name: str) -> None:
    """Print a `name:sha256` entry for [admin] admin_tokens / read_tokens (a random token if none given)."""
    from bkaudit.admin.auth import hash_token as digest

    if token is None:
        token = secrets.token_urlsafe(32)
        click.echo(f"token: {token}", err=True)
    click.echo(f"{name}:{digest(token)}")
