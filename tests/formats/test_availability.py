"""bkaudit.formats.availability against BookKeeper's vectors, a transliteration of Java's encoder, naive sets.

Ground truth never comes from the code under test: bytes from the shared vectors (produced by the real Java
class) or from `JavaEncoder` below, entry sets from expanding groups by hand, missing entries from set loops.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bkaudit.errors import FormatError
from bkaudit.formats import availability
from bkaudit.formats.availability import Availability, decode, encode, encode_runs
from bkaudit.model.quorum import Striping, entries_of_bookie
from tests import shared_vectors

VECTORS = shared_vectors.load("availability.json")
Group = tuple[int, int, int, int]
T = TypeVar("T")
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- independent references ----------------------------------------------------------------------------------


def pack(groups: Iterable[Group], count: int | None = None, version: int = 0) -> bytes:
    """Wire bytes for groups, written by hand from the spec layout (64-byte header, 24-byte groups)."""
    groups = list(groups)
    header = struct.pack(">ii", version, len(groups) if count is None else count) + bytes(56)
    return header + b"".join(struct.pack(">qqii", *g) for g in groups)


class JavaEncoder:
    """Line-by-line transliteration of AvailabilityOfEntriesOfLedger(PrimitiveIterator.OfLong) in Java."""

    def __init__(self, entry_ids: Iterable[int]) -> None:
        self.sorted_groups: dict[int, list[int]] = {}  # TreeMap<Long, SequenceGroup>
        self.cur_group: list[int] | None = None  # [first, last, size, period]
        self.cur_start, self.cur_size = -1, 0
        for entry_id in entry_ids:
            self.add_entry(entry_id)
        self.close()

    def add_entry(self, entry_id: int) -> None:
        if self.cur_start == -1:
            self.cur_start, self.cur_size = entry_id, 1
        elif self.cur_start <= entry_id < self.cur_start + self.cur_size:
            pass
        elif self.cur_start + self.cur_size == entry_id:
            self.cur_size += 1
        else:
            self.add_cur_sequence_to_group()
            self.cur_start, self.cur_size = entry_id, 1

    def add_cur_sequence_to_group(self) -> None:
        group = self.cur_group
        if group is None:
            self.cur_group = [self.cur_start, self.cur_start, self.cur_size, 0]
        elif group[2] == self.cur_size and (group[1] == -1 or self.cur_start - group[1] == group[3]):
            group[1] = self.cur_start
            if group[3] == 0:
                group[3] = group[1] - group[0]
        else:
            self.sorted_groups[group[0]] = group
            self.cur_group = [self.cur_start, self.cur_start, self.cur_size, 0]

    def close(self) -> None:
        if self.cur_start != -1:
            self.add_cur_sequence_to_group()
            self.cur_start, self.cur_size = -1, 0
        if self.cur_group is not None:
            self.sorted_groups[self.cur_group[0]] = self.cur_group

    def groups(self) -> list[Group]:
        return [(g[0], g[1], g[2], g[3]) for _, g in sorted(self.sorted_groups.items())]

    def bytes(self) -> bytes:
        return pack(self.groups())


def expand(groups: Iterable[Group]) -> set[int]:
    """Every entry id the groups describe: `size` ids at first, first+period, ... up to last."""
    ids: set[int] = set()
    for first, last, size, period in groups:
        start = first
        while True:
            ids.update(range(start, start + size))
            if period == 0 or start + period > last:
                break
            start += period
    return ids


def to_ranges(ids: Iterable[int]) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    for e in sorted(set(ids)):
        if ranges and ranges[-1][1] + 1 == e:
            ranges[-1] = (ranges[-1][0], e)
        else:
            ranges.append((e, e))
    return ranges


def naive_missing(
    available: set[int], first: int, last: int, expected: Iterable[int]
) -> list[tuple[int, int]]:
    return to_ranges(e for e in expected if first <= e <= last and e not in available)


def bookie_entries(bookie: int, lo: int, hi: int, ensemble: int, write_quorum: int) -> list[int]:
    """Round-robin striping by its definition: bookie b stores e iff (b - e) mod E < WQ."""
    return [e for e in range(lo, hi + 1) if (bookie - e) % ensemble < write_quorum]


def striping_groups(s: Striping) -> list[Group]:
    """BP-34 groups for a Striping by arithmetic: partial head run, one period-based group, partial tail."""
    if s.last < s.first:
        return []
    if s.size == s.period:
        return [(s.first, s.first, s.last - s.first + 1, 0)]
    groups: list[Group] = []
    run = s.first - (s.first - s.start) % s.period
    if run < s.first:
        head_last = min(run + s.size - 1, s.last)
        if head_last >= s.first:
            groups.append((s.first, s.first, head_last - s.first + 1, 0))
        run += s.period
    if run + s.size - 1 <= s.last:
        last_full = run + (s.last - (run + s.size - 1)) // s.period * s.period
        groups.append((run, last_full, s.size, s.period))
        run = last_full + s.period
    if run <= s.last:
        groups.append((run, run, s.last - run + 1, 0))
    return groups


def holed_striping_groups(s: Striping, holes: Iterable[int]) -> list[Group]:
    """Groups for the striping's ids minus the given holes (split into segments between holes)."""
    groups: list[Group] = []
    lo = s.first
    for hole in [*sorted(set(holes)), s.last + 1]:
        groups += striping_groups(Striping(lo, hole - 1, s.start, s.period, s.size))
        lo = hole + 1
    return groups


