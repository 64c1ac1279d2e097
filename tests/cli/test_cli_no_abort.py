"""No aborts at exit: 100 runs of cheap table-reading commands all end with their own exit code.

Before bkaudit.shutdown, `bkaudit violations --json` died with SIGABRT (exit 134, "terminate called without an
active exception") in about 3 runs in 100 on this 2-core machine with 4 runs at a time: Arrow pool threads
that delta-rs reads use were killed during interpreter teardown. Four runs in parallel reproduce the load
under which it showed; every run must exit 0 with its full JSON (or 1 with its one-line error).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.cli.warehouse import RUN_ID, VIOLATIONS, make_warehouse

RUNS = 100

pytestmark = pytest.mark.slow


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BKAUDIT_")}
    return subprocess.run([sys.executable, "-m", "bkaudit.cli", *args], capture_output=True, text=True,
                          timeout=300, env=env)


def test_hundred_runs_never_abort(tmp_path_factory: pytest.TempPathFactory) -> None:
    warehouse = make_warehouse(tmp_path_factory.mktemp("warehouse"))
    out = str(tmp_path_factory.mktemp("report"))
    # mostly `violations --json`; every tenth the failing `report --run-id nope` that ended in "Aborted"
    jobs = [["report", "--warehouse", warehouse, "--run-id", "nope", "--out", out] if i % 10 == 9
            else ["violations", "--warehouse", warehouse, "--json"] for i in range(RUNS)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(_run, jobs))
    problems = []
    for args, proc in zip(jobs, results, strict=True):
        if args[0] == "violations":
            ok = proc.returncode == 0 and len(json.loads(proc.stdout)["violations"]) == len(VIOLATIONS)
        else:
            ok = proc.returncode == 1 and proc.stderr.strip().count("\n") == 0 and "nope" in proc.stderr
        if not ok or "terminate called" in proc.stderr or "Aborted" in proc.stderr:
            problems.append((args[0], proc.returncode, proc.stderr[-300:]))
    assert not problems, f"{len(problems)} of {RUNS} runs misbehaved: {problems[:5]}"
    assert json.loads(results[0].stdout)["run_id"] == RUN_ID
