"""bench/scaling.py's pure parts: the per-phase table by size, the per-ledger view and its growth figure.

The runs below are constructed so the expected figures are plain arithmetic on the inputs: one phase linear
(20 µs per ledger at every size), one fixed (10 s whatever the size), one quadratic.
"""

from __future__ import annotations

import argparse

import pytest

from bench import scaling

SIZES = [10_000, 100_000]


def _run(n: int, jitter: float = 0.0) -> dict:
    linear, fixed, quadratic = 20e-6 * n + jitter, 10.0, (n / 10_000) ** 2
    return {
        "session_s": 15.0, "snapshot_s": linear + fixed, "check_s": quadratic,
        "seconds": linear + fixed + quadratic, "wall_s": linear + fixed + quadratic + 15.0,
        "snapshot_steps": {"ledgers": linear, "cluster_state": fixed, "validation": 0.0, "commit": 0.0},
        "phases": {"ledger_pass_and_fanout": quadratic},
    }


def test_phase_table_medians_per_size_and_growth() -> None:
    by_size = {n: [_run(n, -1.0), _run(n), _run(n, 5.0)] for n in SIZES}  # median = the middle run
    rows = dict(scaling.phase_table(SIZES, by_size))
    assert rows["snapshot: ledgers"] == {10_000: pytest.approx(0.2), 100_000: pytest.approx(2.0)}
    assert rows["check: ledger_pass_and_fanout"] == {10_000: 1.0, 100_000: 100.0}
    per = {name: {n: secs[n] / n * 1e6 for n in SIZES} for name, secs in rows.items()}
    assert scaling.growth(per["snapshot: ledgers"], SIZES) == "1.00x"  # linear
    assert scaling.growth(per["snapshot: cluster_state"], SIZES) == "0.10x"  # fixed cost amortised
    assert scaling.growth(per["check: ledger_pass_and_fanout"], SIZES) == "10.00x"  # super-linear
    assert scaling.growth(per["snapshot: validation"], SIZES) == "-"


def test_report_has_a_column_per_size_and_the_per_ledger_view() -> None:
    m = {
        "sizes": SIZES, "layout": "uniform", "runs": 1, "when": "now", "json": "x.json",
        "machine_start": {"cpus": 2, "python": "CPython", "kernel": "Linux", "load_average": [1.0, 1.0, 1.0]},
        "machine_end": {"cpus": 2, "python": "CPython", "kernel": "Linux", "load_average": [1.0, 1.0, 1.0]},
        "results": {str(n): [_run(n)] for n in SIZES},
        "setup": {str(n): {"bookies": 1.0} for n in SIZES},
        "described": {str(n): "closed" for n in SIZES},
    }
    text = scaling.report(m)
    assert "| phase | 10,000 ledgers | 100,000 ledgers |" in text
    assert "| check: ledger_pass_and_fanout | 100.0 | 1,000.0 | 10.00x |" in text


def test_sizes_are_parsed_sorted_and_checked() -> None:
    assert scaling.parse_sizes("100000,10_000,10000") == [10_000, 100_000]
    with pytest.raises(argparse.ArgumentTypeError):
        scaling.parse_sizes("10,100000")  # a ledger count below 100 is a typo


def _snapshot_only(n: int) -> dict:
    linear, fixed = 20e-6 * n, 10.0
    return {"session_s": 15.0, "snapshot_s": linear + fixed, "seconds": linear + fixed, "wall_s": 99.0,
            "snapshot_steps": {"ledgers": linear, "cluster_state": fixed, "validation": 0.0, "commit": 0.0},
            "checked": False}


def _linear_run(n: int) -> dict:
    r = _run(n)
    r["phases"] = {"ledger_pass_and_fanout": 50e-6 * n + 2.0}
    r["check_s"] = 50e-6 * n + 2.0
    return r


