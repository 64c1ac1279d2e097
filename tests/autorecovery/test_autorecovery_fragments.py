"""Under-replicated fragment detection and target choice, against naive per-entry references."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkaudit.autorecovery.fragments import (
    BookieState,
    ReadEvidence,
    Reason,
    bookie_state,
    bookies_to_probe,
    choose_targets,
    entries_to_read,
    find_fragments,
    first_entry_unconfirmed,
    open_last_segment_at_risk,
    plan_repairs,
    segment_closed,
)
from bkaudit.errors import BookieError, NotEnoughBookies
from bkaudit.formats import availability
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.model.placement import DefaultPolicy, RackAwarePolicy
from bkaudit.model.quorum import stores_entry
from bkaudit.model.topology import Topology

W = BookieState.WRITABLE


def md(segments, *, e=3, wq=2, aq=2, state=LedgerState.CLOSED, last=99) -> LedgerMetadata:
    return LedgerMetadata(
        e,
        wq,
        aq,
        state,
        last if state is LedgerState.CLOSED else -1,
        0,
        DigestType.CRC32C,
        b"",
        tuple(Segment(f, tuple(ens)) for f, ens in segments),
    )


def holding(ids) -> availability.Availability:
    return availability.decode(availability.encode(sorted(ids)))


def full(metadata: LedgerMetadata, lac: int | None = None) -> dict[str, availability.Availability]:
    """Every bookie holds exactly what it should (in an open last segment: up to `lac`)."""
    held: dict[str, set[int]] = {}
    for _i, seg, last in metadata.segment_ranges():
        for b, bookie in enumerate(seg.ensemble):
            end = last if last is not None else (lac if lac is not None else -1)
            ids = [
                x
                for x in range(seg.first_entry_id, end + 1)
                if stores_entry(b, x, metadata.ensemble_size, metadata.write_quorum)
            ]
            held.setdefault(bookie, set()).update(ids)
    return {b: holding(ids) for b, ids in held.items()}


def test_healthy_ledger_has_no_fragments() -> None:
    m = md([(0, "abc"), (50, "abd")])
    states = dict.fromkeys("abcd", W)
    assert find_fragments(m, states, full(m)) == []


def test_lost_bookie_gives_one_fragment_per_segment_with_only_its_striping() -> None:
    m = md([(0, "abc"), (50, "abd")], e=3, wq=2)
    states = {"a": W, "b": W, "c": W, "d": W}
    states["b"] = BookieState.LOST
    frags = find_fragments(m, states, full(m))
    assert [(f.segment_index, f.bookie_index, f.reason) for f in frags] == [
        (0, 1, Reason.LOST),
        (1, 1, Reason.LOST),
    ]
    f0 = frags[0]
    assert f0.replace and f0.closed
    naive = [x for x in range(0, 50) if stores_entry(1, x, 3, 2)]
    assert [x for lo, hi in f0.entry_ranges() for x in range(lo, hi + 1)] == naive
    assert f0.entry_count() == len(naive) < 50  # never every id of the segment


def test_missing_entries_on_a_writable_bookie_are_refilled_in_place() -> None:
    m = md([(0, "abc")], last=29)
    answers = full(m)
    kept = [x for x in answers["c"] if x not in (4, 5, 10)]
    answers["c"] = holding(kept)
    frags = find_fragments(m, dict.fromkeys("abc", W), answers)
    assert len(frags) == 1
    f = frags[0]
    assert f.reason is Reason.MISSING_ENTRIES and not f.replace
    assert f.entry_ranges() == [(4, 5), (10, 10)]


def test_no_such_ledger_on_a_writable_bookie_refills_its_whole_striping() -> None:
    m = md([(0, "abc")], last=8)
    answers = full(m)
    answers["a"] = None
    (f,) = find_fragments(m, dict.fromkeys("abc", W), answers)
    assert f.reason is Reason.MISSING_ENTRIES
    assert f.entry_count() == len([x for x in range(9) if stores_entry(0, x, 3, 2)])


def test_readonly_bookie_lacking_entries_is_replaced_not_refilled() -> None:
    m = md([(0, "abc")], last=8)
    answers = full(m)
    answers["a"] = holding([])
    states = {"a": BookieState.READONLY, "b": W, "c": W}
    (f,) = find_fragments(m, states, answers)
    assert f.reason is Reason.READONLY_INCOMPLETE and f.replace and f.missing is None


def test_unreachable_bookie_counts_only_when_the_marker_names_it() -> None:
    m = md([(0, "abc")], last=8)
    answers: dict = full(m)
    answers["b"] = BookieError("UNAVAILABLE", "timeout")
    states = dict.fromkeys("abc", W)
    assert find_fragments(m, states, answers) == []
    (f,) = find_fragments(m, states, answers, marked={"b"})
    assert f.reason is Reason.UNREACHABLE and f.replace


def test_entries_to_read_are_ledgercheckers_first_and_last_per_fragment_or_every_one() -> None:
    """LedgerChecker.verifyLedgerFragment at auditorLedgerVerificationPercentage 0: per fragment, the first
    and the last entry the bookie stores (getFirstStoredEntryId / getLastStoredEntryId)."""
    m = md([(0, "abc"), (10, "adc")], e=3, wq=2, last=29)

    def stores(index: int, first: int, last: int) -> list[int]:
        return [x for x in range(first, last + 1) if stores_entry(index, x, 3, 2)]

    a0, a1, c0, c1 = stores(0, 0, 9), stores(0, 10, 29), stores(2, 0, 9), stores(2, 10, 29)
    d1 = stores(1, 10, 29)
    assert entries_to_read(m, "a", None, every=False) == sorted({a0[0], a0[-1], a1[0], a1[-1]})
    assert entries_to_read(m, "c", None, every=True) == sorted(set(c0) | set(c1))
    assert entries_to_read(m, "d", None, every=False) == [d1[0], d1[-1]]
    assert entries_to_read(m, "z", None, every=True) == []


def test_entries_to_read_in_an_open_last_segment_stop_at_the_lac() -> None:
    m = md([(0, "abc")], state=LedgerState.OPEN)
    assert entries_to_read(m, "a", None, every=True) == []  # LAC unknown: nothing known to be there
    assert entries_to_read(m, "a", 7, every=True) == [x for x in range(8) if stores_entry(0, x, 3, 2)]


def test_read_evidence_judges_like_a_listing_of_everything_but_the_absent_entries() -> None:
    m = md([(0, "abc")], last=29)
    answers: dict = full(m)
    answers["b"] = ReadEvidence(frozenset({4, 5, 6, 28}), read=20)  # 5 is not b's: index 1 stores 0, 1 mod 3
    (f,) = find_fragments(m, dict.fromkeys("abc", W), answers)
    assert f.reason is Reason.MISSING_ENTRIES and f.bookie == "b"
    assert f.entry_ranges() == [(4, 4), (6, 6), (28, 28)]
    assert 4 not in answers["b"] and 7 in answers["b"]  # an entry not read counts as present
    assert find_fragments(m, dict.fromkeys("abc", W), {**full(m), "b": ReadEvidence()}) == []
    assert ReadEvidence(frozenset({3, 4, 5, 9})).missing(4, 9) == [(4, 5), (9, 9)]


def test_empty_ledger_with_a_lost_bookie_still_needs_a_swap() -> None:
    """BookKeeper #3220: empty ledgers kept the dead bookie forever; a swap with nothing to copy fixes it."""
    m = md([(0, "abc")], last=-1)
    (f,) = find_fragments(m, {"a": W, "b": W, "c": BookieState.LOST}, {})
    assert f.closed and f.entry_count() == 0 and f.replace


