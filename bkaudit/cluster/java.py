"""Apache BookKeeper's own Java processes next to bkaudit: bookies, AutoRecovery, the shell and the client.

The jars are BookKeeper's released ones, resolved from Maven Central by `make bookkeeper` (tests/java/pom.xml)
into `.cache/bookkeeper/lib`, on a classpath of their own (BookKeeper's netty, ZooKeeper and protobuf differ
from pyspark's). `BKAUDIT_BOOKKEEPER_HOME` points elsewhere. Nothing here is built from BookKeeper's source.

Each process gets a `bk_server.conf` written from keyword arguments, with BookKeeper's defaults for everything
not named: what a test or a benchmark changes is visible in one call. JVM flags are those of BookKeeper's
bin/common.sh.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bkaudit.errors import ClusterError

if TYPE_CHECKING:
    from bkaudit.zk.settings import ZkSettings

STORAGE_CLASSES: Mapping[str, str] = {
    "sorted": "org.apache.bookkeeper.bookie.SortedLedgerStorage",  # ServerConfiguration's default
    "interleaved": "org.apache.bookkeeper.bookie.InterleavedLedgerStorage",
    "db": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",  # Pulsar's default
}
"""Ledger storage names bkaudit's harness accepts → BookKeeper's `ledgerStorageClass`."""

BOOKIE_MAIN = "org.apache.bookkeeper.server.Main"
AUTORECOVERY_MAIN = "org.apache.bookkeeper.replication.AutoRecoveryMain"
SHELL_MAIN = "org.apache.bookkeeper.bookie.BookieShell"
DRIVER_MAIN = "BkDriver"
CONF_FILE = "bk_server.conf"

# bin/common.sh's flags for JDK 17 (netty's direct buffers and unsafe access)
_JVM_FLAGS = (
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Djava.net.preferIPv4Stack=true",
    "-XX:+UseSerialGC",  # 2-core test machines: no parallel collector threads fighting the tests
)

_LOG4J2 = """\
status = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %-5p [%t] %c{1} - %m%n
rootLogger.level = {level}
rootLogger.appenderRef.console.ref = console
logger.zk.name = org.apache.zookeeper
logger.zk.level = warn
"""

# the shell prints its answers through its commands' loggers: those, bare, on stdout; the rest on stderr
_LOG4J2_SHELL = _LOG4J2.replace("{level}", "warn") + """appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %m%n
logger.cli.name = org.apache.bookkeeper.tools.cli
logger.cli.level = info
logger.cli.additivity = false
logger.cli.appenderRef.out.ref = out
logger.shell.name = org.apache.bookkeeper.bookie.BookieShell
logger.shell.level = info
logger.shell.additivity = false
logger.shell.appenderRef.out.ref = out
"""


@dataclass(frozen=True)
class JavaBookKeeper:
    """Where BookKeeper's jars (and our compiled client driver) are, and how to start a JVM on them."""

    home: Path

    @classmethod
    def locate(cls) -> JavaBookKeeper:
        """The cache `make bookkeeper` filled; ClusterError saying how to fill it when it is missing."""
        env = os.environ.get("BKAUDIT_BOOKKEEPER_HOME")
        home = Path(env) if env else Path(__file__).resolve().parents[2] / ".cache" / "bookkeeper"
        found = cls(home)
        if not any(found.lib.glob("bookkeeper-server-*.jar")):
            raise ClusterError(f"Apache BookKeeper's jars are not in {found.lib}: run `make bookkeeper` (it "
                               "resolves them from Maven Central) or set BKAUDIT_BOOKKEEPER_HOME")
        return found

    @property
    def lib(self) -> Path:
        return self.home / "lib"

    @property
    def classes(self) -> Path:
        return self.home / "classes"

    @property
    def version(self) -> str:
        jar = next(self.lib.glob("bookkeeper-server-*.jar"), None)
        return jar.stem.removeprefix("bookkeeper-server-") if jar else "unknown"

    def log4j_config(self, level: str = "INFO") -> Path:
        """A log4j2 file for `level` (INFO, WARN, ...), or SHELL: the shell's answers alone on stdout."""
        path = self.home / f"log4j2-{level.lower()}.properties"
        text = _LOG4J2_SHELL if level == "SHELL" else _LOG4J2.replace("{level}", level.lower())
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
        return path

    def command(self, main: str, *args: str, heap_mb: int = 256, direct_mb: int = 256,
                log_level: str = "INFO", tmp_dir: Path | None = None) -> list[str]:
        """`java <flags> -cp <BookKeeper's jars>[:driver classes] main args...`.

        `tmp_dir` (created) is the JVM's java.io.tmpdir: RocksDB unpacks its 13 MB native library there and
        removes it only on a clean exit, so a killed DbLedgerStorage bookie would leave one in /tmp."""
        classpath = f"{self.lib}/*"
        if main == DRIVER_MAIN:
            if not (self.classes / f"{DRIVER_MAIN}.class").exists():
                raise ClusterError(f"the BookKeeper client driver is not compiled in {self.classes}: run "
                                   "`make bookkeeper`")
            classpath = f"{self.classes}:{classpath}"
        tmp = []
        if tmp_dir is not None:
            tmp_dir.mkdir(parents=True, exist_ok=True)
            tmp = [f"-Djava.io.tmpdir={tmp_dir}"]
        return ["java", f"-Xmx{heap_mb}m", f"-XX:MaxDirectMemorySize={direct_mb}m", *_JVM_FLAGS, *tmp,
                *extra_opts(), f"-Dlog4j.configurationFile={self.log4j_config(log_level)}", "-cp", classpath,
                main, *args]


