"""bkaudit.model.quorum against naive per-entry / brute-force reference implementations."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkaudit.errors import QuorumError
from bkaudit.model.quorum import (
    AckSet,
    Striping,
    entries_of_bookie,
    fencing_covered,
    recovery_absent_threshold,
    stores_entry,
    union_run_arrays,
    validate_quorum,
    write_set,
)

QUICK = settings(max_examples=200, deadline=None)


@st.composite
def quorums(draw: st.DrawFn, max_e: int = 9) -> tuple[int, int, int]:
    """Valid (E, WQ, AQ) with E >= WQ >= AQ >= 1."""
    e = draw(st.integers(1, max_e))
    wq = draw(st.integers(1, e))
    aq = draw(st.integers(1, wq))
    return e, wq, aq


# -- naive references: one entry at a time, exactly as the protocol describes it -------------------------
def naive_write_set(entry_id: int, e: int, wq: int) -> tuple[int, ...]:
    return tuple((entry_id + j) % e for j in range(wq))


def naive_stripe(first: int, last: int, start: int, period: int, size: int) -> list[int]:
    return [x for x in range(first, last + 1) if (x - start) % period < size]


def naive_runs(ids: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for x in ids:
        if runs and runs[-1][1] == x - 1:
            runs[-1] = (runs[-1][0], x)
        else:
            runs.append((x, x))
    return runs


def naive_covered(responded: set[int], e: int, wq: int, aq: int) -> bool:
    """Every write set has >= WQ-AQ+1 responders, checked entry by entry over one full period."""
    return all(len(set(naive_write_set(i, e, wq)) & responded) >= wq - aq + 1 for i in range(e))


# -- validate_quorum ---------------------------------------------------------------------------------------
@given(st.integers(-2, 6), st.integers(-2, 6), st.integers(-2, 6))
@QUICK
def test_validate_quorum_accepts_exactly_the_creation_invariant(e: int, wq: int, aq: int) -> None:
    if e >= wq >= aq >= 1:
        validate_quorum(e, wq, aq)
    else:
        with pytest.raises(QuorumError, match=f"E={e} WQ={wq} AQ={aq}"):
            validate_quorum(e, wq, aq)


# -- write_set / stores_entry ------------------------------------------------------------------------------
@given(quorums(), st.integers(0, 10**12))
@QUICK
def test_write_set_matches_round_robin(q: tuple[int, int, int], entry_id: int) -> None:
    e, wq, _ = q
    ws = write_set(entry_id, e, wq)
    assert ws == naive_write_set(entry_id, e, wq)
    assert len(set(ws)) == wq  # distinct bookies because WQ <= E
    assert ws[0] == entry_id % e


@given(quorums(), st.integers(0, 10**6))
@QUICK
def test_stores_entry_agrees_with_write_set(q: tuple[int, int, int], entry_id: int) -> None:
    e, wq, _ = q
    members = set(naive_write_set(entry_id, e, wq))
    assert [stores_entry(b, entry_id, e, wq) for b in range(e)] == [b in members for b in range(e)]


def test_write_set_known_values() -> None:
    assert write_set(0, 3, 2) == (0, 1)
    assert write_set(2, 3, 2) == (2, 0)
    assert write_set(7, 5, 3) == (2, 3, 4)
    assert write_set(9, 5, 3) == (4, 0, 1)
    assert write_set(4, 4, 4) == (0, 1, 2, 3)


# -- Striping ----------------------------------------------------------------------------------------------
@st.composite
def stripings(draw: st.DrawFn) -> Striping:
    period = draw(st.integers(1, 8))
    size = draw(st.integers(1, period))
    first = draw(st.integers(-20, 60))
    last = draw(st.integers(first - 3, first + 60))
    start = draw(st.integers(-30, 30))
    return Striping(first=first, last=last, start=start, period=period, size=size)


@given(stripings())
@QUICK
def test_striping_iteration_count_len_match_naive(s: Striping) -> None:
    expected = naive_stripe(s.first, s.last, s.start, s.period, s.size)
    assert list(s) == expected
    assert s.count() == len(expected) == len(s)


@given(stripings())
@QUICK
def test_striping_contains_matches_naive(s: Striping) -> None:
    expected = set(naive_stripe(s.first, s.last, s.start, s.period, s.size))
    for x in range(s.first - s.period - 2, s.last + s.period + 3):
        assert (x in s) == (x in expected)


@given(stripings())
@QUICK
def test_striping_runs_are_maximal_ascending_and_exact(s: Striping) -> None:
    expected = naive_stripe(s.first, s.last, s.start, s.period, s.size)
    assert list(s.runs()) == naive_runs(expected)


@given(stripings())
@QUICK
def test_striping_run_count_is_the_number_of_naive_runs(s: Striping) -> None:
    assert s.run_count() == len(naive_runs(naive_stripe(s.first, s.last, s.start, s.period, s.size)))


@given(stripings())
@QUICK
def test_striping_first_run_start_is_where_the_first_naive_run_begins(s: Striping) -> None:
    runs = naive_runs(naive_stripe(s.first, s.last, s.start, s.period, s.size))
    if runs:  # that run may begin before `first`: the ids from its start are in the pattern
        start = s.first_run_start()
        assert start <= runs[0][0] and (start - s.start) % s.period == 0
        assert runs[0][0] - start < s.size and (runs[0][0] == s.first or start == runs[0][0])


def test_striping_contains_rejects_non_integers() -> None:
    s = Striping(first=0, last=10, start=0, period=3, size=2)
    assert "1" not in s
    assert 1.0 not in s
    assert None not in s


def test_striping_empty_range_and_full_period() -> None:
    assert list(Striping(first=5, last=4, start=0, period=3, size=1)) == []
    assert Striping(first=5, last=-1, start=0, period=3, size=1).count() == 0
    full = Striping(first=-1, last=3, start=7, period=4, size=4)
    assert list(full.runs()) == [(-1, 3)]
    assert full.count() == 5


def test_striping_bp34_examples() -> None:
    # BP-34 example 1: entries 1, 2, 4, 5, 7, 8, 10, 11 are one SequenceGroup (start 1, size 2, period 3)
    s = Striping(first=1, last=11, start=1, period=3, size=2)
    assert list(s) == [1, 2, 4, 5, 7, 8, 10, 11]
    assert list(s.runs()) == [(1, 2), (4, 5), (7, 8), (10, 11)]


@given(st.integers(0, 10**15), st.integers(-10, 10), st.integers(1, 9), st.data())
@QUICK
def test_striping_count_on_huge_ranges_by_residue(
    last: int, start: int, period: int, data: st.DataObject
) -> None:
    """Counting by residue class (an independent O(period) formula) agrees on ranges far too big to list."""
    size = data.draw(st.integers(1, period))
    s = Striping(first=0, last=last, start=start, period=period, size=size)
    expected = sum(
        (last - r) // period + 1 for r in range(min(period, last + 1)) if (r - start) % period < size
    )
    assert s.count() == expected


@pytest.mark.parametrize(("period", "size"), [(0, 1), (3, 0), (3, 4), (-1, -1)])
def test_striping_rejects_impossible_shapes(period: int, size: int) -> None:
    with pytest.raises(QuorumError):
        Striping(first=0, last=1, start=0, period=period, size=size)


# -- entries_of_bookie -------------------------------------------------------------------------------------
@given(quorums(), st.data())
@QUICK
def test_entries_of_bookie_matches_per_entry_schedule(q: tuple[int, int, int], data: st.DataObject) -> None:
    e, wq, _ = q
    bookie = data.draw(st.integers(0, e - 1))
    first = data.draw(st.integers(0, 40))
    last = data.draw(st.integers(first - 2, first + 50))
    got = entries_of_bookie(bookie, first, last, e, wq)
    expected = [x for x in range(first, last + 1) if bookie in naive_write_set(x, e, wq)]
    assert list(got) == expected
    assert got.count() == len(expected)
    assert list(got.runs()) == naive_runs(expected)


@given(quorums(), st.integers(0, 30), st.integers(0, 60))
@QUICK
def test_entries_of_bookies_cover_each_entry_wq_times(q: tuple[int, int, int], first: int, n: int) -> None:
    e, wq, _ = q
    last = first + n
    counts = [0] * (n + 1)
    for b in range(e):
        for x in entries_of_bookie(b, first, last, e, wq):
            counts[x - first] += 1
    assert counts == [wq] * (n + 1)


@pytest.mark.parametrize(("bookie", "e", "wq"), [(-1, 3, 2), (3, 3, 2), (0, 3, 4), (0, 3, 0)])
def test_entries_of_bookie_rejects_bad_arguments(bookie: int, e: int, wq: int) -> None:
    with pytest.raises(QuorumError):
        entries_of_bookie(bookie, 0, 10, e, wq)


# -- fencing coverage / recovery ---------------------------------------------------------------------------
@given(quorums(max_e=8), st.data())
@QUICK
def test_fencing_covered_matches_brute_force(q: tuple[int, int, int], data: st.DataObject) -> None:
    e, wq, aq = q
    responded = data.draw(st.sets(st.integers(0, e - 1)))
    assert fencing_covered(responded, e, wq, aq) == naive_covered(responded, e, wq, aq)


@pytest.mark.parametrize(("e", "wq", "aq"), [(3, 3, 2), (5, 3, 2), (4, 2, 2), (6, 3, 1), (1, 1, 1)])
def test_fencing_covered_exhaustively_on_small_ensembles(e: int, wq: int, aq: int) -> None:
    for n in range(e + 1):
        for responded in itertools.combinations(range(e), n):
            assert fencing_covered(responded, e, wq, aq) == naive_covered(set(responded), e, wq, aq)


def test_fencing_covered_known_values() -> None:
    # E=3 WQ=3 AQ=2: one responder leaves two silent bookies, enough for an old writer's AQ
    assert not fencing_covered([0], 3, 3, 2)
    assert fencing_covered([0, 1], 3, 3, 2)
    # AQ=1: everyone in every write set must have responded
    assert not fencing_covered([0, 1], 3, 2, 1)
    assert fencing_covered([0, 1, 2], 3, 2, 1)
    # responders outside the ensemble do not help
    assert not fencing_covered([7, 8], 3, 3, 2)


@given(quorums())
@QUICK
def test_recovery_absent_threshold(q: tuple[int, int, int]) -> None:
    _, wq, aq = q
    assert recovery_absent_threshold(wq, aq) == wq - aq + 1


# -- AckSet ------------------------------------------------------------------------------------------------
class ReferenceAckSet:
    """BookKeeper's AckSetImpl: the latest response from each bookie index counts."""

    def __init__(self, wq: int, aq: int) -> None:
        self.wq, self.aq = wq, aq
        self.state: dict[int, bool] = {}

    def ack(self, i: int) -> bool:
        self.state[i] = True
        return self.complete

    def fail(self, i: int) -> bool:
        self.state[i] = False
        return self.failed

    @property
    def complete(self) -> bool:
        return sum(self.state.values()) >= self.aq

    @property
    def failed(self) -> bool:
        return sum(1 for ok in self.state.values() if not ok) > self.wq - self.aq


