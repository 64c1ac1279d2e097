"""An embedded, real ZooKeeper server run from the jars that pyspark's wheel already ships.

Tests, the demo and local clusters need a real ZooKeeper (sequential ids, ephemeral nodes, multi, versions all
behave exactly as in production) without asking users to install one: pyspark's `jars/` folder contains
`zookeeper-3.9.x.jar` and its dependencies, so `java -cp "<pyspark>/jars/*" ZooKeeperServerMain zoo.cfg` is a
complete standalone server.

Layout of `data_dir`: `zoo.cfg`, `log4j2.properties`, `zookeeper.log` (server log), `zookeeper.out` (JVM
stdout/stderr), `data/` (snapshots + transaction log) and `zookeeper.json` ({pid, port, connect}) while the
server runs, so `bkaudit zk stop --data-dir D` can find and stop a server started with `--background`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from bkaudit.errors import ClusterError
from bkaudit.processes import pid_alive

STATE_FILE = "zookeeper.json"
# the readiness probe's kazoo client: its connection-drop warnings during start-up are expected noise
_QUIET_LOGGER = logging.getLogger("bkaudit.zk.server.probe")
_QUIET_LOGGER.addHandler(logging.NullHandler())
_QUIET_LOGGER.propagate = False
LOG_FILE = "zookeeper.log"
OUT_FILE = "zookeeper.out"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
# Small heap and fast JIT start: an audit-scale test server needs little, and start-up time matters in tests.
JVM_OPTS = ("-Xms32m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")
DEFAULT_HEAP_MB = 512


def jvm_opts(heap_mb: int = DEFAULT_HEAP_MB) -> tuple[str, ...]:
    """The server JVM's flags. Above the small default the server is sized for load (a benchmark's million
    ledger znodes, ~2 KiB of heap each): then it runs as ZooKeeper is run in production, G1 and the full JIT.
    A 512 MiB serial-GC heap holding a million znodes spends its time collecting, and the sessions of every
    client expire (measured: the 1M-ledger populate lost its connection after 2 minutes)."""
    if heap_mb < 64:
        raise ValueError(f"ZooKeeper heap_mb={heap_mb}: at least 64 MiB")
    if heap_mb <= DEFAULT_HEAP_MB:
        return ("-Xms32m", f"-Xmx{heap_mb}m", *JVM_OPTS[2:])
    return (f"-Xms{heap_mb}m", f"-Xmx{heap_mb}m", "-XX:+UseG1GC", "-Djava.awt.headless=true")

_LOG4J2 = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{ISO8601}} %-5p [%t] %c{{1}}: %m%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
"""


