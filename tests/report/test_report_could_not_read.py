"""A table the report or `bkaudit violations` cannot read is "could not read", never clean (issue 32 item 2).

The warehouse is written here (tests/cli/warehouse.py: a succeeded run with a critical violation),
then broken the way an operator or a disk would break it: `violations/_delta_log` deleted (the issue's repro),
a commit of the log overwritten with garbage, a data file deleted, a table missing. Each reader must name the
table and the reason, in one line, and exit 1; the report page must say "could not read" where the data would
be, and never "Durability clean".
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from bkaudit.cli import run
from bkaudit.report.outcome import write_and_judge
from tests.cli.warehouse import RUN_ID, make_warehouse

CLEAN = "Durability clean"


def _no_log(wh: Path, table: str) -> None:
    shutil.rmtree(wh / table / "_delta_log")


def _garbage_commit(wh: Path, table: str) -> None:
    last = sorted((wh / table / "_delta_log").glob("*.json"))[-1]
    last.write_text('garbage{"add":')


def _data_file_gone(wh: Path, table: str) -> None:
    for part in (wh / table).rglob("*.parquet"):
        part.unlink()


def _missing(wh: Path, table: str) -> None:
    shutil.rmtree(wh / table)


BREAKS: dict[str, Callable[[Path, str], None]] = {
    "delta log deleted": _no_log, "corrupt commit": _garbage_commit, "data file deleted": _data_file_gone,
    "table missing": _missing,
}


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    wh = tmp_path / "wh"
    make_warehouse(wh)
    return wh


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("how", sorted(BREAKS))
def test_report_of_a_run_whose_violations_cannot_be_read_says_could_not_read(
    warehouse: Path, tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    BREAKS[how](warehouse, "violations")
    out = tmp_path / "out"
    for fail_on in ("never", "critical"):  # never clean, and never judged by counts it could not check
        code = run(["report", "--warehouse", str(warehouse), "--run-id", RUN_ID, "--out", str(out),
                    "--fail-on", fail_on])
        captured = capsys.readouterr()
        assert code == 1, captured.err
        line = one_line(captured.err)
        assert line.startswith("error: could not read") and "violations" in line, line
        page = (out / f"report-{RUN_ID}.html").read_text()
        assert CLEAN not in page
        assert 'class="verdict unknown"' in page and "Could not read the violations table" in page
        for section in ("categories", "managed-ledgers", "worst-ledgers"):
            body = page.split(f'<section id="{section}">')[1].split("</section>")[0]
            assert 'class="unreadable" data-table="violations"' in body, section
            assert "No ledger is missing entries" not in body


@pytest.mark.parametrize("how", sorted(BREAKS))
def test_violations_command_says_could_not_read(
    warehouse: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    BREAKS[how](warehouse, "violations")
    code = run(["violations", "--warehouse", str(warehouse), "--json"])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    assert captured.out == ""
    assert one_line(captured.err).startswith("error: could not read table 'violations'")


@pytest.mark.parametrize("how", ["delta log deleted", "corrupt commit"])
def test_unreadable_audit_runs_is_one_line_and_writes_nothing(
    warehouse: Path, tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    BREAKS[how](warehouse, "audit_runs")
    for args in (["report", "--out", str(tmp_path / "out")], ["violations"]):
        code = run([*args, "--warehouse", str(warehouse)])
        captured = capsys.readouterr()
        assert code == 1, captured.err
        assert one_line(captured.err).startswith("error: could not read table 'audit_runs'")
    assert not (tmp_path / "out").exists()


def test_an_unreadable_bookie_checks_is_named_and_fails_the_report(warehouse: Path, tmp_path: Path) -> None:
    _garbage_commit(warehouse, "bookie_checks")
    outcome = write_and_judge(warehouse=str(warehouse), run_id=RUN_ID, out_dir=str(tmp_path), fail_on="never")
    assert outcome.exit_code == 1 and outcome.error is not None and "bookie_checks" in outcome.error
    assert set(outcome.summary["unreadable"]) == {"bookie_checks"}
    page = Path(outcome.summary["report"]).read_text()
    bookies = page.split('<section id="bookies">')[1].split("</section>")[0]
    assert 'data-table="bookie_checks"' in bookies


def test_a_readable_warehouse_still_reports_and_judges(warehouse: Path, tmp_path: Path) -> None:
    outcome = write_and_judge(warehouse=str(warehouse), run_id=RUN_ID, out_dir=str(tmp_path),
                              fail_on="critical")
    assert outcome.exit_code == 3 and outcome.error is None and outcome.summary["unreadable"] == {}
    assert 'class="unreadable"' not in Path(outcome.summary["report"]).read_text()


def test_tables_commands_over_a_corrupt_log_are_one_line(
    warehouse: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _garbage_commit(warehouse, "violations")
    for args in (["tables", "files", "violations"], ["tables", "vacuum"]):
        code = run([*args, "--warehouse", str(warehouse)])
        captured = capsys.readouterr()
        assert code == 1, captured.err
        assert one_line(captured.err).startswith("error: could not read table 'violations'")
