"""The invariant checker against hand-built histories: a clean one passes, each violation is caught.

Histories are written the way a run records them (bkaudit.chaos.history), with ground truth chosen here.
"""

from __future__ import annotations

from typing import Any

from bkaudit.chaos import invariants
from bkaudit.chaos.history import History, excerpt, load

Ev = dict[str, Any]


def ev(t: float, type_: str, **fields: Any) -> Ev:
    return {"t": t, "type": type_, **fields}


def ledger(
    lid: int, entries: int, *, e: int = 3, wq: int = 2, aq: int = 2, close: int | None = None
) -> list[Ev]:
    """A ledger written and acknowledged up to `entries - 1`, closed at `close` (default: the last ack)."""
    out = [ev(1, "create", ledger=lid, e=e, wq=wq, aq=aq, ensemble=["a", "b", "c"][:e])]
    out += [ev(2, "ack", ledger=lid, entry=i, digest=f"d{lid}-{i}") for i in range(entries)]
    out.append(ev(3, "close", ledger=lid, last_entry=entries - 1 if close is None else close, by="writer"))
    return out


def reads(lid: int, entries: int, *, bad: dict[int, str | None] | None = None) -> list[Ev]:
    bad = bad or {}
    return [
        ev(90, "final_read", ledger=lid, entry=i, digest=bad.get(i, f"d{lid}-{i}")) for i in range(entries)
    ]


def final(lid: int, last: int) -> Ev:
    return ev(91, "final_metadata", ledger=lid, state="CLOSED", last_entry=last)


def wipe(t: float, lid: int, bookie: str, index: int, first: int, last: int, **q: int) -> Ev:
    quorum = {"e": 3, "wq": 2, "aq": 2, **q}
    return ev(
        t,
        "damage",
        ledger=lid,
        bookie=bookie,
        index=index,
        first=first,
        last=last,
        closed=True,
        cause=0,
        **quorum,
    )


def check(n: int, started: float, findings: list[tuple[str, int | None]], *, final: bool = False) -> list[Ev]:
    out = [ev(started + 5, "check", n=n, started=started, ended=started + 5, stable=True, final=final)]
    out += [
        ev(started + 5, "finding", n=n, category=c, ledger=lid, bookie=None, under_repair=False)
        for c, lid in findings
    ]
    return out


def names(violations: list[invariants.Violation]) -> list[tuple[str, int | None]]:
    return sorted(
        ((v.invariant, v.ledger) for v in violations), key=lambda x: (x[0], x[1] is None, x[1] or 0)
    )


def clean_history() -> list[Ev]:
    """Ledger 1 healthy; ledger 2 lost bookie b (index 1) at t=10, reported by check 1, repaired at t=30-31,
    clean in check 2; ledger 3 corrupted on purpose and reported."""
    h = [*ledger(1, 10), *ledger(2, 9), *ledger(3, 4)]
    h.append(wipe(10, 2, "b", 1, 0, 8))
    h.append(ev(12, "damage", ledger=3, kind="metadata", cause=1))
    h += check(1, 20, [("below_ack_quorum", 2), ("metadata_unparseable", 3)])
    h.append(ev(31, "repair", ledger=2, locked_t=30, done_t=31, node="ar0"))
    h += check(2, 40, [("metadata_unparseable", 3)], final=True)
    h += [*reads(1, 10), *reads(2, 9), final(1, 9), final(2, 8)]
    return h


def test_a_clean_history_upholds_every_invariant() -> None:
    assert invariants.check(clean_history()) == []


def test_acknowledged_entry_lost_with_fewer_than_aq_bookies_damaged() -> None:
    h = clean_history()
    h = [e for e in h if not (e["type"] == "final_read" and e["ledger"] == 1 and e["entry"] == 4)]
    h.append(ev(90, "final_read", ledger=1, entry=4, digest=None, detail="DataLossError"))
    h.append(ev(90, "final_read", ledger=1, entry=5, digest="something else"))  # later record wins
    (v,) = [v for v in invariants.check(h) if v.invariant == "acknowledged_readable"]
    assert v.ledger == 1 and "entry 4: unreadable" in v.detail and "entry 5: payload differs" in v.detail