# -- vectors -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("vec", VECTORS["encode"], ids=lambda v: str(v["entries"]))
def test_encode_vectors_byte_exact(vec: dict) -> None:
    assert encode(vec["entries"]).hex() == vec["hex"]
    assert JavaEncoder(vec["entries"]).bytes().hex() == vec["hex"]  # the reference agrees with Java


@pytest.mark.parametrize("vec", VECTORS["encode"], ids=lambda v: str(v["entries"]))
def test_decode_encode_vectors(vec: dict) -> None:
    decoded = decode(bytes.fromhex(vec["hex"]))
    expected = sorted(set(vec["entries"]))
    assert list(decoded) == expected
    assert decoded.total == len(expected)
    assert decoded.runs() is not None and list(decoded.runs()) == to_ranges(expected)
    data = bytes.fromhex(vec["hex"])
    assert decoded.groups == tuple(struct.unpack_from(">qqii", data, 64 + 24 * i) for i in range(data[7]))


@pytest.mark.parametrize("vec", VECTORS["decode"], ids=lambda v: str(v["groups"]))
def test_decode_vectors_period_based(vec: dict) -> None:
    decoded = decode(pack(tuple(g) for g in vec["groups"]))
    assert decoded.groups == tuple(tuple(g) for g in vec["groups"])
    assert decoded.total == vec["total"]
    assert list(decoded) == vec["available"]
    for e in range(-2, max(vec["available"]) + 5):
        assert (e in decoded) == (e in vec["available"])


def test_decode_bp34_example_2() -> None:
    groups = [(1, 6, 3, 5), (11, 13, 1, 2), (16, 16, 3, 0), (21, 21, 2, 0)]
    decoded = decode(pack(groups))
    assert decoded.total == 13
    assert list(decoded) == [1, 2, 3, 6, 7, 8, 11, 13, 16, 17, 18, 21, 22]


@pytest.mark.parametrize("vec", VECTORS["unavailable"], ids=lambda v: str(v["expected"]))
def test_unavailable_vectors(vec: dict) -> None:
    decoded = decode(encode(vec["available"]))
    lo, hi = min(vec["expected"]), max(vec["expected"])
    assert decoded.missing(lo, hi, vec["expected"]) == to_ranges(vec["unavailable"])
    assert decoded.missing_count(lo, hi, vec["expected"]) == len(vec["unavailable"])


@pytest.mark.parametrize("vec", VECTORS["malformed"], ids=lambda v: v["why"])
def test_malformed_vectors(vec: dict) -> None:
    with pytest.raises(FormatError) as info:
        decode(bytes.fromhex(vec["hex"]))
    assert info.value.field is not None and info.value.offset is not None


# -- encoder quirks ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ids", "groups"),
    [
        ([-1, 0, 1], [(0, 0, 2, 0)]),
        ([0, 1, -1, 2], [(0, 0, 2, 0), (2, 2, 1, 0)]),  # -1 ends the run being built, as in Java
        ([1, 0, 1], [(0, 0, 2, 0), (1, 1, 1, 0)]),  # overlapping groups from unsorted input
        ([1, 2, 3, 5, 1, 2], [(1, 1, 2, 0), (5, 5, 1, 0)]),  # a later run with the same start overwrites
        ([1, 2, 3, 5, 1, 2, 9], [(1, 1, 2, 0), (5, 5, 1, 0), (9, 9, 1, 0)]),
        ([0, 1, 2, 3, 7, 1], [(0, 0, 4, 0), (1, 1, 1, 0), (7, 7, 1, 0)]),  # a group inside another
        ([-1], []),
    ],
)
def test_encode_unsorted_quirks(ids: list[int], groups: list[Group]) -> None:
    assert JavaEncoder(ids).groups() == groups
    assert encode(ids) == pack(groups)


