"""TLS material for the bookie RPC: server credentials (optionally mutual) and client credentials.

Plaintext is the default (loopback clusters, tests). A bookie with `[bookie] tls_cert` + `tls_key` serves TLS;
adding `tls_ca` makes it mutual: clients must present a certificate signed by that CA. Clients configure
`[rpc] tls_ca` (to verify bookies) and, for mTLS, `tls_cert` + `tls_key`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from bkaudit.errors import ConfigError


def _read(path: str | Path | None, key: str) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(key, f"cannot read {path}: {exc}") from exc


@dataclass(frozen=True)
class TlsConfig:
    """Client-side TLS: the CA that signs bookie certificates, and our own certificate for mutual TLS.

    `server_name` overrides the name checked against the bookie certificate (when bookies are addressed by an
    IP or a name that is not in their certificate's SAN).
    """

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    server_name: str | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca, "rpc.tls_ca"),
            private_key=_read(self.key, "rpc.tls_key"),
            certificate_chain=_read(self.cert, "rpc.tls_cert"),
        )

    def channel_options(self) -> list[tuple[str, Any]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []

    @classmethod
    def from_settings(cls, settings: Any) -> TlsConfig | None:
        """The `[rpc]` section's TLS settings, or None for plaintext."""
        from bkaudit.rpc.settings import RpcSettings

        rpc = settings.get(RpcSettings)
        if not (rpc.tls_ca or rpc.tls_cert):
            return None
        return cls(ca=rpc.tls_ca or None, cert=rpc.tls_cert or None, key=rpc.tls_key or None,
                   server_name=rpc.tls_server_name or None)


def server_credentials(cert: str, key: str, ca: str | None = None) -> grpc.ServerCredentials:
    """Bookie TLS credentials; with `ca`, clients must present a certificate that CA signed (mutual TLS)."""
    cert_bytes = _read(cert, "bookie.tls_cert")
    key_bytes = _read(key, "bookie.tls_key")
    assert cert_bytes is not None and key_bytes is not None
    ca_bytes = _read(ca, "bookie.tls_ca")
    return grpc.ssl_server_credentials(
        [(key_bytes, cert_bytes)], root_certificates=ca_bytes, require_client_auth=ca_bytes is not None
    )
