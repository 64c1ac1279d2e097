"""Read evidence (LedgerChecker semantics) without Spark or bookies: selection, reduction, assessment.

Ground truth is a naive per-entry model: which entries a bookie index stores is recomputed here from the write
set rule (entry e is on index i iff (i - e) mod E < WQ), never taken from the code under test.
"""

from __future__ import annotations

import random

import pytest

from bkaudit.audit.base import Category
from bkaudit.audit.durability import DurabilityCheck, assess, evidence_basis
from bkaudit.audit.evidence import failed_evidence
from bkaudit.audit.reads import (
    ReadSummary,
    entries_to_verify,
    first_stored,
    last_stored,
    plan_reads,
    read_evidence,
    summarise_reads,
    verify_entry,
)
from bkaudit.audit.statuses import STATUS_CORRUPT
from bkaudit.formats.entry import DigestManager
from bkaudit.model.ledger import DigestType, Segment
from bkaudit.model.quorum import entries_of_bookie
from bkaudit.model.shape import LedgerShape


def stored(idx: int, first: int, last: int, e: int, wq: int) -> list[int]:
    return [x for x in range(first, last + 1) if (idx - x) % e < wq]


LAYOUTS = [(3, 2), (3, 3), (5, 3), (2, 2), (4, 2), (5, 1), (1, 1)]


@pytest.mark.parametrize(("e", "wq"), LAYOUTS)
def test_first_and_last_stored_match_the_write_sets(e, wq):
    for first in range(0, 7):
        for last in range(first - 1, first + 12):
            for idx in range(e):
                naive = stored(idx, first, last, e, wq)
                s = entries_of_bookie(idx, first, last, e, wq)
                assert first_stored(s) == (naive[0] if naive else None)
                assert last_stored(s) == (naive[-1] if naive else None)


