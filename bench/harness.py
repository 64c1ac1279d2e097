"""The one benchmark harness (issue 15): fresh processes, alternated sides, medians with min and max.

Every benchmark in bench/ that compares bkaudit with a baseline runs its sides through `compare`:

- each run of each side is a FRESH Python process (`python -m bench.harness --call module:function ...`), so
  nothing is warmed by an earlier run in the same process (JVM, Spark session, Python imports, caches);
- two times per run: `wall_s`, spawn to exit as the parent sees it (start-up included: interpreter, imports,
  Spark session), and `seconds`, the work alone as the side timed it inside its process (no start-up); a side
  that also returns `done_at` (wall clock when its answer was known) gets `to_result_s`, spawn to answer,
  which leaves out what it does after (stopping a Spark session or a JVM);
- sides alternate: A B, B A, A B, ... (`alternation`), so machine load drifts over both alike;
- `runs` runs of each side (default 3); each measure is reported as median with min and max (`Spread`);
- a ratio is median / median (`ratio`), never best of one side against one run of the other;
- a `before_run` hook lets a bench reset shared state (restart bookies: no side inherits warm caches).

Results go to JSON (`write_json`, default bench/results/<name>-<UTC stamp>.json) and to markdown table
rows (`markdown_row`). The pure parts (Spread, alternation, ratio) are tested in
tests/bench/test_bench_harness.py.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"
DEFAULT_RUNS = 3


# -- pure ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """Median, min and max of one measure over the runs of one side."""

    median: float
    low: float
    high: float
    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        xs = tuple(float(v) for v in values)
        if not xs:
            raise ValueError("a spread needs at least one value")
        return cls(statistics.median(xs), min(xs), max(xs), xs)

    def cell(self, digits: int = 2) -> str:
        """`median (min-max)`, as every table in docs/performance.md shows a measure."""
        return f"{self.median:,.{digits}f} ({self.low:,.{digits}f}-{self.high:,.{digits}f})"

    def rate_cell(self, work: float) -> str:
        """`work / seconds` as median (min-max); the fastest run gives the max rate."""
        return f"{work / self.median:,.0f} ({work / self.high:,.0f}-{work / self.low:,.0f})"

    def as_json(self) -> dict[str, Any]:
        return {"median": self.median, "min": self.low, "max": self.high, "values": list(self.values)}


def alternation(sides: Sequence[str], runs: int) -> list[tuple[int, str]]:
    """(run, side) in execution order: the side order reverses every run (A B, B A, A B, ...)."""
    if runs < 1:
        raise ValueError("runs must be >= 1")
    if len(set(sides)) != len(sides) or not sides:
        raise ValueError(f"sides must be distinct and non-empty: {list(sides)}")
    order: list[tuple[int, str]] = []
    for run in range(runs):
        for side in sides if run % 2 == 0 else tuple(reversed(sides)):
            order.append((run, side))
    return order


def ratio(baseline: Spread, ours: Spread) -> float:
    """How many times faster `ours` is than `baseline`, from seconds: median / median (> 1: ours faster)."""
    return baseline.median / ours.median


def markdown_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


# -- running sides -------------------------------------------------------------------------------------------


class Monitoring(Protocol):
    """A watcher started around one run (bench/monitor.py's Monitor): `stop` gets the side's result (None if
    it failed; its `window`, [start, end] of the work on the wall clock, if it gives one) and returns the
    watcher's JSON summary."""

    def stop(self, result: Mapping[str, Any] | None) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Side:
    """One side of a comparison: `function` (`module:function` in bench/) called with `kwargs` in a fresh
    process; it returns a JSON-able dict with at least `seconds` (its work, timed inside the process)."""

    name: str
    function: str
    kwargs: Mapping[str, Any]
    label: str


def run_fresh(side: Side, *, timeout_s: float = 3600.0, log_to: Path | None = None) -> dict[str, Any]:
    """One run of `side` in a new interpreter; adds `wall_s` (spawn to exit, start-up included).
    `log_to`: where its stderr goes as well (a kept run's log, to diagnose it afterwards)."""
    with tempfile.TemporaryDirectory(prefix="bkaudit-bench-run-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            "-m",
            "bench.harness",
            "--call",
            side.function,
            "--kwargs",
            json.dumps(dict(side.kwargs)),
            "--out",
            str(out),
        ]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        spawned_at = time.time()
        t0 = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
        wall = time.perf_counter() - t0
        if log_to is not None:
            log_to.parent.mkdir(parents=True, exist_ok=True)
            log_to.write_text(done.stderr, encoding="utf-8")
        if done.returncode != 0:
            raise RuntimeError(
                f"side {side.name} failed (exit {done.returncode}):\n{done.stderr[-4000:]}"
            )
        result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    result["wall_s"] = wall
    if "done_at" in result:
        result["to_result_s"] = float(result["done_at"]) - spawned_at
    return result


def compare(
    sides: Sequence[Side],
    *,
    runs: int = DEFAULT_RUNS,
    before_run: Callable[[Side], Side] | None = None,
    after_run: Callable[[str, dict[str, Any]], None] | None = None,
    timeout_s: float = 3600.0,
    monitor: Callable[[Side], Monitoring] | None = None,
    log_dir: Path | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Every side `runs` times, alternated, each in a fresh process: {side name: [result per run]}.

    `before_run` (untimed) resets shared state and returns the side to run, e.g. with a fresh warehouse;
    `after_run` checks a result (raise to stop: a wrong answer is not a measurement); `timeout_s` bounds
    one run of a side; `monitor` starts a watcher in this (parent) process just before the side's process
    and stops it when that exits, its summary going into the result as `monitor` (bench/monitor.py: memory
    per process role, ZooKeeper load); `log_dir`: each run's stderr kept there as `run-N-<side>.log`."""
    by_name = {s.name: s for s in sides}
    results: dict[str, list[dict[str, Any]]] = {s.name: [] for s in sides}
    for run, name in alternation([s.name for s in sides], runs):
        side = by_name[name] if before_run is None else before_run(by_name[name])
        log_to = None if log_dir is None else log_dir / f"run-{run}-{name}.log"
        r = run_watched(side, timeout_s=timeout_s, monitor=monitor, log_to=log_to)
        if after_run is not None:
            after_run(name, r)
        results[name].append(r)
        print(
            f"  run {run + 1} {name}: {r['seconds']:.2f}s inside, {r['wall_s']:.2f}s with start-up",
            flush=True,
        )
    return results


def spreads(results: list[dict[str, Any]], key: str) -> Spread:
    return Spread.of(r[key] for r in results)


# -- reporting -----------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "kernel": f"{platform.system()} {platform.release()}",
        "load_average": list(os.getloadavg()),
        "commit": commit(),
    }


def commit() -> str | None:
    """The checkout's commit (with "+dirty" when code differs from it), so a result names the code it
    measured; None outside a git checkout."""
    try:
        def git(*args: str) -> str:
            done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True,
                                  timeout=10)
            return done.stdout.strip()

        head = git("rev-parse", "--short=12", "HEAD")
        # results and docs change while benchmarks run: only code makes a measurement "dirty"
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results", ":!docs")
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def machine_line(start: Mapping[str, Any], end: Mapping[str, Any]) -> str:
    def load(m: Mapping[str, Any]) -> str:
        return ", ".join(f"{x:.1f}" for x in m["load_average"])

    code = f" Code at {start['commit']}." if start.get("commit") else ""
    return (
        f"Machine: {start['cpus']} CPUs, {start['python']}, {start['kernel']}; load average {load(start)} at "
        f"the start, {load(end)} at the end (a shared, loaded machine: compare ratios within one run).{code}"
    )