def test_open_ledger_last_segment_is_never_closed_and_is_flagged_at_risk() -> None:
    m = md([(0, "abc"), (20, "abd")], state=LedgerState.OPEN)
    states = {"a": W, "b": W, "c": W, "d": BookieState.LOST}
    frags = find_fragments(m, states, {}, lac=25)
    assert [(f.segment_index, f.closed) for f in frags] == [(1, False)]
    assert plan_repairs(m, frags) == []
    assert open_last_segment_at_risk(m, {"a", "b", "c"})
    assert not open_last_segment_at_risk(m, {"a", "b", "c", "d"})
    assert not open_last_segment_at_risk(md([(0, "abd")]), {"a"})  # closed ledgers are never at risk


def test_open_ledger_earlier_segments_are_closed_once_the_lac_reached_the_last_segment() -> None:
    m = md([(0, "abc"), (20, "abd")], state=LedgerState.OPEN)
    assert segment_closed(m, 0, lac=19)
    assert not segment_closed(m, 0, lac=18)
    assert not segment_closed(m, 0, lac=None)
    assert not segment_closed(m, 1, lac=100)
    states = {"a": W, "b": W, "c": BookieState.LOST, "d": W}
    (f,) = find_fragments(m, states, {}, lac=30)
    assert (f.segment_index, f.closed, f.last_entry_id) == (0, True, 19)