@pytest.mark.parametrize(("e", "wq"), LAYOUTS)
def test_selection_follows_ledger_checker(e, wq):
    rng = random.Random(7)
    for first, last in [(0, 0), (0, 1), (0, 9), (3, 50), (0, 999)]:
        for idx in range(e):
            naive = stored(idx, first, last, e, wq)
            s = entries_of_bookie(idx, first, last, e, wq)
            for pct in (0, 1, 10, 33, 50, 99, 100, 150):
                picked = entries_to_verify(s, pct, rng)
                assert picked == sorted(set(picked))
                assert set(picked) <= set(naive), "only entries the bookie stores are read"
                if not naive:
                    assert picked == []
                    continue
                assert naive[0] in picked and naive[-1] in picked, "first and last stored always read"
                length = naive[-1] - naive[0] + 1
                n = int(length * pct / 100)
                if naive[0] == naive[-1]:
                    assert picked == [naive[0]]
                elif n >= length:
                    assert picked == naive, "the whole fragment"
                elif n == 0:
                    assert picked == [naive[0], naive[-1]]
                else:
                    bucket = length // n
                    middle = [x for x in picked if x not in (naive[0], naive[-1])]
                    # at most one pick per bucket of `bucket` ids from the first stored entry
                    slots = [(x - naive[0]) // bucket for x in middle]
                    assert len(slots) == len(set(slots))
                    assert all(x < naive[-1] - 1 for x in middle)


def test_selection_is_seeded_and_spread():
    s = entries_of_bookie(0, 0, 9_999, 3, 2)
    a = entries_to_verify(s, 10, random.Random("x"))
    b = entries_to_verify(s, 10, random.Random("x"))
    c = entries_to_verify(s, 10, random.Random("y"))
    assert a == b and a != c
    # ~ 2/3 of the 1,000 buckets hit a stored entry; spread over the whole fragment
    assert 500 < len(a) < 800
    assert max(a[i + 1] - a[i] for i in range(len(a) - 1)) < 100


def shape(e: int, wq: int, aq: int, last: int, ensembles: list[tuple[int, tuple[str, ...]]]) -> LedgerShape:
    return LedgerShape(
        ledger_id=42,
        ensemble_size=e,
        write_quorum=wq,
        ack_quorum=aq,
        closed=True,
        last_entry_id=last,
        segments=tuple(Segment(f, ens) for f, ens in ensembles),
    )


def test_plan_covers_every_segment_of_the_bookie():
    s = shape(3, 2, 2, 59, [(0, ("a", "b", "c")), (30, ("a", "d", "c"))])
    full = plan_reads(s, "a", 100, seed="r1")
    naive = stored(0, 0, 29, 3, 2) + stored(0, 30, 59, 3, 2)
    assert list(full.entries) == naive and full.expected == len(naive) and full.fraction == 1.0
    none = plan_reads(s, "a", 0, seed="r1")
    assert list(none.entries) == [0, 29, 30, 59] or set(none.entries) == {
        stored(0, 0, 29, 3, 2)[0],
        stored(0, 0, 29, 3, 2)[-1],
        stored(0, 30, 59, 3, 2)[0],
        stored(0, 30, 59, 3, 2)[-1],
    }
    b = plan_reads(s, "b", 100, seed="r1")
    assert list(b.entries) == stored(1, 0, 29, 3, 2)
    assert plan_reads(s, "zz", 100).entries == ()


def test_summary_rules():
    assert summarise_reads({1: "OK", 2: "ENOENTRY", 3: STATUS_CORRUPT}) == ReadSummary("OK", 3, (2,), (3,))
    assert summarise_reads({1: "OK", 2: "ENOLEDGER"}).status == "ENOLEDGER"
    failed = summarise_reads({1: "OK", 2: "DEADLINE_EXCEEDED"}, {2: "no answer in 2s"})
    assert failed.status == "DEADLINE_EXCEEDED" and "entry 2" in (failed.error or "")
    assert summarise_reads({}) == ReadSummary("OK", 0)


def naive_min_replicas(sh: LedgerShape, bad: dict[str, set[int]]) -> int:
    least = sh.write_quorum
    for i, seg in enumerate(sh.segments):
        last = sh.segments[i + 1].first_entry_id - 1 if i + 1 < len(sh.segments) else sh.last_entry_id
        for x in range(seg.first_entry_id, last + 1):
            copies = sum(
                1
                for idx in range(sh.ensemble_size)
                if (idx - x) % sh.ensemble_size < sh.write_quorum
                and x not in bad.get(seg.ensemble[idx], set())
            )
            least = min(least, copies)
    return least


def naive_category(sh: LedgerShape, bad: dict[str, set[int]]) -> Category | None:
    least = naive_min_replicas(sh, bad)
    if least == 0:
        return Category.NO_REPLICA
    if least < sh.ack_quorum:
        return Category.BELOW_ACK_QUORUM
    if least < sh.write_quorum:
        return Category.BELOW_WRITE_QUORUM
    return None


@pytest.mark.parametrize(("e", "wq", "aq"), [(3, 2, 2), (3, 2, 1), (3, 3, 2), (5, 3, 2)])
def test_read_evidence_gives_the_same_categories_as_the_damage(e, wq, aq):
    names = tuple("abcde"[:e])
    sh = shape(e, wq, aq, 29, [(0, names)])
    rng = random.Random(3)
    for _ in range(20):
        bad = {b: set(rng.sample(range(30), rng.randrange(0, 4))) for b in names}
        bad = {b: {x for x in xs if (names.index(b) - x) % e < wq} for b, xs in bad.items()}
        evidence = []
        for bookie in names:
            plan = plan_reads(sh, bookie, 100)
            outcomes = {x: ("ENOENTRY" if x in bad[bookie] else "OK") for x in plan.entries}
            evidence.append(read_evidence(sh, bookie, summarise_reads(outcomes)))
        a = assess(sh, evidence)
        assert a.category is naive_category(sh, bad)
        holes = sorted(set().union(*bad.values()))
        assert [x for lo, hi in a.under_replicated for x in range(lo, hi + 1)] == holes
        assert a.basis == {"evidence": "reads", "sampled_fraction": 1.0}


def test_corrupt_entry_is_not_a_replica_and_is_reported():
    sh = shape(3, 2, 1, 29, [(0, ("a", "b", "c"))])
    plan = plan_reads(sh, "c", 0)
    bad_entry = plan.entries[-1]
    ev_c = read_evidence(sh, "c", ReadSummary("OK", len(plan.entries), (), (bad_entry,)))
    evidence = [
        read_evidence(sh, b, ReadSummary("OK", len(plan_reads(sh, b, 0).entries))) for b in ("a", "b")
    ] + [ev_c]
    a = assess(sh, evidence)
    assert a.category is Category.BELOW_WRITE_QUORUM and a.under_replicated == ((bad_entry, bad_entry),)
    findings = DurabilityCheck().findings(a)
    corrupt = [f for f in findings if f.category is Category.CORRUPT_ENTRIES]
    assert len(corrupt) == 1 and corrupt[0].bookie_id == "c"
    assert corrupt[0].missing_entries == ((bad_entry, bad_entry),)
    for f in findings:
        assert f.detail["evidence"] == "reads"
        assert 0 < f.detail["sampled_fraction"] < 1


def test_no_ledger_and_failures():
    sh = shape(3, 2, 1, 29, [(0, ("a", "b", "c"))])
    gone = read_evidence(sh, "a", ReadSummary("ENOLEDGER", 1))
    assert gone.status == "ENOLEDGER" and gone.missing_count == len(stored(0, 0, 29, 3, 2))
    down = read_evidence(sh, "b", ReadSummary("DEADLINE_EXCEEDED", 0, error="no answer"))
    assert not down.answered and down.evidence == "reads"
    a = assess(sh, [gone, down, read_evidence(sh, "c", ReadSummary("OK", 2))])
    assert a.category is Category.BELOW_WRITE_QUORUM and a.partial
    assert evidence_basis([failed_evidence("x", "UNAVAILABLE")]) == {"evidence": "listing"}


@pytest.mark.parametrize("kind", list(DigestType))
def test_verify_entry(kind):
    dm = DigestManager(9, b"secret", kind)
    data = dm.package(4, 3, 100, b"payload")
    assert verify_entry(9, 4, data, kind.name, b"secret") is None
    assert verify_entry(9, 4, data, kind.name) is None  # MAC without password: header check only
    assert verify_entry(9, 5, data, kind.name) is not None, "wrong entry id"
    assert verify_entry(9, 4, data[:10], kind.name) is not None, "truncated"
    flipped = bytearray(data)
    flipped[-1] ^= 0xFF
    if kind in (DigestType.CRC32, DigestType.CRC32C):
        assert "digest" in (verify_entry(9, 4, bytes(flipped), kind.name) or "")
    if kind is DigestType.MAC:
        assert verify_entry(9, 4, bytes(flipped), kind.name, b"secret") is not None
    assert verify_entry(9, 4, data, "NOT-A-TYPE") is None  # unknown digest: ids only
