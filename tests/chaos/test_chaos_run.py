"""`bkaudit chaos` end to end on a real local cluster: short fixed-seed schedules, every invariant must hold.

Run A: every fault kind but the wipe (whose known gap is pinned in test_chaos_regressions.py), no checker, so
many faults fit in a short run. Run B: wipes, corrupt znodes, AutoRecovery kills, resets and pauses with the
checker, so invariants 4 and 5 (findings explained, clean after the drain) are exercised; writers there only
crash when they must, so no recovery meets a wiped bookie (the seed 7 gap).
The history is re-checked offline and its schedule compared with the one the seed gives (replay).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bkaudit.chaos import invariants
from bkaudit.chaos.history import load
from bkaudit.chaos.schedule import FaultKind, make_schedule, parse_kinds
from bkaudit.cluster.bookies import BOOKIE_SESSION_TIMEOUT_S

ROOT = Path(__file__).resolve().parents[2]
NO_WIPE = ",".join(k.value for k in FaultKind if k is not FaultKind.BOOKIE_WIPE)


def chaos(tmp_path: Path, *args: str, timeout: float = 450) -> tuple[int, dict[str, Any], str]:
    """Run `bkaudit chaos --json`; `timeout` + 120 s to stop stays under pytest-timeout's 600 s."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bkaudit.cli", "chaos", "--json", "--workdir", str(tmp_path), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=dict(os.environ),
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # SIGTERM: the run stops its cluster before exiting
        out, err = proc.communicate(timeout=120)
        raise AssertionError(f"chaos run did not end within {timeout}s:\n{err[-3000:]}") from None
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return proc.returncode, (json.loads(lines[-1]) if lines else {}), err[-3000:]


def verify(
    tmp_path: Path, seed: int, duration: float, kinds: str, code: int, doc: dict[str, Any], err: str,
    *, autorecovery: int = 2,
) -> list[dict[str, Any]]:
    assert doc, err
    assert code == 0 and doc["violations"] == [], json.dumps(doc, indent=1)[:6000]
    assert (
        doc["seed"] == seed
        and doc["entries_acknowledged"] > 100
        and sum(doc["faults_injected"].values()) >= 3
    )
    events = load(doc["history"])
    assert invariants.check(events) == []  # the same verdict offline, from the file alone
    schedule = make_schedule(
        seed=seed,
        duration_s=duration,
        bookies=5,
        kinds=parse_kinds(kinds),
        max_bookie_failures=1,
        autorecovery_processes=autorecovery,
        mean_gap_s=3.0,
        session_timeout_s=BOOKIE_SESSION_TIMEOUT_S,
    )
    recorded = events[0]["schedule"]
    assert [(f["at_s"], f["kind"], f["target"]) for f in recorded] == [
        (f.at_s, f.kind.value, f.target) for f in schedule.faults
    ]  # `--seed S` replays this schedule
    assert {e["type"] for e in events} >= {"create", "ack", "close", "fault", "final_read", "final_metadata"}
    return events


@pytest.mark.cluster
@pytest.mark.slow
def test_chaos_every_fault_but_the_wipe_upholds_the_guarantee(tmp_path: Path) -> None:
    code, doc, err = chaos(
        tmp_path, "--seed", "1101", "--duration", "30", "--faults", NO_WIPE, "--no-checker"
    )
    events = verify(tmp_path, 1101, 30, NO_WIPE, code, doc, err)
    started = {e["kind"] for e in events if e["type"] == "fault" and e["phase"] == "start"}
    assert len(started) >= 4, started


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.spark
def test_chaos_wipes_and_corruption_are_reported_then_repaired(tmp_path: Path) -> None:
    kinds = "bookie_wipe,corrupt_znode,autorecovery_kill,proxy_reset,bookie_pause"
    code, doc, err = chaos(
        tmp_path, "--seed", "2202", "--duration", "25", "--faults", kinds, "--crash-probability", "0"
    )
    events = verify(tmp_path, 2202, 25, kinds, code, doc, err)
    checks = [e for e in events if e["type"] == "check"]
    assert [c["n"] for c in checks] == [1, 2] and all(c["stable"] and not c["error"] for c in checks)
    assert checks[1]["final"]
    damaged = {e["ledger"] for e in events if e["type"] == "damage" and e.get("kind") != "metadata"}
    corrupted = {e["ledger"] for e in events if e["type"] == "damage" and e.get("kind") == "metadata"}
    assert damaged and corrupted, "seed 2202 wipes a bookie and corrupts a znode"
    found = {(e["n"], e["category"], e["ledger"]) for e in events if e["type"] == "finding"}
    assert {(2, "metadata_unparseable", lid) for lid in corrupted} <= found


def test_bad_options_exit_2_without_starting_anything(tmp_path: Path) -> None:
    code, _, err = chaos(tmp_path, "--faults", "bookie_kill,bookie_explode", timeout=60)
    assert code == 2 and "bookie_explode" in err
    code, _, err = chaos(tmp_path, "--bookies", "3", "--max-bookie-failures", "2", timeout=60)
    assert code == 2 and "max-bookie-failures" in err
    code, _, err = chaos(tmp_path, "--bookies", "3", "--java-bookies", "4", timeout=60)
    assert code == 2 and "java-bookies" in err
    assert not list(tmp_path.iterdir())
