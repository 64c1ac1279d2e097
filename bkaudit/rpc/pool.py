"""BookieClientPool: one BookieClient per bookie id, resolved from the bookie's registration.

Ledger metadata names bookies by id; where a bookie listens is in its registration's bookie-rpc endpoint
(BookKeeper's DefaultBookieAddressResolver), else in a static map, else the id itself is host:port (legacy).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from bkaudit.errors import FormatError
from bkaudit.rpc.client import BookieClient
from bkaudit.rpc.tls import TlsConfig
from bkaudit.zk import registry
from bkaudit.zk.paths import DEFAULT_ROOT

if TYPE_CHECKING:
    from kazoo.client import KazooClient

log = logging.getLogger(__name__)


class BookieClientPool:
    """Thread-safe cache of clients; `invalidate` drops one (e.g. after its endpoint changed)."""

    def __init__(self, *, zk: KazooClient | None = None, root: str = DEFAULT_ROOT,
                 static: Mapping[str, str] | None = None, tls: TlsConfig | None = None,
                 request_timeout_s: float = 10.0, connect_timeout_s: float = 5.0) -> None:
        self.zk = zk
        self.root = root
        self.static = dict(static or {})
        self.tls = tls
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._clients: dict[str, BookieClient] = {}
        self._lock = threading.Lock()

    def get(self, bookie_id: str) -> BookieClient:
        client = self._clients.get(bookie_id)
        if client is not None:
            return client
        target = self.resolve(bookie_id)
        with self._lock:
            client = self._clients.get(bookie_id)
            if client is None:
                client = BookieClient(bookie_id, target, tls=self.tls,
                                      connect_timeout_s=self.connect_timeout_s,
                                      request_timeout_s=self.request_timeout_s)
                self._clients[bookie_id] = client
        return client

    def resolve(self, bookie_id: str) -> str:
        """host:port for `bookie_id`: registration endpoint, else the static map, else the id itself."""
        if self.zk is not None:
            try:
                info = registry.read_bookie_service_info(self.zk, bookie_id, self.root)
            except FormatError as exc:
                log.warning("registration of %s is unreadable (%s); falling back", bookie_id, exc)
                info = None
            except Exception as exc:  # ZooKeeper trouble must not make a bookie unreachable by id
                log.warning("cannot read registration of %s: %s", bookie_id, exc)
                info = None
            target = registry.endpoint_target(info) if info is not None else None
            if target:
                return target
        return self.static.get(bookie_id, bookie_id)

    def invalidate(self, bookie_id: str) -> None:
        with self._lock:
            client = self._clients.pop(bookie_id, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()

    def __enter__(self) -> BookieClientPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
