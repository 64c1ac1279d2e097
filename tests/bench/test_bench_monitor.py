"""bench/monitor.py's pure parts: percentiles, role attribution, mntr parsing and rates, the summaries and
tables, and bench/harness.py's `compare(monitor=)` plumbing (a real fresh process per run).

The threads against real processes and the real embedded ZooKeeper:
tests/bench/test_bench_monitor_live.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import harness, monitor

MB = 1024 * 1024


# -- percentiles ---------------------------------------------------------------------------------------------
def test_percentile_is_nearest_rank() -> None:
    xs = [float(x) for x in range(1, 101)]  # 1..100
    assert monitor.percentile(xs, 50) == 50.0
    assert monitor.percentile(xs, 99) == 99.0
    assert monitor.percentile(xs, 100) == 100.0
    assert monitor.percentile([5.0, 1.0, 3.0], 50) == 3.0
    assert monitor.percentile([7.0], 99) == 7.0


def test_percentile_of_nothing_or_bad_q_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        monitor.percentile([], 50)
    with pytest.raises(ValueError, match="q must be"):
        monitor.percentile([1.0], 0)
    with pytest.raises(ValueError, match="q must be"):
        monitor.percentile([1.0], 101)


@settings(max_examples=200, deadline=None)
@given(xs=st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=300),
       q1=st.floats(0.01, 100), q2=st.floats(0.01, 100))
def test_percentile_is_an_observed_value_and_monotone_in_q(xs: list[float], q1: float, q2: float) -> None:
    lo, hi = sorted((q1, q2))
    assert monitor.percentile(xs, lo) in xs
    assert monitor.percentile(xs, lo) <= monitor.percentile(xs, hi)
    # at least q% of the values are <= the q-th percentile
    p = monitor.percentile(xs, hi)
    assert sum(1 for x in xs if x <= p) >= hi / 100 * len(xs) - 1e-9


# -- roles ---------------------------------------------------------------------------------------------------
def _p(pid: int, ppid: int, *argv: str, rss_mb: int = 10) -> Any:
    return monitor.Proc(pid=pid, ppid=ppid, argv=argv, rss=rss_mb * MB)


def test_attribute_follows_the_tree_under_the_bench_process() -> None:
    procs = {p.pid: p for p in [
        _p(1, 0, "/sbin/init"),
        _p(100, 1, "/venv/bin/python", "bench/snapshot.py"),  # the bench process (root)
        _p(101, 100, "/venv/bin/python", "bench/harness.py", "--call", "snapshot:job_side"),  # driver
        _p(102, 101, "/usr/lib/jvm/bin/java", "-cp", "x", "org.apache.spark.deploy.SparkSubmit"),
        _p(103, 102, "/venv/bin/python3", "-m", "pyspark.daemon"),
        _p(104, 103, "/venv/bin/python3", "-m", "pyspark.daemon"),  # forked workers keep the argv
        _p(105, 103, "/venv/bin/python3", "-m", "pyspark.daemon"),
        _p(106, 101, "/bin/bash", "spark-class"),  # neither java nor a worker
        _p(110, 100, "/usr/bin/java", "org.apache.zookeeper.server.ZooKeeperServerMain"),
        _p(111, 100, "/venv/bin/python", "-m", "bkaudit.cli", "bookie", "run"),
        _p(112, 100, "/venv/bin/python", "-m", "bkaudit.cli", "bookie", "run"),
        _p(113, 100, "/venv/bin/python", "-c", "from multiprocessing ..."),  # not a side: ignored
        _p(200, 1, "/venv/bin/python", "-m", "pyspark.daemon"),  # someone else's: not ours
        _p(201, 1, "/usr/bin/java"),
    ]}
    roles = monitor.attribute(procs, root=100, fixed={"zookeeper": 110, "bookie-0": 111, "bookie-1": 112,
                                                      "bookie-2": 999})  # 999: gone, no role
    assert {k: sorted(v) for k, v in roles.items()} == {
        "driver": [101], "jvm": [102], "python_workers": [103, 104, 105], "other": [106],
        "zookeeper": [110], "bookie-0": [111], "bookie-1": [112],
    }


def test_a_python_child_of_the_driver_is_not_a_spark_worker() -> None:
    procs = {p.pid: p for p in [_p(10, 1, "python", "harness.py", "--call", "m:f"),
                                _p(11, 10, "python", "-c", "pass")]}
    assert monitor.attribute(procs, root=1, fixed={}) == {"driver": [10], "other": [11]}
    assert monitor.attribute(procs, root=1, fixed={}, is_driver=lambda p: False) == {}


def test_summarise_memory_peaks_of_sum_and_of_largest_process() -> None:
    samples = [
        {"python_workers": {1: 10 * MB, 2: 30 * MB}, "driver": {9: 50 * MB}},
        {"python_workers": {1: 20 * MB, 3: 25 * MB}, "driver": {9: 40 * MB}},  # sum 45 > 40, largest 25 < 30
        {"python_workers": {}, "driver": {9: 60 * MB}},
    ]
    got = monitor.summarise_memory(samples)
    assert list(got) == ["driver", "python_workers"]
    assert got["python_workers"] == monitor.RoleMemory(45.0, 30.0, 3, 2)
    assert got["driver"] == monitor.RoleMemory(60.0, 60.0, 1, 3)


def test_role_order_in_reports() -> None:
    roles = ["bookie-10", "zookeeper", "bookie-2", "python_workers", "driver", "jvm", "zz"]
    assert sorted(roles, key=monitor.role_order) == [
        "driver", "jvm", "python_workers", "zookeeper", "bookie-2", "bookie-10", "zz"]


def test_read_proc_of_this_process_and_of_a_gone_pid(tmp_path: Path) -> None:
    me = monitor.read_proc(os.getpid())
    assert me is not None and me.ppid == os.getppid() and me.rss > 10 * MB
    assert monitor.read_proc(10**9) is None
    pss = monitor.read_pss(os.getpid())
    assert pss is not None and 0 < pss <= me.rss * 1.1  # shared pages count in part
    assert monitor.read_pss(10**9) is None


# -- mntr ----------------------------------------------------------------------------------------------------
MNTR = (
    "zk_version\t3.9.5-293c895a, built on 2026-02-11 20:18 UTC\n"
    "zk_server_state\tstandalone\n"
    "zk_avg_latency\t4.5\n"
    "zk_max_latency\t17\n"
    "zk_packets_received\t1200\n"
    "zk_packets_sent\t1180\n"
    "zk_outstanding_requests\t3\n"
    "zk_znode_count\t5005\n"
    "zk_approximate_data_size\t441000\n"
    "garbage line without a tab\n"
    "zk_odd\t\n"
)


def test_parse_mntr_keeps_numbers_and_skips_the_rest() -> None:
    got = monitor.parse_mntr(MNTR)
    assert got["zk_avg_latency"] == 4.5 and got["zk_max_latency"] == 17.0
    assert got["zk_packets_received"] == 1200.0 and got["zk_znode_count"] == 5005.0
    assert "zk_version" not in got and "zk_server_state" not in got and "zk_odd" not in got
    assert monitor.parse_mntr("") == {} and monitor.parse_mntr("\x00\xff garbage") == {}


def _s(t: float, rec: float, sent: float, max_lat: float = 0.0, outstanding: float = 0.0) -> Any:
    return monitor.MntrSample(t=t, values={
        "zk_packets_received": rec, "zk_packets_sent": sent, "zk_max_latency": max_lat,
        "zk_avg_latency": 1.5, "zk_outstanding_requests": outstanding, "zk_znode_count": 7.0,
        "zk_approximate_data_size": 100.0})


def test_mntr_series_rates_are_deltas_of_the_cumulative_counts() -> None:
    samples = [_s(0.0, 100, 90), _s(1.0, 600, 490, 9, 4), _s(3.0, 1600, 1290, 12, 0)]
    rows = monitor.mntr_series(samples)
    assert [r["packets_received_per_s"] for r in rows] == [500.0, 500.0]
    assert [r["packets_sent_per_s"] for r in rows] == [400.0, 400.0]
    assert [r["outstanding_requests"] for r in rows] == [4.0, 0.0]
    summary = monitor.summarise_mntr(samples)
    assert summary["outstanding_requests"] == {"median": 2.0, "max": 4.0}
    # latencies: mntr's own since the reset, from the last poll
    assert summary["max_latency_ms"] == {"max": 12.0} and summary["avg_latency_ms"] == {"run": 1.5}
    assert "t" not in summary
    assert monitor.mntr_series(samples[:1]) == [] and monitor.summarise_series([]) == {}
    assert monitor.summarise_mntr([]) == {}


def test_probe_summary() -> None:
    s = monitor.ProbeSummary.of(rate=100, scheduled=103, latencies_s=[i / 1000 for i in range(1, 101)],
                                errors={"ConnectionLoss": 2, "unanswered": 1}, seconds=1.0)
    assert (s.answered, s.failures, s.p50_ms, s.p99_ms, s.max_ms) == (100, 3, 50.0, 99.0, 100.0)
    assert s.answered_per_s == 100.0
    none = monitor.ProbeSummary.of(rate=100, scheduled=5, latencies_s=[], errors={"ConnectionLoss": 5},
                                   seconds=0.05)
    assert none.p99_ms is None and none.failures == 5 and none.as_json()["p99_ms"] is None
    with pytest.raises(ValueError, match="rate"):
        monitor.Probe(connect="127.0.0.1:1", path="/", rate=0)


def test_probe_summary_over_a_window_keeps_the_requests_scheduled_in_it() -> None:
    outcomes = [monitor.ProbeOutcome(100.0 + i / 100, 0.002) for i in range(300)]  # 3 s at 100/s, 2 ms
    outcomes[150] = monitor.ProbeOutcome(101.5, 0.9)  # a stall inside the window
    outcomes[10] = monitor.ProbeOutcome(100.1, 5.0)  # start-up, outside it
    outcomes.append(monitor.ProbeOutcome(101.2, None, "ConnectionLoss"))
    outcomes.append(monitor.ProbeOutcome(102.9, None, "unanswered"))
    work = monitor.ProbeSummary.over(outcomes, rate=100, start=101.0, end=102.0)
    assert (work.scheduled, work.answered, work.failures) == (102, 101, 1)
    assert work.max_ms == 900.0 and work.p50_ms == 2.0 and work.errors == {"ConnectionLoss": 1}
    whole = monitor.ProbeSummary.over(outcomes, rate=100, start=100.0, end=103.0)
    assert (whole.scheduled, whole.failures, whole.max_ms) == (302, 2, 5000.0)


def test_zk_targets_parses_the_connect_string() -> None:
    t = monitor.zk_targets("127.0.0.1:21810/chroot", "/ledgers", {"zookeeper": 5})
    assert (t.zk_host, t.zk_port, t.zk_connect, t.probe_path) == (
        "127.0.0.1", 21810, "127.0.0.1:21810/chroot", "/ledgers")


# -- tables --------------------------------------------------------------------------------------------------
def _run(driver: float, workers: float, largest: float, p99: float, mntr_max: float) -> dict[str, Any]:
    return {"monitor": {
        "memory": {"roles": {
            "driver": {"peak_sum_mb": driver, "peak_single_mb": driver, "processes": 1, "samples": 3},
            "python_workers": {"peak_sum_mb": workers, "peak_single_mb": largest, "processes": 3,
                               "samples": 3},
        }},
        "probe": {"p50_ms": 1.0, "p99_ms": p99 * 10, "max_ms": p99 * 20, "failures": 0,  # whole process
                  "work": {"p50_ms": 1.0, "p99_ms": p99, "max_ms": p99 * 2, "failures": 0}},
        "mntr": {"summary": {"max_latency_ms": {"max": mntr_max}, "avg_latency_ms": {"run": 2.0},
                             "outstanding_requests": {"median": 0.0, "max": 7.0},
                             "packets_received_per_s": {"median": 100.0, "max": 1500.0}},
                 "summary_work": {"outstanding_requests": {"median": 0.0, "max": 2.0},
                                  "packets_received_per_s": {"median": 900.0, "max": 1500.0}}},
    }}


def test_tables_give_median_min_max_over_runs_per_side() -> None:
    results = {"b": [_run(300, 700, 170, 20, 50), _run(320, 650, 160, 40, 70), _run(310, 800, 180, 30, 60)],
               "a": [{"seconds": 1.0}]}  # a side without a monitor has no column
    mem = "\n".join(monitor.memory_table(results, {"b": "(b)"}))
    assert "| role | (b) |" in mem
    assert "| driver | 310 (300-320) |" in mem
    assert "| python_workers | 700 (650-800); largest one 170 (160-180) |" in mem
    zk = "\n".join(monitor.zookeeper_table(results, {"b": "(b)"}))
    # the work window's figures, the whole process's p99 apart, the run's latencies from mntr
    assert ("| (b) | 1.0 (1.0-1.0) | 30.0 (20.0-40.0) | 60 (40-80) | 0 (0-0) | 300.0 (200.0-400.0) "
            "| 60 (50-70) | 2.0 (2.0-2.0) | 2 (2-2) | 900 (900-900) | 1,500 (1,500-1,500) |" in zk)
    assert monitor.memory_table({"a": [{"seconds": 1.0}]}, {}) == []
    assert monitor.zookeeper_table({"a": [{"seconds": 1.0}]}, {}) == []


def test_idle_line() -> None:
    idle = {"seconds": 10.0, "load_average": [3.21, 2.0, 1.0],
            "probe": {"p50_ms": 1.234, "p99_ms": 12.5, "max_ms": 30.2, "failures": 0},
            "mntr": {"summary": {"packets_received_per_s": {"median": 104.0, "max": 120.0}}}}
    assert monitor.idle_line(idle) == (
        "Probe with no side running (10 s before the runs, load average 3.2): p50 1.2 ms, p99 12.5 ms, "
        "max 30 ms, 0 failures; ZooKeeper received 104 packets/s.")
    assert monitor.idle_line({"seconds": 10.0, "probe": {"p99_ms": None}}) == (
        "Probe with no side running: no answer.")


# -- harness.compare(monitor=) -------------------------------------------------------------------------------
class _Recorder:
    """Stands in for bench/monitor.Monitor to check the harness's plumbing: started before the side's
    process, stopped after it exited, its summary in the result."""

    def __init__(self, log: list[tuple[str, Any]], side: Any) -> None:
        self.log, self.side = log, side
        log.append(("start", side.name))

    def stop(self, result: dict[str, Any] | None) -> dict[str, Any]:
        self.log.append(("stop", self.side.name))
        assert result is None or result["note"] == self.side.name  # it gets the side's own result
        return {"watched": self.side.name}


def test_compare_starts_a_monitor_around_each_fresh_run() -> None:
    log: list[tuple[str, Any]] = []
    sides = [harness.Side("x", "harness:_probe", {"note": "x"}, "x"),
             harness.Side("y", "harness:_probe", {"note": "y"}, "y")]

    def after(name: str, r: dict[str, Any]) -> None:
        log.append(("ran", name))
        assert r["monitor"] == {"watched": name}  # the summary is in before after_run sees the result

    out = harness.compare(sides, runs=2, monitor=lambda side: _Recorder(log, side), after_run=after)
    assert log == [("start", "x"), ("stop", "x"), ("ran", "x"), ("start", "y"), ("stop", "y"), ("ran", "y"),
                   ("start", "y"), ("stop", "y"), ("ran", "y"), ("start", "x"), ("stop", "x"), ("ran", "x")]
    assert all(r["pid"] != os.getpid() for runs in out.values() for r in runs)


def test_compare_stops_the_monitor_when_the_side_fails() -> None:
    log: list[tuple[str, Any]] = []
    bad = harness.Side("bad", "harness:no_such_function", {}, "bad")
    with pytest.raises(RuntimeError, match="side bad failed"):
        harness.compare([bad], runs=1, monitor=lambda side: _Recorder(log, side))
    assert log == [("start", "bad"), ("stop", "bad")]
