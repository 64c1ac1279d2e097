"""BookieClientPool: one BookieClient per bookie id, resolved from the bookie's registration.

Ledger metadata names bookies by id; where a bookie listens is in its registration's bookie-rpc endpoint
(BookKeeper's DefaultBookieAddressResolver), else in a static map, else the id itself is host:port (legacy).
The registration's properties also say whether the bookie serves bkaudit's batch listing (op 1000); only
then is it used (`BookieAddress.batch_listing`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bkaudit.errors import FormatError
from bkaudit.formats import records
from bkaudit.rpc.client import BookieClient
from bkaudit.rpc.framing import DEFAULT_MAX_FRAME_BYTES
from bkaudit.rpc.operations import RequestClient
from bkaudit.rpc.settings import BATCH_LISTING_PROPERTY, GRPC, GRPC_PROTOCOL, NATIVE
from bkaudit.rpc.tls import TlsConfig

if TYPE_CHECKING:
    from bkaudit.store.base import Registry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BookieAddress:
    """Where a bookie listens for the chosen transport, and whether it advertised batch listing."""

    target: str
    batch_listing: bool = False


def address_of(info: records.BookieServiceInfo | None, *, transport: str = NATIVE) -> BookieAddress | None:
    """The address a registration gives for `transport` (None: it has no such endpoint)."""
    if info is None:
        return None
    protocol = GRPC_PROTOCOL if transport == GRPC else records.BOOKIE_RPC_PROTOCOL
    endpoint = info.endpoint(protocol)
    if endpoint is None:
        return None
    host = endpoint.host
    target = f"[{host}]:{endpoint.port}" if ":" in host else f"{host}:{endpoint.port}"
    batch = info.properties_dict().get(BATCH_LISTING_PROPERTY, "").lower() in ("true", "1", "yes")
    return BookieAddress(target, batch)


def lookup_address(
    bookie_id: str, registration: Callable[[str], records.BookieServiceInfo | None] | None, *,
    static: Mapping[str, str], transport: str = NATIVE,
) -> BookieAddress:
    """The address `registration(bookie_id)` gives for `transport`, else the static map, else the id itself
    (legacy host:port ids). An unreadable registration falls back too: ZooKeeper trouble must not make a
    bookie unreachable by id."""
    if registration is not None:
        try:
            info = registration(bookie_id)
        except FormatError as exc:
            log.warning("registration of %s is unreadable (%s); falling back", bookie_id, exc)
            info = None
        except Exception as exc:
            log.warning("cannot read registration of %s: %s", bookie_id, exc)
            info = None
        address = address_of(info, transport=transport)
        if address is not None:
            return address
    return BookieAddress(static.get(bookie_id, bookie_id))


class BookieClientPool:
    """Thread-safe cache of clients; `invalidate` drops one (e.g. after its endpoint changed).

    `transport` is "native" (BookKeeper's protocol, the default, any bookie) or "grpc" (bkaudit bookies'
    gRPC listener).
    """

    def __init__(self, *, registry: Registry | None = None, static: Mapping[str, str] | None = None,
                 tls: TlsConfig | None = None, request_timeout_s: float = 10.0,
                 connect_timeout_s: float = 5.0, transport: str = NATIVE,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.registry = registry
        self.static = dict(static or {})
        self.tls = tls
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.transport = transport
        self.max_frame_bytes = max_frame_bytes
        self._clients: dict[str, RequestClient] = {}
        self._lock = threading.Lock()

    def get(self, bookie_id: str) -> BookieClient:
        client = self._clients.get(bookie_id)
        if client is not None:
            return client  # type: ignore[return-value]
        address = self.lookup(bookie_id)
        with self._lock:
            client = self._clients.get(bookie_id)
            if client is None:
                client = make_client(bookie_id, address, transport=self.transport, tls=self.tls,
                                     connect_timeout_s=self.connect_timeout_s,
                                     request_timeout_s=self.request_timeout_s,
                                     max_frame_bytes=self.max_frame_bytes)
                self._clients[bookie_id] = client
        return client  # type: ignore[return-value]

    def resolve(self, bookie_id: str) -> str:
        """host:port for `bookie_id`: registration endpoint, else the static map, else the id itself."""
        return self.lookup(bookie_id).target

    def lookup(self, bookie_id: str) -> BookieAddress:
        """The registration's address for this pool's transport, else the static map, else the id itself."""
        registry = self.registry
        read = None if registry is None else (lambda b: registry.registration(b)[1])
        return lookup_address(bookie_id, read, static=self.static, transport=self.transport)

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


def make_client(bookie_id: str, address: BookieAddress, *, transport: str = NATIVE,
                tls: TlsConfig | None = None, connect_timeout_s: float = 5.0, request_timeout_s: float = 10.0,
                max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> RequestClient:
    """A client of the chosen transport for one bookie (the gRPC one only when asked for)."""
    cls: type[RequestClient] = BookieClient
    if transport == GRPC:
        from bkaudit.rpc.grpcclient import GrpcBookieClient

        cls = GrpcBookieClient
    return cls(bookie_id, address.target, tls=tls, connect_timeout_s=connect_timeout_s,  # type: ignore[call-arg]
               request_timeout_s=request_timeout_s, batch_listing=address.batch_listing,
               max_frame_bytes=max_frame_bytes)
