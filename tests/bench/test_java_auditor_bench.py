"""A smoke run of bench/java_auditor.py end to end: BookKeeper's own Auditor and `bkaudit check --fresh` on
Java bookies, 150 ledgers, one run of each side.

The bench asserts after every run that each side found exactly the holes it injected (and that whatever more
BookKeeper's replicasCheck names, its bookie returns on a read). Here the checks are on what the run must
show from outside: the exit status, both sides timed, the holes it injected (1 % of the closed ledgers, on one
bookie, never in an open ledger) all found by both, and nothing left running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.test_recovery_bench_smoke import _processes_under

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
LEDGERS = 150


def test_java_auditor_bench_times_both_sides_and_both_find_the_injected_holes(tmp_path: Path,
                                                                             java_bookkeeper) -> None:
    out = tmp_path / "java-auditor.json"
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, TMPDIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "java_auditor.py"), "--ledgers", str(LEDGERS), "--runs", "1",
         "--json", str(out)],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "| BookKeeper Auditor replicasCheck |" in done.stdout
    doc = json.loads(out.read_text())
    closed = LEDGERS - doc["open"]
    assert doc["holed"] == max(1, round(0.01 * closed))
    assert doc["stalled"]["ledgers"] == 0  # AQ = WQ ledgers lose no copy to the ensemble change
    assert doc["multi_segment"] > 0 and doc["open"] > 0
    for side in ("bkaudit", "java"):
        (run,) = doc["results"][side]
        assert run["seconds"] > 0 and run["to_result_s"] > run["seconds"]
        assert run["verdict"]["found"] == run["verdict"]["damaged"] == len(doc["expected"])
    assert doc["results"]["bkaudit"][0]["verdict"]["false_ledgers"] == 0
    assert _processes_under(tmp_path) == []  # no bookie, ZooKeeper or Auditor left running
