"""Running the admin app: uvicorn (optionally TLS), the webhook dispatcher, and their shutdown."""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bkaudit.admin.settings import AdminSettings
from bkaudit.admin.webhooks import Dispatcher

if TYPE_CHECKING:
    from bkaudit.store import ClusterStore
    from bkaudit.tables.location import Warehouse

log = logging.getLogger(__name__)


@dataclass
class AdminServer:
    """The API + dashboard and the webhook dispatcher over one cluster store (one ZooKeeper session)."""

    cluster: ClusterStore
    settings: AdminSettings
    warehouse: Warehouse | str = ""
    pool: Any = None
    port: int | None = None  # overrides settings.port (0 = any free port)
    bookie_http_timeout_s: float = 10.0  # [lifecycle] bookie_http_timeout_s: the read-only switch's call
    _server: Any = None
    _socket: socket.socket | None = None
    _thread: threading.Thread | None = None
    dispatcher: Dispatcher | None = None
    bound: tuple[str, int] | None = field(default=None)

    def _uvicorn(self) -> Any:
        import uvicorn

        from bkaudit.admin.app import create_app

        app = create_app(self.cluster, settings=self.settings, warehouse=self.warehouse, pool=self.pool,
                         bookie_http_timeout_s=self.bookie_http_timeout_s)
        s = self.settings
        config = uvicorn.Config(
            app, host=s.listen, port=s.port if self.port is None else self.port, log_level="warning",
            ssl_certfile=s.tls_cert or None, ssl_keyfile=s.tls_key or None, access_log=False,
        )
        return uvicorn.Server(config)

    def _start_dispatcher(self) -> None:
        s = self.settings
        self.dispatcher = Dispatcher(self.cluster, poll_s=s.webhook_poll_s,
                                     max_attempts=s.webhook_max_attempts, backoff_s=s.webhook_backoff_s,
                                     timeout_s=s.webhook_timeout_s, allow=s.allowed_networks()).start()

    def listen(self) -> tuple[str, int]:
        """Bind the listening socket (OSError when the address is taken or not local); what it is bound to.

        Bound here rather than by uvicorn, which reports a taken port by exiting the process with its own
        code 3 (bkaudit's "findings" code)."""
        if self._socket is None:
            host = self.settings.listen or None  # "": every address
            port = self.settings.port if self.port is None else self.port
            family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                                 flags=socket.AI_PASSIVE)[0]
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(address)
            except OSError:
                sock.close()
                raise
            self._socket = sock
            self.bound = sock.getsockname()[:2]
        assert self.bound is not None
        return self.bound

    def run(self) -> None:
        """Serve in this thread until SIGINT / SIGTERM (uvicorn's handlers), then stop the dispatcher."""
        self.listen()
        self._server = self._uvicorn()
        self._start_dispatcher()
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self.stop()

    def start(self, timeout_s: float = 30.0) -> AdminServer:
        """Serve in a background thread (tests, embedding); returns once the socket listens."""
        self.listen()
        self._server = self._uvicorn()
        self._server.config.install_signal_handlers = False  # not the main thread
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        name="admin-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the admin server did not start")
            time.sleep(0.02)
        self._start_dispatcher()
        return self

    @property
    def serving(self) -> bool:
        """True while the HTTP server started by `start()` runs."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def url(self) -> str:
        assert self.bound is not None
        scheme = "https" if self.settings.tls_cert else "http"
        return f"{scheme}://{self.bound[0]}:{self.bound[1]}"

    def stop(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.stop()
            self.dispatcher = None
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