# -- discovery ---------------------------------------------------------------------------------------------
def find_java() -> str:
    """The `java` executable: $JAVA_HOME/bin/java if JAVA_HOME is set, else the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
        raise ClusterError(f"JAVA_HOME={home} has no executable bin/java; fix JAVA_HOME or unset it")
    found = shutil.which("java")
    if found is None:
        raise ClusterError(
            "Java 17+ is needed to run ZooKeeper but `java` is not on PATH and JAVA_HOME is not set "
            "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless)"
        )
    return found


def find_jars_dir() -> Path:
    """pyspark's `jars/` folder, checked to contain ZooKeeper's server jar (pyspark is not imported)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ClusterError("pyspark is not installed, so there are no ZooKeeper jars (pip install pyspark)")
    for location in spec.submodule_search_locations:
        jars = Path(location) / "jars"
        if any(jars.glob("zookeeper-3*.jar")):
            return jars
    where = ", ".join(spec.submodule_search_locations)
    raise ClusterError(f"no zookeeper-3.*.jar in pyspark's jars folder under {where}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on `host` (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """True if something already listens on (host, port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def four_letter_word(host: str, port: int, word: str = "ruok", timeout_s: float = 2.0) -> str:
    """Send a ZooKeeper four-letter command and return the answer ('' if nothing answered)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(word.encode("ascii"))
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""


# -- the server --------------------------------------------------------------------------------------------
class ZooKeeperServer:
    """A standalone ZooKeeper process bound to `host:port` with its state in `data_dir`.

    `detach=True` starts the JVM in its own session so it outlives this Python process (the CLI's
    `--background`); otherwise, when started from the main thread on Linux, the JVM is killed if this process
    dies (no orphaned servers after a crashed test run).
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        data_dir: str | os.PathLike[str],
        host: str = "127.0.0.1",
        detach: bool = False,
        log_level: str = "INFO",
        heap_mb: int = DEFAULT_HEAP_MB,
    ) -> None:
        self.host = host
        self.jvm_opts = jvm_opts(heap_mb)
        self.data_dir = Path(data_dir).resolve()
        self.detach = detach
        self.log_level = log_level
        self._requested_port = port
        self.port: int | None = port
        self._proc: subprocess.Popen[bytes] | None = None

    # -- properties ----------------------------------------------------------------------------------------
    @property
    def connect_string(self) -> str:
        if self.port is None:
            raise ClusterError("ZooKeeper server has no port yet (call start())")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- lifecycle -----------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 30) -> ZooKeeperServer:
        """Launch the JVM and return once ZooKeeper answers `ruok` and accepts a real client session.

        With no port given, a free one is picked, and re-picked (up to 3 times) if another process grabs it
        between picking and binding.
        """
        if self.is_running():
            return self
        java, jars = find_java(), find_jars_dir()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        _refuse_if_other_server_running(self.data_dir)
        attempts = 1 if self._requested_port is not None else 3
        for attempt in range(attempts):
            self.port = self._requested_port or free_port(self.host)
            if port_in_use(self.host, self.port):
                if attempt + 1 < attempts:
                    continue
                raise ClusterError(f"cannot start ZooKeeper: {self.host}:{self.port} is already in use")
            self._launch(java, jars)
            try:
                self._wait_until_serving(timeout_s)
            except ClusterError:
                self._kill_quietly()
                if attempt + 1 >= attempts or not self._lost_port_race():
                    raise
                continue
            self._write_state()
            return self
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self, timeout_s: float = 10) -> None:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL; removes the state file. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            _terminate(proc.pid, timeout_s, wait=lambda t: _wait_popen(proc, t))
        if proc is not None:
            proc.wait()
        _remove_state(self.data_dir, pid=proc.pid if proc else None)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ZooKeeperServer({self.host}:{self.port}, data_dir={str(self.data_dir)!r}, pid={self.pid})"

    # -- internals -----------------------------------------------------------------------------------------
    def _launch(self, java: str, jars: Path) -> None:
        cfg = self._write_config()
        log4j = self.data_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(log=self.log_path, level=self.log_level), encoding="utf-8")
        cmd = [
            *([] if self.detach else die_with_parent_prefix()),
            java,
            *self.jvm_opts,
            f"-Dlog4j2.configurationFile={log4j}",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            f"{jars}/*",
            MAIN_CLASS,
            str(cfg),
        ]
        out = (self.data_dir / OUT_FILE).open("ab")
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,
            )
        finally:
            out.close()

    def _write_config(self) -> Path:
        data = self.data_dir / "data"
        data.mkdir(exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            "\n".join(
                [
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.host}",
                    f"dataDir={data}",
                    "tickTime=2000",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,stat,mntr,srvr,srst",
                    "maxClientCnxns=0",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        return cfg

    def _wait_until_serving(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        assert self._proc is not None and self.port is not None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ClusterError(
                    f"ZooKeeper exited with code {self._proc.returncode} during start-up on "
                    f"{self.host}:{self.port}{self._diagnostics()}"
                )
            ready = four_letter_word(self.host, self.port, "ruok", 1.0) == "imok"
            if ready and self._session_works(deadline):
                return
            time.sleep(0.05)
        raise ClusterError(
            f"ZooKeeper did not start serving on {self.host}:{self.port} within {timeout_s:g}s"
            f"{self._diagnostics()}"
        )

    def _session_works(self, deadline: float) -> bool:
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.connect_string, timeout=10.0, logger=_QUIET_LOGGER)
        try:
            client.start(timeout=max(0.5, min(5.0, deadline - time.monotonic())))
            client.get("/")
            return True
        except Exception:  # any failure just means "not serving yet"
            return False
        finally:
            client.stop()
            client.close()

    def _lost_port_race(self) -> bool:
        return "Address already in use" in self._diagnostics()

    def _diagnostics(self) -> str:
        parts = []
        for name in (LOG_FILE, OUT_FILE):
            tail = _tail(self.data_dir / name, 25)
            if tail:
                parts.append(f"\n--- last lines of {self.data_dir / name} ---\n{tail}")
        return "".join(parts)

    def _kill_quietly(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            _terminate(proc.pid, 5, wait=lambda t: _wait_popen(proc, t))
        if proc is not None:
            proc.wait()

    def _write_state(self) -> None:
        state = {"pid": self.pid, "port": self.port, "host": self.host, "connect": self.connect_string,
                 "data_dir": str(self.data_dir)}
        tmp = self.data_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.data_dir / STATE_FILE)


# -- background servers (by state file) --------------------------------------------------------------------
def read_state(data_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The state file of a server started in `data_dir`, or None if there is none (or it is unreadable)."""
    path = Path(data_dir) / STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and isinstance(state.get("pid"), int) else None


def running_state(data_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The state of the ZooKeeper still running from `data_dir`, or None (a stale file is ignored)."""
    state = read_state(data_dir)
    if state is None or not _is_our_server(state["pid"], Path(data_dir)):
        return None
    return state


def stop_background(data_dir: str | os.PathLike[str], timeout_s: float = 10) -> dict[str, Any] | None:
    """Stop the server started (e.g. with `bkaudit zk start --background`) in `data_dir`.

    Returns its state, or None if none was running. The pid is only signalled after checking that it still
    is a ZooKeeper using this data dir, so a stale state file never kills an unrelated process that reused
    the pid.
    """
    directory = Path(data_dir).resolve()
    state = running_state(directory)
    if state is None:
        _remove_state(directory, pid=None)
        return None
    _terminate(state["pid"], timeout_s, wait=lambda t: _wait_pid_gone(state["pid"], t))
    _remove_state(directory, pid=state["pid"])
    return state


def _refuse_if_other_server_running(data_dir: Path) -> None:
    state = running_state(data_dir)
    if state is not None:
        raise ClusterError(
            f"a ZooKeeper (pid {state['pid']}) is already running from {data_dir} at {state.get('connect')}; "
            f"stop it first (bkaudit zk stop --data-dir {data_dir})"
        )


def _is_our_server(pid: int, data_dir: Path) -> bool:
    """True if `pid` is alive and is ZooKeeperServerMain started with `data_dir`'s zoo.cfg."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return pid_alive(pid) and sys.platform != "linux"
    cfg = str(data_dir.resolve() / "zoo.cfg").encode()
    return MAIN_CLASS.encode() in cmdline and cfg in cmdline


def _remove_state(data_dir: Path, *, pid: int | None) -> None:
    state = read_state(data_dir)
    if state is not None and pid is not None and state.get("pid") != pid:
        return  # another server's file: leave it
    with contextlib.suppress(FileNotFoundError):
        (data_dir / STATE_FILE).unlink()


# -- process helpers ---------------------------------------------------------------------------------------
def _terminate(pid: int, timeout_s: float, *, wait: Any) -> None:
    """SIGTERM, then SIGKILL if the process is still there after `timeout_s`."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait(timeout_s):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait(5.0)


def _wait_popen(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    try:
        proc.wait(timeout=timeout_s)
        return True
    except subprocess.TimeoutExpired:
        return False


def _wait_pid_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


def die_with_parent_prefix() -> list[str]:
    """`setpriv --pdeathsig TERM --`: Linux then SIGTERMs the JVM if this process dies (no orphaned servers).

    PR_SET_PDEATHSIG fires when the *thread* that forked exits, so it is only used from the main thread;
    `setpriv` (util-linux) execs java, so the pid stays the JVM's. Where it is missing, nothing is prefixed
    (a preexec_fn would do the same, but is unsafe in a process with threads).
    """
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []


def _tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16384))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