@given(quorums(), st.data())
@QUICK
def test_ackset_matches_reference_model(q: tuple[int, int, int], data: st.DataObject) -> None:
    _, wq, aq = q
    ops = data.draw(st.lists(st.tuples(st.booleans(), st.integers(0, wq - 1)), max_size=12))
    ours, ref = AckSet(wq, aq), ReferenceAckSet(wq, aq)
    for is_ack, index in ops:
        if is_ack:
            assert ours.ack(index) == ref.ack(index)
        else:
            assert ours.fail(index) == ref.fail(index)
        assert ours.complete == ref.complete
        assert ours.failed == ref.failed
        assert ours.acked == frozenset(i for i, ok in ref.state.items() if ok)


def test_ackset_completes_at_aq_distinct_acks() -> None:
    acks = AckSet(3, 2)
    assert not acks.ack(0)
    assert not acks.ack(0)  # a duplicate ack is not a second replica
    assert acks.ack(2)
    assert acks.complete and acks.acked == frozenset({0, 2})


def test_ackset_fails_once_aq_is_unreachable() -> None:
    acks = AckSet(3, 2)
    assert not acks.fail(0)  # WQ-AQ = 1 failure tolerated
    assert acks.fail(1)
    assert acks.failed and not acks.complete


def test_ackset_ack_after_fail_counts() -> None:
    acks = AckSet(3, 2)
    acks.fail(0)
    acks.fail(1)
    assert acks.failed
    assert not acks.ack(1)  # a retried bookie that now acks clears its failure
    assert not acks.failed


