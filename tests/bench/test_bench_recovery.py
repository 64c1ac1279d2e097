"""bench/recovery.py's pure parts: the ledger size plan, the ensembles, the seeded scenario order, the
per-worker rate arithmetic, the ground-truth bodies and their comparison,
and the BookKeeper-style copier's batches.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import Future
from typing import Any

import pytest

from bench import recovery
from bkaudit.formats.entry import DigestManager
from bkaudit.model.ledger import DigestType

# -- the ledger size plan ------------------------------------------------------------------------------------


def test_plan_is_seeded_and_within_the_issue_ranges() -> None:
    plan = recovery.ledger_plan(ledgers=200, seed=7)
    assert plan == recovery.ledger_plan(ledgers=200, seed=7)
    assert [s.ledger_id for s in plan] == list(range(1, 201))
    assert all(10_000 <= s.entries <= 50_000 for s in plan)
    assert len({s.entries for s in plan}) > 150  # lengths vary, not one size for all
    assert plan != recovery.ledger_plan(ledgers=200, seed=8)


def test_entry_sizes_are_seeded_per_ledger_and_within_1_to_4_kib() -> None:
    a, b = recovery.ledger_plan(ledgers=2, seed=3, entries=(5_000, 5_000))
    sizes = a.sizes()
    assert len(sizes) == 5_000
    assert sizes.min() >= 1024 and sizes.max() <= 4096
    assert sizes.max() - sizes.min() > 2_500  # spread over the range
    assert (sizes == a.sizes()).all()
    assert not (sizes == b.sizes()).all()  # another ledger, other sizes
    assert a.payload_bytes() == int(sizes.sum())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ledgers": 0}, "--ledgers"),
        ({"ledgers": 1, "entries": (10, 5)}, "entries per ledger"),
        ({"ledgers": 1, "entries": (0, 5)}, "entries per ledger"),
        ({"ledgers": 1, "sizes": (0, 5)}, "entry sizes"),
    ],
)
def test_plan_rejects_impossible_shapes(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        recovery.ledger_plan(**kwargs)


def test_ensembles_put_the_victim_in_every_ledger_at_every_index() -> None:
    sources = ["s1", "s2", "s3", "s4"]
    layout = recovery.ensembles(list(range(1, 13)), victim="v", sources=sources)
    assert all(len(set(ens)) == 3 and ens.count("v") == 1 for ens in layout.values())
    assert Counter(ens.index("v") for ens in layout.values()) == {0: 4, 1: 4, 2: 4}
    assert all(set(ens) - {"v"} <= set(sources) for ens in layout.values())
    pairs = Counter(frozenset(set(ens) - {"v"}) for ens in layout.values())
    assert len(pairs) == 6 and set(pairs.values()) == {2}  # every pair of sources, evenly


# -- the scenario order --------------------------------------------------------------------------------------


def test_scenario_order_is_a_seeded_permutation() -> None:
    names = ["bkaudit-1", "bk-style-1", "bkaudit-2"]
    assert recovery.scenario_order(names, seed=11) == recovery.scenario_order(names, seed=11)
    orders = {tuple(recovery.scenario_order(names, seed=s)) for s in range(40)}
    assert all(sorted(o) == sorted(names) for o in orders)
    assert len(orders) == 6  # every order occurs for some seed: none is built in
    assert names == ["bkaudit-1", "bk-style-1", "bkaudit-2"]  # the input is not shuffled in place


# -- the rates -----------------------------------------------------------------------------------------------


def test_rates_are_per_worker_in_mb_of_10_to_the_6_bytes() -> None:
    r = recovery.rates(bytes_copied=60_000_000, ledgers=10, seconds=30.0, workers=2)
    assert r.mb_per_s == pytest.approx(2.0)
    assert r.mb_per_s_per_worker == pytest.approx(1.0)
    assert r.ledgers_per_min == pytest.approx(20.0)
    assert r.ledgers_per_min_per_worker == pytest.approx(10.0)


@pytest.mark.parametrize(("seconds", "workers"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_rates_reject_no_time_or_no_worker(seconds: float, workers: int) -> None:
    with pytest.raises(ValueError):
        recovery.rates(bytes_copied=1, ledgers=1, seconds=seconds, workers=workers)


def test_summary_divides_by_the_scenario_workers() -> None:
    runs = [
        {"seconds": s, "wall_s": s + 2, "ledgers": 4, "bytes_written": 8_000_000, "entries_written": 100}
        for s in (2.0, 4.0, 8.0)
    ]
    summary = recovery.summarize({"results": {"bkaudit-2": runs, "bkaudit-1": runs}})
    two, one = summary["bkaudit-2"], summary["bkaudit-1"]
    assert one["mb_per_s_per_worker"].median == pytest.approx(2.0)  # 8 MB in 4 s
    assert two["mb_per_s_per_worker"].median == pytest.approx(1.0)
    assert (two["mb_per_s_per_worker"].low, two["mb_per_s_per_worker"].high) == pytest.approx((0.5, 2.0))
    assert one["ledgers_per_min_per_worker"].median == pytest.approx(60.0)
    assert two["ledgers_per_min_per_worker"].median == pytest.approx(30.0)


# -- ground truth and its comparison -------------------------------------------------------------------------


def test_bodies_are_real_crc32c_entries_with_the_planned_sizes() -> None:
    (spec,) = recovery.ledger_plan(ledgers=1, seed=5, entries=(50, 50))
    bodies = recovery.LedgerBodies(spec, recovery.payload_pool(5))
    sizes = spec.sizes()
    check = DigestManager(spec.ledger_id, b"", DigestType.CRC32C)
    total = 0
    for e in range(spec.entries):
        entry = check.verify(bodies.body(e), entry_id=e)
        total += int(sizes[e])
        assert len(entry.payload) == sizes[e]
        assert (entry.last_add_confirmed, entry.length) == (e - 1, total)
    assert bodies.length == total == spec.payload_bytes()
    assert bodies.body(7) == recovery.LedgerBodies(spec, recovery.payload_pool(5)).body(7)
    assert bodies.body(7) != bodies.body(8)


def _done(value: bytes | Exception) -> Future[bytes]:
    fut: Future[bytes] = Future()
    if isinstance(value, Exception):
        fut.set_exception(value)
    else:
        fut.set_result(value)
    return fut


def test_compare_reports_a_changed_byte_and_an_unreadable_entry() -> None:
    (spec,) = recovery.ledger_plan(ledgers=1, seed=5, entries=(10, 10))
    bodies = recovery.LedgerBodies(spec, recovery.payload_pool(5))
    good = bodies.body(2)
    flipped = good[:-1] + bytes([good[-1] ^ 1])
    problems: list[str] = []
    recovery._compare(
        [(1, _done(bodies.body(1))), (2, _done(flipped)), (3, _done(OSError("ENOENTRY")))], bodies, problems
    )
    assert problems == [
        "ledger 1 entry 2: body differs from the loaded one",
        "ledger 1 entry 3: unreadable: ENOENTRY",
    ]


# -- the BookKeeper-style copier -----------------------------------------------------------------------------


class _Recording(recovery.BookKeeperStyleCopier):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__(pool=None)
        self.calls: list[tuple[list[int], int]] = []

    def copy_ids(self, task: Any, entry_ids: Any, window: int, *, should_stop: Any = None) -> Any:
        self.calls.append((list(entry_ids), window))
        return recovery.CopyResult(copied=len(self.calls[-1][0]))


def test_bookkeeper_style_copies_every_id_first_to_last_in_sequential_batches_of_10() -> None:
    from bkaudit.autorecovery.copier import CopyTask

    # the lost index of an E3/WQ2 ledger stores 0,1, 3,4, 6,7, ...: BookKeeper copies the ids between too
    task = CopyTask(
        ledger_id=1, master_key=b"", digest=None, ensemble=("a", "b", "c"), ensemble_size=3,
        write_quorum=2, ranges=[(0, 1), (3, 4), (6, 7), (9, 10), (12, 13), (15, 16), (18, 19), (21, 22)],
        target="t",
    )
    copier = _Recording()
    result = copier.copy(task)
    assert [ids for ids, _ in copier.calls] == [list(range(0, 10)), list(range(10, 20)), [20, 21, 22]]
    assert {window for _, window in copier.calls} == {10}
    assert result.copied == 23


def test_disk_needed_counts_the_sources_and_a_full_baseline_copy() -> None:
    plan = recovery.ledger_plan(ledgers=4, seed=2, entries=(100, 200))
    payload = sum(s.payload_bytes() for s in plan)
    # sources: each entry on WQ=2 of 3 bookies, the lost one's 2/3 not loaded -> 4/3; targets: all ids -> 1
    assert recovery.disk_needed(plan) == int(payload * recovery.STORAGE_OVERHEAD * (4 / 3 + 1))