def write_json(name: str, payload: Mapping[str, Any], path: str | None = None) -> Path:
    """`payload` to `path`, or bench/results/<name>-<UTC stamp>.json; returns the path written."""
    if path:
        target = Path(path)
    else:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        target = RESULTS / f"{name}-{stamp}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(payload, indent=2, sort_keys=True, default=_jsonable)
    target.write_text(text + "\n", encoding="utf-8")
    return target


def _jsonable(value: Any) -> Any:
    if isinstance(value, Spread):
        return value.as_json()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON-able: {type(value).__name__}")


def run_watched(
    side: Side, *, timeout_s: float = 3600.0, monitor: Callable[[Side], Monitoring] | None = None,
    log_to: Path | None = None,
) -> dict[str, Any]:
    """`run_fresh`, with `monitor` (if any) watching from this process while the side's process runs."""
    if monitor is None:
        return run_fresh(side, timeout_s=timeout_s, log_to=log_to)
    watching = monitor(side)
    try:
        r = run_fresh(side, timeout_s=timeout_s, log_to=log_to)
    except BaseException:
        watching.stop(None)
        raise
    r["monitor"] = watching.stop(r)
    return r


def zookeeper_heap_mb(ledgers: int) -> int:
    """The embedded ZooKeeper's heap for a benchmark of `ledgers` ledger znodes: the 512 MiB default up to
    100,000, then ~2 KiB per znode (1M bench znodes hold ~310 MB of data, `mntr`'s approximate_data_size, plus
    the DataTree's per-node objects). The default server collects garbage until sessions expire at 1M."""
    return 512 if ledgers <= 100_000 else 512 + ledgers // 500