def extra_opts() -> list[str]:
    """`$BOOKIE_EXTRA_OPTS`, which BookKeeper's bin/bookkeeper appends to every JVM it starts (the tests set
    `-XX:TieredStopAtLevel=1`: their JVMs live seconds, and C2 compiler threads only compete with the other
    tests for two cores; the benchmarks leave it unset)."""
    return shlex.split(os.environ.get("BOOKIE_EXTRA_OPTS", ""))


def metadata_service_uri(zk: ZkSettings) -> str:
    """BookKeeper's `metadataServiceUri` for bkaudit's [zk] settings (connect string, ledgers root, layout:
    `[zk] layout` names BookKeeper's ledger managers, whose URI schemes are `zk+<layout>`).

    A chroot in the connect string ("host:port/c1") becomes part of the ledgers path: BookKeeper's URI has no
    chroot, and `/c1` + `/ledgers` names the same znodes.
    """
    hosts, _, chroot = zk.connect.partition("/")
    path = ("/" + chroot.strip("/") if chroot else "") + zk.root
    return f"zk+{zk.layout}://{hosts.replace(',', ';')}{path}"


def server_conf(*, zk: ZkSettings, host: str, port: int, data_dir: Path, storage: str = "sorted",
                http_port: int | None = None, zk_timeout_ms: int = 6000,
                extra: Mapping[str, object] | None = None, small_caches: bool = True) -> dict[str, str]:
    """A ServerConfiguration for one loopback host: a bookie's, or AutoRecovery's (which needs a bookie id of
    its own for its Auditor vote). Everything not named keeps BookKeeper's default. `small_caches`: a test
    bookie's JVM is small, and DbLedgerStorage's caches are sized down to fit it; a bookie given BookKeeper's
    default memory keeps the default caches too."""
    if storage not in STORAGE_CLASSES:
        raise ClusterError(f"unknown ledger storage {storage!r} (known: {', '.join(STORAGE_CLASSES)})")
    conf: dict[str, str] = {
        "metadataServiceUri": metadata_service_uri(zk),
        "bookiePort": str(port),
        "advertisedAddress": host,
        "listeningInterface": "lo",
        "allowLoopback": "true",
        "journalDirectories": str(data_dir / "journal"),
        "ledgerDirectories": str(data_dir / "ledgers"),
        "ledgerStorageClass": STORAGE_CLASSES[storage],
        "zkTimeout": str(zk_timeout_ms),
        "httpServerEnabled": "false",
    }
    if storage == "db" and small_caches:  # DbLedgerStorage sizes its caches from direct memory
        conf.update({"dbStorage_writeCacheMaxSizeMb": "32", "dbStorage_readAheadCacheMaxSizeMb": "32",
                     "dbStorage_rocksDB_blockCacheSize": str(16 * 1024 * 1024)})
    if http_port is not None:
        conf.update({"httpServerEnabled": "true", "httpServerPort": str(http_port), "httpServerHost": host,
                     # set by BookKeeper's shipped conf/bk_server.conf, not by ServerConfiguration
                     "httpServerClass": "org.apache.bookkeeper.http.vertx.VertxHttpServer"})
    for key, value in (extra or {}).items():
        conf[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return conf


def write_conf(path: Path, conf: Mapping[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()), encoding="utf-8")
    return path


def run_shell(java: JavaBookKeeper, conf: Path, *args: str, timeout_s: float = 120,
              check: bool = True) -> subprocess.CompletedProcess[str]:
    """`bookkeeper shell <args>` (BookieShell) with `conf`: the command's answer on stdout (its own log lines,
    bare), everything else on stderr. ClusterError with the output's tail when it fails (and `check`) or
    hangs."""
    cmd = java.command(SHELL_MAIN, "-conf", str(conf), *args, log_level="SHELL")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"bookkeeper shell {' '.join(args)} did not finish within {timeout_s:g}s") from exc
    if check and done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise ClusterError(f"bookkeeper shell {' '.join(args)} exited {done.returncode}:\n{tail}")
    return done