def test_readonly_counts_as_missing_for_an_open_last_segment_like_bookkeeper() -> None:
    m = md([(0, "abc")], state=LedgerState.OPEN)
    assert open_last_segment_at_risk(m, {"a", "b"})  # c read-only: not writable


def test_bookies_to_probe_skips_lost_bookies_and_the_open_segment_beyond_the_lac() -> None:
    m = md([(0, "abc"), (20, "abd")], state=LedgerState.OPEN)
    states = {"a": W, "b": BookieState.READONLY, "c": BookieState.LOST, "d": W}
    assert bookies_to_probe(m, states, lac=25) == ["a", "b", "d"]  # the open segment up to its LAC too
    assert bookies_to_probe(m, states, lac=19) == ["a", "b"]  # nothing confirmed in the open segment yet
    assert bookies_to_probe(m, states, lac=None) == []


def test_chaos_seed_103_open_segment_missing_confirmed_entries_is_an_open_fragment() -> None:
    """Seed 103: a writer crashed, then a bookie of its still-OPEN ledger was wiped and came back empty; the
    worker probed only closed segments, found nothing and marked the ledger replicated, so the entries stayed
    with one copy until the checker re-marked it. Entries up to the LAC missing in the open last segment are
    now an open fragment: never copied (the writer or recovery owns the segment), but the worker defers the
    ledger instead of resolving it, as BookKeeper's ReplicationWorker does with foundOpenFragments."""
    m = md([(0, "abc")], state=LedgerState.OPEN)
    states = {"a": W, "b": W, "c": W}
    answers = full(md([(0, "abc")], last=30))
    answers["b"] = holding([])  # wiped: a new, empty storage
    (f,) = find_fragments(m, states, answers, lac=30)
    assert (f.segment_index, f.bookie, f.closed, f.reason) == (0, "b", False, Reason.MISSING_ENTRIES)
    assert f.entry_count() == sum(1 for x in range(31) if stores_entry(1, x, 3, 2))  # b's striping up to LAC
    assert plan_repairs(m, [f]) == []
    assert find_fragments(m, states, full(md([(0, "abc")], last=30)), lac=30) == []  # complete: nothing
    assert find_fragments(m, states, answers, lac=None) == []  # LAC unknown: nothing to judge against


def test_first_entry_probe_checks_the_open_segments_first_entry_alone() -> None:
    """The demo's abandoned one-entry ledgers: LAC -1 (no later add carried 0), entry 0 on a wiped bookie.
    LedgerChecker reads the first entry of the open segment when the LAC is below it and, since some bookie
    holds it, checks the fragment [first, first]; the worker must see the same open fragment (else it
    resolves the marker with entry 0 on one copy)."""
    m = md([(0, "abc")], state=LedgerState.OPEN)
    assert first_entry_unconfirmed(m, -1) == 0
    assert first_entry_unconfirmed(m, 0) is None  # the LAC reaches it: checked up to the LAC
    assert first_entry_unconfirmed(m, None) is None  # LAC unknown: nothing to ask about
    assert first_entry_unconfirmed(md([(0, "abc")]), -1) is None  # closed
    states = dict.fromkeys("abc", W)
    answers = {"a": holding([0]), "b": holding([]), "c": holding([])}  # entry 0's write set: a, b
    assert find_fragments(m, states, answers, lac=-1) == []  # the LAC alone: nothing is judged
    assert bookies_to_probe(m, states, -1, open_end=0) == ["a", "b"]
    assert entries_to_read(m, "b", -1, every=False, open_end=0) == [0]
    (f,) = find_fragments(m, states, answers, lac=-1, open_end=0)
    assert (f.bookie, f.closed, f.reason, f.missing) == ("b", False, Reason.MISSING_ENTRIES, ((0, 0),))
    # a later segment: the LAC below its first entry keeps the earlier segment open (isClosed), whatever the
    # probe says about the last segment
    m2 = md([(0, "abc"), (10, "abd")], state=LedgerState.OPEN)
    assert first_entry_unconfirmed(m2, 5) == 10
    assert not segment_closed(m2, 0, 5)