@pytest.mark.parametrize(("ids", "truth"), [([1, 0, 1], [0, 1]), ([0, 1, 2, 3, 7, 1], [0, 1, 2, 3, 7])])
def test_overlapping_java_groups_count_once(ids: list[int], truth: list[int]) -> None:
    decoded = decode(encode(ids))
    assert decoded.groups == tuple(JavaEncoder(ids).groups())  # overlapping, as Java writes them
    assert decoded.total == len(truth)
    assert list(decoded) == truth
    assert decoded.missing(0, 9) == to_ranges(set(range(10)) - set(truth))


@pytest.mark.parametrize("bad", [[-2], [0, 2**63], [5, -7]])
def test_encode_rejects_non_entry_ids(bad: list[int]) -> None:
    with pytest.raises(ValueError):
        encode(bad)


@FAST
@given(
    st.one_of(
        st.lists(st.integers(min_value=-1, max_value=40), max_size=40),
        st.lists(st.integers(min_value=-1, max_value=8), max_size=25),  # many repeated starts and overlaps
    )
)
def test_encode_matches_java_for_any_order(ids: list[int]) -> None:
    assert encode(ids) == JavaEncoder(ids).bytes()


@FAST
@given(st.lists(st.integers(min_value=-1, max_value=10**6), max_size=60))
def test_round_trip_sorted(ids: list[int]) -> None:
    ids.sort()
    decoded = decode(encode(ids))
    expected = sorted({e for e in ids if e >= 0})
    assert list(decoded) == expected
    assert decoded.total == len(expected)
    assert list(decoded.runs()) == to_ranges(expected)


@FAST
@given(
    st.one_of(
        st.lists(st.integers(min_value=-1, max_value=50), max_size=50),
        st.lists(st.integers(min_value=-1, max_value=10), max_size=25),
    )
)
def test_decode_of_any_java_encoding_matches_its_groups(ids: list[int]) -> None:
    groups = JavaEncoder(ids).groups()
    truth = expand(groups)
    decoded = decode(encode(ids))
    assert decoded.total == len(truth)
    assert list(decoded) == sorted(truth)
    assert all((e in decoded) == (e in truth) for e in range(-1, 60))


# -- encode_runs ---------------------------------------------------------------------------------------------

runs_strategy = st.lists(
    st.tuples(st.integers(min_value=0, max_value=5), st.integers(min_value=0, max_value=6)), max_size=30
)


def build_runs(gaps_and_lengths: list[tuple[int, int]], start: int = 0) -> list[tuple[int, int]]:
    runs, cursor = [], start
    for gap, length in gaps_and_lengths:
        first = cursor + gap
        runs.append((first, first + length))
        cursor = first + length + 1
    return runs


@FAST
@given(runs_strategy, st.integers(min_value=0, max_value=2**40))
def test_encode_runs_equals_encode(gaps_and_lengths: list[tuple[int, int]], start: int) -> None:
    runs = build_runs(gaps_and_lengths, start)  # gap 0 makes adjacent runs, which must merge like Java's
    ids = [e for first, last in runs for e in range(first, last + 1)]
    assert encode_runs(runs) == encode(ids)
    assert encode_runs(iter(runs)) == encode(ids)


@pytest.mark.parametrize("runs", [[(3, 1)], [(0, 5), (3, 8)], [(5, 6), (0, 1)], [(-1, 2)], [(0, 2**63)]])
def test_encode_runs_rejects_bad_runs(runs: list[tuple[int, int]]) -> None:
    with pytest.raises(ValueError):
        encode_runs(runs)


def test_encode_runs_splits_runs_longer_than_int32() -> None:
    data = encode_runs([(0, 2**31)])
    decoded = decode(data)
    assert decoded.groups == ((0, 0, 2**31 - 1, 0), (2**31 - 1, 2**31 - 1, 2, 0))
    assert decoded.total == 2**31 + 1
    assert list(decoded.runs()) == [(0, 2**31)]


