"""The decommission what-if (bkaudit.decommission): removing bookies together, against a brute-force count."""

from __future__ import annotations

import itertools

import pytest

from bkaudit import decommission as dc
from bkaudit.audit.base import Category, Finding
from bkaudit.audit.details import BookieGap, DurabilityDetail, UnverifiableDetail, UnverifiedBookie
from bkaudit.model.ledger import Segment
from bkaudit.model.quorum import write_set
from bkaudit.model.shape import LedgerShape


def shape(ensembles: list[tuple[int, tuple[str, ...]]], e: int, wq: int, aq: int, last: int,
          closed: bool = True) -> LedgerShape:
    return LedgerShape(7, e, wq, aq, closed, last, tuple(Segment(first, ens) for first, ens in ensembles))


def brute_min_copies(s: LedgerShape, gone: set[str], missing: dict[str, set[int]]) -> int:
    """Per entry: copies on bookies of its write set that stay and did not lose it."""
    worst = s.write_quorum
    segs = list(s.segments)
    for i, seg in enumerate(segs):
        end = segs[i + 1].first_entry_id - 1 if i + 1 < len(segs) else s.last_entry_id
        for entry in range(seg.first_entry_id, end + 1):
            holders = [seg.ensemble[j] for j in write_set(entry, s.ensemble_size, s.write_quorum)]
            copies = sum(1 for b in holders if b not in gone and entry not in missing.get(b, set()))
            worst = min(worst, copies)
    return worst


def test_one_bookie_of_a_healthy_ledger_is_safe() -> None:
    s = shape([(0, ("a", "b", "c"))], 3, 2, 2, 29)
    v = dc.judge(s, ["a"])
    assert v.reason is None and v.min_copies_after == 1 and v.bookies == ("a",)
    assert v.entries_on == {"a": 20}  # a stores 2 of every 3 entries with E3/WQ2


def test_two_bookies_of_one_write_set_lose_entries() -> None:
    s = shape([(0, ("a", "b", "c"))], 3, 2, 2, 29)
    v = dc.judge(s, ["a", "b"])
    assert v.reason == dc.WOULD_LOSE_ENTRIES and v.min_copies_after == 0
    assert v.entries_at_risk == 10  # entries whose write set is exactly {a, b}
    assert v.entries_at_risk == sum(1 for r in v.ranges for _ in range(r[0], r[1] + 1))


def durability(*gaps: BookieGap, truncated: bool) -> DurabilityDetail:
    """A durability detail with only what the decommission audit reads: the gaps and the truncation."""
    return DurabilityDetail(3, 2, 2, 0, 0, 0, 0, {}, (), (), gaps, False, (), truncated)


def test_entries_already_missing_elsewhere_block_the_removal() -> None:
    s = shape([(0, ("a", "b", "c"))], 3, 2, 2, 29)
    # c (index 2 stores e % 3 in {1, 2}) lost its entries among 0..5, as the check reports them
    lost = BookieGap("c", 0, 2, 4, ((1, 2), (4, 5)))
    rows = [Finding(Category.BELOW_WRITE_QUORUM, 1, facts=durability(lost, truncated=False))]
    for gone in ("a", "b"):
        v = dc.judge(s, [gone], rows)
        expected = brute_min_copies(s, {gone}, {"c": {1, 2, 4, 5}})
        assert v.min_copies_after == expected == 0 and v.reason == dc.WOULD_LOSE_ENTRIES
    # entries 1, 4 are on {b, c}; 2, 5 on {c, a}: removing a leaves 2 and 5 with nothing
    assert dc.judge(s, ["a"], rows).ranges == ((2, 2), (5, 5))
    assert dc.judge(s, ["c"], rows).reason is None


def test_unverifiable_staying_bookie_blocks_but_a_removed_one_does_not() -> None:
    s = shape([(0, ("a", "b", "c"))], 3, 2, 2, 9)
    rows = [Finding(Category.LEDGER_UNVERIFIABLE, 1, bookie_id="c",
                    facts=UnverifiableDetail("", "", (UnverifiedBookie("c", "UNAVAILABLE", None),)))]
    assert dc.judge(s, ["a"], rows).reason == dc.UNVERIFIABLE
    assert dc.judge(s, ["c"], rows).reason is None


def test_truncated_evidence_is_not_guessed() -> None:
    s = shape([(0, ("a", "b", "c"))], 3, 2, 2, 9)
    truncated = durability(truncated=True)
    rows = [Finding(Category.BELOW_WRITE_QUORUM, 1, facts=truncated)]
    assert dc.judge(s, ["a"], rows).reason == dc.EVIDENCE_TRUNCATED


def test_open_ledger_current_segment_is_not_judged() -> None:
    s = shape([(0, ("a", "b", "c")), (10, ("d", "b", "c"))], 3, 2, 2, -1, closed=False)
    v = dc.judge(s, ["a", "b"])
    assert v.open_tail  # b is in the segment the writer still writes
    assert v.reason == dc.WOULD_LOSE_ENTRIES  # the closed first segment loses its {a, b} entries
    only = dc.judge(shape([(0, ("a", "b", "c"))], 3, 2, 2, -1, closed=False), ["a", "b"])
    assert only.reason is None and only.open_tail


@pytest.mark.parametrize("removing", [("a",), ("b",), ("a", "c"), ("b", "d"), ("a", "b", "c")])
def test_matches_brute_force_over_ensemble_changes(removing: tuple[str, ...]) -> None:
    segments = [(0, ("a", "b", "c", "d")), (13, ("a", "e", "c", "d")), (21, ("f", "e", "c", "d"))]
    s = shape(segments, 4, 3, 2, 40)
    v = dc.judge(s, list(removing), min_copies=2)
    best = brute_min_copies(s, set(removing), {})
    assert v.min_copies_after == best
    assert (v.reason == dc.WOULD_LOSE_ENTRIES) == (best < 2)


def test_answers_per_bookie_and_table_rows() -> None:
    s1 = shape([(0, ("a", "b", "c"))], 3, 2, 2, 29)
    s2 = shape([(0, ("a", "c", "d"))], 3, 3, 2, 5)
    verdicts = [dc.judge(s, ["a", "b"]) for s in (s1, s2)]
    out = dc.answers(["a", "b", "z"], verdicts, {"a": "writable", "b": "readonly"})
    by = {a.bookie_id: a for a in out}
    assert not by["a"].safe and not by["b"].safe and by["z"].safe
    assert by["a"].ledgers == 2 and by["b"].ledgers == 1 and by["z"].ledgers == 0
    assert [v.ledger_id for v in by["a"].blocking] == [7]  # s2 keeps 2 copies of everything
    table = dc.table_rows("aud", "snap", "2026-11-22", out, min_copies=1, check_run_id="aud", audited_at_us=0)
    rows = table.to_pylist()
    assert [r["bookie_id"] for r in rows] == ["a", "b", "z"]
    assert rows[0]["blocking"][0]["reason"] == dc.WOULD_LOSE_ENTRIES and rows[2]["safe"] is True
    assert table.schema == dc.DECOMMISSION_AUDITS.schema
    assert all(itertools.chain(r["requested"] == ["a", "b", "z"] for r in rows))
