"""bench/harness.py's pure parts: medians with min and max, the alternation order, the median/median ratio.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import harness


def test_spread_odd_count_is_the_middle_value() -> None:
    s = harness.Spread.of([3.0, 9.0, 1.0])
    assert (s.median, s.low, s.high) == (3.0, 1.0, 9.0)
    assert s.values == (3.0, 9.0, 1.0)  # run order kept for the JSON


def test_spread_even_count_averages_the_middle_pair() -> None:
    s = harness.Spread.of([4.0, 1.0, 3.0, 2.0])
    assert (s.median, s.low, s.high) == (2.5, 1.0, 4.0)


def test_spread_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        harness.Spread.of([])


def test_spread_cells() -> None:
    s = harness.Spread.of([2.0, 4.0, 5.0])
    assert s.cell(1) == "4.0 (2.0-5.0)"
    # rates: 100 units of work; the slowest run (5 s) gives the lowest rate
    assert s.rate_cell(100) == "25 (20-50)"


def test_alternation_reverses_the_side_order_every_run() -> None:
    assert harness.alternation(["ours", "base"], 3) == [
        (0, "ours"), (0, "base"), (1, "base"), (1, "ours"), (2, "ours"), (2, "base"),
    ]
    assert harness.alternation(["a", "b", "c"], 2) == [
        (0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"), (1, "a"),
    ]


@settings(max_examples=100, deadline=None)
@given(
    sides=st.lists(st.text(min_size=1, max_size=3), min_size=1, max_size=5, unique=True),
    runs=st.integers(1, 8),
)
def test_alternation_runs_every_side_equally_and_never_twice_in_a_row_across_runs(
    sides: list[str], runs: int
) -> None:
    order = harness.alternation(sides, runs)
    assert Counter(side for _run, side in order) == dict.fromkeys(sides, runs)
    assert [run for run, _side in order] == sorted(run for run, _side in order)
    firsts = Counter(order[i * len(sides)][1] for i in range(runs))
    if len(sides) > 1:  # first and last place alternate between the two ends
        assert firsts[sides[0]] == (runs + 1) // 2
        assert firsts[sides[-1]] == runs // 2


def test_alternation_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        harness.alternation(["a", "b"], 0)
    with pytest.raises(ValueError):
        harness.alternation(["a", "a"], 3)
    with pytest.raises(ValueError):
        harness.alternation([], 3)


def test_ratio_is_median_over_median_not_best_of() -> None:
    baseline = harness.Spread.of([10.0, 1.0, 12.0])  # one lucky fast run must not decide the ratio
    ours = harness.Spread.of([2.0, 2.5, 1.5])
    assert harness.ratio(baseline, ours) == pytest.approx(10.0 / 2.0)
    assert harness.ratio(ours, baseline) == pytest.approx(2.0 / 10.0)


def test_markdown_row() -> None:
    assert harness.markdown_row(["a", "1.0 (0.5-2.0)", ""]) == "| a | 1.0 (0.5-2.0) |  |"


def test_run_fresh_runs_the_side_in_a_new_process(tmp_path: Path) -> None:
    """A real child interpreter: its result carries its own pid (not ours) and a wall time."""
    side = harness.Side("probe", "harness:_probe", {"note": "x"}, "probe")
    out = harness.run_fresh(side, timeout_s=120)
    assert out["pid"] != os.getpid()
    assert out["note"] == "x"
    assert out["wall_s"] >= out["seconds"] >= 0


def test_run_fresh_keeps_the_sides_stderr_when_asked(tmp_path: Path) -> None:
    side = harness.Side("probe", "harness:_probe", {"note": "y"}, "probe")
    out = harness.run_fresh(side, timeout_s=120, log_to=tmp_path / "logs" / "run-0-probe.log")
    assert f"probe y in {out['pid']}" in (tmp_path / "logs" / "run-0-probe.log").read_text()


def test_write_json_round_trips_spreads(tmp_path: Path) -> None:
    path = harness.write_json("t", {"s": harness.Spread.of([1.0, 2.0, 3.0])}, str(tmp_path / "r.json"))
    assert '"median": 2.0' in path.read_text(encoding="utf-8")


def test_a_result_names_its_commit_and_only_code_makes_it_dirty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=True)
        return done.stdout.strip()

    git("init", "-q")
    for rel in ("bkaudit/x.py", "bench/results/r.json", "docs/d.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("0\n")
    git("add", "-A")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "c")
    monkeypatch.setattr(harness, "REPO", tmp_path)
    head = git("rev-parse", "--short=12", "HEAD")
    assert harness.commit() == head
    (tmp_path / "bench/results/r.json").write_text("1\n")  # a benchmark writing its results
    (tmp_path / "docs/d.md").write_text("1\n")
    (tmp_path / "new.py").write_text("untracked\n")
    assert harness.commit() == head
    (tmp_path / "bkaudit/x.py").write_text("1\n")
    assert harness.commit() == head + "+dirty"
    assert harness.machine()["commit"] == head + "+dirty"
    monkeypatch.setattr(harness, "REPO", tmp_path / "nowhere")
    assert harness.commit() is None