long_runs_strategy = st.lists(
    st.tuples(st.integers(min_value=0, max_value=5), st.integers(min_value=0, max_value=6)),
    min_size=availability.VECTOR_MIN_RUNS - 4,
    max_size=availability.VECTOR_MIN_RUNS * 3,
)


@FAST
@given(long_runs_strategy, st.integers(min_value=0, max_value=2**40))
def test_long_run_lists_take_the_column_path_and_still_equal_java(
    gaps_and_lengths: list[tuple[int, int]], start: int
) -> None:
    runs = build_runs(gaps_and_lengths, start)  # around VECTOR_MIN_RUNS, adjacent runs included
    ids = [e for first, last in runs for e in range(first, last + 1)]
    java = encode(ids)
    assert encode_runs(runs) == java
    assert availability.encode_run_arrays([f for f, _ in runs], [last for _, last in runs]) == java


@FAST
@given(long_runs_strategy, st.integers(min_value=0, max_value=2**40))
def test_separated_run_arrays_equal_java(gaps_and_lengths: list[tuple[int, int]], start: int) -> None:
    """A bookie index's runs (ascending, a gap between any two); touching runs are merged first, as the
    index keeps them."""
    runs = merge_touching(build_runs(gaps_and_lengths, start))
    ids = [e for first, last in runs for e in range(first, last + 1)]
    firsts = np.array([f for f, _ in runs], dtype=np.int64)
    lasts = np.array([last for _, last in runs], dtype=np.int64)
    assert availability.encode_separated_run_arrays(firsts, lasts) == encode(ids)


@pytest.mark.parametrize("bad", [(-3, -1), (5, 5 + 2**31), (2**63 - 3, 2**63 - 1)])
def test_separated_run_arrays_outside_the_fast_path_take_the_validating_one(bad: tuple[int, int]) -> None:
    runs = [(10 * i + 100, 10 * i + 101) for i in range(3)]
    runs = [bad, *runs] if bad[0] < 100 else [*runs, bad]
    firsts = np.array([f for f, _ in runs], dtype=np.int64)
    lasts = np.array([last for _, last in runs], dtype=np.int64)
    try:
        expected: bytes | type[ValueError] = availability.encode_run_arrays(firsts, lasts)
    except ValueError:
        expected = ValueError
    if expected is ValueError:
        with pytest.raises(ValueError):
            availability.encode_separated_run_arrays(firsts, lasts)
    else:
        assert availability.encode_separated_run_arrays(firsts, lasts) == expected


def merge_touching(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for first, last in runs:
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


@pytest.mark.parametrize("bad", [(3, 1), (150, 160), (-1, 2), (0, 2**63), (2**63 - 1, 2**63 - 1)])
def test_long_run_lists_reject_bad_runs_like_short_ones(bad: tuple[int, int]) -> None:
    runs = [(10 * i, 10 * i + 1) for i in range(availability.VECTOR_MIN_RUNS)]
    runs.insert(20, bad)
    with pytest.raises(ValueError):
        encode_runs(runs)
    with pytest.raises(ValueError):
        availability.encode_run_arrays([f for f, _ in runs], [last for _, last in runs])


def test_column_path_splits_long_runs_and_reaches_the_int64_edge() -> None:
    runs = [(3 * i, 3 * i + 1) for i in range(availability.VECTOR_MIN_RUNS)]
    base = runs[-1][1] + 5
    tail = [(base, base + 2**31), (2**63 - 5, 2**63 - 1)]
    data = encode_runs(runs + tail)
    assert list(decode(data).runs()) == runs + tail
    assert data == availability._encode_irregular_runs(runs + tail)
    with pytest.raises(ValueError):
        availability.encode_run_arrays([1, 2], [1])


@FAST
@given(
    st.integers(min_value=1, max_value=9),
    st.data(),
    st.integers(min_value=0, max_value=2**40),
    st.integers(min_value=-3, max_value=300),
)
def test_encode_striping_equals_java_over_its_ids(
    period: int, data: st.DataObject, first: int, span: int
) -> None:
    """Both sides of the numpy crossover, cut runs at either end, empty and one-run stripings."""
    size = data.draw(st.integers(min_value=1, max_value=period))
    start = first - data.draw(st.integers(min_value=0, max_value=2 * period))
    striping = Striping(first, first + span, start, period, size)
    ids = [e for e in range(first, first + span + 1) if (e - start) % period < size]  # the definition
    assert availability.encode_striping(striping) == encode(ids)


@FAST
@given(st.data(), st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=4), st.booleans())
def test_encode_segment_stripings_equals_java_over_the_union(
    data: st.DataObject, spans: list[int], overlap: bool
) -> None:
    """A bookie's share of a multi-segment ledger: one striping per segment it served (some skipped),
    runs touching across boundaries joined; overlapping ranges (never a ledger's) still encode the union."""
    stripings, first = [], data.draw(st.integers(min_value=0, max_value=50))
    for span in spans:
        period = data.draw(st.integers(min_value=1, max_value=6))
        size = data.draw(st.integers(min_value=1, max_value=period))
        if data.draw(st.booleans()) or not stripings:
            start = first - data.draw(st.integers(min_value=0, max_value=period))
            stripings.append(Striping(first, first + span - 1, start, period, size))
        first += span - (data.draw(st.integers(min_value=0, max_value=span)) if overlap else 0)
    ids = sorted({e for s in stripings for e in range(s.first, s.last + 1) if e in s})  # the definition
    shuffled = data.draw(st.permutations(stripings))
    assert availability.encode_segment_stripings(shuffled) == encode(ids)


