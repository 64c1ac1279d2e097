"""bench/layouts.py, the checker benchmarks' ledger planner: the realistic mix, rack-aware ensemble changes at
segment boundaries, and ground truth that matches a brute-force recount of what the bookies are loaded with.

The brute force here shares nothing with the planner's truth: write sets come from BookKeeper's
RoundRobinDistributionSchedule formula (entry e goes to bookie indexes (e + i) mod E, i < WQ), the copies
from the per-bookie shares the benchmark bulk-loads (`bookie_runs`), expanded entry by entry.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench import layouts

BOOKIES = [f"10.0.0.{i}:3181" for i in range(1, 10)]
RACKS = 3


@pytest.fixture(scope="module")
def plan20k():
    return layouts.plan("realistic", 20_000, BOOKIES, RACKS)


def rack(bookie: str) -> int:
    return BOOKIES.index(bookie) % RACKS  # LocalCluster: /rack-1../rack-N round robin


def test_realistic_mix_within_tolerance(plan20k) -> None:
    plan, holes = plan20k
    n = len(plan)
    long_ = [lay for lay in plan.values() if lay.length > 1_000]
    assert all(13_000 <= lay.length <= 50_000 for lay in long_)
    assert all(10 <= lay.length <= 1_000 for lay in plan.values() if lay.length <= 1_000)
    assert abs(len(long_) / n - 0.02) < 0.004
    multi = [lay for lay in plan.values() if len(lay.segments) > 1]
    assert abs(len(multi) / n - 0.10) < 0.01
    assert {len(lay.segments) for lay in multi} == {2, 3}
    quorums = Counter((lay.e, lay.wq, lay.aq) for lay in plan.values())
    assert set(quorums) == {(2, 2, 2), (3, 2, 2), (5, 3, 2)}
    assert all(abs(c / n - 1 / 3) < 0.02 for c in quorums.values())
    assert len(holes) == n // 100
    # holes land in later segments too, not only in the first
    later = 0
    for lid, lost in holes.items():
        starts = [first for first, _ens in plan[lid].segments]
        later += any(x >= starts[1] for xs in lost.values() for x in xs) if len(starts) > 1 else 0
    assert later > 0


def test_ensembles_rack_aware_and_changes_replace_one_bookie_on_its_rack(plan20k) -> None:
    plan, _holes = plan20k
    changes = 0
    for lay in plan.values():
        for _first, ens in lay.segments:
            assert len(ens) == lay.e and len(set(ens)) == lay.e
            assert len({rack(b) for b in ens}) == min(lay.e, RACKS)
        for (f0, before), (f1, after) in itertools.pairwise(lay.segments):
            assert 0 <= f0 < f1 <= lay.last  # every segment non-empty
            differ = [i for i in range(lay.e) if before[i] != after[i]]
            assert len(differ) == 1
            i = differ[0]
            assert after[i] not in before and rack(after[i]) == rack(before[i])
            changes += 1
    assert changes > 2_000


def _write_set(entry: int, e: int, wq: int) -> list[int]:
    return [(entry + i) % e for i in range(wq)]  # RoundRobinDistributionSchedule


def _brute_force(lay, lost: dict[str, set[int]]) -> tuple[str, list[tuple[int, int]]] | None:
    """Category and under-replicated entries from the loaded shares, entry by entry."""
    held = {b: {x for lo, hi in layouts.bookie_runs(lay, b, lost.get(b)) for x in range(lo, hi + 1)}
            for b in lay.bookies()}
    starts = [first for first, _ens in lay.segments]
    least, under = lay.wq, []
    for x in range(lay.length):
        seg = max(i for i, s in enumerate(starts) if s <= x)
        ens = lay.segments[seg][1]
        copies = sum(1 for i in _write_set(x, lay.e, lay.wq) if x in held[ens[i]])
        least = min(least, copies)
        if copies < lay.wq:
            under.append(x)
    if least == lay.wq:
        return None
    category = "no_replica" if least == 0 else "below_ack_quorum" if least < lay.aq else "below_write_quorum"
    runs: list[tuple[int, int]] = []
    for x in under:
        if runs and runs[-1][1] + 1 == x:
            runs[-1] = (runs[-1][0], x)
        else:
            runs.append((x, x))
    return category, runs


@pytest.mark.parametrize("holes_of", ["listing", "read"])
def test_truth_matches_brute_force_over_the_loaded_shares(holes_of: str) -> None:
    # 30,000 ledgers give 300 damaged ones; short ledgers keep the brute force fast, so long ledgers are
    # checked on their own below
    plan = layouts.realistic(30_000, BOOKIES, RACKS)
    holes = layouts.listing_holes(plan) if holes_of == "listing" else layouts.read_holes(plan)
    short = {lid: lost for lid, lost in holes.items() if plan[lid].length <= 1_000}
    assert len(short) > 250
    truth = layouts.truth(plan, short)
    for lid, lost in short.items():
        lay = plan[lid]
        for bookie, xs in lost.items():  # every hole is a real deletion of a copy the bookie holds
            full = {x for lo, hi in layouts.bookie_runs(lay, bookie) for x in range(lo, hi + 1)}
            assert xs <= full
        assert truth.get(lid) == _brute_force(lay, lost), lid
    assert set(truth) <= set(short)
    assert {cat for cat, _runs in truth.values()} == {"no_replica", "below_ack_quorum", "below_write_quorum"}


def test_truth_of_long_multi_segment_ledgers_matches_brute_force() -> None:
    plan = layouts.realistic(20_000, BOOKIES, RACKS)
    long_multi = {lid: lay for lid, lay in plan.items() if lay.length > 1_000 and len(lay.segments) > 1}
    picked = dict(list(long_multi.items())[:4])
    assert picked
    holes = layouts.listing_holes(picked, seed="long")
    truth = layouts.truth(picked, holes)
    for lid, lost in holes.items():
        assert truth.get(lid) == _brute_force(picked[lid], lost)


def test_read_holes_hit_what_first_last_reads_see() -> None:
    plan = layouts.realistic(10_000, BOOKIES, RACKS)
    for lid, lost in layouts.read_holes(plan).items():
        lay = plan[lid]
        ends = set()
        for first, last, ens in lay.spans():
            ends |= {first, last}
            for b in ens:
                runs = list(layouts.entries_of_bookie(ens.index(b), first, last, lay.e, lay.wq).runs())
                if runs:
                    ends |= {runs[0][0], runs[-1][1]}
        assert all(x in ends for xs in lost.values() for x in xs)


def test_shares_stay_runs_without_holes() -> None:
    lay = layouts.realistic(2_000, BOOKIES, RACKS)
    big = next(v for v in lay.values() if v.length > 13_000 and v.e == v.wq)
    b = next(iter(big.segments[0][1]))
    # E == WQ: every bookie holds every entry of its segments, one run per segment at most
    assert len(layouts.bookie_runs(big, b)) <= len(big.segments)


def test_uniform_layout_is_the_quick_bench_layout() -> None:
    plan, holes = layouts.plan("uniform", 1_000, BOOKIES, RACKS, entries=10)
    assert {(lay.e, lay.wq, lay.aq) for lay in plan.values()} == {(3, 2, 2), (5, 3, 2)}
    assert {lay.length for lay in plan.values()} == {10}
    assert all(len(lay.segments) == 1 for lay in plan.values())
    assert len(holes) == 10
    with pytest.raises(ValueError, match="unknown layout"):
        layouts.plan("zipf", 10, BOOKIES, RACKS)


def test_multi_segment_metadata_round_trips_as_bookkeeper_v3() -> None:
    from bench import checker
    from bkaudit.formats.ledger_metadata import parse, serialize

    plan = layouts.realistic(500, BOOKIES, RACKS)
    lay = next(v for v in plan.values() if len(v.segments) == 3)
    blob = serialize(checker.metadata_for(lay))
    assert blob.startswith(b"BookieMetadataFormatVersion\t3\n")
    md = parse(blob)
    assert [(s.first_entry_id, s.ensemble) for s in md.segments] == list(lay.segments)
    assert (md.ensemble_size, md.write_quorum, md.ack_quorum, md.last_entry_id) == (lay.e, lay.wq, lay.aq,
                                                                                     lay.last)


def test_footprint_counts_what_the_bench_loads() -> None:
    plan = layouts.realistic(300, BOOKIES, RACKS)
    holes = layouts.listing_holes(plan)
    need = layouts.footprint(plan, holes)
    damaged = [(lid, b) for lid, lay in plan.items() for b in lay.bookies() if b in holes.get(lid, {})]
    assert damaged, "the plan must have damaged shares for this test to mean anything"
    shares = [layouts.bookie_runs(plan[lid], b) for lid, b in damaged]
    assert need.copies == sum(hi - lo + 1 for runs in shares for lo, hi in runs)
    assert need.runs == sum(len(runs) for runs in shares)
    healthy = [(lid, b) for lid, lay in plan.items() for b in lay.bookies() if b not in holes.get(lid, {})]
    assert need.stripings == sum(len(layouts.bookie_stripings(plan[lid], b)) for lid, b in healthy)
    assert need.disk_bytes == need.copies * layouts.ROW_BYTES + need.stripings * layouts.STRIPING_ROW_BYTES
    whole = layouts.footprint(plan)  # nothing lost: every share is stripings
    assert (whole.copies, whole.runs) == (0, 0)
    assert whole.stripings == sum(len(layouts.bookie_stripings(lay, b)) for lay in plan.values()
                                  for b in lay.bookies())


def test_bookie_stripings_hold_the_bookie_runs() -> None:
    plan = layouts.realistic(200, BOOKIES, RACKS)
    from bkaudit.bookie.runs import StripedIds

    for lay in list(plan.values())[:200]:
        for b in lay.bookies():
            assert StripedIds(layouts.bookie_stripings(lay, b)).runs() == _merged(layouts.bookie_runs(lay, b))


def _merged(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(runs):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out
