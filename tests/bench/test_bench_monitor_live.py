"""bench/monitor.py's threads against real things: real processes allocating a known amount of memory, the
real embedded ZooKeeper answering mntr, the probe against a real server, and a server paused with SIGSTOP.

Ground truth is what each test injects (the bytes a process allocates, the reads a test makes, how long the
test pauses ZooKeeper), never the monitor's own figures.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import monitor
from bkaudit.zk.server import ZooKeeperServer
from tests.helpers import wait_for

MB = 1024 * 1024
ALLOCATE_MB = 150

# A process tree shaped like a Spark side: driver (python) -> "java" (Python run through a symlink named
# `java`, so /proc shows argv[0] as a JVM's) -> worker (python), which allocates ALLOCATE_MB when told to
# and then forks a child that shares those pages (as pyspark.daemon's forked workers share the daemon's).
WORKER = f"""
import os, sys, time, pathlib
d = pathlib.Path(sys.argv[1])
(d / "worker.pid").write_text(str(os.getpid()))
while not (d / "go").exists():
    time.sleep(0.02)
block = b"x" * ({ALLOCATE_MB} * 1024 * 1024)  # written, so every page is resident
time.sleep(1.5)  # at least one sample with the allocation and no fork yet
child = os.fork()
if child == 0:
    (d / "forked.pid").write_text(str(os.getpid()))
while not (d / "stop").exists():
    time.sleep(0.02)
if child == 0:
    os._exit(0)