def test_bookie_state() -> None:
    assert bookie_state("a", {"a"}, set()) is W
    assert bookie_state("a", set(), {"a"}) is BookieState.READONLY
    assert bookie_state("a", {"b"}, {"c"}) is BookieState.LOST


# -- targets ------------------------------------------------------------------------------------------------
def test_targets_respect_racks_and_never_reuse_an_ensemble_member() -> None:
    m = md([(0, ("a1", "b1", "c1"))], e=3, wq=2)
    topology = Topology.from_mapping(
        {"a1": "/r1", "b1": "/r2", "c1": "/r3", "a2": "/r1", "c2": "/r3", "b2": "/r2"},
        default_location="/default-rack",
    )
    states = {"a1": W, "b1": BookieState.LOST, "c1": W}
    (repair,) = plan_repairs(m, find_fragments(m, states, full(m)))
    for seed in range(20):
        chosen = choose_targets(
            repair,
            m,
            RackAwarePolicy(min_racks_per_write_quorum=2),
            ["a1", "a2", "b2", "c1", "c2"],
            topology,
            exclude={"b1"},
            rng=random.Random(seed),
        )
        assert set(chosen) == {1}
        assert chosen[1] not in {"a1", "b1", "c1"}
        assert chosen[1] == "b2"  # the only candidate keeping both write sets of index 1 on two racks


def test_two_replacements_in_one_segment_are_distinct() -> None:
    m = md([(0, "abcd")], e=4, wq=2)
    states = {"a": BookieState.LOST, "b": BookieState.LOST, "c": W, "d": W}
    (repair,) = plan_repairs(m, find_fragments(m, states, full(m)))
    chosen = choose_targets(
        repair, m, DefaultPolicy(), ["c", "d", "x", "y"], Topology.from_mapping({}), exclude={"a", "b"}
    )
    assert set(chosen) == {0, 1} and set(chosen.values()) == {"x", "y"}
    assert repair.target_of(repair.fragments[0]) in {"x", "y"}


def test_no_candidate_outside_the_ensemble_raises() -> None:
    m = md([(0, "abc")])
    (repair,) = plan_repairs(m, find_fragments(m, {"a": W, "b": W, "c": BookieState.LOST}, full(m)))
    with pytest.raises(NotEnoughBookies):
        choose_targets(repair, m, DefaultPolicy(), ["a", "b"], Topology.from_mapping({}), exclude={"c"})


# -- property: fragments equal a per-entry reference --------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(
    e=st.integers(1, 5),
    data=st.data(),
)
def test_fragments_match_a_naive_per_entry_reference(e: int, data: st.DataObject) -> None:
    wq = data.draw(st.integers(1, e))
    bookies = [f"b{i}" for i in range(e + 3)]
    n_segments = data.draw(st.integers(1, 3))
    starts = sorted(data.draw(st.lists(st.integers(0, 40), min_size=n_segments - 1, max_size=n_segments - 1)))
    last = data.draw(st.integers(-1, 60))
    firsts = [0, *starts]
    segments = [(f, tuple(data.draw(st.permutations(bookies))[:e])) for f in firsts]
    m = md(segments, e=e, wq=wq, aq=1, last=max(last, firsts[-1] - 1))
    states = {b: data.draw(st.sampled_from([W, W, BookieState.READONLY, BookieState.LOST])) for b in bookies}
    # every non-lost bookie holds a random subset of what it should hold
    truth = full(m)
    answers = {}
    for b in bookies:
        if states[b] is BookieState.LOST or b not in truth:
            continue
        should = list(truth[b])
        answers[b] = holding([x for x in should if data.draw(st.booleans()) or len(should) > 30])
    frags = find_fragments(m, states, answers)
    got = {(f.segment_index, f.bookie_index) for f in frags}
    want = set()
    for i, seg, seg_last in m.segment_ranges():
        for b, bookie in enumerate(seg.ensemble):
            ids = [x for x in range(seg.first_entry_id, seg_last + 1) if stores_entry(b, x, e, wq)]
            if states[bookie] is BookieState.LOST or any(x not in answers[bookie] for x in ids):
                want.add((i, b))
    assert got == want
    for f in frags:
        if f.reason is Reason.MISSING_ENTRIES:
            ids = [x for lo, hi in f.entry_ranges() for x in range(lo, hi + 1)]
            assert ids == [x for x in f.expected if x not in answers[f.bookie]]