def test_loss_beyond_the_guarantee_is_not_a_violation_but_needs_damage_to_aq_bookies() -> None:
    h = [*ledger(5, 6), wipe(10, 5, "a", 0, 0, 5), *reads(5, 6, bad={0: None, 2: None})]
    assert names(invariants.check(h)) == [("acknowledged_readable", 5)]  # 1 bookie lost, AQ=2: must survive
    # entry 0 (indexes 0,1) now lost both copies; entry 2 (indexes 2,0) only one
    h.append(wipe(11, 5, "b", 1, 0, 5))
    (v,) = invariants.check(h)
    assert "entry 2" in v.detail and "entry 0" not in v.detail


def test_recovery_that_cut_acknowledged_entries() -> None:
    h = [*ledger(6, 8, close=5), *reads(6, 8), final(6, 5)]
    got = names(invariants.check(h))
    assert ("recovery_covers_acks", 6) in got


def test_two_closes_that_disagree() -> None:
    h = [*ledger(7, 4), ev(50, "close", ledger=7, last_entry=9, by="recovery"), *reads(7, 4), final(7, 3)]
    (v,) = invariants.check(h)
    assert v.invariant == "closes_agree" and "recovery=9" in v.detail and "writer=3" in v.detail


def test_damage_the_checker_did_not_report_or_reported_in_the_wrong_category() -> None:
    h = clean_history()
    h = [e for e in h if not (e["type"] == "finding" and e["n"] == 1 and e["ledger"] == 2)]
    (v,) = invariants.check(h)
    assert (v.invariant, v.ledger) == ("findings_explained", 2) and "below_ack_quorum" in v.detail
    h.append(ev(25, "finding", n=1, category="below_write_quorum", ledger=2, bookie=None, under_repair=False))
    got = invariants.check(h)
    assert [v.invariant for v in got] == ["findings_explained"]
    assert "should be reported as below_ack_quorum" in got[0].detail  # WQ2=AQ2 with one copy gone: below AQ


def test_two_damaged_copies_of_aq_two_is_below_ack_quorum() -> None:
    h = [*ledger(8, 6, e=3, wq=3, aq=2), *reads(8, 6), final(8, 5)]
    h += [wipe(10, 8, "a", 0, 0, 5, wq=3), wipe(11, 8, "b", 1, 0, 5, wq=3)]
    h += check(1, 20, [("below_write_quorum", 8)])
    (v,) = invariants.check(h)
    assert "should be reported as below_ack_quorum" in v.detail


def test_a_repair_begun_before_the_damage_does_not_count() -> None:
    h = clean_history()
    h = [e for e in h if e["type"] != "repair"]
    h.append(ev(31, "repair", ledger=2, locked_t=5, done_t=31, node="ar0"))  # locked before the wipe at 10
    got = invariants.check(h)  # so checks 2 (t=40) and 3 (t=50) still had to report the damage
    assert names(got) == [("findings_explained", 2)]
    assert "check 2: damage b should be reported as below_ack_quorum (found: nothing)" in got[0].detail


def test_finding_without_cause_and_corruption_not_reported() -> None:
    h = clean_history()
    h = [
        e
        for e in h
        if not (e["type"] == "finding" and e["category"] == "metadata_unparseable" and e["n"] == 1)
    ]
    h.append(ev(25, "finding", n=1, category="below_ack_quorum", ledger=1, bookie=None, under_repair=False))
    h.append(
        ev(
            25,
            "finding",
            n=1,
            category="bookie_unreachable_but_registered",
            ledger=None,
            bookie="x",
            under_repair=False,
        )
    )
    got = names(invariants.check(h))
    assert got == [("findings_explained", 1), ("findings_explained", 3), ("findings_explained", None)]