def cpu_ticks(pid: int | None) -> int:
    """User + system CPU ticks of a process (all its threads), from /proc; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (OSError, TypeError):
        return 0
    return int(fields[11]) + int(fields[12])


def machine_busy_ticks() -> int:
    """CPU ticks the whole machine spent on anything but idle and iowait, from /proc/stat."""
    cpu = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    return sum(int(x) for x in cpu) - int(cpu[3]) - int(cpu[4])


class CpuMeter:
    """Where the CPU of one run went: a cluster's bookies, its ZooKeeper, and the rest of the machine (the
    side's own processes, plus whatever else ran), read from /proc between `start` and `stop` (both
    untimed). `cluster`: a bkaudit.cluster.local.LocalCluster, read at each call (bookies restart)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.at: tuple[int, int, int] = (0, 0, 0)

    def _now(self) -> tuple[int, int, int]:
        bookies = sum(cpu_ticks(b.pid) for b in self.cluster.bookies)
        zk = cpu_ticks((self.cluster.zookeeper or {}).get("pid"))
        return bookies, zk, machine_busy_ticks()

    def start(self) -> None:
        self.at = self._now()

    def stop(self) -> dict[str, float]:
        hz = os.sysconf("SC_CLK_TCK")
        bookies, zk, machine = (b - a for a, b in zip(self.at, self._now(), strict=True))
        return {"bookies_s": bookies / hz, "zookeeper_s": zk / hz, "machine_s": machine / hz,
                "rest_s": (machine - bookies - zk) / hz}


def _probe(note: str) -> dict[str, Any]:
    """A trivial side for the harness's own test: which process ran it (and it says so on stderr)."""
    t0 = time.perf_counter()
    print(f"probe {note} in {os.getpid()}", file=sys.stderr)
    return {"pid": os.getpid(), "note": note, "seconds": time.perf_counter() - t0}


def _call(function: str, kwargs: dict[str, Any], out: str) -> int:
    """Child side of `run_fresh`: import bench.<module>, call the function, write its dict as JSON."""
    module_name, _, func_name = function.partition(":")
    result = getattr(importlib.import_module(f"bench.{module_name}"), func_name)(**kwargs)
    Path(out).write_text(json.dumps(result, default=_jsonable), encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run one benchmark side in this (fresh) process")
    parser.add_argument("--call", required=True, help="module:function, module in bench/")
    parser.add_argument("--kwargs", default="{}", help="JSON object of keyword arguments")
    parser.add_argument("--out", required=True, help="where the side's JSON result goes")
    args = parser.parse_args(argv)
    return _call(args.call, json.loads(args.kwargs), args.out)


if __name__ == "__main__":
    sys.exit(main())