def test_snapshot_only_sizes_have_no_check_rows_and_the_projection_is_the_fitted_line() -> None:
    sizes = [10_000, 100_000, 1_000_000, 3_000_000]
    by_size = {n: [_linear_run(n)] for n in sizes[:3]} | {3_000_000: [_snapshot_only(3_000_000)]}
    rows = scaling.phase_table(sizes, by_size)
    table = dict(rows)
    assert table["check: ledger_pass_and_fanout"][3_000_000] is None
    assert table["snapshot + check (no start-up)"][3_000_000] is None  # the snapshot alone is no total
    assert table["snapshot: ledgers"][3_000_000] == pytest.approx(60.0)
    per = {n: None if v is None else v / n * 1e6 for n, v in table["check: ledger_pass_and_fanout"].items()}
    assert scaling.growth(per, sizes) == f"{(52 / 1e6) / (2.5 / 1e4):.2f}x"  # over the sizes it ran at

    projected = {name: (fixed, per, at, high) for name, fixed, per, at, _low, high
                 in scaling.projection(rows, 10_000_000)}
    fixed, per_ledger, at, largest = projected["snapshot: ledgers"]
    assert (fixed, per_ledger, at, largest) == (pytest.approx(0, abs=1e-6), pytest.approx(20.0),
                                                pytest.approx(200.0), 3_000_000)
    fixed, per_ledger, at, largest = projected["check: ledger_pass_and_fanout"]
    assert (fixed, per_ledger, at, largest) == (pytest.approx(2.0), pytest.approx(50.0), pytest.approx(502.0),
                                                1_000_000)  # fitted from 100,000 and 1,000,000 only
    assert "Spark session start" not in projected  # a fixed cost is not projected

    m = {"sizes": sizes, "layout": "realistic", "runs": 1, "when": "now", "json": "x.json",
         "snapshot_only_above": 1_000_000, "project_to": 10_000_000,
         "machine_start": {"cpus": 2, "python": "CPython", "kernel": "Linux", "load_average": [1.0] * 3},
         "machine_end": {"cpus": 2, "python": "CPython", "kernel": "Linux", "load_average": [1.0] * 3},
         "results": {str(n): runs for n, runs in by_size.items()},
         "setup": {str(n): {"metadata": 1.0} for n in sizes}, "described": {str(n): "closed" for n in sizes}}
    text = scaling.report(m)
    assert "The phase that bounds it: **check: ledger_pass_and_fanout**, 502 s" in text
    assert "At 3,000,000 ledgers the snapshot job alone" in text


def _with_memory(run: dict, driver_mb: float, zk_mb: float, bookies_mb: list[float]) -> dict:
    roles = {"driver": {"peak_sum_mb": driver_mb}, "zookeeper": {"peak_sum_mb": zk_mb}}
    roles |= {f"bookie-{i}": {"peak_sum_mb": mb} for i, mb in enumerate(bookies_mb)}
    return run | {"monitor": {"memory": {"roles": roles}}}


def test_memory_is_projected_per_kind_of_work_and_past_the_spark_switch_from_the_sizes_above_it() -> None:
    """Checked sizes: the driver grows 1 GB per million. Snapshot-only sizes: up to 2,000,000 the driver
    validates on pandas (grows), above it on Spark (flat at 300 MB): the projection must use the flat part,
    and give the empty bookies of a snapshot-only size no row."""
    results = {
        "1000000": [_with_memory(_linear_run(1_000_000), 1_300, 2_000, [600, 700, 650])],
        "1500000": [_with_memory(_linear_run(1_500_000), 1_800, 3_000, [850, 950, 900])],
        "2000000": [_with_memory(_snapshot_only(2_000_000), 1_600, 4_000, [80, 80, 80])],
        "3000000": [_with_memory(_snapshot_only(3_000_000), 300, 6_000, [80, 80, 80])],
        "4000000": [_with_memory(_snapshot_only(4_000_000), 300, 8_000, [80, 80, 80])],
    }
    projected = scaling.memory_projection({"results": results}, 10_000_000)
    mem = {(kind, role): (per, at, low, high) for kind, role, per, at, low, high in projected}
    checked, alone = scaling.CHECKED, scaling.SNAPSHOT_ALONE
    assert mem[checked, "driver"] == (pytest.approx(1_000), pytest.approx(10_300), 1_000_000, 1_500_000)
    assert mem[checked, "each bookie"][:2] == (pytest.approx(500), pytest.approx(5_150))  # of the medians
    assert mem[alone, "driver"] == (pytest.approx(0), pytest.approx(300), 3_000_000, 4_000_000)
    assert mem[alone, "zookeeper"][:2] == (pytest.approx(2_000), pytest.approx(20_000))
    assert (alone, "each bookie") not in mem
