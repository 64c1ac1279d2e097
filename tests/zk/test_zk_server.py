"""The embedded ZooKeeper server, the `bkaudit zk` CLI and bkaudit.zk.client against a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kazoo.exceptions import ConnectionLoss, NoAuthError, NoNodeError

from bkaudit.config import ZkSettings
from bkaudit.errors import ClusterError, ZooKeeperError
from bkaudit.zk import server as zkserver
from bkaudit.zk.client import RateLimiter, acls, close, connect, with_retries
from bkaudit.zk.server import ZooKeeperServer, four_letter_word, free_port, stop_background


def _cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bkaudit.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[-1].split()[0] == "Z")


# -- server ------------------------------------------------------------------------------------------------
def test_session_server_answers_four_letter_words_and_sessions(zk_server: ZooKeeperServer, zk) -> None:
    assert four_letter_word(zk_server.host, zk_server.port, "ruok") == "imok"
    assert "Zookeeper version: 3." in four_letter_word(zk_server.host, zk_server.port, "srvr")
    zk.create("/server-smoke", b"x", ephemeral=True)
    assert zk.get("/server-smoke")[0] == b"x"


def test_start_and_stop_own_server(tmp_path: Path) -> None:
    with ZooKeeperServer(data_dir=tmp_path) as server:
        pid = server.pid
        assert pid is not None and _alive(pid)
        state = json.loads((tmp_path / "zookeeper.json").read_text())
        assert state == {"pid": pid, "port": server.port, "host": "127.0.0.1",
                         "connect": server.connect_string, "data_dir": str(tmp_path.resolve())}
        assert "clientPortAddress=127.0.0.1" in (tmp_path / "zoo.cfg").read_text()
        client = connect(server.connect_string)
        client.create("/persisted", b"v")
        close(client)
    assert not _alive(pid)
    assert not (tmp_path / "zookeeper.json").exists()
    assert (tmp_path / "zookeeper.log").stat().st_size > 0
    server.stop()  # idempotent


def test_busy_port_gives_clear_error(zk_server: ZooKeeperServer, tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=f"127.0.0.1:{zk_server.port} is already in use"):
        ZooKeeperServer(port=zk_server.port, data_dir=tmp_path).start(timeout_s=10)


def test_cli_busy_port(zk_server: ZooKeeperServer, tmp_path: Path) -> None:
    port, data_dir = str(zk_server.port), str(tmp_path / "zk")
    result = _cli("zk", "start", "--port", port, "--data-dir", data_dir, cwd=tmp_path)
    assert result.returncode == 1
    assert "already in use" in result.stderr


def test_cli_background_start_then_stop(tmp_path: Path) -> None:
    started = _cli("zk", "start", "--background", "--json", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    assert info["data_dir"] == str((tmp_path / ".bkaudit" / "zk").resolve())
    assert _alive(info["pid"])
    client = connect(info["connect"])
    client.create("/from-test", b"1")
    close(client)
    again = _cli("zk", "start", "--background", cwd=tmp_path)
    assert again.returncode == 1 and "already running" in again.stderr

    stopped = _cli("zk", "stop", "--json", cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["stopped"] is True
    deadline = time.monotonic() + 10
    while _alive(info["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(info["pid"])
    assert not (tmp_path / ".bkaudit" / "zk" / "zookeeper.json").exists()
    with pytest.raises(ZooKeeperError, match="cannot connect"):
        connect(info["connect"], timeout_s=1)
    none = _cli("zk", "stop", cwd=tmp_path)
    assert none.returncode == 0 and "no ZooKeeper running" in none.stdout


def test_stale_state_file_never_signals_an_unrelated_pid(tmp_path: Path) -> None:
    (tmp_path / "zookeeper.json").write_text(json.dumps({"pid": os.getpid(), "port": 1, "connect": "x:1"}))
    assert stop_background(tmp_path) is None
    assert not (tmp_path / "zookeeper.json").exists()


def test_missing_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nojava"))
    with pytest.raises(ClusterError, match=r"JAVA_HOME=.*no executable bin/java"):
        ZooKeeperServer(data_dir=tmp_path).start()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ClusterError, match="Java 17"):
        zkserver.find_java()


def test_jars_are_found() -> None:
    assert any(zkserver.find_jars_dir().glob("zookeeper-3*.jar"))


# -- client ------------------------------------------------------------------------------------------------
def test_connect_unreachable_raises_zookeeper_error() -> None:
    port = free_port()
    with pytest.raises(ZooKeeperError, match=f"127.0.0.1:{port}"):
        connect(f"127.0.0.1:{port}", timeout_s=0.5)


def test_digest_auth_and_creator_acls(zk_server: ZooKeeperServer, zk_root: str) -> None:
    settings = ZkSettings(connect=zk_server.connect_string, auth_digest="bk:secret", enable_security=True)
    assert acls(ZkSettings()) is not None and acls(ZkSettings())[0].id.scheme == "world"
    secure = connect(settings)
    try:
        secure.create(zk_root, b"private", makepath=True)  # default_acl = CREATOR_ALL_ACL
        assert secure.get_acls(zk_root)[0][0].id.scheme == "digest"
        anonymous = connect(zk_server.connect_string)
        try:
            with pytest.raises(NoAuthError):
                anonymous.get(zk_root)
        finally:
            close(anonymous)
    finally:
        close(secure)


def test_with_retries_retries_transient_then_gives_up() -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionLoss()
        return "ok"

    assert with_retries(flaky, attempts=5, base_delay_s=0.001, max_delay_s=0.01) == "ok"
    assert len(calls) == 3

    def always() -> None:
        raise ConnectionLoss()

    with pytest.raises(ZooKeeperError, match="after 2 attempts"):
        with_retries(always, attempts=2, base_delay_s=0.001, max_delay_s=0.01)

    answered = []

    def no_node() -> None:
        answered.append(1)
        raise NoNodeError()

    with pytest.raises(NoNodeError):
        with_retries(no_node, attempts=5, base_delay_s=0.001)
    assert len(answered) == 1


def test_rate_limiter_bounds_rate_across_threads() -> None:
    limiter = RateLimiter(200, burst=10)
    start = time.monotonic()

    def worker() -> None:
        for _ in range(30):
            limiter.acquire()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    # 120 permits at 200/s with a burst of 10: at least (120 - 10) / 200 = 0.55 s
    assert elapsed >= 0.5
    assert elapsed < 2.0
    assert not RateLimiter(1, burst=1).try_acquire(2)


def test_rate_limiter_unlimited() -> None:
    for rate in (0, None):
        limiter = RateLimiter(rate)
        start = time.monotonic()
        for _ in range(10000):
            limiter.acquire()
        assert time.monotonic() - start < 0.5
    with pytest.raises(ValueError):
        RateLimiter(-1)


@pytest.mark.skipif(sys.platform != "linux" or not zkserver.shutil.which("setpriv"), reason="Linux + setpriv")
def test_server_dies_with_a_killed_parent(tmp_path: Path) -> None:
    script = (
        "import sys, time\n"
        "from bkaudit.zk.server import ZooKeeperServer\n"
        f"s = ZooKeeperServer(data_dir={str(tmp_path)!r}).start()\n"
        "print(s.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    assert _alive(pid)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_a_server_sized_for_load_runs_with_that_heap(tmp_path: Path) -> None:
    """heap_mb reaches the JVM (read back from the live process's command line), and a heap above the small
    default switches to G1 and the full JIT; a nonsense heap is refused before anything starts."""
    with ZooKeeperServer(data_dir=tmp_path / "big", heap_mb=768) as server:
        assert server.pid is not None
        argv = Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")
        assert b"-Xmx768m" in argv and b"-XX:+UseG1GC" in argv
        assert b"-XX:TieredStopAtLevel=1" not in argv and b"-XX:+UseSerialGC" not in argv
        client = connect(server.connect_string)
        client.create("/sized", b"v")
        close(client)
    small = zkserver.jvm_opts()
    assert "-Xmx512m" in small and "-XX:+UseSerialGC" in small
    with pytest.raises(ValueError, match="heap_mb"):
        ZooKeeperServer(data_dir=tmp_path / "bad", heap_mb=8)
