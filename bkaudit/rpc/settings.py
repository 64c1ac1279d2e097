"""`[rpc]` settings: how clients (ledger client, checker, replication worker) talk to bookies."""

from __future__ import annotations

import dataclasses

from bkaudit.errors import ConfigError

NATIVE = "native"
GRPC = "grpc"
GRPC_PROTOCOL = "bkaudit-grpc"
"""BookieServiceInfo endpoint protocol of a bkaudit bookie's optional gRPC listener (never "bookie-rpc")."""
BATCH_LISTING_PROPERTY = "bkaudit.listing.batch"
"""BookieServiceInfo property by which a bookie advertises the batch listing operation (op 1000)."""

SERVICE = "bkaudit.Bookie"
METHOD = "/bkaudit.Bookie/Exchange"
"""A bidirectional stream of BookKeeper v3 Request / Response bytes, one protobuf message per gRPC message."""
FRAMED_METHOD = "/bkaudit.Bookie/ExchangeFramed"
"""The same stream, each gRPC message carrying one or more BookKeeper frames (bkaudit.rpc.framing)."""

MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""gRPC message limit of bkaudit's own transport (not BookKeeper's): a message coalesces frames up to
`framing.COALESCE_BYTES` plus one frame, each frame within the native limit (5 MiB, bkaudit bookies cut
listings to it), so above gRPC's 4 MB default."""


@dataclasses.dataclass(frozen=True)
class RpcSettings:
    """Client side of the bookie RPC."""

    connect_timeout_s: float = 5.0
    request_timeout_s: float = 10.0
    # "native": BookKeeper's TCP protocol on the bookie-rpc endpoint (any bookie); "grpc": bkaudit's only
    transport: str = NATIVE
    # largest response frame accepted (BookKeeper: nettyMaxFrameSizeBytes)
    max_frame_bytes: int = 5 * 1024 * 1024
    # TLS towards bookies: CA to verify them; own certificate + key for mutual TLS; optional name override
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_server_name: str = ""
    # also check the bookie's name against its certificate (BookKeeper: tlsHostnameVerificationEnabled, false)
    tls_hostname_verification: bool = False

    def __post_init__(self) -> None:
        if self.request_timeout_s <= 0:
            raise ConfigError("rpc.request_timeout_s", "must be > 0")
        if self.connect_timeout_s <= 0:
            raise ConfigError("rpc.connect_timeout_s", "must be > 0")
        if self.transport not in (NATIVE, GRPC):
            raise ConfigError("rpc.transport", f"must be {NATIVE!r} or {GRPC!r}, got {self.transport!r}")
        if self.max_frame_bytes < 1024:
            raise ConfigError("rpc.max_frame_bytes", "must be >= 1024")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("rpc.tls_cert", "tls_cert and tls_key must be set together")
