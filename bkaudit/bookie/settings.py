"""`[bookie]` settings (BookKeeper's ServerConfiguration keys named in docs/config.md)."""

from __future__ import annotations

import dataclasses

from bkaudit.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class BookieSettings:
    """One bookie process. The command line (--port, --data-dir, --rack, ...) overrides these."""

    port: int = 3181
    data_dir: str = ""
    listen_address: str = "127.0.0.1"
    # host in the bookie id (host:port) and in the registered endpoint (BookKeeper: advertisedAddress)
    advertised_address: str = "127.0.0.1"
    rack: str = ""
    # TLS: cert + key serve TLS; adding ca requires client certificates signed by it (mutual TLS)
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    # refuse (EUA) plaintext clients: only requests after START_TLS are served. Off, as BookKeeper's default
    # auth provider serves any channel; what a TLS-authenticating bookieAuthProviderFactoryClass does
    require_tls: bool = False
    # read-only below max(min_free_bytes, min_free_fraction * total); writable again above 1.1x that
    min_free_fraction: float = 0.05
    min_free_bytes: int = 0
    disk_check_interval_s: float = 2.0
    # bounded work: requests in flight beyond this get ETOOMANYREQUESTS (maxPendingAddRequestsPerThread)
    max_pending_requests: int = 10000
    group_commit_max_batch: int = 2000
    read_threads: int = 4
    # largest request frame accepted, its 4-byte length included (Netty counts it); larger ones close the
    # connection, and no listing answer is larger (BookKeeper: nettyMaxFrameSizeBytes)
    max_frame_bytes: int = 5 * 1024 * 1024
    # optional second listener speaking bkaudit's gRPC transport (endpoint protocol "bkaudit-grpc");
    # -1: off, 0: any free port
    grpc_port: int = -1
    # graceful stop: how long in-flight requests may take to finish after going read-only
    drain_timeout_s: float = 10.0
    # false: never answer GET_LIST_OF_ENTRIES_OF_LEDGER, like a Java bookie on DbLedgerStorage (tests, demos)
    answer_listing: bool = True
    # the data-integrity check (BookKeeper: dataIntegrityChecking): a bookie whose storage is new or whose
    # cookies differ puts OPEN ledgers naming it "in limbo" (EUNKNOWNLEDGERSTATE, not ENOENTRY) until it has
    # recovered them and copied its entries back (docs/bookie.md)
    data_integrity_checking: bool = False
    # with the check: re-stamp missing or differing cookies after it instead of refusing to start
    # (BookKeeper: dataIntegrityStampMissingCookies)
    data_integrity_stamp_missing_cookies: bool = False
    # pause between full-check rounds while ledgers are left (BookKeeper's DataIntegrityService: 3 s)
    data_integrity_interval_s: float = 3.0
    # bound of the cached listing encodings (LRU; a 50,000-entry E3/WQ2 ledger costs about 400 KB)
    listing_cache_bytes: int = 256 * 1024 * 1024
    # what clients may hold (BookKeeper's Netty server bounds none of it): open connections (more are closed
    # at once), the time a request frame may take to arrive whole, the bytes incomplete frames of every
    # connection hold together (one connection holds at most one frame, max_frame_bytes)
    max_connections: int = 1000
    frame_timeout_s: float = 30.0
    max_buffered_bytes: int = 256 * 1024 * 1024

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError("bookie.port", f"must be a TCP port, got {self.port}")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("bookie.tls_cert", "tls_cert and tls_key must be set together")
        if self.tls_ca and not self.tls_cert:
            raise ConfigError("bookie.tls_ca", "mutual TLS (tls_ca) needs tls_cert and tls_key")
        if self.require_tls and not self.tls_cert:
            raise ConfigError("bookie.require_tls", "needs tls_cert and tls_key")
        if not -1 <= self.grpc_port <= 65535:
            raise ConfigError("bookie.grpc_port", f"must be -1 (off) or a TCP port, got {self.grpc_port}")
        if self.max_frame_bytes < 1024:
            raise ConfigError("bookie.max_frame_bytes", "must be >= 1024")
        if not 0 <= self.min_free_fraction < 1:
            raise ConfigError("bookie.min_free_fraction", "must be in [0, 1)")
        if self.min_free_bytes < 0:
            raise ConfigError("bookie.min_free_bytes", "must be >= 0")
        if self.data_integrity_interval_s <= 0:
            raise ConfigError("bookie.data_integrity_interval_s", "must be > 0")
        if self.data_integrity_stamp_missing_cookies and not self.data_integrity_checking:
            raise ConfigError("bookie.data_integrity_stamp_missing_cookies",
                              "needs data_integrity_checking (the check is what makes re-stamping safe)")
        if self.max_connections < 1:
            raise ConfigError("bookie.max_connections", "must be >= 1")
        if self.frame_timeout_s <= 0:
            raise ConfigError("bookie.frame_timeout_s", "must be > 0")
        if self.max_buffered_bytes < self.max_frame_bytes:
            raise ConfigError("bookie.max_buffered_bytes",
                              f"must be >= max_frame_bytes ({self.max_frame_bytes}): one frame must fit")
        if self.listing_cache_bytes < 0:
            raise ConfigError("bookie.listing_cache_bytes", "must be >= 0 (0: no cache)")
        for key in ("max_pending_requests", "group_commit_max_batch", "read_threads"):
            if getattr(self, key) < 1:
                raise ConfigError(f"bookie.{key}", "must be >= 1")
        if self.rack and not self.rack.startswith("/"):
            raise ConfigError("bookie.rack", f"a network location starts with '/', got {self.rack!r}")
