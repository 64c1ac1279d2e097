"""A smoke run of bench/recovery.py end to end: 3 small ledgers, every scenario once, on real processes.

The bench builds its own cluster (ZooKeeper + 8 bookie processes, a fresh one per scenario run) and verifies
every entry after every run itself. Here the ground truth is computed independently from the plan: how many
entries each copier must write follows from the E3/WQ2 write-set rule (entry e is on indexes e%3 and
(e+1)%3) and the lost bookie's index in each ensemble, not from the code under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
LEDGERS, MIN_ENTRIES, MAX_ENTRIES = 3, 200, 400


def _stored(index: int, entries: int) -> list[int]:
    return [e for e in range(entries) if index in (e % 3, (e + 1) % 3)]


def _processes_under(path: Path) -> list[int]:
    mine = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if str(path).encode() in (proc / "cmdline").read_bytes():
                mine.append(int(proc.name))
        except OSError:
            continue
    return mine


def test_recovery_bench_runs_every_scenario_on_fresh_clusters_and_copies_what_bookkeeper_would(
    tmp_path: Path,
) -> None:
    work, out = tmp_path / "work", tmp_path / "recovery.json"
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    done = subprocess.run(
        [
            sys.executable, str(REPO / "bench" / "recovery.py"), "--ledgers", str(LEDGERS), "--runs", "1",
            "--min-entries", str(MIN_ENTRIES), "--max-entries", str(MAX_ENTRIES), "--seed", "3",
            "--workdir", str(work), "--json", str(out),
        ],
        env=env, capture_output=True, text=True, timeout=400, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| bkaudit, 1 worker (production FragmentCopier) | 1 |" in done.stdout
    doc = json.loads(out.read_text())
    assert _processes_under(work) == []  # no ZooKeeper or bookie left running

    assert sorted(doc["order"]) == ["bk-style-1", "bkaudit-1", "bkaudit-2"]
    assert [name for _run, name in doc["execution"]] == doc["order"]
    plan = doc["plan"]
    assert len(plan) == LEDGERS and all(MIN_ENTRIES <= s["entries"] <= MAX_ENTRIES for s in plan)
    victim_index = [n % 3 for n in range(LEDGERS)]  # the bench rotates the lost bookie over the indexes
    striping = sum(len(_stored(i, s["entries"])) for i, s in zip(victim_index, plan, strict=True))
    spans = sum(
        _stored(i, s["entries"])[-1] - _stored(i, s["entries"])[0] + 1
        for i, s in zip(victim_index, plan, strict=True)
    )
    total = sum(s["entries"] for s in plan)
    for name, runs in doc["results"].items():
        (run,) = runs
        assert run["ledgers"] == LEDGERS, name
        assert run["entries_written"] == (spans if name == "bk-style-1" else striping), name
        (check,) = doc["verification"][name]
        assert check["entries_read"] == total, name  # every entry of every ledger read back
    summary = doc["summary"]
    assert summary["bk-style-1"]["bytes_written"]["median"] > summary["bkaudit-1"]["bytes_written"]["median"]