os.waitpid(child, 0)
"""
JVM = """
import os, subprocess, sys, pathlib
python, worker, d = sys.argv[1:4]
pathlib.Path(d, "jvm.pid").write_text(str(os.getpid()))
subprocess.run([python, "-c", worker, d], check=True)
"""
DRIVER = """
import subprocess, sys
java, jvm, python, worker, d = sys.argv[1:6]
subprocess.run([java, "-c", jvm, python, worker, d], check=True)
"""


def test_sampler_sees_a_worker_grow_by_what_it_allocated_and_attributes_the_tree(tmp_path: Path) -> None:
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.symlink_to(os.path.realpath(sys.executable))  # the base interpreter: the scripts need only stdlib
    driver_pid: list[int] = []
    sampler = monitor.MemorySampler(is_driver=lambda p: p.pid in driver_pid, interval_s=0.5)
    sampler.start()
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(java), JVM, sys.executable, WORKER,
                               str(tmp_path)])
    driver_pid.append(driver.pid)
    try:
        def worker_pid() -> Any:
            assert driver.poll() is None, "the process tree died"
            path = tmp_path / "worker.pid"
            return path.exists() and path.read_text()

        worker = int(wait_for(worker_pid, what="the worker"))
        jvm = int((tmp_path / "jvm.pid").read_text())

        def seen() -> Any:
            return next((s for s in reversed(sampler.samples)
                         if worker in s.get("python_workers", {})), None)

        first = wait_for(seen, what="a sample with the worker")
        base = sampler.samples.index(first)
        before, pss_before = first["python_workers"][worker], sampler.workers_pss[base]
        (tmp_path / "go").write_text("1")
        wait_for((tmp_path / "forked.pid").exists, what="the fork")
        forked = int(wait_for(lambda: (tmp_path / "forked.pid").read_text(), what="the forked pid"))
        count = len(sampler.samples)
        wait_for(lambda: len(sampler.samples) >= count + 2, what="two samples after the fork")
    finally:
        (tmp_path / "go").write_text("1")  # a worker still waiting to allocate must reach its stop check
        (tmp_path / "stop").write_text("1")
        driver.wait(timeout=60)
    summary = sampler.stop()
    assert summary["error"] is None
    workers = summary["roles"]["python_workers"]
    # the largest worker grew by what it allocated
    grown_mb = workers["peak_single_mb"] - before / MB
    assert ALLOCATE_MB * 0.9 <= grown_mb <= ALLOCATE_MB * 1.15, grown_mb
    # two processes map those pages after the fork: the RSS sum counts them twice, PSS once
    rss_grown = workers["peak_sum_mb"] - before / MB
    assert 2 * ALLOCATE_MB * 0.9 <= rss_grown <= 2 * ALLOCATE_MB * 1.15 + before / MB, rss_grown
    pss_grown = workers["peak_pss_sum_mb"] - pss_before / MB
    assert ALLOCATE_MB * 0.9 <= pss_grown <= ALLOCATE_MB * 1.15, pss_grown
    pids = {role: set().union(*(set(s.get(role, {})) for s in sampler.samples)) for role in summary["roles"]}
    assert pids == {"driver": {driver.pid}, "jvm": {jvm}, "python_workers": {worker, forked}}
    # the series, not only the peak; its last sample may come after the tree exited (the stop above)
    assert max(summary["series_mb"]["python_workers"]) >= 2 * ALLOCATE_MB


def test_sampler_reads_fixed_pids_as_their_roles(zk_server: ZooKeeperServer) -> None:
    assert zk_server.pid is not None
    sampler = monitor.MemorySampler(fixed={"zookeeper": zk_server.pid}, is_driver=lambda p: False,
                                    interval_s=0.2)
    sampler.start()
    wait_for(lambda: len(sampler.samples) >= 2, what="two samples")
    summary = sampler.stop()
    zk_rss_mb = int(Path(f"/proc/{zk_server.pid}/statm").read_text().split()[1]) * monitor.PAGE / MB
    assert list(summary["roles"]) == ["zookeeper"]
    assert summary["roles"]["zookeeper"]["peak_sum_mb"] == pytest.approx(zk_rss_mb, rel=0.3)


def test_mntr_counts_the_reads_a_client_makes(zk_server: ZooKeeperServer, zk: Any, zk_root: str) -> None:
    zk.ensure_path(zk_root)
    reads = 2000
    poller = monitor.MntrPoller(host=zk_server.host, port=zk_server.port, interval_s=0.5)
    poller.start()
    try:
        wait_for(lambda: len(poller.samples) >= 1, what="a first poll")
        for _ in range(reads):
            zk.get(zk_root)
        count = len(poller.samples)
        wait_for(lambda: len(poller.samples) >= count + 2, what="two polls after the reads")
    finally:
        summary = poller.stop()
    assert summary["error"] is None and summary["stats_reset"] is True  # srst is whitelisted
    first, last = poller.samples[0].values, poller.samples[-1].values
    received = last["zk_packets_received"] - first["zk_packets_received"]
    rates = [r["packets_received_per_s"] for r in summary["series"]]
    spans = [b.t - a.t for a, b in itertools.pairwise(poller.samples)]
    # every read is one request packet (other sessions' pings only add); the rates integrate to the count
    assert received >= reads
    assert sum(r * s for r, s in zip(rates, spans, strict=True)) == pytest.approx(received)
    assert summary["summary"]["packets_received_per_s"]["max"] > 0
    assert summary["summary"]["znode_count"]["max"] >= 3  # /, /zookeeper, the test's root


def test_probe_reports_about_its_rate(zk_server: ZooKeeperServer, zk: Any, zk_root: str) -> None:
    zk.ensure_path(zk_root)
    probe = monitor.Probe(connect=zk_server.connect_string, path=zk_root)
    probe.start()
    started = time.time()  # after the connect: the window lies within the probe's sending
    time.sleep(3.0)  # the probe's own run time: what is measured is its count over its elapsed time
    out = probe.stop(window=[started + 1.0, started + 2.0])
    assert out["failures"] == 0
    assert out["answered"] == out["scheduled"]
    assert 90 <= out["answered_per_s"] <= 101
    assert 0 < out["p50_ms"] <= out["p99_ms"] <= out["max_ms"]
    work = out["work"]  # the requests scheduled within one second of the run: about `rate` of them
    assert 95 <= work["scheduled"] <= 102 and work["answered"] == work["scheduled"]


def test_probe_on_a_missing_znode_is_a_clear_error(zk_server: ZooKeeperServer, zk_root: str) -> None:
    probe = monitor.Probe(connect=zk_server.connect_string, path=zk_root + "/nope")
    with pytest.raises(ValueError, match="does not exist"):
        probe.start()
    # the whole monitor refuses too, and leaves no thread of its own running
    watch = monitor.Monitor(monitor.zk_targets(zk_server.connect_string, zk_root + "/nope", {}))
    with pytest.raises(ValueError, match="does not exist"):
        watch.start()
    assert watch.memory.error is None and not watch.memory._thread.is_alive()
    assert watch.mntr is not None and not watch.mntr._thread.is_alive()


@pytest.fixture
def private_zk(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A server of its own, with the /probe znode: the test pauses it, which the session's shared server must
    not see."""
    from bkaudit.zk.client import close, connect

    server = ZooKeeperServer(data_dir=tmp_path / "zk").start(timeout_s=60)
    try:
        assert server.pid is not None
        admin = connect(server.connect_string)
        admin.ensure_path("/probe")
        close(admin)
        yield server
    finally:
        if server.pid is not None:
            try:
                os.kill(server.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        server.stop()


def pause(server: ZooKeeperServer, seconds: float) -> None:
    """SIGSTOP the server for `seconds`, then SIGCONT it (whatever happens while waiting)."""
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    paused_at = time.monotonic()
    try:
        wait_for(lambda: time.monotonic() - paused_at >= seconds, timeout_s=seconds + 30, what="the pause")
    finally:
        os.kill(server.pid, signal.SIGCONT)


@pytest.mark.cluster
def test_probe_and_mntr_expose_a_server_paused_with_sigstop(private_zk: ZooKeeperServer) -> None:
    short = monitor.Probe(connect=private_zk.connect_string, path="/probe", session_timeout_s=10.0)
    poller = monitor.MntrPoller(host=private_zk.host, port=private_zk.port, interval_s=0.5, timeout_s=0.5)
    short.start()
    poller.start()
    time.sleep(1.0)
    pause_s = 2.5
    pause(private_zk, pause_s)
    time.sleep(1.0)
    out = short.stop()
    polls = poller.stop()
    # the requests scheduled at the start of the pause were answered only after it: open loop shows it
    assert out["max_ms"] >= (pause_s - 0.3) * 1000
    assert out["p99_ms"] >= 1000  # ~250 of ~450 requests waited for the pause
    assert out["failures"] == 0  # a 2.5 s pause is within the 10 s session: late, not lost
    assert polls["unanswered"] >= 2  # mntr got no answer while the server was stopped


@pytest.mark.cluster
def test_probe_exposes_a_pause_that_outlasts_its_session(private_zk: ZooKeeperServer) -> None:
    probe = monitor.Probe(connect=private_zk.connect_string, path="/probe", session_timeout_s=4.0, grace_s=15)
    probe.start()
    time.sleep(0.5)
    pause_s = 8.0
    pause(private_zk, pause_s)
    time.sleep(2.0)
    out = probe.stop()
    # Usually kazoo drops the connection with requests in flight (failures). Whether the session survives
    # is a race, though: while the server is stopped the probe keeps writing, and after SIGCONT the queued
    # requests can touch the session before the server expires it (a CI run saw 0 failures). Either way
    # the pause must show: as failures, or as requests answered at least the pause late (open loop).
    assert out["failures"] > 0 or out["max_ms"] >= (pause_s - 0.5) * 1000, out
    assert out["scheduled"] == out["answered"] + out["failures"]
