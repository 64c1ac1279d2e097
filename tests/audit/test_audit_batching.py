"""bkaudit.audit.batching: listing calls sized by the bytes the metadata predicts.

Ground truth: sizes of real encodings (BookKeeper's layout, built by `encode_runs` from naive entry sets; that
encoder is checked against Java's vectors in tests/formats/test_availability.py) and brute-force checks
of the planner.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkaudit.audit.batching import ITEM_OVERHEAD_BYTES, answer_bytes, call_budget, plan_calls
from bkaudit.formats.availability import encode_runs
from bkaudit.model.quorum import entries_of_bookie

QUICK = settings(max_examples=200, deadline=None)


def naive_runs(ids: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for e in sorted(set(ids)):
        if runs and runs[-1][1] == e - 1:
            runs[-1] = (runs[-1][0], e)
        else:
            runs.append((e, e))
    return runs


@given(st.integers(1, 6), st.data(), st.lists(st.integers(0, 400), min_size=1, max_size=4))
@QUICK
def test_answer_bytes_bounds_the_encoding_of_what_a_healthy_bookie_holds(e: int, data, cuts) -> None:
    wq = data.draw(st.integers(1, e))
    idx = data.draw(st.integers(0, e - 1))
    bounds = sorted(set(cuts))
    spans = list(zip([0, *[b + 1 for b in bounds[:-1]]], bounds, strict=True))  # consecutive segments
    stripings = [entries_of_bookie(idx, first, last, e, wq) for first, last in spans]
    held = [x for s in stripings for x in s]
    encoding = encode_runs(naive_runs(held))
    bound = answer_bytes(stripings)
    assert bound >= len(encoding) + 26  # the item framing is at most 26 bytes
    if len(spans) == 1:  # one segment: the bound is exact
        assert bound == len(encoding) + ITEM_OVERHEAD_BYTES


def test_a_50k_entry_e3_wq2_ledger_answers_about_400_kb() -> None:
    s = entries_of_bookie(0, 0, 49_999, 3, 2)
    size = answer_bytes([s])
    assert size == len(encode_runs(list(s.runs()))) + ITEM_OVERHEAD_BYTES
    assert 390_000 < size < 410_000
    # a count-sized batch of 500 of them is 40x BookKeeper's 5 MiB frame; the planner keeps each call at half
    calls = plan_calls([size] * 500, max_bytes=call_budget(5 * 1024 * 1024), max_count=500)
    assert all(len(c) * size <= 5 * 1024 * 1024 // 2 for c in calls)
    assert [p for c in calls for p in c] == list(range(500))


@given(st.lists(st.integers(0, 5000), max_size=60), st.integers(1, 20_000), st.integers(1, 12))
@QUICK
def test_plan_calls_keeps_order_and_both_limits(sizes: list[int], max_bytes: int, max_count: int) -> None:
    calls = plan_calls(sizes, max_bytes=max_bytes, max_count=max_count)
    assert [p for c in calls for p in c] == list(range(len(sizes)))
    for c in calls:
        assert 1 <= len(c) <= max_count
        assert len(c) == 1 or sum(sizes[p] for p in c) <= max_bytes
    # greedy: a call was closed only because the next position would break a limit
    for a, b in itertools.pairwise(calls):
        assert len(a) == max_count or sum(sizes[p] for p in a) + sizes[b[0]] > max_bytes


def test_plan_calls_refuses_empty_limits() -> None:
    with pytest.raises(ValueError):
        plan_calls([1], max_bytes=0, max_count=1)
    assert plan_calls([], max_bytes=1, max_count=1) == []