class JavaClient:
    """BookKeeper's Java client in a JVM of its own (tests/java/src/BkDriver.java), one JSON command per call.

    `settings` are ClientConfiguration keys (`{"useV2WireProtocol": True}` for Pulsar brokers' default wire
    protocol). `call` raises ClusterError with the client's error (and BKException code, in `.code`) unless
    `check=False`, when the answer is returned as it came. `close()` (or the context manager) stops the JVM by
    its pid; a client that does not answer within `timeout_s` is killed.
    """

    def __init__(self, java: JavaBookKeeper, *, zk: ZkSettings, log: Path,
                 settings: Mapping[str, object] | None = None, timeout_s: float = 120) -> None:
        import json
        import threading

        from bkaudit.zk.server import die_with_parent_prefix

        self._json = json
        self.timeout_s = timeout_s
        args = ["client", "--uri", metadata_service_uri(zk)]
        for key, value in (settings or {}).items():
            args += ["--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log
        self._stderr = log.open("ab")
        self._proc = subprocess.Popen(
            [*die_with_parent_prefix(), *java.command(DRIVER_MAIN, *args, heap_mb=512, direct_mb=512)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, encoding="utf-8",
            start_new_session=True)
        self._lock = threading.Lock()
        ready = self._read_line(timeout_s)
        if not ready.get("ready"):
            self.close()
            raise ClusterError(f"the Java client did not start: {ready}{self._log_tail()}")

    @property
    def pid(self) -> int:
        return self._proc.pid

    def call(self, op: str, *, check: bool = True, timeout_s: float | None = None,
             **args: object) -> dict[str, object]:
        with self._lock:
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.write(self._json.dumps({"op": op, **args}) + "\n")
                self._proc.stdin.flush()
            except (BrokenPipeError, ValueError) as exc:
                raise ClusterError(f"the Java client exited{self._log_tail()}") from exc
            answer = self._read_line(timeout_s or self.timeout_s)
        if check and not answer.get("ok"):
            err = ClusterError(f"Java client {op} failed: {answer.get('error')}")
            err.code = answer.get("code")  # type: ignore[attr-defined]
            raise err
        return answer

    def _read_line(self, timeout_s: float) -> dict[str, object]:
        import select

        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout_s)
        if not ready:
            self.close()
            raise ClusterError(f"the Java client gave no answer within {timeout_s:g}s{self._log_tail()}")
        line = self._proc.stdout.readline()
        if not line:
            code = self._proc.wait()
            raise ClusterError(f"the Java client exited with {code}{self._log_tail()}")
        answer: dict[str, object] = self._json.loads(line)
        return answer

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_bytes()[-16384:].decode("utf-8", "replace")
        except OSError:
            return ""
        return f"\n--- last lines of {self.log} ---\n" + "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write('{"op": "quit"}\n')
                self._proc.stdin.flush()
                self._proc.wait(timeout=10)
            except Exception:
                self._proc.kill()
                self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()

    def __enter__(self) -> JavaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def damage(java: JavaBookKeeper, *, storage: str, data_dir: Path, ledger_id: int,
           entries: tuple[int, ...] = (), forget: bool = False) -> None:
    """Make a STOPPED Java bookie (directories as `server_conf` lays them out under `data_dir`) lose
    entries of a ledger, or with `forget` the whole ledger, through BookKeeper's own storage formats (the
    driver's damage mode). The bookie must have stopped cleanly: its shutdown checkpoint moves the journal's
    last mark past every entry, so a restart replays none of them back."""
    damage_many(java, storage=storage, data_dir=data_dir,
                plan={ledger_id: None if forget else tuple(entries)})


def damage_many(java: JavaBookKeeper, *, storage: str, data_dir: Path,
                plan: Mapping[int, tuple[int, ...] | None]) -> None:
    """`damage` for many ledgers in one JVM (one RocksDB open): `plan` maps a ledger to the entries the
    stopped bookie loses, or None to forget the whole ledger."""
    kind = "db" if storage == "db" else "interleaved"
    lines = "".join(f"{lid} {'forget' if lost is None else ','.join(map(str, lost))}\n"
                    for lid, lost in plan.items())
    plan_file = data_dir / "damage-plan.txt"
    plan_file.write_text(lines, encoding="utf-8")
    args = ["damage", "--storage", kind, "--ledger-dir", str(data_dir / "ledgers" / "current"),
            "--plan", str(plan_file)]
    done = subprocess.run(java.command(DRIVER_MAIN, *args, log_level="WARN"), capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL)
    plan_file.unlink(missing_ok=True)
    if done.returncode != 0 or '"ok":true' not in done.stdout:
        raise ClusterError(f"damage of ledgers {sorted(plan)[:5]}... failed:\n"
                           f"{(done.stdout + done.stderr)[-3000:]}")


class JavaProcess:
    """A long-running BookKeeper JVM (AutoRecovery, say) started from a conf file, its output in `log`.
    `stop()` signals it by its pid (SIGTERM, SIGKILL after `timeout_s`)."""

    def __init__(self, java: JavaBookKeeper, main: str, conf: Path, log: Path, *, heap_mb: int = 256,
                 direct_mb: int = 256, log_level: str = "INFO") -> None:
        from bkaudit.zk.server import die_with_parent_prefix

        self.main = main
        self.conf = conf
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            self._proc = subprocess.Popen(
                [*die_with_parent_prefix(),
                 *java.command(main, "--conf", str(conf), heap_mb=heap_mb, direct_mb=direct_mb,
                               log_level=log_level)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return f"\n--- last lines of {self.log} ---\n" + "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self, *, timeout_s: float = 20, kill: bool = False) -> None:
        import signal

        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self._proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
