"""Memory and ZooKeeper-load monitoring around one benchmark run (issue 15, items 4 and 5).

Runs in the *parent* bench process, around each side's fresh process (bench/harness.py `compare(monitor=)`),
so it measures without touching the measured process. Three background threads:

- `MemorySampler`: at 1 Hz, the resident set size (RSS, /proc/<pid>/statm) of every process of each *role*:
  `driver` (the side's own Python process, `bench.harness --call`, a direct child of the bench process),
  `jvm` (a Java process under the driver: Spark's JVM), `python_workers` (Python processes under that JVM:
  pyspark.daemon and the workers it forks), `other` (anything else under the driver), and the fixed pids
  the bench names: `bookie-<i>` (each LocalCluster bookie) and `zookeeper` (the embedded ZooKeeper JVM).
  Per role: the peak of the sum over its processes and the peak of its largest single process. A 1 Hz
  sample misses a peak shorter than a second. The RSS of forked workers counts the pages they share with
  pyspark.daemon once per process, so python_workers also gets the peak of their summed proportional set
  size (PSS, /proc/<pid>/smaps_rollup: shared pages divided among their sharers).
- `MntrPoller`: `srst` once when the run starts (the server's statistics then cover this run alone), then
  ZooKeeper's `mntr` four-letter word each second: packets received/sent per second (deltas of its
  cumulative counts, exact), outstanding requests, znode count and approximate data size per sample, and
  the run's average and maximum request latency (mntr's latencies are cumulative since the reset; resetting
  every second instead would lose the requests served between the two commands). Without `srst` on the
  server's whitelist the latencies are since the server started (`stats_reset: false` in the summary).
- `Probe`: its own kazoo session issuing `rate` (100) getData/s on one existing znode, *open loop*: request
  i is sent at t0 + i/rate whatever happened to the earlier ones, and its latency is measured from that
  scheduled time, not from when it was actually sent, so a stalled server (or a stalled sender) shows up
  as latency instead of being hidden by the client waiting (no coordinated omission). Requests that fail,
  or are unanswered `grace_s` after the run, are counted as failures.

The pure parts (percentiles, role attribution, mntr parsing, the summaries, the markdown tables) are tested
in tests/bench/test_bench_monitor.py; the threads against real processes and the real embedded ZooKeeper in
tests/bench/test_bench_monitor_live.py.
"""

from __future__ import annotations

import itertools
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MB = 1024 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")
PROC = Path("/proc")
INTERVAL_S = 1.0
PROBE_RATE = 100.0
MNTR_KEYS = (  # what the poller keeps of mntr's ~200 lines
    "zk_packets_received",
    "zk_packets_sent",
    "zk_avg_latency",
    "zk_max_latency",
    "zk_outstanding_requests",
    "zk_znode_count",
    "zk_approximate_data_size",
    "zk_num_alive_connections",
)


# -- pure ----------------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank q-th percentile (0 < q <= 100) of `values`: a value that was observed."""
    if not values:
        raise ValueError("a percentile needs at least one value")
    if not 0 < q <= 100:
        raise ValueError(f"q must be in (0, 100]: {q}")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass(frozen=True)
class Proc:
    """One process as /proc shows it at one instant."""

    pid: int
    ppid: int
    argv: tuple[str, ...]
    rss: int  # bytes


def _exe(p: Proc) -> str:
    return os.path.basename(p.argv[0]) if p.argv else ""


def is_java(p: Proc) -> bool:
    return _exe(p) == "java"


def is_python(p: Proc) -> bool:
    return _exe(p).startswith("python")


def is_harness_side(p: Proc) -> bool:
    """The side's fresh process, as bench/harness.py's `run_fresh` starts it (`bench.harness --call ...`)."""
    return is_python(p) and "--call" in p.argv