def test_durability_left_after_drain_needs_a_data_loss_record_that_damage_explains() -> None:
    h = clean_history()
    h += check(4, 60, [("no_replica", 1), ("metadata_unparseable", 3)], final=True)
    assert names(invariants.check(h)) == [("clean_after_drain", 1), ("findings_explained", 1)]
    h.append(ev(95, "data_loss", ledger=1, ranges=[[3, 4]], bookies=["a", "b"]))
    (v,) = invariants.check(h)  # the finding is now explained by the record, but nothing explains the record
    assert (v.invariant, v.ledger) == ("clean_after_drain", 1) and "fewer than AQ=2" in v.detail
    h += [wipe(70, 1, "a", 0, 0, 9), wipe(71, 1, "b", 1, 0, 9), wipe(72, 1, "c", 2, 0, 9)]
    h = [e for e in h if e["type"] != "final_read" or e["ledger"] != 1]  # every copy gone: unreadable is fine
    h += check(5, 80, [("no_replica", 1), ("metadata_unparseable", 3)], final=True)
    assert invariants.check(h) == []


def test_history_file_round_trip_and_excerpt(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "h.jsonl"
    rec = History(path)
    rec.record("run", seed=9, schedule=[{"kind": "bookie_kill"}])
    for i in range(100):
        rec.record("ack", ledger=1 + i % 2, entry=i // 2, digest="x")
    rec.record("fault", index=0, kind="bookie_kill", phase="start")
    rec.close()
    with path.open("a") as fh:
        fh.write('{"t": 1, "type": "ack", "led')  # torn last line of a killed run
    events = load(path)
    assert len(events) == 102 and events[0]["seed"] == 9
    cut = excerpt(events, ledgers=[2])
    assert cut[0]["type"] == "run" and "schedule" not in cut[0]
    assert [e["type"] for e in cut[1:]] == ["fault", "acks"]
    assert cut[2]["count"] == 50 and cut[2]["last"]["entry"] == 49


def test_placement_finding_needs_an_ensemble_change_or_repair_of_that_ledger() -> None:
    """Seed 2202: a writer replaced a failed bookie in place (segment 0, no new segment) with the only spare,
    on a rack already in the write set; the checker's placement_fail is explained by that change."""
    h = [*ledger(9, 5), *reads(9, 5)]
    h.append(ev(91, "final_metadata", ledger=9, state="CLOSED", last_entry=4, ensembles=[["a", "b", "c"]]))
    h += check(1, 20, [("placement_fail", 9)])
    assert names(invariants.check(h)) == [("findings_explained", 9)]  # same ensemble as created: no cause
    h[-3]["ensembles"] = [["a", "x", "c"]]
    assert invariants.check(h) == []


def test_below_write_quorum_after_a_bookie_failed_during_the_writes_is_explained() -> None:
    """Seed 101: the proxy dropped one bookie's traffic while a WQ4/AQ3 ledger was written; the writer closed
    on AQ acknowledgements before its add timeout replaced the bookie, leaving entries with 3 of 4 copies."""
    h = [*ledger(11, 5, e=3, wq=3, aq=2), *reads(11, 5)]
    h += check(1, 20, [("below_write_quorum", 11)])
    assert names(invariants.check(h)) == [("findings_explained", 11)]
    h.append(ev(2.5, "fault", index=0, kind="proxy_drop", target=1, phase="start", bookie="b"))
    h.append(ev(4.0, "fault", index=0, kind="proxy_drop", target=1, phase="heal"))
    assert invariants.check(h) == []
    h[-2]["bookie"] = "z"  # a bookie the ledger never used explains nothing
    assert names(invariants.check(h)) == [("findings_explained", 11)]
    h += check(2, 40, [("below_ack_quorum", 11)])  # only the writes' AQ copies are promised: below AQ is not
    assert ("findings_explained", 11) in names(invariants.check(h))


def test_a_segment_swap_repairs_only_its_segment() -> None:
    """Seed 101: AutoRecovery swapped the wiped bookie out of segment 0 and then lost ZooKeeper before marking
    the ledger replicated; the swap alone is the repair of that segment."""
    h = [*ledger(12, 10), *reads(12, 10), final(12, 9)]
    h.append({**wipe(10, 12, "b", 1, 0, 4), "segment": 0})
    h.append({**wipe(10, 12, "b", 1, 5, 9), "segment": 1})
    h.append(ev(31, "repair", ledger=12, segment=0, locked_t=30, done_t=31, node="ar0"))
    h += check(1, 40, [])
    (v,) = invariants.check(h)  # segment 1 is still damaged
    assert (v.invariant, v.ledger) == ("findings_explained", 12)
    h.append(ev(35, "repair", ledger=12, segment=1, locked_t=34, done_t=35, node="ar0"))
    assert invariants.check(h) == []


def test_placement_finding_on_a_ledger_created_while_a_bookie_was_away_is_explained() -> None:
    """Seed 104: a bookie's session had expired and it had not re-registered yet, so the rack-aware policy
    could only pick among two racks for an E3/WQ2 ledger (no odd ring alternates two racks)."""
    h = [*ledger(13, 5), *reads(13, 5), final(13, 4)]
    h += check(1, 20, [("placement_fail", 13)])
    assert names(invariants.check(h)) == [("findings_explained", 13)]
    h.append(ev(0.1, "fault", index=0, kind="bookie_session_expiry", target=2, phase="start", bookie="z"))
    h.append(ev(0.5, "fault", index=0, kind="bookie_session_expiry", target=2, phase="heal"))
    assert invariants.check(h) == []  # healed 0.5 s before the ledger was created: not re-registered yet


def test_a_bookies_integrity_check_repairs_only_that_bookies_damage() -> None:
    """A wiped bookie's data-integrity check copies its own entries back (`repair` naming the bookie): that
    repairs its damage, not another bookie's wipe of the same ledger."""
    h = [*ledger(13, 10, e=3, wq=3, aq=2), *reads(13, 10), final(13, 9)]
    h += [wipe(10, 13, "a", 0, 0, 9, wq=3), wipe(11, 13, "b", 1, 0, 9, wq=3)]
    h.append(ev(31, "repair", ledger=13, segment=None, bookie="a", locked_t=30, done_t=31, node="ia"))
    h += check(1, 40, [])
    (v,) = invariants.check(h)  # b's copies are still gone
    assert (v.invariant, v.ledger) == ("findings_explained", 13) and "damage b" in v.detail
    h = [e for e in h if e["type"] not in ("check", "finding")]
    h.append(ev(35, "repair", ledger=13, segment=None, bookie="b", locked_t=34, done_t=35, node="ib"))
    h += check(1, 40, [])
    assert invariants.check(h) == []


def test_chaos_seed_305_a_repair_finishing_while_the_check_runs_may_or_may_not_be_seen() -> None:
    """Seed 305: a wiped bookie's integrity check copied ledger 74 back 0.6 s into check 1 (it keeps working
    while AutoRecovery is stopped), the checker read it healthy, and the invariant wanted a finding. Damage
    must be reported only if still unrepaired when the check ENDS; a finding is still explained meanwhile."""
    base = [*ledger(14, 10), *reads(14, 10), final(14, 9), wipe(10, 14, "a", 0, 0, 9)]
    during = ev(22, "repair", ledger=14, segment=None, bookie="a", locked_t=21, done_t=22, node="ia")
    assert invariants.check([*base, during, *check(1, 20, [])]) == []  # repaired before it was read
    assert invariants.check([*base, during, *check(1, 20, [("below_ack_quorum", 14)])]) == []  # read first
    after = ev(27, "repair", ledger=14, segment=None, bookie="a", locked_t=26, done_t=27, node="ia")
    (v,) = invariants.check([*base, after, *check(1, 20, [])])  # ended at 25: still damaged then
    assert (v.invariant, v.ledger) == ("findings_explained", 14) and "below_ack_quorum" in v.detail