def test_encode_striping_edges_take_the_validated_path() -> None:
    whole = Striping(5, 5 + 2**31, 5, 1, 1)  # one run longer than an int32 size: split, as encode_runs does
    assert availability.encode_striping(whole) == encode_runs([(5, 5 + 2**31)])
    top = Striping(2**63 - 7, 2**63 - 1, 0, 3, 2)  # ids up to the int64 edge
    assert availability.encode_striping(top) == encode_runs(list(top.runs()))
    assert availability.encode_striping(Striping(10, 9, 0, 3, 2)) == encode([])


# -- decoding valid group shapes -----------------------------------------------------------------------------


@st.composite
def group_lists(draw: st.DrawFn) -> list[Group]:
    """Ascending, non-overlapping groups: runs, period-based groups, single sequences, touching sequences."""
    groups: list[Group] = []
    cursor = draw(st.integers(min_value=0, max_value=5))
    for _ in range(draw(st.integers(min_value=0, max_value=6))):
        first = cursor + draw(st.integers(min_value=0, max_value=4))
        size = draw(st.integers(min_value=1, max_value=4))
        kind = draw(st.sampled_from(["run", "periodic", "touching", "single"]))
        if kind == "run":
            group = (first, first, size, 0)
        elif kind == "single":
            group = (first, first, size, draw(st.integers(min_value=0, max_value=9)))
        else:
            period = size if kind == "touching" else draw(st.integers(min_value=size + 1, max_value=size + 4))
            group = (first, first + period * draw(st.integers(min_value=1, max_value=5)), size, period)
        groups.append(group)
        cursor = group[1] + group[2]
    return groups


@FAST
@given(group_lists())
def test_decode_period_groups_against_naive_expansion(groups: list[Group]) -> None:
    truth = expand(groups)
    decoded = decode(pack(groups) + b"trailing bytes are ignored")
    assert decoded.groups == tuple(groups)
    assert decoded.total == len(truth)
    assert list(decoded) == sorted(truth)
    assert list(decoded.runs()) == to_ranges(truth)
    top = max(truth, default=0) + 3
    assert [e for e in range(-2, top) if e in decoded] == sorted(truth)


@FAST
@given(group_lists(), st.integers(min_value=0, max_value=60), st.integers(min_value=0, max_value=60))
def test_missing_everything_in_range(groups: list[Group], first: int, span: int) -> None:
    truth = expand(groups)
    decoded = decode(pack(groups))
    last = first + span - 5  # sometimes an empty range
    expected = naive_missing(truth, first, last, range(first, last + 1))
    assert decoded.missing(first, last) == expected
    assert decoded.missing_count(first, last) == sum(b - a + 1 for a, b in expected)


@FAST
@given(group_lists(), st.sets(st.integers(min_value=0, max_value=70), max_size=30), st.integers(0, 70))
def test_missing_iterable_expectation(groups: list[Group], wanted: set[int], last: int) -> None:
    truth = expand(groups)
    decoded = decode(pack(groups))
    expected = naive_missing(truth, 0, last, wanted)
    assert decoded.missing(0, last, list(wanted)) == expected
    assert decoded.missing_count(0, last, iter(wanted)) == sum(b - a + 1 for a, b in expected)