def attribute(
    procs: Mapping[int, Proc],
    *,
    root: int,
    fixed: Mapping[str, int],
    is_driver: Callable[[Proc], bool] = is_harness_side,
) -> dict[str, list[int]]:
    """{role: pids} for one /proc snapshot.

    `fixed` names pids the bench knows (bookie-<i>, zookeeper). A direct child of `root` (the bench process)
    that `is_driver` accepts is a `driver`; under a driver, a Java process is `jvm`, a Python process under a
    JVM is one of `python_workers`, anything else `other`. Processes outside those trees are ignored."""
    roles: dict[str, list[int]] = {}
    for role, pid in fixed.items():
        if pid in procs:
            roles.setdefault(role, []).append(pid)
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    known = set(fixed.values())

    def walk(pid: int, under_jvm: bool) -> None:
        for child in children.get(pid, ()):
            if child in known:
                continue
            p = procs[child]
            if is_java(p):
                role = "jvm"
            elif under_jvm and is_python(p):
                role = "python_workers"
            else:
                role = "other"
            roles.setdefault(role, []).append(child)
            walk(child, under_jvm or role == "jvm")

    for pid in children.get(root, ()):
        if pid in known or not is_driver(procs[pid]):
            continue
        roles.setdefault("driver", []).append(pid)
        walk(pid, False)
    return roles


@dataclass(frozen=True)
class RoleMemory:
    """One role over a run: peak of the sum of its processes' RSS, peak of its largest process."""

    peak_sum_mb: float
    peak_single_mb: float
    processes: int  # distinct pids seen
    samples: int  # samples in which the role had a process

    def as_json(self) -> dict[str, Any]:
        return {"peak_sum_mb": round(self.peak_sum_mb, 1), "peak_single_mb": round(self.peak_single_mb, 1),
                "processes": self.processes, "samples": self.samples}


def summarise_memory(samples: Iterable[Mapping[str, Mapping[int, int]]]) -> dict[str, RoleMemory]:
    """Per role, from samples of {role: {pid: rss bytes}}."""
    peak_sum: dict[str, int] = {}
    peak_one: dict[str, int] = {}
    pids: dict[str, set[int]] = {}
    seen: dict[str, int] = {}
    for sample in samples:
        for role, rss in sample.items():
            if not rss:
                continue
            peak_sum[role] = max(peak_sum.get(role, 0), sum(rss.values()))
            peak_one[role] = max(peak_one.get(role, 0), max(rss.values()))
            pids.setdefault(role, set()).update(rss)
            seen[role] = seen.get(role, 0) + 1
    return {
        role: RoleMemory(peak_sum[role] / MB, peak_one[role] / MB, len(pids[role]), seen[role])
        for role in sorted(peak_sum, key=role_order)
    }


def role_order(role: str) -> tuple[int, int, str]:
    """Report order: driver, jvm, python_workers, other, zookeeper, bookie-0, bookie-1, ..."""
    head = ("driver", "jvm", "python_workers", "other", "zookeeper")
    if role in head:
        return (head.index(role), 0, role)
    if role.startswith("bookie-") and role[7:].isdigit():
        return (len(head), int(role[7:]), role)
    return (len(head) + 1, 0, role)


def parse_mntr(text: str) -> dict[str, float]:
    """mntr's `key<TAB>value` lines, numeric values only (zk_version, zk_server_state are left out)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("\t")
        if not sep:
            continue
        try:
            out[key.strip()] = float(value.strip())
        except ValueError:
            continue
    return out


@dataclass(frozen=True)
class MntrSample:
    """One poll: seconds since the poller started and mntr's kept values."""

    t: float
    values: Mapping[str, float]


def mntr_series(samples: Sequence[MntrSample]) -> list[dict[str, float]]:
    """Per-poll rows from the second poll on: packets received/sent per second (the delta of mntr's
    cumulative counts to the previous poll), outstanding requests, znodes, approximate data size."""
    rows: list[dict[str, float]] = []
    for prev, s in itertools.pairwise(samples):
        span = s.t - prev.t
        if span <= 0:
            continue
        v, pv = s.values, prev.values
        rows.append({
            "t": round(s.t, 2),
            "packets_received_per_s": (v.get("zk_packets_received", 0.0) - pv.get("zk_packets_received", 0.0))
            / span,
            "packets_sent_per_s": (v.get("zk_packets_sent", 0.0) - pv.get("zk_packets_sent", 0.0)) / span,
            "outstanding_requests": v.get("zk_outstanding_requests", 0.0),
            "znode_count": v.get("zk_znode_count", 0.0),
            "approximate_data_size": v.get("zk_approximate_data_size", 0.0),
        })
    return rows


