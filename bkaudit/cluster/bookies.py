"""The bookies of a local cluster: their loopback addresses, what cluster.json records of each, and limits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bkaudit.errors import ClusterError

STATE_FILE = "cluster.json"
LOG_FILE = "bookie.log"
BOOKIE_SESSION_TIMEOUT_S = 6.0
"""ZooKeeper session of local bookies: short, so a killed bookie disappears within seconds."""
START_TIMEOUT_S = 60.0
MAX_DISK_USAGE = 0.999
"""Used fraction of the disk at which a local bookie turns read-only (as in BookKeeper's own test clusters,
TestBKConfiguration: diskUsageThreshold 0.999). A loopback cluster shares its disk with everything else on
the host; at the production default (0.95) a host disk 95 % full made every bookie read-only and every
write fail."""
JAVA_DISK_SETTINGS: dict[str, object] = {"diskUsageThreshold": MAX_DISK_USAGE, "diskUsageWarnThreshold": 0.99}
MAX_BOOKIES = 250  # 127.0.0.2 .. 127.0.0.251
JAVA_BOOKIE_MEMORY_MB: dict[str, tuple[int, int]] = {"sorted": (256, 384), "interleaved": (256, 384),
                                                     "db": (384, 384)}
"""Heap and direct MB of a local Java bookie by storage, unless its cluster names them (small: tests)."""


def java_memory(value: Any) -> tuple[int, int] | None:
    """cluster.json's `java_memory_mb` ([heap, direct] or null)."""
    return None if not value else (int(value[0]), int(value[1]))


def bookie_host(index: int) -> str:
    """The loopback address of the `index`-th bookie (0-based): 127.0.0.2, 127.0.0.3, ..."""
    if not 0 <= index < MAX_BOOKIES:
        raise ClusterError(f"a local cluster holds at most {MAX_BOOKIES} bookies (one loopback address each)")
    return f"127.0.0.{index + 2}"


@dataclass
class BookieInfo:
    """One bookie of the cluster (the keys of cluster.json's "bookies" entries)."""

    id: str
    rack: str | None
    port: int
    pid: int | None
    data_dir: str
    host: str = ""  # listen + advertised address; "" in clusters made before per-bookie addresses: the id's
    listing: bool = True
    """False: started with --no-listing (never answers listing requests, like DbLedgerStorage)."""
    readonly: bool = False
    """True: started with --readonly (serves reads, registered under available/readonly, never a target)."""
    kind: str = "bkaudit"
    """"bkaudit", or "java": Apache BookKeeper's own bookie (bkaudit.cluster.java), Maven Central's jars."""
    storage: str = ""
    """A Java bookie's ledger storage: sorted (BookKeeper's default), interleaved or db (Pulsar's default)."""
    http_port: int | None = None
    """A Java bookie's HTTP admin API port (httpServerEnabled), None when it runs none."""

    def __post_init__(self) -> None:
        if not self.host:
            self.host = self.id.rpartition(":")[0] or "127.0.0.1"