@st.composite
def striping_cases(draw: st.DrawFn) -> tuple[int, int, int, int, int]:
    ensemble = draw(st.integers(min_value=1, max_value=7))
    write_quorum = draw(st.integers(min_value=1, max_value=ensemble))
    bookie = draw(st.integers(min_value=0, max_value=ensemble - 1))
    first = draw(st.integers(min_value=0, max_value=20))
    last = first + draw(st.integers(min_value=-1, max_value=80))
    return bookie, first, last, ensemble, write_quorum


@FAST
@given(
    striping_cases(),
    st.sets(st.integers(min_value=0, max_value=110), max_size=12),
    st.sets(st.integers(min_value=0, max_value=110), max_size=6),
    st.booleans(),
    st.tuples(st.integers(min_value=0, max_value=30), st.integers(min_value=-5, max_value=120)),
)
def test_missing_with_striping_expectation(
    case: tuple[int, int, int, int, int],
    holes: set[int],
    extras: set[int],
    period_based: bool,
    query: tuple[int, int],
) -> None:
    bookie, first, last, ensemble, write_quorum = case
    stored = set(bookie_entries(bookie, first, last, ensemble, write_quorum))
    if period_based:  # the bookie answers with BP-34 period groups; extras would overlap them
        striping = Striping(first, last, (bookie - write_quorum + 1) % ensemble, ensemble, write_quorum)
        groups = holed_striping_groups(striping, holes & stored)
        truth = stored - holes
        assert expand(groups) == truth  # the scaffolding itself is right
        decoded = decode(pack(groups))
    else:
        truth = (stored - holes) | extras
        decoded = decode(encode(sorted(truth)))
    expected_striping = entries_of_bookie(bookie, first, last, ensemble, write_quorum)
    q_first, q_last = query
    want = naive_missing(truth, q_first, q_last, bookie_entries(bookie, first, last, ensemble, write_quorum))
    assert decoded.missing(q_first, q_last, expected_striping) == want
    assert decoded.missing_count(q_first, q_last, expected_striping) == sum(b - a + 1 for a, b in want)
    assert all((e in decoded) == (e in truth) for e in range(0, last + 3))


@FAST
@given(
    st.integers(min_value=1, max_value=6),
    st.integers(min_value=1, max_value=6),
    st.integers(min_value=0, max_value=12),
    st.integers(min_value=1, max_value=6),
    st.integers(min_value=1, max_value=6),
    st.integers(min_value=0, max_value=12),
    st.integers(min_value=0, max_value=90),
)
def test_missing_between_unrelated_periodic_patterns(
    a_size: int, a_gap: int, a_start: int, e_size: int, e_gap: int, e_start: int, last: int
) -> None:
    """Available and expected both period-based with arbitrary (often different) periods and phases."""
    available = Striping(a_start, 100, a_start, a_size + a_gap, a_size)
    expected = Striping(0, 100, e_start, e_size + e_gap, e_size)
    truth = set(range(a_start, 101)) & {e for e in range(101) if (e - a_start) % (a_size + a_gap) < a_size}
    decoded = decode(pack(striping_groups(available)))
    want_ids = [e for e in range(101) if (e - e_start) % (e_size + e_gap) < e_size]
    want = naive_missing(truth, 0, last, want_ids)
    assert decoded.missing(0, last, expected) == want
    assert decoded.missing_count(0, last, expected) == sum(b - a + 1 for a, b in want)


def test_runs_merge_across_period_group_and_run() -> None:
    decoded = decode(pack([(1, 4, 2, 3), (6, 6, 2, 0)]))
    assert list(decoded.runs()) == [(1, 2), (4, 7)]
    assert decoded.missing(0, 9) == [(0, 0), (3, 3), (8, 9)]


def test_missing_rejects_negative_first() -> None:
    with pytest.raises(ValueError):
        decode(encode([0])).missing(-1, 5)


def test_availability_is_immutable_and_hashable() -> None:
    decoded = decode(encode([1, 2, 5]))
    with pytest.raises(AttributeError):
        decoded.groups = ()  # type: ignore[misc]
    assert decoded == decode(encode_runs([(1, 2), (5, 5)]))
    assert hash(decoded) == hash(decode(encode([1, 2, 5])))
    assert decoded != decode(encode([1, 2]))
    # equality is by the normalised (merged) form, so adjacent or overlapping runs equal one run
    assert Availability([(0, 0, 2, 0), (2, 2, 1, 0)]) == Availability([(0, 0, 3, 0)])
    assert Availability([(0, 0, 4, 0), (1, 1, 1, 0)]) == Availability([(0, 0, 4, 0)])
    assert not decode(encode([])) and decoded
    assert "x" not in decoded and 1.0 not in decoded