def summarise_series(rows: Sequence[Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """{metric: {median, max}} over the rows (the `t` column aside)."""
    if not rows:
        return {}
    return {
        key: {"median": statistics.median(r[key] for r in rows), "max": max(r[key] for r in rows)}
        for key in rows[0]
        if key != "t"
    }


def summarise_mntr(samples: Sequence[MntrSample]) -> dict[str, dict[str, float]]:
    """`summarise_series` of the rows, plus the latencies of the last poll: mntr's maximum and average since
    the reset (the run so far), as `max_latency_ms.max` and `avg_latency_ms.run`."""
    out = summarise_series(mntr_series(samples))
    if samples:
        last = samples[-1].values
        if "zk_max_latency" in last:
            out["max_latency_ms"] = {"max": last["zk_max_latency"]}
        if "zk_avg_latency" in last:
            out["avg_latency_ms"] = {"run": last["zk_avg_latency"]}
    return out


@dataclass(frozen=True)
class ProbeOutcome:
    """One probe request: when it was scheduled (wall clock, s), and its latency from then or its error."""

    due: float
    latency_s: float | None
    error: str | None = None


@dataclass(frozen=True)
class ProbeSummary:
    """The probe over one run: latencies in ms from each request's scheduled send time."""

    rate: float
    scheduled: int
    answered: int
    failures: int
    seconds: float
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    errors: Mapping[str, int]

    @classmethod
    def of(cls, *, rate: float, scheduled: int, latencies_s: Sequence[float], errors: Mapping[str, int],
           seconds: float) -> ProbeSummary:
        ms = [x * 1000 for x in latencies_s]
        return cls(
            rate=rate,
            scheduled=scheduled,
            answered=len(ms),
            failures=sum(errors.values()),
            seconds=seconds,
            p50_ms=percentile(ms, 50) if ms else None,
            p99_ms=percentile(ms, 99) if ms else None,
            max_ms=max(ms) if ms else None,
            errors=dict(errors),
        )

    @classmethod
    def over(cls, outcomes: Iterable[ProbeOutcome], *, rate: float, start: float, end: float) -> ProbeSummary:
        """The requests scheduled within [start, end] (wall-clock seconds)."""
        mine = [o for o in outcomes if start <= o.due <= end]
        errors: dict[str, int] = {}
        for o in mine:
            if o.error is not None:
                errors[o.error] = errors.get(o.error, 0) + 1
        return cls.of(rate=rate, scheduled=len(mine), errors=errors, seconds=end - start,
                      latencies_s=[o.latency_s for o in mine if o.latency_s is not None])

    @property
    def answered_per_s(self) -> float:
        return self.answered / self.seconds if self.seconds > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "rate": self.rate, "scheduled": self.scheduled, "answered": self.answered,
            "failures": self.failures, "seconds": round(self.seconds, 3),
            "answered_per_s": round(self.answered_per_s, 1), "p50_ms": self.p50_ms, "p99_ms": self.p99_ms,
            "max_ms": self.max_ms, "errors": dict(self.errors),
        }


# -- /proc ---------------------------------------------------------------------------------------------------


def read_proc(pid: int, proc: Path = PROC) -> Proc | None:
    """One process from /proc, or None if it went away meanwhile (or is a zombie: no memory left)."""
    base = proc / str(pid)
    try:
        stat = (base / "stat").read_text()
        statm = (base / "statm").read_text()
        argv = (base / "cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # the command name in (...) may hold spaces and ')'
    if fields[0] == "Z":
        return None
    args = tuple(a.decode("utf-8", "replace") for a in argv.split(b"\0") if a)
    return Proc(pid=pid, ppid=int(fields[1]), argv=args, rss=int(statm.split()[1]) * PAGE)


def read_pss(pid: int, proc: Path = PROC) -> int | None:
    """Proportional set size in bytes (/proc/<pid>/smaps_rollup: shared pages divided among their sharers),
    or None if the process went away or the kernel does not say."""
    try:
        text = (proc / str(pid) / "smaps_rollup").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return None


def read_procs(proc: Path = PROC) -> dict[int, Proc]:
    """Every process /proc lists now."""
    out: dict[int, Proc] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            p = read_proc(int(entry.name), proc)
            if p is not None:
                out[p.pid] = p
    return out


# -- the threads ---------------------------------------------------------------------------------------------


class _Ticker:
    """A daemon thread calling `tick` every `interval_s` (on a fixed schedule) until stopped."""

    def __init__(self, name: str, interval_s: float) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.error: BaseException | None = None
        self.started = 0.0

    def start(self) -> None:
        self.started = time.monotonic()
        self._thread.start()

    def _run(self) -> None:
        n = 0
        try:
            while True:
                self.tick()
                n += 1
                if self._stop.wait(max(0.0, self.started + n * self.interval_s - time.monotonic())):
                    break
        except BaseException as exc:  # reported by stop(): a monitor that died says so
            self.error = exc

    def tick(self) -> None:
        raise NotImplementedError

    def halt(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=30)


class MemorySampler(_Ticker):
    """RSS per role at 1 Hz (see the module doc). `fixed` names known pids: {"bookie-0": pid, ...}."""

    def __init__(self, *, root: int | None = None, fixed: Mapping[str, int] | None = None,
                 is_driver: Callable[[Proc], bool] = is_harness_side, interval_s: float = INTERVAL_S,
                 proc: Path = PROC) -> None:
        super().__init__("bench-memory", interval_s)
        self.root = os.getpid() if root is None else root
        self.is_driver = is_driver
        self.fixed = dict(fixed or {})
        self.proc = proc
        self.samples: list[dict[str, dict[int, int]]] = []
        self.workers_pss: list[int] = []  # per sample: python_workers' PSS sum (their RSS double-counts)
        self.times: list[float] = []

    def tick(self) -> None:
        procs = read_procs(self.proc)
        roles = attribute(procs, root=self.root, fixed=self.fixed, is_driver=self.is_driver)
        self.times.append(time.monotonic() - self.started)
        # PSS first: a reader that sees sample i (another thread) must also find workers_pss[i]
        self.workers_pss.append(sum(read_pss(pid, self.proc) or 0 for pid in roles.get("python_workers", ())))
        self.samples.append({role: {pid: procs[pid].rss for pid in pids} for role, pids in roles.items()})

    def stop(self) -> dict[str, Any]:
        self.halt()
        summary = summarise_memory(self.samples)
        series: dict[str, list[float]] = {"t": [round(t, 2) for t in self.times]}
        for role in summary:
            series[role] = [round(sum(s.get(role, {}).values()) / MB, 1) for s in self.samples]
        roles = {role: m.as_json() for role, m in summary.items()}
        if "python_workers" in roles and any(self.workers_pss):
            roles["python_workers"]["peak_pss_sum_mb"] = round(max(self.workers_pss) / MB, 1)
        return {
            "interval_s": self.interval_s,
            "samples": len(self.samples),
            "roles": roles,
            "series_mb": series,
            "error": None if self.error is None else repr(self.error),
        }


class MntrPoller(_Ticker):
    """ZooKeeper's mntr every second (see the module doc)."""

    def __init__(self, *, host: str, port: int, interval_s: float = INTERVAL_S,
                 timeout_s: float = 2.0) -> None:
        super().__init__("bench-mntr", interval_s)
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self.samples: list[MntrSample] = []
        self.unanswered = 0
        self.stats_reset = False
        self.wall0 = 0.0

    def _word(self, word: str) -> str:
        from bkaudit.zk.server import four_letter_word

        return four_letter_word(self.host, self.port, word, self.timeout_s)

    def start(self) -> None:
        self.stats_reset = "reset" in self._word("srst").lower()
        super().start()
        self.wall0 = time.time() - (time.monotonic() - self.started)

    def tick(self) -> None:
        values = parse_mntr(self._word("mntr"))
        if "zk_packets_received" not in values:  # a stalled or dead server: no answer within timeout_s
            self.unanswered += 1
            return
        self.samples.append(MntrSample(t=time.monotonic() - self.started,
                                       values={k: values[k] for k in MNTR_KEYS if k in values}))

    def stop(self, window: Sequence[float] | None = None) -> dict[str, Any]:
        """The summary over the run; with `window` ([start, end], wall clock) also `summary_work`: the polls
        within it (packets/s, outstanding; the latencies are the run's up to the window's last poll)."""
        self.halt()
        if self.error is None:
            self.tick()  # the run's end: a run shorter than the interval still gets a delta
        rows = mntr_series(self.samples)
        work: dict[str, Any] = {}
        if window is not None:
            lo, hi = window[0] - self.wall0, window[1] - self.wall0
            work = {"summary_work": summarise_mntr([s for s in self.samples if lo <= s.t <= hi])}
        return {
            "interval_s": self.interval_s,
            "stats_reset": self.stats_reset,
            "polls": len(self.samples),
            "unanswered": self.unanswered,
            "summary": summarise_mntr(self.samples),
            "series": rows,
            "error": None if self.error is None else repr(self.error),
            **work,
        }


class Probe:
    """`rate` getData/s on `path` from its own kazoo session, open loop: request i is sent at t0 + i/rate
    whatever happened to the earlier ones and its latency runs from that scheduled time, so a stalled server
    shows up as latency, not as a probe that quietly slowed down (see the module doc)."""

    def __init__(self, *, connect: str, path: str, rate: float = PROBE_RATE, grace_s: float = 10.0,
                 session_timeout_s: float = 10.0) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0: {rate}")
        self.connect, self.path, self.rate, self.grace_s = connect, path, rate, grace_s
        self.session_timeout_s = session_timeout_s
        self._lock = threading.Lock()
        self._outcomes: list[ProbeOutcome] = []
        self._pending: dict[int, float] = {}  # request number: its due time (wall clock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._send, name="bench-probe", daemon=True)
        self._zk: Any = None
        self._t0 = 0.0  # perf_counter at the start
        self._wall0 = 0.0  # time.time() at the same instant: due times are reported on the wall clock

    def start(self) -> None:
        from bkaudit.config import ZkSettings
        from bkaudit.zk.client import connect

        self._zk = connect(ZkSettings(connect=self.connect, session_timeout_s=self.session_timeout_s))
        if self._zk.exists(self.path) is None:
            from bkaudit.zk.client import close

            close(self._zk)
            raise ValueError(f"the probe's znode {self.path} does not exist")
        self._t0, self._wall0 = time.perf_counter(), time.time()
        self._thread.start()

    def _send(self) -> None:
        i = 0
        while True:
            due = self._t0 + i / self.rate
            wait = due - time.perf_counter()
            if wait > 0 and self._stop.wait(wait):
                break
            if self._stop.is_set():
                break
            with self._lock:
                self._pending[i] = due
            try:
                result = self._zk.get_async(self.path)
            except Exception as exc:  # kazoo refuses at once (closed client)
                self._done(i, None, exc)
            else:
                result.rawlink(lambda r, i=i: self._done(i, r, None))
            i += 1

    def _done(self, i: int, result: Any, exc: BaseException | None) -> None:
        now = time.perf_counter()
        if exc is None and not result.successful():
            exc = result.exception
        with self._lock:
            due = self._pending.pop(i)
            wall = self._wall0 + (due - self._t0)
            self._outcomes.append(ProbeOutcome(wall, now - due if exc is None else None,
                                               None if exc is None else type(exc).__name__))

    def stop(self, window: Sequence[float] | None = None) -> dict[str, Any]:
        """Stop sending, wait up to `grace_s` for answers (the rest count as failures), close the session.

        The summary covers every request; with `window` ([start, end], wall clock, the side's work as it
        timed it) also, as `work`, the requests scheduled within it."""
        from bkaudit.zk.client import close

        self._stop.set()
        self._thread.join(timeout=30)
        end = self._wall0 + (time.perf_counter() - self._t0)
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending:
                    break
            time.sleep(0.05)
        with self._lock:
            outcomes = list(self._outcomes)
            outcomes += [ProbeOutcome(self._wall0 + (due - self._t0), None, "unanswered")
                         for due in self._pending.values()]
        close(self._zk)
        out = ProbeSummary.over(outcomes, rate=self.rate, start=self._wall0, end=end).as_json()
        if window is not None:
            work = ProbeSummary.over(outcomes, rate=self.rate, start=window[0], end=window[1])
            out["work"] = work.as_json()
        return out


# -- one run -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Targets:
    """What a bench monitors: the processes it knows and its ZooKeeper (host, port, a znode for the probe)."""

    fixed: Mapping[str, int]
    zk_host: str | None = None
    zk_port: int | None = None
    zk_connect: str | None = None
    probe_path: str | None = None


class Monitor:
    """Sampler, mntr poller and probe around one run: `start()`, the run, `stop()` -> the JSON summary."""

    def __init__(self, targets: Targets, *, probe_rate: float = PROBE_RATE) -> None:
        self.memory = MemorySampler(fixed=targets.fixed)
        self.mntr = (MntrPoller(host=targets.zk_host, port=targets.zk_port)
                     if targets.zk_host and targets.zk_port else None)
        self.probe = (Probe(connect=targets.zk_connect, path=targets.probe_path, rate=probe_rate)
                      if targets.zk_connect and targets.probe_path else None)

    def start(self) -> Monitor:
        """Start every part; if one cannot start (ZooKeeper unreachable, no probe znode), stop the others
        and raise: a run is not measured half-watched."""
        self.memory.start()
        try:
            if self.mntr is not None:
                self.mntr.start()
            if self.probe is not None:
                self.probe.start()
        except BaseException:
            self.memory.halt()
            if self.mntr is not None:
                self.mntr.halt()
            raise
        return self

    def stop(self, result: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Every part's summary; a `window` in the side's `result` ([start, end] of its work, wall clock)
        adds the ZooKeeper figures of the work alone (start-up excluded)."""
        window = result.get("window") if result is not None else None
        out: dict[str, Any] = {"memory": self.memory.stop()}
        if self.probe is not None:
            out["probe"] = self.probe.stop(window)
        if self.mntr is not None:
            out["mntr"] = self.mntr.stop(window)
        for part, summary in out.items():
            if summary.get("error"):
                print(f"  monitor: the {part} thread failed: {summary['error']}", file=sys.stderr, flush=True)
        return out


def idle_reference(targets: Targets, *, seconds: float = 10.0) -> dict[str, Any]:
    """The monitor for `seconds` with no side running: what the probe's latency is on this machine when
    nothing loads ZooKeeper (the probe shares the CPUs with everything else; read its p99 against this)."""
    watch = Monitor(targets).start()
    time.sleep(seconds)
    out = watch.stop()
    out["seconds"] = seconds
    out["load_average"] = list(os.getloadavg())
    return out


def idle_line(idle: Mapping[str, Any]) -> str:
    """One markdown line for `idle_reference`'s result."""
    probe = idle.get("probe", {})
    packets = idle.get("mntr", {}).get("summary", {}).get("packets_received_per_s", {}).get("median")
    p50, p99, top = (probe.get(k) for k in ("p50_ms", "p99_ms", "max_ms"))
    if p99 is None:
        return "Probe with no side running: no answer."
    return (f"Probe with no side running ({idle['seconds']:g} s before the runs, load average "
            f"{idle['load_average'][0]:.1f}): p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {top:.0f} ms, "
            f"{probe.get('failures', 0)} failures"
            + (f"; ZooKeeper received {packets:,.0f} packets/s." if packets is not None else "."))


def zk_targets(connect: str, probe_path: str, fixed: Mapping[str, int]) -> Targets:
    """Targets for a single-server connect string `host:port`."""
    host, _, port = connect.split("/", 1)[0].split(",")[0].rpartition(":")
    return Targets(fixed=fixed, zk_host=host, zk_port=int(port), zk_connect=connect, probe_path=probe_path)


def monitor_factory(targets: Callable[[], Targets]) -> Callable[[Any], Monitor]:
    """For harness.compare(monitor=): a started Monitor per run, its targets read when the run starts (bookie
    pids change when the bench restarts them before a run)."""
    return lambda _side: Monitor(targets()).start()


# -- report --------------------------------------------------------------------------------------------------


def _spread(values: Sequence[float], digits: int = 0) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:,.{digits}f}"
    return f"{med:,.{digits}f} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"


def memory_table(results: Mapping[str, Sequence[Mapping[str, Any]]], labels: Mapping[str, str]) -> list[str]:
    """Markdown: peak RSS (MB) per role and side, median over runs (min-max); python_workers gives the peak
    of the sum of concurrent workers, of the largest single one, and of their PSS sum."""
    roles: set[str] = set()
    for runs in results.values():
        for r in runs:
            roles.update(r.get("monitor", {}).get("memory", {}).get("roles", {}))
    if not roles:
        return []
    ordered = sorted(roles, key=role_order)
    sides = [s for s in results if any("monitor" in r for r in results[s])]
    lines = [
        "Peak RSS per role (MB, sampled at 1 Hz from the bench process; median over runs (min-max)):",
        "",
        "| role | " + " | ".join(labels.get(s, s) for s in sides) + " |",
        "| --- |" + " ---: |" * len(sides),
    ]
    for role in ordered:
        cells = []
        for s in sides:
            got = [r["monitor"]["memory"]["roles"][role] for r in results[s]
                   if role in r.get("monitor", {}).get("memory", {}).get("roles", {})]
            cell = _spread([g["peak_sum_mb"] for g in got])
            if role in ("python_workers", "other") and got:
                cell += f"; largest one {_spread([g['peak_single_mb'] for g in got])}"
            pss = [g["peak_pss_sum_mb"] for g in got if "peak_pss_sum_mb" in g]
            if pss:
                cell += f"; PSS sum {_spread(pss)}"
            cells.append(cell)
        lines.append(f"| {role} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def zookeeper_table(
    results: Mapping[str, Sequence[Mapping[str, Any]]], labels: Mapping[str, str]
) -> list[str]:
    """Markdown: per side, the probe's p50/p99/max/failures and mntr's packets/s and outstanding requests
    during the side's work (its `window`; the whole process if it gave none), the probe's p99 over the whole
    process (start-up included), and mntr's average and maximum latency over the run."""
    sides = [s for s in results if any("probe" in r.get("monitor", {}) or "mntr" in r.get("monitor", {})
                                       for r in results[s])]
    if not sides:
        return []
    lines = [
        "ZooKeeper under the run (open-loop probe of 100 getData/s from its own session, latency from each "
        "request's scheduled time; `mntr` each second after one `srst`; during the work unless the column "
        "says otherwise; median over runs (min-max)):",
        "",
        "| side | probe p50 ms | probe p99 ms | probe max ms | probe failures "
        "| probe p99 ms, whole process | mntr max latency ms, run | mntr avg latency ms, run "
        "| max outstanding | packets received/s, median | packets received/s, max |",
        "| --- |" + " ---: |" * 10,
    ]
    for s in sides:
        mons = [r["monitor"] for r in results[s] if "monitor" in r]

        def probe(key: str, work: bool = True, mons: list[Any] = mons) -> list[float]:
            got = [m["probe"].get("work", m["probe"]) if work else m["probe"] for m in mons if "probe" in m]
            return [float(g[key]) for g in got if g.get(key) is not None]

        def mntr(metric: str, stat: str, mons: list[Any] = mons) -> list[float]:
            got = [m["mntr"].get("summary_work") or m["mntr"]["summary"] for m in mons if "mntr" in m]
            if metric.endswith("latency_ms"):  # the run's, from the last poll
                got = [m["mntr"]["summary"] for m in mons if "mntr" in m]
            return [float(g[metric][stat]) for g in got if metric in g]

        lines.append(
            f"| {labels.get(s, s)} | {_spread(probe('p50_ms'), 1)} | {_spread(probe('p99_ms'), 1)} | "
            f"{_spread(probe('max_ms'), 0)} | {_spread(probe('failures'))} | "
            f"{_spread(probe('p99_ms', work=False), 1)} | "
            f"{_spread(mntr('max_latency_ms', 'max'))} | {_spread(mntr('avg_latency_ms', 'run'), 1)} | "
            f"{_spread(mntr('outstanding_requests', 'max'))} | "
            f"{_spread(mntr('packets_received_per_s', 'median'))} | "
            f"{_spread(mntr('packets_received_per_s', 'max'))} |"
        )
    lines.append("")
    return lines
