"""The `violations.detail` JSON is a public interface (docs/tables.md): per category, the text a typed detail
renders to is pinned byte for byte (keys, order, omitted keys), as the checks wrote it when details were
dicts; reading it back gives the same typed detail. And decisions read typed fields, not JSON keys."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bkaudit import decommission as dc
from bkaudit.audit.base import Category, EvidenceBasis, Finding, RunNotes, ZnodeStamp
from bkaudit.audit.details import (
    BookieGap,
    CorruptEntriesDetail,
    DurabilityDetail,
    ExtraEntriesDetail,
    MetadataDetail,
    OpenSegmentNote,
    OpenSegmentUnknownDetail,
    OverdueMarkerDetail,
    PlacementDetail,
    PlacementSegment,
    UnreachableBookieDetail,
    UnverifiableDetail,
    UnverifiedBookie,
)
from bkaudit.audit.queue import replicas_to_publish
from bkaudit.job.findings import Violation, violation_of_row
from bkaudit.model.shape import LedgerShape

DURABILITY = DurabilityDetail(
    ensemble_size=3,
    write_quorum=2,
    ack_quorum=2,
    entries_checked=30,
    entries_below_write_quorum=20,
    entries_below_ack_quorum=20,
    entries_without_replica=0,
    replicas_histogram={1: 20, 2: 10},
    worst_entries=((0, 1), (3, 4)),
    bookies_missing_entries=("b:1", "c:1"),
    missing_by_bookie=(
        BookieGap("b:1", 0, 1, 10, ((0, 0), (3, 3)), lost=True),
        BookieGap("c:1", 1, 2, 10, ((20, 29),), in_open_segment=True),
    ),
    partial=True,
    unverified_bookies=("a:1",),
    ranges_truncated=False,
    lost_bookies=("b:1",),
    open_segment=OpenSegmentNote(1, 20, 29),
)
NOTES = RunNotes(
    basis=EvidenceBasis("reads", 0.5),
    znode=ZnodeStamp(7),
    reevaluated=True,
    under_repair=True,
    marker_replicas=("b:1",),
    marker_ctime_ms=42,
)

CASES = [
    (
        Category.BELOW_ACK_QUORUM,
        DURABILITY,
        NOTES,
        '{"ensemble_size":3,"write_quorum":2,"ack_quorum":2,"entries_checked":30,'
        '"entries_below_write_quorum":20,"entries_below_ack_quorum":20,"entries_without_replica":0,'
        '"replicas_histogram":{"1":20,"2":10},"worst_entries":[[0,1],[3,4]],'
        '"bookies_missing_entries":["b:1","c:1"],"missing_by_bookie":['
        '{"bookie":"b:1","segment":0,"bookie_index":1,"missing_count":10,"missing":[[0,0],[3,3]],'
        '"cause":"lost_bookie"},'
        '{"bookie":"c:1","segment":1,"bookie_index":2,"missing_count":10,"missing":[[20,29]],'
        '"open_segment":true}],'
        '"partial":true,"unverified_bookies":["a:1"],"ranges_truncated":false,"cause":"lost_bookie",'
        '"lost_bookies":["b:1"],"open_segment":{"segment":1,"first_entry":20,"checked_to":29},'
        '"evidence":"reads","sampled_fraction":0.5,"znode_version":7,"reevaluated":true,"under_repair":true,'
        '"marker_replicas":["b:1"],"marker_ctime_ms":42}',
    ),
    (
        Category.NO_REPLICA,
        DurabilityDetail(3, 3, 2, 5, 5, 5, 5, {0: 5}, ((0, 4),), ("a:1",),
                         (BookieGap("a:1", 0, 0, 5, ((0, 4),)),), False, (), True),
        RunNotes(basis=EvidenceBasis("listing"), znode=ZnodeStamp(3)),
        '{"ensemble_size":3,"write_quorum":3,"ack_quorum":2,"entries_checked":5,'
        '"entries_below_write_quorum":5,"entries_below_ack_quorum":5,"entries_without_replica":5,'
        '"replicas_histogram":{"0":5},"worst_entries":[[0,4]],"bookies_missing_entries":["a:1"],'
        '"missing_by_bookie":[{"bookie":"a:1","segment":0,"bookie_index":0,"missing_count":5,"missing":[[0,4]]}],'
        '"partial":false,"unverified_bookies":[],"ranges_truncated":true,"evidence":"listing","znode_version":3}',
    ),
    (
        Category.BELOW_WRITE_QUORUM,
        DurabilityDetail(3, 2, 2, 2, 1, 0, 0, {1: 1, 2: 1}, ((7, 7),), ("b:1",),
                         (BookieGap("b:1", 0, 1, 1, ((7, 7),)),), False, (), False),
        RunNotes(),
        '{"ensemble_size":3,"write_quorum":2,"ack_quorum":2,"entries_checked":2,'
        '"entries_below_write_quorum":1,"entries_below_ack_quorum":0,"entries_without_replica":0,'
        '"replicas_histogram":{"1":1,"2":1},"worst_entries":[[7,7]],"bookies_missing_entries":["b:1"],'
        '"missing_by_bookie":[{"bookie":"b:1","segment":0,"bookie_index":1,"missing_count":1,"missing":[[7,7]]}],'
        '"partial":false,"unverified_bookies":[],"ranges_truncated":false}',
    ),
    (
        Category.EXTRA_ENTRIES,
        ExtraEntriesDetail(3, ((1, 1), (40, 41)), False),
        RunNotes(basis=EvidenceBasis("listing"), znode=ZnodeStamp(2)),
        '{"extra_count":3,"extra_entries":[[1,1],[40,41]],"ranges_truncated":false,"evidence":"listing",'
        '"znode_version":2}',
    ),
    (
        Category.CORRUPT_ENTRIES,
        CorruptEntriesDetail(1, ((5, 5),), 12, False, OpenSegmentNote(0, 0, 9)),
        RunNotes(basis=EvidenceBasis("reads", None), znode=ZnodeStamp(1)),
        '{"corrupt_count":1,"corrupt_entries":[[5,5]],"entries_read":12,"ranges_truncated":false,'
        '"open_segment":{"segment":0,"first_entry":0,"checked_to":9},"evidence":"reads","sampled_fraction":null,'
        '"znode_version":1}',
    ),
    (
        Category.PLACEMENT_FAIL,
        PlacementDetail("rackaware", "FAIL", 2, 2,
                        (PlacementSegment(0, ("a:1", "b:1"), "FAIL", ("one rack",)),),
                        {"a:1": "/r1", "b:1": None}, bookkeeper_verdict="MEETS_STRICT"),
        RunNotes(znode=ZnodeStamp(4)),
        '{"policy":"rackaware","adherence":"FAIL","write_quorum":2,"ack_quorum":2,'
        '"segments":[{"segment":0,"ensemble":["a:1","b:1"],"adherence":"FAIL","reasons":["one rack"]}],'
        '"locations":{"a:1":"/r1","b:1":null},"bookkeeper_verdict":"MEETS_STRICT","znode_version":4}',
    ),
    (
        Category.PLACEMENT_SOFT,
        PlacementDetail("zoneaware", "MEETS_SOFT", 3, 2, (), {}),
        RunNotes(),
        '{"policy":"zoneaware","adherence":"MEETS_SOFT","write_quorum":3,"ack_quorum":2,"segments":[],'
        '"locations":{}}',
    ),
    (
        Category.UNDERREPLICATED_TOO_LONG,
        OverdueMarkerDetail(1000, 601.0, 600, ("b1:3181",), None),
        RunNotes(),
        '{"marked_at_ms":1000,"age_s":601.0,"grace_period_s":600,"replicas":["b1:3181"],"locked_by":null}',
    ),
    (
        Category.BOOKIE_UNREACHABLE_BUT_REGISTERED,
        UnreachableBookieDetail("writable", 2, "UNAVAILABLE", "refused", 7),
        RunNotes(),
        '{"state":"writable","attempts":2,"status":"UNAVAILABLE","error":"refused","ledgers_unverified":7}',
    ),
    (
        Category.LEDGER_UNVERIFIABLE,
        UnverifiableDetail("bookie c:1 was unreachable", "bookie_unreachable",
                           (UnverifiedBookie("c:1", "UNAVAILABLE", None, "bookie_unreachable"),),
                           open_segment=OpenSegmentNote(0, 0, 6)),
        RunNotes(basis=EvidenceBasis("listing"), znode=ZnodeStamp(2)),
        '{"reason":"bookie c:1 was unreachable","reason_code":"bookie_unreachable",'
        '"bookies":[{"bookie":"c:1","status":"UNAVAILABLE","reason_code":"bookie_unreachable","error":null}],'
        '"open_segment":{"segment":0,"first_entry":0,"checked_to":6},"evidence":"listing","znode_version":2}',
    ),
    (
        Category.LEDGER_UNVERIFIABLE,
        UnverifiableDetail("metadata changed 3 times", "metadata_changing"),
        RunNotes(znode=ZnodeStamp(9)),
        '{"reason":"metadata changed 3 times","reason_code":"metadata_changing","znode_version":9}',
    ),
    (
        Category.LEDGER_UNVERIFIABLE,
        OpenSegmentUnknownDetail("LAC unknown", "open_segment_unknown", OpenSegmentNote(1, 20, None),
                                 (UnverifiedBookie("a:1", "UNAVAILABLE", "x"),)),
        RunNotes(znode=ZnodeStamp(None), reevaluated=True),
        '{"reason":"LAC unknown","reason_code":"open_segment_unknown",'
        '"open_segment":{"segment":1,"first_entry":20,"checked_to":null},'
        '"bookies":[{"bookie":"a:1","status":"UNAVAILABLE","error":"x"}],"znode_version":null,"reevaluated":true}',
    ),
    (
        Category.METADATA_UNPARSEABLE,
        MetadataDetail("bad bytes", parsed=False, raw_bytes=12),
        RunNotes(znode=ZnodeStamp(4), reevaluated=True),
        '{"error":"bad bytes","parsed":false,"raw_bytes":12,"znode_version":4,"reevaluated":true}',
    ),
    (
        Category.METADATA_UNPARSEABLE,
        MetadataDetail("E < WQ", parsed=True, problems=("E < WQ",)),
        RunNotes(znode=ZnodeStamp(None)),
        '{"error":"E < WQ","parsed":true,"problems":["E < WQ"],"znode_version":null}',
    ),
]


@pytest.mark.parametrize(("category", "facts", "notes", "text"), CASES)
def test_violations_detail_json_is_byte_identical_and_reads_back(category, facts, notes, text) -> None:
    f = Finding(category, 1, facts=facts, notes=notes)
    row = Violation(f).row()
    assert row["detail"] == text
    back = violation_of_row(row).finding
    assert back.facts == facts and back.notes == notes


def test_every_category_is_pinned() -> None:
    assert {c for c, *_ in CASES} == set(Category)


def test_the_queue_decision_reads_the_typed_bookies_not_a_json_key() -> None:
    """The marker's replicas are the typed `bookies_missing_entries`; were the decision to read a misspelled
    key it would fall back to the finding's single bookie and this would fail."""
    f = Finding(Category.BELOW_WRITE_QUORUM, 1, bookie_id="z:1", facts=DURABILITY)
    assert replicas_to_publish(f, publish_placement=False) == ("b:1", "c:1")
    assert replicas_to_publish(Finding(Category.NO_REPLICA, 1, bookie_id="z:1"), publish_placement=False) == (
        "z:1",
    )