def test_draining_bookie_is_replaced_even_when_complete_and_readable() -> None:
    m = md([(0, "abc"), (50, "abd")])
    states = {"a": BookieState.READONLY, "b": W, "c": W, "d": W}
    assert find_fragments(m, states, full(m)) == []  # read-only and complete: nothing to do ...
    fragments = find_fragments(m, states, full(m), draining={"a"})  # ... unless it is draining
    assert [(f.segment_index, f.bookie, f.reason, f.replace) for f in fragments] == [
        (0, "a", Reason.DRAINING, True),
        (1, "a", Reason.DRAINING, True),
    ]
    # judged without answers too (the worker's re-check after its own swap)
    assert len(find_fragments(m, states, {}, draining={"a"})) == 2


def test_two_draining_bookies_of_one_segment_are_replaced_by_non_draining_targets() -> None:
    m = md([(0, "abc")], last=8)
    states = {"a": BookieState.READONLY, "b": BookieState.READONLY, "c": W, "d": W, "e": W}
    (repair,) = plan_repairs(m, find_fragments(m, states, full(m), draining={"a", "b"}))
    chosen = choose_targets(
        repair, m, DefaultPolicy(), ["c", "d", "e", "a", "b"], Topology.from_mapping({}), exclude={"a", "b"},
        rng=random.Random(1),
    )
    assert set(chosen) == {0, 1} and set(chosen.values()) == {"d", "e"}


def test_draining_bookie_storing_no_entry_of_a_segment_still_leaves_it() -> None:
    """The demo's ledger 4: entry 1 failed on the draining bookie (EREADONLY), the writer changed ensembles;
    segment 0 (entry 0 only) still names it at an index storing nothing. The drain counts any ensemble naming
    it, so the worker must swap it out (nothing to copy), not answer nothing_to_repair forever."""
    m = md([(0, "abc"), (1, "abd")], state=LedgerState.OPEN)  # E=3 WQ=2: entry 0 on indexes 0 and 1
    states = {"a": W, "b": W, "c": BookieState.READONLY, "d": W}
    assert open_last_segment_at_risk(m, {"a", "b", "d"}, {"c"}) is False  # the writer already moved on
    frags = find_fragments(m, states, full(m, lac=5), lac=5, draining={"c"})
    assert [(f.segment_index, f.bookie, f.reason, f.closed, f.entry_count()) for f in frags] == [
        (0, "c", Reason.DRAINING, True, 0)
    ]
    (repair,) = plan_repairs(m, frags)
    assert repair.replaced() == {2}
    # also once the ledger is closed with that segment empty (closed ledgers are the common case)
    closed = md([(0, "abc"), (0, "abd")], last=9)
    (f,) = find_fragments(closed, states, full(closed), draining={"c"})
    assert (f.segment_index, f.closed, f.entry_count(), f.replace) == (0, True, 0, True)


def test_draining_bookie_in_the_open_last_segment_waits_for_the_writer_then_fencing() -> None:
    m = md([(0, "abc"), (10, "abd")], state=LedgerState.OPEN)
    states = {"a": W, "b": W, "c": W, "d": W}
    frags = find_fragments(m, states, full(m, lac=12), lac=12, draining={"d"})
    assert [(f.segment_index, f.closed) for f in frags] == [(1, False)]  # never copied while open ...
    assert plan_repairs(m, frags) == []
    # ... but at risk (deferred, then fenced), even before the bookie re-registered read-only
    assert open_last_segment_at_risk(m, {"a", "b", "c", "d"}, {"d"})
    # an earlier segment of an open ledger is copied once the LAC reached the last segment
    frags = find_fragments(m, states, full(m, lac=12), lac=12, draining={"c"})
    assert [(f.segment_index, f.closed) for f in frags] == [(0, True)]
    assert not find_fragments(m, states, full(m, lac=12), lac=12)
