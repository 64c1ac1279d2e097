"""The last segment of open ledgers (issue 30 item 2) and which Auditor stamps a run may write (item 4).

Ground truth is BookKeeper's rules written out here: PendingReadLacOp / RRQuorumCoverageSet for the LAC,
LedgerChecker.checkLedger / EntryExistsCallback for the first-entry probe, and the damage each test injects.
"""

from __future__ import annotations

import struct

import google_crc32c
import pytest

from bkaudit.audit.base import Category
from bkaudit.audit.coverage import RunCoverage, stamps
from bkaudit.audit.durability import DurabilityCheck, LedgerEvidence
from bkaudit.audit.evidence import compare_bookie
from bkaudit.audit.expected import expected_by_bookie
from bkaudit.audit.open_segments import (
    LacAnswer,
    decide_open_segment,
    first_entry_readers,
    lac_of_bodies,
    last_add_confirmed,
    open_segment_finding,
)
from bkaudit.errors import FormatError
from bkaudit.formats.availability import decode, encode
from bkaudit.model.ledger import Segment
from bkaudit.model.quorum import write_set
from bkaudit.model.shape import LedgerShape

A, B, C, D = "a:1", "b:1", "c:1", "d:1"


def open_shape(segments, *, e=3, wq=2, aq=2, open_end=None) -> LedgerShape:
    segs = tuple(Segment(f, ens) for f, ens in segments)
    return LedgerShape(7, e, wq, aq, False, -1, segs, open_end=open_end)


# -- BookKeeper's bytes, written out from DigestManager's layout (not bkaudit.formats.entry) ---------------


def crc32c_entry(ledger_id: int, entry_id: int, lac: int, payload: bytes) -> bytes:
    header = struct.pack(">qqqq", ledger_id, entry_id, lac, len(payload))
    return header + struct.pack(">I", google_crc32c.value(header + payload)) + payload


def crc32c_lac(ledger_id: int, lac: int) -> bytes:
    header = struct.pack(">qq", ledger_id, lac)
    return header + struct.pack(">I", google_crc32c.value(header))


def test_lac_is_the_highest_of_the_explicit_lac_and_the_last_entrys():
    assert lac_of_bodies(7, "CRC32C", crc32c_lac(7, 41), crc32c_entry(7, 40, 39, b"x")) == 41
    assert lac_of_bodies(7, "CRC32C", None, crc32c_entry(7, 40, 39, b"x")) == 39
    assert lac_of_bodies(7, "CRC32C", None, None) is None
    bad = bytearray(crc32c_entry(7, 40, 39, b"x"))
    bad[-1] ^= 1
    with pytest.raises(FormatError):
        lac_of_bodies(7, "CRC32C", None, bytes(bad))
    with pytest.raises(FormatError):
        lac_of_bodies(7, "CRC32C", None, crc32c_entry(8, 40, 39, b"x"))  # another ledger's entry
    # MAC: no password in the snapshot, the ids are checked
    assert lac_of_bodies(7, "MAC", None, crc32c_entry(7, 40, 39, b"x")) == 39


def test_the_lac_needs_answers_covering_every_write_set():
    s = open_shape([(0, (A, B, C))])
    # E3 WQ2 AQ2: with indexes 0 and 1 every write set has fewer than AQ unknown bookies
    assert last_add_confirmed(s, [LacAnswer(0, "OK", 12), LacAnswer(1, "ENOENTRY")]) == 12
    # one answer leaves write set (1, 2) with two unknown: not established (the open would fail)
    assert last_add_confirmed(s, [LacAnswer(0, "OK", 12), LacAnswer(1, "UNAVAILABLE")]) is None
    # NoSuchLedger / NoSuchEntry are valid answers without a LAC
    assert last_add_confirmed(s, [LacAnswer(0, "ENOLEDGER"), LacAnswer(2, "ENOENTRY")]) == -1
    # an answer whose body does not verify is not a valid one
    assert last_add_confirmed(s, [LacAnswer(0, "OK", None, "bad digest"), LacAnswer(1, "OK", 3)]) is None