def test_the_decommission_decision_reads_the_typed_gaps_and_basis() -> None:
    shape = LedgerShape.of(ledger_id=1, ensemble_size=3, write_quorum=2, ack_quorum=2, state="CLOSED",
                           last_entry_id=29, segments=[(0, 0, ("a:1", "b:1", "c:1"))], version=1)
    gap = BookieGap("c:1", 0, 2, 4, ((1, 2), (4, 5)))
    facts = DurabilityDetail(3, 2, 2, 30, 4, 4, 0, {1: 4}, ((1, 2),), ("c:1",), (gap,), False, (), False)
    reads = RunNotes(basis=EvidenceBasis("reads", 0.25))
    f = Finding(Category.BELOW_WRITE_QUORUM, 1, facts=facts, notes=reads)
    v = dc.judge(shape, ["a:1"], [f])
    assert v.reason == dc.WOULD_LOSE_ENTRIES and v.ranges == ((2, 2), (5, 5))
    assert v.detail["evidence"] == "reads" and v.detail["sampled_fraction"] == 0.25
    truncated = Finding(Category.BELOW_WRITE_QUORUM, 1, facts=replace(facts, ranges_truncated=True))
    assert dc.judge(shape, ["a:1"], [truncated]).reason == dc.EVIDENCE_TRUNCATED


def test_a_row_with_part_of_a_detail_reads_back_with_defaults() -> None:
    """A row written with fewer keys (an older version, a hand-made table) still feeds the decisions."""
    row = {"category": "no_replica", "ledger_id": 3, "bookie_id": None,
           "detail": '{"bookies_missing_entries":["b1","b2"],"znode_version":4}'}
    f = violation_of_row(row).finding
    assert replicas_to_publish(f, publish_placement=False) == ("b1", "b2")
    assert f.znode_version == 4
    notes_only = violation_of_row({**row, "detail": '{"znode_version":4}'}).finding
    assert notes_only.facts is None and Violation(notes_only).row()["detail"] == '{"znode_version":4}'