def test_ackset_fail_after_ack_withdraws_the_ack() -> None:
    # BookKeeper's AckSetImpl.failBookieAndCheck clears the ack: the latest answer from an index wins, so an
    # index whose bookie was replaced and then failed no longer counts towards AQ.
    acks = AckSet(3, 2)
    acks.ack(0)
    acks.ack(1)
    assert acks.complete
    acks.fail(1)
    assert not acks.complete
    assert acks.acked == frozenset({0})


# -- union of stripings as run columns (the expected share of a multi-segment ledger's bookie) -------------
@st.composite
def segment_shares(draw: st.DrawFn) -> list[Striping]:
    """One bookie's stripings over consecutive segments (some empty), as a ledger's ensembles give them."""
    e, wq, _aq = draw(quorums(max_e=6))
    cuts = sorted(draw(st.lists(st.integers(0, 400), min_size=1, max_size=4)))
    stripings = []
    for first, nxt in itertools.pairwise([*cuts, cuts[-1] + draw(st.integers(-1, 300))]):
        stripings.append(entries_of_bookie(draw(st.integers(0, e - 1)), first, nxt - 1, e, wq))
    return stripings


@QUICK
@given(segment_shares())
def test_union_run_arrays_equals_the_naive_union(stripings: list[Striping]) -> None:
    ids = sorted({x for s in stripings for x in naive_stripe(s.first, s.last, s.start, s.period, s.size)})
    firsts, lasts = union_run_arrays(stripings)
    assert list(zip(firsts.tolist(), lasts.tolist(), strict=True)) == naive_runs(ids)


def test_union_run_arrays_of_nothing_is_empty() -> None:
    firsts, lasts = union_run_arrays([Striping(5, 4, 0, 3, 2)])
    assert firsts.size == 0 and lasts.size == 0
