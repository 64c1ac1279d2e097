"""[zk] settings: the ZooKeeper connection every part of bkaudit shares."""

from __future__ import annotations

import dataclasses

from bkaudit.errors import ConfigError
from bkaudit.zk.paths import validate_root, validate_state_root


@dataclasses.dataclass(frozen=True)
class ZkSettings:
    """ZooKeeper connection shared by every part."""

    connect: str = "127.0.0.1:2181"
    root: str = "/ledgers"
    session_timeout_s: float = 30.0
    connect_timeout_s: float = 15.0
    # digest authentication ("user:password") and CREATOR_ALL ACLs, as BookKeeper's zkEnableSecurity
    auth_digest: str = dataclasses.field(default="", repr=False)  # a secret: never in repr() or tracebacks
    enable_security: bool = False
    # ledger manager layout for writing new ledgers: hierarchical | longhierarchical | legacyhierarchical
    layout: str = "hierarchical"
    # bkaudit's own znodes (data-loss records), outside the ledgers root so BookKeeper's nukeexistingcluster
    # is not blocked; "" = "/bkaudit" + root (e.g. /bkaudit/ledgers)
    state_root: str = ""

    def __post_init__(self) -> None:
        if not self.connect.strip():
            raise ConfigError("zk.connect", "must not be empty")
        try:  # `/a/../b`, `//x`, control characters: ZooKeeper would refuse the path later, mid-command
            validate_root(self.root)
        except ValueError as exc:
            raise ConfigError("zk.root", str(exc)) from None
        if self.session_timeout_s <= 0:
            raise ConfigError("zk.session_timeout_s", "must be > 0")
        if self.layout not in ("hierarchical", "longhierarchical", "legacyhierarchical"):
            raise ConfigError("zk.layout", f"unknown ledger layout {self.layout!r}")
        if self.auth_digest and ":" not in self.auth_digest:
            raise ConfigError("zk.auth_digest", "must be 'user:password'")
        if self.auth_digest:  # from now on this process's log lines never show it (py4j logs Spark options)
            from bkaudit.logs import register_secret

            register_secret(self.auth_digest.split(":", 1)[1])
        if self.state_root:
            try:
                validate_state_root(self.state_root, root=self.root)
            except ValueError as exc:
                raise ConfigError("zk.state_root", str(exc)) from None
