"""Durability check against a naive per-entry reference (no servers).

The reference walks every entry of every checked segment and counts, per write-set position, whether the
bookie holds it: exactly what the check must compute with ranges and stripings instead of loops.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bkaudit.audit.base import Category
from bkaudit.audit.durability import DurabilityCheck, LedgerEvidence, assess, sweep
from bkaudit.audit.evidence import BookieEvidence, compare_bookie, failed_evidence
from bkaudit.audit.expected import checked_limit, checked_segments, expected_by_bookie
from bkaudit.audit.statuses import STATUS_NOT_CHECKED
from bkaudit.formats.availability import decode, encode
from bkaudit.model.ledger import Segment
from bkaudit.model.quorum import write_set
from bkaudit.model.shape import LedgerShape

POOL = [f"10.0.0.{i}:3181" for i in range(1, 9)]


def shape(E, WQ, AQ, segments, *, closed=True, last=-1, ledger_id=7, open_end=None):
    return LedgerShape(
        ledger_id=ledger_id,
        ensemble_size=E,
        write_quorum=WQ,
        ack_quorum=AQ,
        closed=closed,
        last_entry_id=last,
        segments=tuple(Segment(first, tuple(ens)) for first, ens in segments),
        open_end=None if closed else open_end,
    )


# -- the naive reference ------------------------------------------------------------


def naive_spans(s: LedgerShape):
    """Closed: every segment to the last entry. Open: every segment but the last, and the last from its first
    entry up to the LAC the run established (`open_end`), as LedgerChecker checks an open ledger."""
    segs = s.segments
    n = len(segs) if s.closed else len(segs) - 1
    for i in range(n):
        first = segs[i].first_entry_id
        last = segs[i + 1].first_entry_id - 1 if i + 1 < len(segs) else s.last_entry_id
        if s.closed:
            last = min(last, s.last_entry_id)
        yield i, first, last, segs[i].ensemble
    if not s.closed and segs and s.open_end is not None:
        yield len(segs) - 1, segs[-1].first_entry_id, s.open_end, segs[-1].ensemble


def naive_expected(s: LedgerShape) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for _i, first, last, ens in naive_spans(s):
        for e in range(first, last + 1):
            for idx in write_set(e, s.ensemble_size, s.write_quorum):
                out.setdefault(ens[idx], set()).add(e)
    return out


def naive_copies(s: LedgerShape, held: dict[str, set[int] | None], failed: set[str]) -> dict[int, int]:
    """entry -> copies, counted per write-set position as BookKeeper; failed bookies count as present."""
    copies = {}
    for _i, first, last, ens in naive_spans(s):
        for e in range(first, last + 1):
            n = 0
            for idx in write_set(e, s.ensemble_size, s.write_quorum):
                b = ens[idx]
                if b in failed or (held.get(b) is not None and e in held[b]):
                    n += 1
            copies[e] = n
    return copies


def naive_extra(s: LedgerShape, bookie: str, held: set[int]) -> set[int]:
    limit = None if s.closed else s.segments[-1].first_entry_id - 1
    if not s.closed and s.open_end is not None:
        limit = max(limit, s.open_end)  # entries past the LAC may be in flight: never extra
    should = naive_expected(s).get(bookie, set())
    return {e for e in held if e >= 0 and (limit is None or e <= limit) and e not in should}


def to_ranges(ids):
    out = []
    for e in sorted(ids):
        if out and e == out[-1][1] + 1:
            out[-1] = (out[-1][0], e)
        else:
            out.append((e, e))
    return out


# -- strategies ------------------------------------------------------------


@st.composite
def ledgers(draw, allow_duplicates=False):
    E = draw(st.integers(1, 6))
    WQ = draw(st.integers(1, E))
    AQ = draw(st.integers(1, WQ))
    nseg = draw(st.integers(1, 4))
    starts = sorted(draw(st.lists(st.integers(0, 40), min_size=nseg - 1, max_size=nseg - 1)))
    ensembles = []
    for _ in range(nseg):
        if allow_duplicates and draw(st.booleans()):
            ensembles.append(tuple(draw(st.lists(st.sampled_from(POOL), min_size=E, max_size=E))))
        else:
            ensembles.append(tuple(draw(st.permutations(POOL))[:E]))
    closed = draw(st.booleans())
    last = draw(st.integers(-1, 50))
    open_end = draw(st.one_of(st.none(), st.integers(-1, 55)))
    return shape(E, WQ, AQ, list(zip([0, *starts], ensembles, strict=True)), closed=closed, last=last,
                 open_end=open_end)


@st.composite
def scenarios(draw, allow_duplicates=False):
    s = draw(ledgers(allow_duplicates))
    expected = naive_expected(s)
    held: dict[str, set[int] | None] = {}
    failed: set[str] = set()
    for bookie in sorted(expected):
        kind = draw(st.sampled_from(["exact", "exact", "holes", "extra", "both", "enoledger", "failed"]))
        ids = set(expected[bookie])
        if kind in ("holes", "both") and ids:
            lo = draw(st.sampled_from(sorted(ids)))
            hi = draw(st.integers(lo, lo + 12))
            ids -= set(range(lo, hi + 1))
            ids -= set(draw(st.lists(st.sampled_from(sorted(expected[bookie])), max_size=4)))
        if kind in ("extra", "both"):
            ids |= set(draw(st.lists(st.integers(0, 70), max_size=6)))
        if kind == "enoledger":
            held[bookie] = None
        elif kind == "failed":
            failed.add(bookie)
        else:
            held[bookie] = ids
    return s, held, failed


def run_check(s, held, failed):
    evidence = []
    for bookie, wants in expected_by_bookie(s).items():
        if bookie in failed:
            evidence.append(failed_evidence(bookie, "UNAVAILABLE", "connection refused"))
        elif held[bookie] is None:
            evidence.append(compare_bookie(s, bookie, None, wants))
        else:
            evidence.append(compare_bookie(s, bookie, decode(encode(held[bookie])), wants))
    return evidence


# -- properties ------------------------------------------------------------


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(allow_duplicates=True))
def test_assessment_matches_naive_reference(scenario):
    s, held, failed = scenario
    evidence = run_check(s, held, failed)
    a = assess(s, evidence)
    copies = naive_copies(s, held, failed)
    wq, aq = s.write_quorum, s.ack_quorum
    least = min(copies.values(), default=wq)
    assert a.min_replicas == least
    assert a.entries_checked == len(copies)
    expected_category = (
        None
        if least >= wq
        else Category.NO_REPLICA
        if least == 0
        else Category.BELOW_ACK_QUORUM
        if least < aq
        else Category.BELOW_WRITE_QUORUM
    )
    assert a.category == expected_category
    hist: dict[int, int] = {}
    for c in copies.values():
        if c < wq:
            hist[c] = hist.get(c, 0) + 1
    assert dict(a.replicas_histogram) == hist
    assert list(a.under_replicated) == to_ranges(e for e, c in copies.items() if c < wq)
    if least < wq:
        assert list(a.worst_entries) == to_ranges(e for e, c in copies.items() if c == least)
    assert {ev.bookie_id for ev in a.unverified} == failed & set(expected_by_bookie(s))
    assert a.partial == bool(a.unverified)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(allow_duplicates=True))
def test_extra_entries_match_naive_reference(scenario):
    s, held, failed = scenario
    for ev in run_check(s, held, failed):
        if ev.status != "OK":
            assert ev.extra == () and ev.extra_count == 0
            continue
        want = naive_extra(s, ev.bookie_id, held[ev.bookie_id])
        assert list(ev.extra) == to_ranges(want)
        assert ev.extra_count == len(want)


@settings(max_examples=300, deadline=None)
@given(ledgers(allow_duplicates=True))
def test_expected_by_bookie_matches_naive(s):
    naive = naive_expected(s)
    got = expected_by_bookie(s)
    assert set(got) == set(naive)
    for bookie, wants in got.items():
        ids = set()
        for w in wants:
            ids |= set(w.striping)
        assert ids == naive[bookie]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 8)), max_size=5), max_size=4))
def test_sweep_matches_pointwise_overlap(raw):
    per_index = []
    for ranges in raw:
        rs = sorted({(lo, lo + n) for lo, n in ranges})
        merged = []
        for lo, hi in rs:  # each bookie index's own ranges are disjoint
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
            else:
                merged.append((lo, hi))
        per_index.append(merged)
    level = {}
    for ranges in per_index:
        for lo, hi in ranges:
            for e in range(lo, hi + 1):
                level[e] = level.get(e, 0) + 1
    d = sweep(per_index)
    assert d.max_missing == max(level.values(), default=0)
    assert list(d.under_replicated) == to_ranges(level)
    hist = {}
    for v in level.values():
        hist[v] = hist.get(v, 0) + 1
    assert dict(d.missing_histogram) == hist


# -- worked examples ------------------------------------------------------------

A, B, C, D, E5 = POOL[:5]


def test_healthy_ledger_has_no_findings():
    s = shape(3, 2, 2, [(0, (A, B, C))], last=99)
    held = {b: naive_expected(s)[b] for b in (A, B, C)}
    ev = run_check(s, held, set())
    assert DurabilityCheck().evaluate(LedgerEvidence(s, tuple(ev))) == []
    assert all(e.missing == () and e.extra_count == 0 for e in ev)


def test_enoledger_means_every_expected_entry_missing():
    s = shape(3, 2, 2, [(0, (A, B, C))], last=8)
    held = {A: naive_expected(s)[A], B: naive_expected(s)[B], C: None}
    (finding,) = DurabilityCheck().evaluate(LedgerEvidence(s, tuple(run_check(s, held, set()))))
    assert finding.category is Category.BELOW_ACK_QUORUM  # WQ2 AQ2: one copy left
    assert finding.min_replicas == 1
    assert finding.bookie_id == C
    assert finding.detail["entries_below_write_quorum"] == 6  # C holds 2 of every 3 entries of 0..8
    assert finding.detail["bookies_missing_entries"] == [C]


def test_two_bookies_missing_the_same_entry_is_data_loss():
    s = shape(3, 2, 1, [(0, (A, B, C))], last=5)
    exp = naive_expected(s)
    # entry 1 is on indexes 1 and 2 (B, C); remove it from both
    held = {A: exp[A], B: exp[B] - {1}, C: exp[C] - {1}}
    (finding,) = DurabilityCheck().evaluate(LedgerEvidence(s, tuple(run_check(s, held, set()))))
    assert finding.category is Category.NO_REPLICA
    assert finding.min_replicas == 0
    assert finding.missing_entries == ((1, 1),)
    assert finding.detail["entries_without_replica"] == 1
    assert finding.bookie_id is None  # two bookies: see detail
    assert sorted(finding.detail["bookies_missing_entries"]) == [B, C]


def test_below_write_quorum_only():
    s = shape(5, 3, 2, [(0, (A, B, C, D, E5))], last=19)
    exp = naive_expected(s)
    held = {b: exp[b] for b in exp}
    held[D] = exp[D] - {11, 12}  # D is index 3: it holds e with e mod 5 in {1, 2, 3}
    (finding,) = DurabilityCheck().evaluate(LedgerEvidence(s, tuple(run_check(s, held, set()))))
    assert finding.category is Category.BELOW_WRITE_QUORUM
    assert finding.min_replicas == 2
    assert finding.missing_entries == ((11, 12),)


def test_open_ledger_checks_closed_segments_only():
    # segments [0..9] on A,B,C and [10..] (open) on A,B,D
    s = shape(3, 2, 2, [(0, (A, B, C)), (10, (A, B, D))], closed=False, last=-1)
    assert [sp.index for sp in checked_segments(s)] == [0]
    assert checked_limit(s) == 9
    assert set(expected_by_bookie(s)) == {A, B, C}  # D (only in the open segment) is not asked
    exp = naive_expected(s)
    # A and B also hold entries of the open segment: not extra; C lost entry 4
    held = {A: exp[A] | {10, 11, 12}, B: exp[B] | {11, 12}, C: exp[C] - {4}}
    findings = DurabilityCheck().evaluate(LedgerEvidence(s, tuple(run_check(s, held, set()))))
    assert [f.category for f in findings] == [Category.BELOW_ACK_QUORUM]
    assert findings[0].missing_entries == ((4, 4),)


def test_open_ledger_with_one_segment_checks_nothing():
    s = shape(3, 2, 2, [(0, (A, B, C))], closed=False, last=-1)
    assert checked_segments(s) == ()
    assert expected_by_bookie(s) == {}
    assert assess(s, ()).category is None


def test_in_recovery_is_treated_as_open():
    s = shape(2, 2, 2, [(0, (A, B)), (5, (A, C))], closed=False, last=-1)
    assert [sp.index for sp in checked_segments(s)] == [0]


def test_closed_ledger_with_empty_last_segment():
    s = shape(2, 2, 1, [(0, (A, B)), (5, (A, C))], last=4)
    assert [sp.index for sp in checked_segments(s)] == [0]
    assert set(expected_by_bookie(s)) == {A, B}


def test_extra_entries_reported_per_bookie():
    s = shape(3, 2, 2, [(0, (A, B, C))], last=5)
    exp = naive_expected(s)
    held = {A: exp[A] | {1, 40, 41}, B: exp[B], C: exp[C]}
    findings = DurabilityCheck().evaluate(LedgerEvidence(s, tuple(run_check(s, held, set()))))
    (extra,) = findings
    assert extra.category is Category.EXTRA_ENTRIES
    assert extra.bookie_id == A
    assert extra.detail["extra_count"] == 3
    assert extra.detail["extra_entries"] == [[1, 1], [40, 41]]


def test_failed_bookie_is_unverified_not_missing():
    s = shape(3, 2, 2, [(0, (A, B, C))], last=5)
    exp = naive_expected(s)
    ev = run_check(s, {A: exp[A], B: exp[B]}, {C})
    a = assess(s, ev)
    assert a.category is None and a.partial
    assert [u.bookie_id for u in a.unverified] == [C]
    assert DurabilityCheck().evaluate(LedgerEvidence(s, tuple(ev))) == []


def test_partial_evidence_still_reports_proven_damage():
    s = shape(3, 2, 2, [(0, (A, B, C))], last=5)
    exp = naive_expected(s)
    ev = run_check(s, {A: exp[A] - {0}, B: exp[B]}, {C})
    (finding,) = DurabilityCheck().evaluate(LedgerEvidence(s, tuple(ev)))
    assert finding.category is Category.BELOW_ACK_QUORUM
    assert finding.detail["partial"] is True
    assert finding.detail["unverified_bookies"] == [C]


def test_missing_evidence_is_not_checked_never_healthy():
    s = shape(3, 2, 2, [(0, (A, B, C))], last=5)
    exp = naive_expected(s)
    ev = run_check(s, {A: exp[A], B: exp[B], C: exp[C]}, set())
    a = assess(s, [e for e in ev if e.bookie_id != B])
    assert [(u.bookie_id, u.status) for u in a.unverified] == [(B, STATUS_NOT_CHECKED)]


def test_retry_answer_replaces_failure():
    s = shape(3, 2, 2, [(0, (A, B, C))], last=5)
    exp = naive_expected(s)
    first = run_check(s, {A: exp[A], B: exp[B]}, {C})
    retry = compare_bookie(s, C, decode(encode(exp[C] - {2})))
    a = assess(s, [*first, retry])
    assert not a.partial and a.category is Category.BELOW_ACK_QUORUM
    # and an answer is never replaced by a later failure
    a2 = assess(s, [retry, *first])
    assert not a2.partial


def test_evidence_for_other_metadata_is_ignored():
    s = shape(3, 2, 2, [(0, (A, B, C))], last=5)
    stale = BookieEvidence(D, "OK", missing=(), extra=())
    from bkaudit.audit.evidence import MissingRun

    bogus = BookieEvidence(D, "OK", missing=(MissingRun(0, 2, ((1, 2),), 2),))
    exp = naive_expected(s)
    ev = run_check(s, {A: exp[A], B: exp[B], C: exp[C]}, set())
    assert assess(s, [*ev, stale, bogus]).category is None


def test_large_ledger_is_range_arithmetic():
    # a 600,000-entry ledger, one bookie wiped (ENOLEDGER), one holding nothing: cost grows with ranges
    # (one per stripe run), not with entries, and the counts are exact
    s = shape(3, 2, 2, [(0, (A, B, C))], last=599_999)
    ev = [compare_bookie(s, A, decode(encode([]))), compare_bookie(s, B, None)]
    a = assess(s, ev)
    assert a.min_replicas == 0
    assert a.partial  # C has no evidence: NOT_CHECKED, never assumed healthy
    # entries whose write set is {A, B} (e mod 3 == 0) have no copy; the others lost one of A/B
    assert a.replicas_histogram == {0: 200_000, 1: 400_000}


def test_max_ranges_caps_rows_but_not_counts():
    s = shape(3, 2, 2, [(0, (A, B, C))], last=299)
    exp = naive_expected(s)
    held = {A: exp[A], B: exp[B], C: None}
    (finding,) = DurabilityCheck(max_ranges=5).evaluate(LedgerEvidence(s, tuple(run_check(s, held, set()))))
    assert finding.detail["ranges_truncated"] is True
    assert len(finding.missing_entries) == 5
    assert finding.detail["entries_below_write_quorum"] == 200


def test_shape_problems():
    assert shape(3, 2, 2, [(0, (A, B, C))], last=1).problems() == []
    assert shape(2, 3, 2, [(0, (A, B))]).problems()
    assert shape(3, 2, 2, [(0, (A, B))]).problems()
    assert shape(3, 2, 2, [(0, (A, B, C)), (5, (A, B, D)), (3, (A, B, C))]).problems()
    assert shape(3, 2, 2, []).problems()
