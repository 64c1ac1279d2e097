"""`[admin]` settings: the HTTP management API (BookKeeper's httpServerEnabled and httpServerPort)."""

from __future__ import annotations

import dataclasses
import ipaddress
import re

from bkaudit.errors import ConfigError

_TOKEN_ENTRY = re.compile(r"[A-Za-z0-9_.@-]+:[0-9a-f]{64}")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclasses.dataclass(frozen=True)
class AdminSettings:
    """Where the API listens, who may call it, and how webhooks are delivered."""

    listen: str = "127.0.0.1"
    port: int = 8000  # httpServerPort (8000)
    # bearer tokens as "name:sha256-hex" (`bkaudit admin hash-token`); never the token itself
    admin_tokens: tuple[str, ...] = ()  # may change things (drain, remove, read-only, webhooks)
    read_tokens: tuple[str, ...] = ()  # may read everything
    anonymous_read: bool = True  # GETs without a token; false = every call needs a token
    tls_cert: str = ""  # PEM; with tls_key: HTTPS
    tls_key: str = ""
    warehouse: str = ""  # Delta tables for the audit verdicts (default: [snapshot] warehouse)
    max_body_bytes: int = 65536  # request bodies larger than this are refused (413) before they are read
    webhook_poll_s: float = 1.0  # how often new transitions are looked for
    webhook_max_attempts: int = 5
    webhook_backoff_s: float = 0.5  # first retry delay, doubled per attempt
    webhook_timeout_s: float = 5.0
    # CIDRs webhook URLs may reach although they are loopback, private, link-local, ... (default: none)
    webhook_allow_networks: tuple[str, ...] = ()
    disk_info_timeout_s: float = 2.0  # per bookie, for the disk columns (GetBookieInfo)

    def __post_init__(self) -> None:
        for key in ("admin_tokens", "read_tokens"):
            for entry in getattr(self, key):
                if not _TOKEN_ENTRY.fullmatch(entry):
                    raise ConfigError(f"admin.{key}", "entries must be 'name:<64 hex sha256 of the token>'")
        if not 0 <= self.port <= 65535:
            raise ConfigError("admin.port", "must be 0..65535")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("admin.tls_cert", "tls_cert and tls_key go together")
        if self.webhook_max_attempts < 1:
            raise ConfigError("admin.webhook_max_attempts", "must be >= 1")
        if not 1 <= self.max_body_bytes <= 64 * 1024 * 1024:
            raise ConfigError("admin.max_body_bytes", "must be 1..67108864 (64 MiB)")
        self.allowed_networks()  # validates the entries

    def allowed_networks(self) -> tuple[Network, ...]:
        """`webhook_allow_networks` parsed (ConfigError naming the bad entry)."""
        out = []
        for entry in self.webhook_allow_networks:
            try:
                out.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                why = f"entries must be CIDR networks such as '127.0.0.0/8', got {entry!r}"
                raise ConfigError("admin.webhook_allow_networks", why) from None
        return tuple(out)
