"""jobs/report.py, the report step the Airflow DAG spark-submits: the page and the verdict, as a process.

Run as `python jobs/report.py` (what spark-submit runs on the driver; the job starts no Spark context), over
a warehouse written here with known violations (tests/cli/warehouse.py). The real spark-submit
through Airflow is in tests/airflow/test_dags.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from subprocess import CompletedProcess

from tests.cli.warehouse import RUN_ID, SNAPSHOT_ID, VIOLATIONS, make_warehouse

JOB = Path(__file__).resolve().parents[2] / "jobs" / "report.py"


def report_job(*args: str) -> CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BKAUDIT_")}
    return subprocess.run([sys.executable, str(JOB), *args], capture_output=True, text=True, timeout=180,
                          env=env)


def test_page_then_verdict_by_fail_on(tmp_path: Path) -> None:
    warehouse = make_warehouse(tmp_path / "wh")
    injected: dict[str, int] = {}
    for _lid, category, _sev in VIOLATIONS:
        injected[category] = injected.get(category, 0) + 1
    # VIOLATIONS hold a critical and warnings: never → 0; warning, critical → 3, the page written each time
    for fail_on, expected in (("never", 0), ("warning", 3), ("critical", 3)):
        out = tmp_path / f"out-{fail_on}"
        # "--config ''": the DAG renders an empty --config when none is set
        proc = report_job("--warehouse", warehouse, "--run-id", RUN_ID, "--out", str(out),
                          "--fail-on", fail_on, "--config", "")
        assert proc.returncode == expected, (fail_on, proc.stderr)
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        assert summary["run_id"] == RUN_ID and summary["snapshot_id"] == SNAPSHOT_ID
        assert summary["fail_on"] == fail_on and summary["fail_on_reached"] is bool(expected)
        assert {k: v for k, v in summary["counts"].items() if v} == injected
        page = out / f"report-{RUN_ID}.html"
        assert summary["report"] == str(page) and page.is_file() and (out / "index.html").is_file()
        assert all(str(lid) in page.read_text() for lid, _c, _s in VIOLATIONS)


def test_no_such_run_writes_nothing_and_exits_1(tmp_path: Path) -> None:
    warehouse = make_warehouse(tmp_path / "wh")
    out = tmp_path / "out"
    proc = report_job("--warehouse", warehouse, "--run-id", "nope", "--out", str(out))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().startswith("error:") and "nope" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (out / "report-nope.html").exists()


def test_missing_warehouse_and_bad_flags_are_usage_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    proc = report_job("--warehouse", str(missing), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    assert f"warehouse {missing} does not exist" in proc.stderr
    bogus = report_job("--warehouse", str(tmp_path), "--out", str(tmp_path), "--fail-on", "bogus")
    assert bogus.returncode == 2 and "invalid choice" in bogus.stderr
