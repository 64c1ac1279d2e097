"""One run of the demo: its steps on a local cluster, what each is expected to show, the summary it writes
(the story is in bkaudit.demo's docstring)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import click

from bkaudit.cli_common import json_default
from bkaudit.demo.progress import Progress
from bkaudit.demo.workload import Written, plan, write_ledgers, write_pinned

BOOKIES, RACKS = 6, 3
DURABILITY = ("no_replica", "below_ack_quorum", "below_write_quorum")
STEPS = (
    "start a local cluster: ZooKeeper + 6 bookies on 3 racks",
    "write ledgers",
    "snapshot + check: expect a clean cluster",
    "inject faults",
    "snapshot + check: find the damage, publish it to the under-replication queue",
    "auto-recovery: drain the under-replication queue",
    "lifecycle: add a bookie, drain an old one until Drained",
    "snapshot + check: expect durability clean again",
    "write the HTML report",
    "stop the cluster",
)
EXPLAIN = {
    "no_replica": "entries with no copy left anywhere: data loss",
    "below_ack_quorum": "entries with fewer copies than the writer was promised (ack quorum)",
    "below_write_quorum": "entries missing some of their write-quorum copies: re-replication restores them",
    "ledger_unverifiable": "a bookie that must hold entries of the ledger did not answer (here: the killed "
                           "bookie, gone from ZooKeeper), so its copies could not be counted",
    "bookie_unreachable_but_registered": "a bookie still registered in ZooKeeper does not answer",
    "placement_fail": "every copy on one rack: losing that rack loses the ledger; auto-recovery repairs "
                      "durability, not placement (BookKeeper only relocates with BP-54, publish_placement)",
    "placement_soft": "placement meets the soft rule only (fewer racks than desired)",
    "extra_entries": "copies a bookie still holds although the ledger's metadata no longer assigns them to "
                     "it (left behind when recovery changed an ensemble); harmless, BookKeeper's garbage "
                     "collector reclaims the space",
    "underreplicated_too_long": "a ledger stayed in the under-replication queue past the grace period",
    "metadata_unparseable": "a ledger znode bookkeeper cannot decode",
}


@dataclass
class Expectation:
    name: str
    ok: bool
    detail: str


class Demo:
    """One run of the demo in `directory` (cluster/, warehouse/, report/, bkaudit.toml, demo.json)."""

    def __init__(self, directory: Path, ledgers: int, *, keep: bool, seed: int, out: TextIO) -> None:
        self.dir, self.ledgers, self.keep, self.seed = directory, ledgers, keep, seed
        self.progress = Progress(out, len(STEPS))
        self.warehouse = str(directory / "warehouse")
        self.report_dir = directory / "report"
        self.config_path = directory / "bkaudit.toml"
        self.cluster: Any = None
        self.spark: Any = None
        self.settings: Any = None
        self.expectations: list[Expectation] = []
        self.interrupted = False
        self.runs: dict[str, dict[str, Any]] = {}
        self.summary: dict[str, Any] = {"dir": str(directory), "warehouse": self.warehouse,
                                        "config": str(self.config_path)}

    def expect(self, name: str, ok: bool, detail: str) -> bool:
        self.expectations.append(Expectation(name, bool(ok), detail))
        mark = click.style("ok  ", fg="green") if ok else click.style("FAIL", fg="red", bold=True)
        self.progress.say(f"{mark} {name}: {detail}")
        return bool(ok)

    # -- driver ------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        t0 = time.monotonic()
        spark_future: Future[Any] | None = None
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="demo-spark")
        try:
            spark_future = pool.submit(self._start_spark)  # the JVM starts while the cluster does
            self.step_cluster()
            written = self.step_write()
            self.spark = spark_future.result()
            self.step_check("baseline", "demo-1-baseline", expect_clean=True, written=written)
            faults = self.step_faults()
            self.step_check("faults", "demo-2-faults", publish=True, faults=faults)
            self.step_recover()
            faults["drained"] = self.step_drain()
            self.step_check("recovered", "demo-3-recovered", final=True, faults=faults)
            self.step_report()
        except KeyboardInterrupt:
            self.interrupted = True
            self.expect("finished", False, "interrupted (Ctrl-C): stopping everything it started")
        except Exception as exc:
            self.expect("finished", False, f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}")
        finally:
            self.step_stop(spark_future)
            pool.shutdown(wait=False)
            self.summary.update({
                "runs": self.runs,
                "expectations": [e.__dict__ for e in self.expectations],
                "ok": all(e.ok for e in self.expectations) and bool(self.expectations),
                "interrupted": self.interrupted,
                "seconds": round(time.monotonic() - t0, 1),
            })
            summary_text = json.dumps(self.summary, indent=2, default=json_default)
            (self.dir / "demo.json").write_text(summary_text + "\n")
        return self.summary

    def _start_spark(self) -> Any:
        from bkaudit.spark.session import get_session

        log4j = self.dir / "log4j2.properties"
        log4j.write_text("rootLogger.level = error\nrootLogger.appenderRef.stderr.ref = console\n"
                         "appender.console.type = Console\nappender.console.name = console\n"
                         "appender.console.target = SYSTEM_ERR\n"
                         "appender.console.layout.type = PatternLayout\n"
                         "appender.console.layout.pattern = spark %p %c{1}: %m%n\n")
        opts = f"-Dlog4j2.configurationFile=file:{log4j}"  # Spark's own WARN chatter off the terminal
        conf = {"spark.driver.extraJavaOptions": opts, "spark.executor.extraJavaOptions": opts}
        return get_session("local[2]", app_name="bkaudit-demo", conf=conf)

    # -- steps -------------------------------------------------------------------------------------------
    def step_cluster(self) -> None:
        from bkaudit.cluster.local import LocalCluster

        self.progress.start(STEPS[0])
        self.cluster = LocalCluster.up(self.dir / "cluster", bookies=BOOKIES, racks=RACKS, detach=self.keep)
        self._write_settings()
        for b in self.cluster.bookies:
            self.progress.say(f"bookie {b.id} on {b.rack}")
        self.summary["cluster"] = {"zk": self.cluster.zk, "dir": str(self.cluster.directory),
                                   "bookies": {b.id: b.rack for b in self.cluster.bookies}}
        self.progress.say(f"ZooKeeper {self.cluster.zk}; settings in {self.config_path}")

    def _write_settings(self) -> None:
        """The demo's settings file: where things are, plus timings tuned for a cluster that lives minutes."""
        from bkaudit import config

        self.config_path.write_text(
            "# written by `bkaudit demo`: use it with --config to query or re-run against this cluster\n"
            f'[zk]\nconnect = "{self.cluster.zk}"\nroot = "{self.cluster.root}"\n'
            f'[snapshot]\nwarehouse = "{self.warehouse}"\n'
            "[checker]\nretry_delay_s = 1.0\ncall_timeout_s = 5.0\n"
            "[autorecovery]\nopen_ledger_rereplication_grace = 2.0\nworkers = 2\n"
            "rw_rereplicate_backoff_s = 1.0\nlock_release_of_failed_ledger_grace_s = 8.0\n",
            encoding="utf-8",
        )
        self.settings = config.load(path=self.config_path)

    def step_write(self) -> Written:
        from bkaudit.client import BookKeeper

        self.progress.start(f"{STEPS[1]}: {self.ledgers} of mixed E/WQ/AQ, some open, some on topics")
        with BookKeeper.connect(self.cluster.zk_settings()) as bk:
            written = write_ledgers(bk, plan(self.ledgers, self.seed),
                                    progress=self.progress.counter("ledgers"))
        shapes = ", ".join(f"{k} x{v}" for k, v in sorted(written.shapes.items()))
        self.progress.say(f"{written.entries} entries; {len(written.open_ledgers)} left open; "
                          f"{len(written.managed)} on {len(set(written.managed.values()))} Pulsar topics")
        self.progress.say(f"shapes: {shapes}")
        self.summary["written"] = {"ledgers": len(written.ledgers), "entries": written.entries,
                                   "open": len(written.open_ledgers), "managed": len(written.managed),
                                   "shapes": written.shapes}
        return written

    def step_check(self, phase: str, run_id: str, *, publish: bool = False, expect_clean: bool = False,
                   final: bool = False, written: Written | None = None, faults: dict[str, Any] | None = None,
                   ) -> None:
        from bkaudit.spark.checker import CheckOptions, run_check
        from bkaudit.spark.snapshot import run_snapshot

        self.progress.start(STEPS[{"baseline": 2, "faults": 4, "recovered": 7}[phase]])
        snap = run_snapshot(self.spark, self.settings, warehouse=self.warehouse, snapshot_id=run_id)
        self.progress.say(f"snapshot {snap.snapshot_id}: {snap.ledgers} ledgers, {snap.bookies} bookies, "
                          f"{snap.underreplicated} under-replicated ({snap.seconds:.1f}s)")
        result = run_check(self.spark, self.settings, CheckOptions(
            warehouse=self.warehouse, snapshot_id=snap.snapshot_id, run_id=run_id,
            publish_underreplicated=publish, fail_on="never", progress=None))
        counts = {k: int(v) for k, v in result.counts.items()}
        findings = [v.finding for v in result.violations]
        misplaced = sorted({f.ledger_id for f in findings
                            if f.category.value == "placement_fail" and f.ledger_id is not None})
        # every durability finding, also on ledgers still queued (`counts` leaves those out)
        durable_ledgers = sorted({f.ledger_id for f in findings
                                  if f.category.value in DURABILITY and f.ledger_id is not None})
        self.runs[phase] = {"run_id": result.run_id, "snapshot_id": snap.snapshot_id, "ledgers": snap.ledgers,
                            "counts": counts, "published": result.published,
                            "placement_fail_ledgers": misplaced, "durable_ledgers": durable_ledgers,
                            "under_repair": dict(result.under_repair),
                            "seconds": round(result.seconds, 1)}
        self.progress.say(f"check {result.run_id}: {result.ledgers_checked} ledgers, "
                          f"{result.entries_checked} entries on {len(result.bookies)} bookies "
                          f"({result.seconds:.1f}s)")
        if expect_clean:
            assert written is not None
            self.expect("snapshot saw every ledger", snap.ledgers == len(written.ledgers),
                        f"{snap.ledgers} in the snapshot, {len(written.ledgers)} written")
            found = {k: v for k, v in counts.items() if v}
            self.expect("baseline is clean", not found, "no violation" if not found else f"found {found}")
        elif final:
            self._print_table()
            self._final_expectations(counts, faults or {})
        else:
            self._print_table(only=("faults",))
            durable = sum(counts.get(c, 0) for c in DURABILITY)
            self.expect("damage detected", durable > 0, f"{durable} ledger(s) below their write quorum")
            pinned = (faults or {}).get("misplaced_ledger")
            self.expect("placement violation detected", pinned in misplaced,
                        f"ledger {pinned} is among {len(misplaced)} placement_fail")
            self.expect("published to the queue", result.published > 0,
                        f"{result.published} ledger(s) marked under-replicated")

    def step_faults(self) -> dict[str, Any]:
        self.progress.start(STEPS[3])
        c = self.cluster
        rack1 = [b.id for b in c.bookies if b.rack == "/rack-1"]
        rack2 = [b.id for b in c.bookies if b.rack == "/rack-2"]
        killed, wiped = rack1[0], rack1[1]
        c.kill_bookie(killed)
        self.progress.say(f"killed bookie {killed} (SIGKILL: its disk is gone for good)")
        c.stop_bookie(wiped)
        c.wipe_bookie(wiped)
        c.format_bookie(wiped)
        c.start_bookie(wiped)
        self.progress.say(f"wiped, formatted and restarted bookie {wiped}: same id, empty disk")
        pinned = write_pinned(c.zk_settings(), rack2, 10, "public/default/persistent/misplaced-topic")
        self.progress.say(f"wrote ledger {pinned} with every copy on /rack-2 ({', '.join(rack2)})")
        deadline = time.monotonic() + 30
        registry = c.store().registry
        while registry.bookie_state(killed) != "absent" and time.monotonic() < deadline:
            time.sleep(0.2)
        self.progress.say(f"{killed}'s ZooKeeper session expired: it is no longer registered")
        faults = {"killed": killed, "wiped": wiped, "misplaced_ledger": pinned, "misplaced_on": rack2}
        self.summary["faults"] = faults
        return faults

    def step_recover(self) -> None:
        self.progress.start(STEPS[5])
        events = self.dir / "autorecovery-events.jsonl"
        args = ["autorecovery", "run", "--zk", self.cluster.zk, "--config", str(self.config_path), "--once",
                "--json", "--timeout", "150"]
        self.progress.say("$ bkaudit " + " ".join(args))
        cmd = [sys.executable, "-m", "bkaudit.cli", *args, "--events", str(events)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)
        (self.dir / "autorecovery.log").write_text(proc.stderr, encoding="utf-8")
        lines = proc.stdout.strip().splitlines()
        try:
            summary = json.loads(lines[-1]) if lines else {}
        except ValueError:
            summary = {"output": proc.stdout[-2000:]}
        self.summary["autorecovery"] = {"exit_code": proc.returncode, **summary}
        shown = {k: v for k, v in summary.items() if isinstance(v, int | float | str)}
        self.progress.say(f"summary: {json.dumps(shown)[:300]}")
        self.expect("auto-recovery drained the queue", proc.returncode == 0,
                    f"exit {proc.returncode} (log: {self.dir / 'autorecovery.log'})")

    def step_drain(self) -> str:
        """A bookie joins /rack-3 and an old /rack-3 bookie is drained by the Auditor (autorecovery run)."""
        from bkaudit.config import ZkSettings
        from bkaudit.lifecycle import service
        from bkaudit.model import lifecycle as lc
        from bkaudit.store import bind

        self.progress.start(STEPS[6])
        c = self.cluster
        cluster = bind(c.zk_client(), self.settings.get(ZkSettings))  # where the Auditor writes progress
        added = c.add_bookie(rack="/rack-3")
        old = next(b.id for b in c.bookies if b.rack == "/rack-3" and b.id != added.id)
        before = len(cluster.index.ledgers_of([old])[old])
        self.progress.say(f"bookie {added.id} joined /rack-3; draining {old} ({before} ledgers reference it)")
        service.transition(cluster, old, lc.LifecycleState.DRAINING, actor=lc.Actor.OPERATOR, by="demo",
                           reason="replaced by " + added.id)
        self.progress.say(f"$ bkaudit lifecycle drain {old}   (now read-only; the Auditor moves its ledgers)")
        env = {**os.environ, "BKAUDIT_LIFECYCLE__DRAIN_CHECK_INTERVAL_S": "1"}
        cmd = [sys.executable, "-m", "bkaudit.cli", "autorecovery", "run", "--zk", c.zk, "--config",
               str(self.config_path), "--events", str(self.dir / "drain-events.jsonl")]
        with (self.dir / "drain.log").open("wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        state = lc.LifecycleState.DRAINING
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                state = service.current(cluster, old)[0]
                if state is not lc.LifecycleState.DRAINING:
                    break
                time.sleep(0.5)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        progress = cluster.lifecycle.read_progress(old) or {}
        left = len(cluster.index.ledgers_of([old])[old])
        self.summary["drain"] = {"bookie": old, "added": added.id, "ledgers_before": before,
                                 "state": state.value, "progress": progress}
        self.expect("drained", state is lc.LifecycleState.DRAINED and left == 0,
                    f"{old} is {state.value}; {left} ledgers reference it (was {before}; open, waiting for "
                    f"their writers: {progress.get('waiting_open_ledgers', [])})")
        return old

    def _final_expectations(self, counts: dict[str, int], faults: dict[str, Any]) -> None:
        durable = {c: counts.get(c, 0) for c in DURABILITY}
        left = self.runs["recovered"]["durable_ledgers"]
        self.expect("durability clean after recovery", not left,
                    json.dumps({**durable, "ledgers with a durability finding (queued or not)": left}))
        remaining = {k: v for k, v in counts.items() if v}
        pinned = faults.get("misplaced_ledger")
        misplaced = self.runs["recovered"]["placement_fail_ledgers"]
        self.expect("placement violation still reported", pinned in misplaced,
                    f"ledger {pinned} keeps every copy on one rack")
        if remaining:
            self.progress.say("what remains, in plain words:")
            for category, n in remaining.items():
                self.progress.say(f"  {category} x{n}: {EXPLAIN.get(category, 'see docs/demo.md')}")
            others = [lid for lid in misplaced if lid != pinned]
            if others:
                self.progress.say(
                    f"  ...of which {len(others)} ledger(s) where recovery's replacement bookie "
                    "shares a rack with a write-set neighbour: with /rack-1 down to one bookie, larger "
                    "ensembles often have no other choice, and the worker then places best effort (as "
                    "BookKeeper does without enforceMinNumRacksPerWriteQuorum); `check "
                    "--publish-placement` queues them for relocation")
        killed = faults.get("killed")
        if killed:
            self.progress.say(f"  bookie {killed} stays dead: ZooKeeper keeps its cookie (state "
                              "'unavailable' in the bookies table) until an operator decommissions it; no "
                              "ledger needs it any more, recovery moved its copies")

    def _print_table(self, only: Sequence[str] | None = None) -> None:
        from bkaudit.audit.base import Category

        phases = [p for p in ("baseline", "faults", "recovered")
                  if p in self.runs and (not only or p in only)]
        cats = sorted(Category, key=lambda c: (-c.severity.rank, c.value))
        rows = [(c.value, c.severity.value, [self.runs[p]["counts"].get(c.value, 0) for p in phases])
                for c in cats]
        rows = [r for r in rows if any(r[2]) or r[0] in DURABILITY]
        header = f"{'category':<34} {'severity':<9}" + "".join(f"{p:>11}" for p in phases)
        self.progress.say(header)
        self.progress.say("-" * len(header))
        for name, severity, values in rows:
            self.progress.say(f"{name:<34} {severity:<9}" + "".join(f"{v:>11}" for v in values))

    def step_report(self) -> None:
        from bkaudit.report.builder import write_report

        self.progress.start(STEPS[8])
        path = write_report(self.warehouse, self.report_dir, self.runs["recovered"]["run_id"])
        self.summary["report"] = str(path)
        self.summary["report_index"] = str(self.report_dir / "index.html")
        self.expect("report written", path.is_file() and path.stat().st_size > 0, str(path))
        drained = self.summary.get("drain", {}).get("bookie")
        if drained:
            page = path.read_text(encoding="utf-8")
            self.expect("report shows lifecycle states", drained in page and "Drained" in page,
                        f"{drained} listed as Drained in the bookies section")

    def step_stop(self, spark_future: Future[Any] | None) -> None:
        self.progress.start(STEPS[9] + (" (skipped: --keep)" if self.keep else ""))
        if spark_future is not None:
            try:
                spark = spark_future.result(timeout=120)
                spark.stop()
            except Exception:
                pass
        if self.cluster is not None and not self.keep:
            self.cluster.down()
            self.progress.say("ZooKeeper and bookies stopped")
        elif self.cluster is not None:
            self.progress.say("still running; stop it with: "
                              f"bkaudit cluster down --dir {self.cluster.directory}")
