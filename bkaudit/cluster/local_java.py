"""Apache BookKeeper's own processes in a local cluster (bkaudit.cluster.java): Java bookies, the Java client,
the shell and AutoRecoveryMain, configured for the cluster's ZooKeeper and loopback hosts."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bkaudit.cluster import java as java_bk
from bkaudit.cluster.bookies import (
    BOOKIE_SESSION_TIMEOUT_S,
    JAVA_BOOKIE_MEMORY_MB,
    JAVA_DISK_SETTINGS,
    LOG_FILE,
    BookieInfo,
)
from bkaudit.zk.server import free_port
from bkaudit.zk.settings import ZkSettings

if TYPE_CHECKING:
    from bkaudit.store.zookeeper import ZkStore


class JavaProcesses:
    """LocalCluster's Java side (a mixin: the cluster's ZooKeeper, directory and process tables)."""

    zk: str
    root: str
    directory: Path
    java_settings: dict[str, object]
    java_memory_mb: tuple[int, int] | None
    _java: list[Any]
    _procs: dict[str, subprocess.Popen[bytes]]

    def store(self) -> ZkStore:
        raise NotImplementedError

    def zk_settings(self) -> ZkSettings:
        raise NotImplementedError

    def java_conf(self, b: BookieInfo) -> dict[str, str]:
        """The `bk_server.conf` a Java bookie runs with (BookKeeper's defaults but for loopback, its
        directories and the ZooKeeper session, as short as bkaudit's local bookies')."""
        return java_bk.server_conf(zk=self.zk_settings(), host=b.host, port=b.port,
                                   data_dir=Path(b.data_dir), storage=b.storage or "sorted",
                                   http_port=b.http_port,
                                   zk_timeout_ms=int(BOOKIE_SESSION_TIMEOUT_S * 1000),
                                   extra={**JAVA_DISK_SETTINGS, **self.java_settings},
                                   small_caches=self.java_memory_mb is None)

    def _spawn_java(self, b: BookieInfo, prefix: list[str]) -> None:
        java = java_bk.JavaBookKeeper.locate()
        conf = java_bk.write_conf(Path(b.data_dir) / java_bk.CONF_FILE, self.java_conf(b))
        if b.rack:  # a Java bookie does not publish its rack: Pulsar's admin does (set-bookie-rack)
            self.store().registry.set_rack(b.id, b.rack, b.host)
        heap, direct = self.java_memory_mb or JAVA_BOOKIE_MEMORY_MB[b.storage or "sorted"]
        cmd = [*prefix, *java.command(java_bk.BOOKIE_MAIN, "--conf", str(conf), heap_mb=heap,
                                      direct_mb=direct, tmp_dir=Path(b.data_dir) / "tmp")]
        with (Path(b.data_dir) / LOG_FILE).open("ab") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self._procs[b.id] = proc
        b.pid = proc.pid

    def java_client(self, settings: Mapping[str, object] | None = None) -> java_bk.JavaClient:
        """BookKeeper's Java client on this cluster (stopped by `down()`); `settings` are ClientConfiguration
        keys, e.g. `{"useV2WireProtocol": True}`."""
        n = sum(isinstance(p, java_bk.JavaClient) for p in self._java) + 1
        client = java_bk.JavaClient(java_bk.JavaBookKeeper.locate(), zk=self.zk_settings(),
                                    log=self.directory / f"java-client-{n}.log", settings=settings)
        self._java.append(client)
        return client

    def java_shell(self, *args: str, check: bool = True,
                   timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        """`bookkeeper shell <args>` (BookieShell) against this cluster's metadata."""
        conf = java_bk.write_conf(self.directory / "java-shell" / java_bk.CONF_FILE, java_bk.server_conf(
            zk=self.zk_settings(), host="127.0.0.1", port=3181,
            data_dir=self.directory / "java-shell", extra=self.java_settings))
        return java_bk.run_shell(java_bk.JavaBookKeeper.locate(), conf, *args, check=check,
                                 timeout_s=timeout_s)

    def start_java_autorecovery(self, settings: Mapping[str, object] | None = None, *,
                                log_level: str = "INFO") -> java_bk.JavaProcess:
        """BookKeeper's AutoRecoveryMain (Auditor election + ReplicationWorker) on this cluster, on a loopback
        host of its own (127.0.1.N: its bookie id is its Auditor vote); stopped by `down()`."""
        n = sum(isinstance(p, java_bk.JavaProcess) and p.main == java_bk.AUTORECOVERY_MAIN
                for p in self._java) + 1
        host = f"127.0.1.{n}"
        directory = self.directory / f"java-autorecovery-{n}"
        conf = java_bk.write_conf(directory / java_bk.CONF_FILE, java_bk.server_conf(
            zk=self.zk_settings(), host=host, port=free_port(host), data_dir=directory,
            zk_timeout_ms=int(BOOKIE_SESSION_TIMEOUT_S * 1000),
            extra={**self.java_settings, **(settings or {})}))
        proc = java_bk.JavaProcess(java_bk.JavaBookKeeper.locate(), java_bk.AUTORECOVERY_MAIN, conf,
                                   directory / LOG_FILE, log_level=log_level)
        self._java.append(proc)
        return proc