# -- malformed input -----------------------------------------------------------------------------------------


def group_at(index: int, field: str) -> tuple[str, int]:
    names = {"first": ("firstSequenceStart", 0), "last": ("lastSequenceStart", 8)}
    names |= {"size": ("sequenceSize", 16), "period": ("sequencePeriod", 20)}
    name, delta = names[field]
    return f"sequenceGroup[{index}].{name}", 64 + 24 * index + delta


MALFORMED = {
    "empty": (b"", ("header", 0)),
    "63-byte header": (bytes(63), ("header", 0)),
    "version 1": (pack([], version=1), ("version", 0)),
    "version -1": (pack([], version=-1), ("version", 0)),
    "negative group count": (pack([], count=-1), ("numOfSequenceGroups", 4)),
    "fewer groups than header": (pack([(1, 1, 1, 0)], count=3), ("sequenceGroup[1]", 88)),
    "half a group": (pack([(1, 1, 1, 0)])[:80], ("sequenceGroup[0]", 64)),
    "period 0 with last != first": (pack([(1, 10, 2, 0)]), group_at(0, "period")),
    "zero size": (pack([(1, 1, 0, 0)]), group_at(0, "size")),
    "negative size": (pack([(0, 0, 1, 0), (5, 5, -3, 0)]), group_at(1, "size")),
    "negative period": (pack([(1, 1, 2, -3)]), group_at(0, "period")),
    "last below first": (pack([(10, 4, 2, 3)]), group_at(0, "last")),
    "negative first": (pack([(-5, -5, 1, 0)]), group_at(0, "first")),
    "entry ids overflow int64": (pack([(2**63 - 3, 2**63 - 3, 5, 0)]), group_at(0, "size")),
    "period group overflow int64": (pack([(2**63 - 10, 2**63 - 4, 4, 3)]), group_at(0, "size")),
    "groups descending": (pack([(5, 5, 1, 0), (1, 1, 1, 0)]), group_at(1, "first")),
    "duplicate first": (pack([(5, 5, 1, 0), (5, 5, 3, 0)]), group_at(1, "first")),
    "run inside period group": (pack([(0, 6, 2, 3), (4, 4, 1, 0)]), group_at(1, "first")),
    "period group inside run": (pack([(0, 0, 10, 0), (5, 8, 1, 3)]), group_at(1, "first")),
    "last not on a period": (pack([(1, 10, 2, 4)]), group_at(0, "last")),
    "sequences overlap": (pack([(1, 4, 5, 3)]), group_at(0, "size")),
}


@pytest.mark.parametrize("case", list(MALFORMED), ids=str)
def test_malformed_raises_format_error_with_field_and_offset(case: str) -> None:
    data, (field, offset) = MALFORMED[case]
    with pytest.raises(FormatError) as info:
        decode(data)
    assert (info.value.field, info.value.offset) == (field, offset)


small = st.integers(min_value=-3, max_value=40)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(small, small, st.integers(-2, 6), st.integers(-2, 6)), max_size=5))
def test_any_group_soup_is_rejected_or_answered_correctly(groups: list[Group]) -> None:
    """Whatever decode accepts, it answers exactly; everything else is a FormatError (and nothing else)."""
    try:
        decoded = decode(pack(groups))
    except FormatError as exc:
        assert exc.field is not None and exc.offset is not None
        return
    truth = expand(groups)
    assert decoded.total == len(truth)
    assert list(decoded) == sorted(truth)
    assert decoded.missing(0, 60) == naive_missing(truth, 0, 60, range(61))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_format_error(data: bytes) -> None:
    try:
        decode(data)
    except FormatError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=20), st.data())
def test_corrupted_encodings_raise_only_format_error(ids: list[int], data: st.DataObject) -> None:
    encoded = bytearray(encode(sorted(ids)))
    position = data.draw(st.integers(0, len(encoded) - 1))
    encoded[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(encoded)))
    try:
        decoded = decode(bytes(encoded[:cut]))
    except FormatError:
        return
    assume(decoded.total < 10**6)
    assert sum(1 for _ in decoded) == decoded.total


# -- scale: a 10^9-entry ledger must be answered by arithmetic -----------------------------------------------

BILLION = 10**9


def timed(fn: Callable[..., T], *args: object) -> tuple[T, float]:
    started = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - started