def test_lac_below_the_first_entry_probes_it_as_ledger_checker():
    s = open_shape([(0, (A, B, C)), (20, (A, B, D))])
    readers = first_entry_readers(s)
    assert readers == tuple((A, B, D)[i] for i in write_set(20, 3, 2))
    answers = [LacAnswer(0, "ENOENTRY"), LacAnswer(1, "ENOENTRY"), LacAnswer(2, "ENOENTRY")]
    lac_ok = [LacAnswer(0, "OK", 25), LacAnswer(1, "OK", 24), LacAnswer(2, "UNAVAILABLE")]
    assert decide_open_segment(s, lac_ok, bookies=(A, B, D)).end == 25
    # LAC -1 < 20: every reader says NoSuchEntry → never written, nothing to check
    seg = decide_open_segment(s, answers, bookies=(A, B, D), first_entry_statuses=["ENOENTRY", "ENOLEDGER"])
    assert seg.known and seg.end is None
    # one reader that cannot say (down, error, or has it) → checked alone: [20, 20]
    for other in ("OK", "UNAVAILABLE", "EIO"):
        seg = decide_open_segment(s, answers, bookies=(A, B, D), first_entry_statuses=["ENOENTRY", other])
        assert seg.end == 20
    unknown = decide_open_segment(s, [LacAnswer(0, "UNAVAILABLE")] * 3, bookies=(A, B, D))
    assert not unknown.known and unknown.end is None
    f = open_segment_finding(unknown)
    assert f.category is Category.LEDGER_UNVERIFIABLE and f.detail["reason_code"] == "open_segment_unknown"
    assert f.detail["open_segment"]["first_entry"] == 20


def test_open_segment_is_checked_up_to_the_lac_and_never_past_it():
    """E3 WQ2 AQ2, one open segment, LAC 20. B lacks entry 12 (under the LAC) and entry 25 (past it, maybe
    in flight); C holds 30 (past the LAC): only entry 12 is a finding, with `open_segment` in its detail."""
    s = open_shape([(0, (A, B, C))], open_end=20)
    expected = expected_by_bookie(s)
    held = {b: {e for x in exp for e in x.striping} for b, exp in expected.items()}
    assert max(max(v) for v in held.values()) == 20, "nothing past the LAC is expected"
    b_holds = (held[B] | {25}) - {12}
    c_holds = held[C] | {30}
    evidence = [
        compare_bookie(s, A, decode(encode(sorted(held[A])))),
        compare_bookie(s, B, decode(encode(sorted(b_holds)))),
        compare_bookie(s, C, decode(encode(sorted(c_holds)))),
    ]
    found = DurabilityCheck().evaluate(LedgerEvidence(s, tuple(evidence)))
    (f,) = found
    assert f.category is Category.BELOW_ACK_QUORUM and f.missing_entries == ((12, 12),)
    assert f.detail["open_segment"] == {"segment": 0, "first_entry": 0, "checked_to": 20}
    assert f.detail["missing_by_bookie"][0]["open_segment"] is True


def test_damage_in_a_closed_segment_of_an_open_ledger_does_not_say_open_segment():
    s = open_shape([(0, (A, B, C)), (10, (A, B, D))], open_end=15)
    expected = expected_by_bookie(s)
    held = {b: {e for x in exp for e in x.striping} for b, exp in expected.items()}
    evidence = [compare_bookie(s, b, decode(encode(sorted(h - {3})))) for b, h in held.items()]
    (f,) = DurabilityCheck().evaluate(LedgerEvidence(s, tuple(evidence)))
    assert f.category is Category.NO_REPLICA and f.missing_entries == ((3, 3),)
    assert "open_segment" not in f.detail


def test_a_run_stamps_only_what_it_covered():
    def cover(**changes: object) -> RunCoverage:
        base: dict[str, object] = {"every_ledger": True, "unreadable_ledgers": 0, "open_segments": True,
                                   "unverified_ledgers": 0, "exact": True}
        return RunCoverage(**{**base, **changes})  # type: ignore[arg-type]

    assert stamps(cover()) == ("checkallledgers", "placementpolicycheck", "replicascheck")
    # the decommission audit's selection: nothing
    assert stamps(cover(every_ledger=False)) == ()
    # a ledger whose metadata does not decode: every Java task fails on it and stamps nothing
    assert stamps(cover(unreadable_ledgers=1)) == ()
    # a bookie left unverified: only the placement check (it asks no bookie)
    assert stamps(cover(unverified_ledgers=1)) == ("placementpolicycheck",)
    # open segments not checked (or an LAC not established): not checkAllLedgers
    assert stamps(cover(open_segments=False)) == ("placementpolicycheck", "replicascheck")
    # sampled reads: not every entry compared, not replicasCheck
    assert stamps(cover(exact=False)) == ("checkallledgers", "placementpolicycheck")
