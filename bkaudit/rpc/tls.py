"""TLS material for the bookie RPC: server contexts (optionally mutual) and client contexts.

Plaintext is the default (loopback clusters, tests). A bookie with `[bookie] tls_cert` + `tls_key` accepts
BookKeeper's START_TLS; adding `tls_ca` makes it mutual: clients must present a certificate signed by that CA
(BookKeeper: tlsClientAuthentication). Clients configure `[rpc] tls_ca` (to verify bookies) and, for mTLS,
`tls_cert` + `tls_key`. The native transport uses Python's `ssl`; the optional gRPC transport its own
credentials (grpc is imported only when that transport is used).

Like a Java client, the native transport checks the bookie's certificate chain against the CA but not the
name in it: ClientConfiguration's tlsHostnameVerificationEnabled is false by default, and TLSContextFactory
only then sets the "HTTPS" endpoint identification. Bookies are addressed by ids and IPs that certificates
often do not name. `[rpc] tls_hostname_verification = true` turns the check on (gRPC always checks the name;
`tls_server_name` overrides the name checked).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bkaudit.errors import ConfigError

if TYPE_CHECKING:
    import grpc


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

    `hostname_verification` also checks the bookie's name against its certificate (BookKeeper:
    tlsHostnameVerificationEnabled, off by default); `server_name` overrides that name (when bookies are
    addressed by an IP or a name that is not in their certificate's SAN).
    """

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    server_name: str | None = None
    hostname_verification: bool = False

    def ssl_context(self) -> ssl.SSLContext:
        """Client context (native transport): verify the bookie against `ca` (and its name only when
        `hostname_verification`), present our cert if any."""
        try:
            context = ssl.create_default_context(cafile=self.ca or None)
            context.check_hostname = self.hostname_verification
            if self.cert:
                context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError("rpc.tls_ca", f"cannot load TLS material: {exc}") from exc
        return context

    def credentials(self) -> grpc.ChannelCredentials:
        import grpc

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
        config = cls(ca=rpc.tls_ca or None, cert=rpc.tls_cert or None, key=rpc.tls_key or None,
                     server_name=rpc.tls_server_name or None,
                     hostname_verification=rpc.tls_hostname_verification)
        config.check()
        return config

    def check(self) -> None:
        """ConfigError (exit 2) naming the key when a file cannot be read or its PEM cannot be loaded: at
        start-up, not as every bookie UNAVAILABLE when the first connection builds its context."""
        for path, key in ((self.ca, "rpc.tls_ca"), (self.cert, "rpc.tls_cert"), (self.key, "rpc.tls_key")):
            _read(path, key)
        try:
            context = ssl.create_default_context(cafile=self.ca or None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError("rpc.tls_ca", f"cannot load {self.ca} as PEM CA certificates: {exc}") from exc
        if self.cert:
            try:
                context.load_cert_chain(self.cert, self.key)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError("rpc.tls_cert",
                                  f"cannot load {self.cert} with key {self.key}: {exc}") from exc


def server_ssl_context(cert: str, key: str, ca: str | None = None) -> ssl.SSLContext:
    """The bookie's context for START_TLS; with `ca`, clients must present a certificate it signed (mTLS).
    ConfigError naming the key of a file that cannot be read."""
    for path, name in ((cert, "bookie.tls_cert"), (key, "bookie.tls_key"), (ca, "bookie.tls_ca")):
        _read(path, name)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key)
        if ca:
            context.load_verify_locations(ca)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("bookie.tls_cert", f"cannot load TLS material: {exc}") from exc
    return context


def server_credentials(cert: str, key: str, ca: str | None = None) -> grpc.ServerCredentials:
    """Bookie TLS credentials for the gRPC listener (same meaning as server_ssl_context)."""
    import grpc

    cert_bytes = _read(cert, "bookie.tls_cert")
    key_bytes = _read(key, "bookie.tls_key")
    assert cert_bytes is not None and key_bytes is not None
    ca_bytes = _read(ca, "bookie.tls_ca")
    return grpc.ssl_server_credentials(
        [(key_bytes, cert_bytes)], root_certificates=ca_bytes, require_client_auth=ca_bytes is not None
    )