@pytest.mark.timeout(10)  # a per-entry loop over 10^9 ids would run for minutes: fail fast instead
def test_billion_entry_ledger_full_replication_is_milliseconds() -> None:
    holes = [7, 8, 123_456_789, 500_000_000, BILLION - 1]
    runs = [(0, 6), (9, 123_456_788), (123_456_790, 499_999_999), (500_000_001, BILLION - 2)]
    decoded, decode_time = timed(decode, encode_runs(runs))
    expected = entries_of_bookie(1, 0, BILLION - 1, 3, 3)  # E == WQ: every bookie stores every entry
    missing, missing_time = timed(decoded.missing, 0, BILLION - 1, expected)
    assert missing == to_ranges(holes)
    assert decoded.missing(0, BILLION - 1) == to_ranges(holes)
    assert decoded.missing_count(0, BILLION - 1, expected) == len(holes)
    assert decoded.total == BILLION - len(holes)
    assert 123_456_789 not in decoded and 123_456_790 in decoded
    assert decode_time + missing_time < 0.05


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("ensemble", "write_quorum", "bookie"), [(3, 2, 0), (5, 2, 3), (7, 3, 6)])
def test_billion_entry_ledger_striped_is_milliseconds(ensemble: int, write_quorum: int, bookie: int) -> None:
    expected = entries_of_bookie(bookie, 0, BILLION - 1, ensemble, write_quorum)
    holes = [e for e in (0, 1, 2, 3, 4, 99_999_999, 100_000_000, 600_000_001, BILLION - 1) if e in expected]
    groups = holed_striping_groups(expected, holes)
    data = pack(groups)
    decoded, decode_time = timed(decode, data)
    missing, missing_time = timed(decoded.missing, 0, BILLION - 1, expected)
    count, count_time = timed(decoded.missing_count, 0, BILLION - 1, expected)
    assert missing == to_ranges(holes)
    assert count == len(holes)
    assert decoded.total == expected.count() - len(holes)
    assert decode_time + missing_time + count_time < 0.05
    # a sub-range query that starts mid-stripe
    lo, hi = 99_999_990, 100_000_010
    assert decoded.missing(lo, hi, expected) == naive_missing(
        set(range(lo, hi + 1)) - set(holes), lo, hi, bookie_entries(bookie, lo, hi, ensemble, write_quorum)
    )


def test_module_constants() -> None:
    assert availability.HEADER_SIZE == 64 and availability.GROUP_SIZE == 24
    assert Availability([(1, 1, 2, 0)]).total == 2


# -- a listing that may hide the bookie's newest entry (Java's interleaved index) -------------------------


@given(
    st.integers(1, 6).flatmap(lambda e: st.tuples(st.just(e), st.integers(1, e), st.integers(0, e - 1))),
    st.integers(0, 60),
    st.integers(-1, 300),
)
def test_last_is_the_highest_id_of_any_encoding(layout: tuple[int, int, int], first: int, last: int) -> None:
    e, wq, idx = layout
    striping = entries_of_bookie(idx, first, last, e, wq)
    ids = list(striping)
    top = ids[-1] if ids else None
    assert striping.last_held() == top
    assert decode(availability.encode_striping(striping)).last == top  # period groups
    assert decode(encode(ids)).last == top  # Java's one group per run


@pytest.mark.parametrize(
    ("listed", "last_entry", "hidden"),
    [
        ([], 0, True),  # Java lists a ledger whose only entry is 0 as empty
        (list(range(1024)), 1024, True),  # ... and 0..1023 of a 1,025-entry ledger
        ([0, 3, 6], 9, True),  # striped: the bookie's next entry
        ([0, 1, 2], 2, False),  # complete
        ([0, 1, 5], 2, False),  # something past it is listed: not that quirk, a real hole
        ([0, 1], None, False),  # the bookie must hold nothing
    ],
)
def test_listing_may_hide_only_an_entry_past_everything_listed(listed, last_entry, hidden) -> None:
    assert availability.listing_may_hide(decode(encode(listed)), last_entry) is hidden


def test_with_entry_adds_the_confirmed_entry() -> None:
    assert list(decode(availability.with_entry(encode([0, 1, 2]), 3)).runs()) == [(0, 3)]
    assert list(decode(availability.with_entry(encode([]), 0))) == [0]
    assert list(decode(availability.with_entry(encode([0, 3]), 6))) == [0, 3, 6]
