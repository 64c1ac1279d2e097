"""The checker's phases without Spark: re-read and re-evaluation, bookie statistics, the per-ledger combine,
the ledger selection and the flags defined once. Ground truth is what each test injects (which znodes
changed or vanished, which bookie answered what), never the code under test.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

import click
import pyarrow as pa
import pytest
from click.testing import CliRunner

from bkaudit.audit.base import Category, Finding
from bkaudit.audit.details import DurabilityDetail
from bkaudit.audit.evidence import BookieEvidence, compare_bookie, failed_evidence
from bkaudit.audit.expected import expected_by_bookie
from bkaudit.audit.placement import PlacementCheck
from bkaudit.audit.reconcile import MarkerState, ZnodeVersion
from bkaudit.formats.availability import encode
from bkaudit.formats.ledger_metadata import serialize
from bkaudit.job.bookie_stats import CALL_LOG_COLUMNS, bookie_findings, bookie_stats
from bkaudit.job.check_options import CHECK_FLAGS, CheckOptions, add_arguments, click_options, options_from
from bkaudit.job.cluster_view import ClusterView
from bkaudit.job.combine import COMBINE_SCHEMA, combine_answers
from bkaudit.job.fanout import RESPONSE_SCHEMA
from bkaudit.job.findings import Located, Violation, finding_row, located_of, violations_of
from bkaudit.job.inputs import LedgerSelection
from bkaudit.job.reread import LiveReads, RereadRules, reread
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.model.placement import DefaultPolicy
from bkaudit.model.shape import LedgerShape
from bkaudit.model.topology import Topology

A, B, C = "a:1", "b:1", "c:1"
LAST = 9


def metadata(ensemble: tuple[str, ...] = (A, B, C)) -> LedgerMetadata:
    return LedgerMetadata(
        3, 2, 2, LedgerState.CLOSED, LAST, 100, DigestType.CRC32, b"", (Segment(0, ensemble),)
    )


def rules(max_rounds: int = 3) -> RereadRules:
    placement = PlacementCheck(DefaultPolicy(), Topology.from_mapping({}), "default")
    return RereadRules(
        placement=placement, lost=frozenset(), max_ranges=100, max_rounds=max_rounds
    )


def finding(ledger_id: int, version: int = 1, category: Category = Category.PLACEMENT_FAIL) -> Located:
    return Located(Finding(category, ledger_id).stamped(version), version, 10 + version)


class Live:
    """Scripted ZooKeeper and bookies: each znodes() call returns the next state of the ledgers."""

    def __init__(
        self,
        states: Sequence[Mapping[int, tuple[bytes, ZnodeVersion]]],
        markers: Mapping[int, MarkerState] | None = None,
        holding: Mapping[str, set[int]] | None = None,
    ) -> None:
        self.states = list(states)
        self.marks = dict(markers or {})
        self.holding = holding
        self.asked: list[int] = []

    def znodes(self, ids: Sequence[int]) -> Mapping[int, tuple[bytes, ZnodeVersion]]:
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return {i: state[i] for i in ids if i in state}

    def markers(self, ids: Sequence[int]) -> Mapping[int, MarkerState]:
        return {i: self.marks[i] for i in ids if i in self.marks}

    def ask(
        self, shapes: Sequence[LedgerShape], _digests: Mapping[int, tuple[str, bytes]]
    ) -> Mapping[int, list[BookieEvidence]]:
        out: dict[int, list[BookieEvidence]] = {}
        for s in shapes:
            self.asked.append(s.ledger_id)
            for bookie, expected in expected_by_bookie(s).items():
                held = None if self.holding is None else self.holding.get(bookie)
                if held is None:
                    all_ids = sorted({e for x in expected for e in x.striping})
                    out.setdefault(s.ledger_id, []).append(
                        compare_bookie(s, bookie, _decode(encode(all_ids)))
                    )
                else:
                    out.setdefault(s.ledger_id, []).append(
                        compare_bookie(s, bookie, _decode(encode(sorted(held))))
                    )
        return out

    def reads(self) -> LiveReads:
        return LiveReads(znodes=self.znodes, markers=self.markers, ask=self.ask)


def _decode(data: bytes):  # type: ignore[no-untyped-def]
    from bkaudit.formats.availability import decode

    return decode(data)


def test_deleted_ledgers_are_dropped_and_counted() -> None:
    live = Live([{}])
    out = reread([finding(1), finding(2)], reads=live.reads(), rules=rules())
    assert out.findings == [] and out.deleted == 2 and out.reevaluated == 0


def test_unchanged_ledger_keeps_its_findings_and_a_marker_makes_them_under_repair() -> None:
    live = Live(
        [{1: (b"", ZnodeVersion(1, 11)), 2: (b"", ZnodeVersion(1, 11))}], markers={2: MarkerState((A,), 5)}
    )
    out = reread([finding(1), finding(2)], reads=live.reads(), rules=rules())
    by_ledger = {x.finding.ledger_id: x.finding for x in out.findings}
    assert set(by_ledger) == {1, 2} and out.deleted == 0
    assert not by_ledger[1].under_repair and by_ledger[2].under_repair
    assert live.asked == []  # nothing changed: no bookie asked again


def test_changed_metadata_is_judged_again_from_the_current_znode() -> None:
    # the snapshot saw a placement problem at version 1; now version 2 names other bookies that hold it all
    current = serialize(metadata())
    live = Live([{7: (current, ZnodeVersion(2, 20))}])
    out = reread([finding(7, version=1)], reads=live.reads(), rules=rules())
    assert live.asked == [7]
    assert out.findings == [] and out.reevaluated == 1 and out.changed == 1


def test_a_reevaluated_open_ledger_is_checked_up_to_its_live_lac() -> None:
    """An open ledger whose metadata moved is judged again with the LAC its bookies report now (issue 30 item
    2); one whose LAC cannot be established is unverifiable, its last segment unchecked."""
    from bkaudit.audit.open_segments import OpenSegment

    md = LedgerMetadata(3, 2, 2, LedgerState.OPEN, -1, 0, DigestType.CRC32, b"", (Segment(0, (A, B, C)),))
    current = serialize(md)
    # B lost entry 4 (under the LAC 6) and everything past it; A and C hold 0-9
    shape = LedgerShape.from_metadata(7, md).with_open_end(9)
    held = {b: {e for x in exp for e in x.striping} for b, exp in expected_by_bookie(shape).items()}
    holding = {A: held[A], B: {e for e in held[B] if e < 7 and e != 4}, C: held[C]}
    seen: list[int] = []

    def segments(shapes, _digests):  # type: ignore[no-untyped-def]
        seen.extend(s.ledger_id for s in shapes)
        return {s.ledger_id: OpenSegment(s.ledger_id, 0, 0, 6, 6, "checked up to the LAC 6") for s in shapes}

    live = Live([{7: (current, ZnodeVersion(2, 20))}], holding=holding)
    reads = LiveReads(znodes=live.znodes, markers=live.markers, ask=live.ask, open_segments=segments)
    out = reread([finding(7, version=1)], reads=reads, rules=rules())
    assert seen == [7]
    (f,) = [x.finding for x in out.findings]
    assert f.category is Category.BELOW_ACK_QUORUM and f.missing_entries == ((4, 4),)
    assert f.detail["open_segment"] == {"segment": 0, "first_entry": 0, "checked_to": 6}

    def unknown(shapes, _digests):  # type: ignore[no-untyped-def]
        return {s.ledger_id: OpenSegment(s.ledger_id, 0, 0, None, None, "no coverage") for s in shapes}

    live = Live([{7: (current, ZnodeVersion(2, 20))}], holding=holding)
    reads = LiveReads(znodes=live.znodes, markers=live.markers, ask=live.ask, open_segments=unknown)
    (g,) = [x.finding for x in reread([finding(7, version=1)], reads=reads, rules=rules()).findings]
    assert g.category is Category.LEDGER_UNVERIFIABLE and g.detail["reason_code"] == "open_segment_unknown"


def test_reevaluation_reports_what_the_bookies_hold_now() -> None:
    current = serialize(metadata())
    holding: dict[str, set[int]] = {B: set()}  # B lost everything; A and C hold exactly their stripes
    live = Live([{7: (current, ZnodeVersion(2, 20))}], holding=holding)
    out = reread([finding(7, version=1)], reads=live.reads(), rules=rules())
    categories = {x.finding.category for x in out.findings}
    assert categories == {Category.BELOW_ACK_QUORUM}  # WQ=AQ=2: entries on B keep one copy
    (f,) = [x.finding for x in out.findings]
    assert f.detail["reevaluated"] is True and f.detail["znode_version"] == 2
    assert out.findings[0].version == 2 and out.findings[0].mzxid == 20


def test_metadata_that_keeps_changing_is_unverifiable_after_the_last_round() -> None:
    data = serialize(metadata())
    states = [{7: (data, ZnodeVersion(v, 100 + v))} for v in range(2, 10)]
    live = Live(states)
    out = reread([finding(7, version=1)], reads=live.reads(), rules=rules(max_rounds=2))
    (f,) = [x.finding for x in out.findings]
    assert f.category is Category.LEDGER_UNVERIFIABLE and f.detail["reason_code"] == "metadata_changing"
    assert out.reevaluated == 2


def test_unparseable_current_metadata_is_the_finding() -> None:
    live = Live([{7: (b"\x00garbage", ZnodeVersion(2, 20))}])
    out = reread([finding(7, version=1)], reads=live.reads(), rules=rules())
    assert [x.finding.category for x in out.findings] == [Category.METADATA_UNPARSEABLE]
    assert live.asked == []


def calls(rows: list[tuple[int, str, str, int, str | None, float | None]]) -> pa.Table:
    """(ledger, bookie, status, attempt, call_id, call_ms) rows of the fan-out's call log."""
    cols = {c: [] for c in CALL_LOG_COLUMNS}  # type: dict[str, list[object]]
    for ledger, bookie, status, attempt, call_id, ms in rows:
        cols["ledger_id"].append(ledger)
        cols["bookie_id"].append(bookie)
        cols["status"].append(status)
        cols["error"].append(None if status in ("OK", "ENOLEDGER") else f"{status} from {bookie}")
        cols["call_id"].append(call_id)
        cols["call_ms"].append(ms)
        cols["attempt"].append(attempt)
    return pa.table({c: pa.array(cols[c], RESPONSE_SCHEMA.field(c).type) for c in CALL_LOG_COLUMNS})


def test_bookie_stats_from_the_call_log() -> None:
    log = calls(
        [
            (1, A, "OK", 0, "a#1", 5.0),
            (2, A, "ENOLEDGER", 0, "a#1", 5.0),
            (3, A, "OK", 0, "a#2", 7.0),
            (1, B, "UNAVAILABLE", 0, "b#1", 30.0),
            (2, B, "UNAVAILABLE", 0, "b#1", 30.0),
            (1, B, "OK", 1, "b#2", 3.0),
            (2, B, "UNAVAILABLE", 1, "b#2", 3.0),  # re-check: one answered
            (1, C, "CIRCUIT_OPEN", 0, None, None),
            (1, C, "UNAVAILABLE", 1, "c#1", 9.0),
            (2, C, "EIO", 0, "c#0", 1.0),
        ]
    )
    view = ClusterView(registered={A: "writable", C: "readonly"}, targets={A: "h:1", B: "h:2", C: "h:3"})
    got = {b.bookie_id: b for b in bookie_stats(log, view=view, evidence={C: ("reads", "probe")})}
    assert set(got) == {A, B, C}
    a, b, c = got[A], got[B], got[C]
    assert (a.ledgers_listed, a.errors, a.calls, a.attempts, a.reachable) == (3, 0, 2, 1, True)
    assert a.latency_ms_max == 7.0 and a.state == "writable" and a.target == "h:1" and a.evidence == "listing"
    assert (b.ledgers_listed, b.errors, b.attempts, b.reachable) == (1, 3, 2, True)  # answered in attempt 1
    assert b.ledgers_unverified == 1 and b.error_statuses == {"UNAVAILABLE": 3} and not b.registered
    assert b.state == "absent"
    assert (c.reachable, c.ledgers_unverified, c.attempts) == (False, 2, 2)  # EIO was in attempt 0 only
    assert c.evidence == "reads" and c.evidence_reason == "probe"
    # c stayed unreachable and is still registered; b is reachable: one finding, for c
    found = bookie_findings(list(got.values()), state_of=lambda bookie: view.state(bookie))
    assert [(x.finding.category, x.finding.bookie_id) for x in found] == [
        (Category.BOOKIE_UNREACHABLE_BUT_REGISTERED, C)
    ]
    assert bookie_stats(log.slice(0, 0), view=view, evidence={}) == []


def shape_row(ledger_id: int) -> dict[str, object]:
    return {
        "ledger_id": ledger_id,
        "ensemble_size": 3,
        "write_quorum": 2,
        "ack_quorum": 2,
        "state": "CLOSED",
        "last_entry_id": LAST,
        "znode_version": 4,
        "znode_mzxid": 44,
        "managed_ledger": "ml",
        "segments": [{"segment_index": 0, "first_entry_id": 0, "ensemble": [A, B, C]}],
    }


def test_combine_on_the_driver_judges_each_ledger_from_its_rows() -> None:
    shape = LedgerShape.of(
        ledger_id=5,
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        state="CLOSED",
        last_entry_id=LAST,
        segments=[(0, 0, (A, B, C))],
        version=4,
    )
    held = {b: sorted({e for x in exp for e in x.striping}) for b, exp in expected_by_bookie(shape).items()}
    answers = [
        {"bookie_id": A, "ledger_id": 5, "status": "OK", "answer": None, "attempt": 0},  # digest matched
        {"bookie_id": B, "ledger_id": 5, "status": "ENOLEDGER", "answer": None, "attempt": 0},
        {"bookie_id": C, "ledger_id": 5, "status": "OK", "answer": encode(held[C]), "attempt": 0},
        {"bookie_id": A, "ledger_id": 6, "status": "OK", "answer": None, "attempt": 0},  # no shape: skipped
    ]
    table = pa.Table.from_pylist(answers, schema=RESPONSE_SCHEMA)
    out = combine_answers(table, {5: shape_row(5)}, max_ranges=100, lost=frozenset())
    # WQ=AQ=2 and B holds nothing: its entries keep one copy, below the ack quorum
    assert [(x.finding.category, x.finding.ledger_id) for x in out] == [(Category.BELOW_ACK_QUORUM, 5)]
    (x,) = out
    assert (x.version, x.mzxid, x.managed_ledger) == (4, 44, "ml")
    assert x.finding.detail["bookies_missing_entries"] == [B]
    assert set(COMBINE_SCHEMA.names) >= set(RESPONSE_SCHEMA.names)


def test_a_lost_bookies_copies_are_missing_and_say_so() -> None:
    """Not registered, silent through the re-check: BookKeeper's Auditor marks its ledgers (issue 30 item 3).
    Ground truth: B held its whole share (WQ=AQ=2, E=3) and is gone, so its entries keep one copy."""
    shape = LedgerShape.of(
        ledger_id=5,
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        state="CLOSED",
        last_entry_id=LAST,
        segments=[(0, 0, (A, B, C))],
        version=4,
    )
    from bkaudit.job.combine import ledger_findings

    evidence = [
        BookieEvidence(A, "OK"),
        BookieEvidence(C, "OK"),
        failed_evidence(B, "UNAVAILABLE", "refused"),
    ]
    (f,) = ledger_findings(shape, evidence, max_ranges=10, lost={B})
    held_by_b = sorted({e for x in expected_by_bookie(shape)[B] for e in x.striping})
    assert f.category is Category.BELOW_ACK_QUORUM and f.min_replicas == 1
    assert f.detail["cause"] == "lost_bookie" and f.detail["lost_bookies"] == [B]
    assert f.detail["bookies_missing_entries"] == [B] and f.detail["partial"] is False
    assert f.detail["entries_below_ack_quorum"] == len(held_by_b)
    assert f.detail["missing_by_bookie"][0]["cause"] == "lost_bookie"
    # every copy on lost bookies: no replica
    (g,) = ledger_findings(shape, [BookieEvidence(A, "OK"), failed_evidence(B, "UNAVAILABLE", "x"),
                                   failed_evidence(C, "CIRCUIT_OPEN", "x")], max_ranges=10, lost={B, C})
    assert g.category is Category.NO_REPLICA and g.detail["lost_bookies"] == [B, C]


def test_a_registered_bookie_that_does_not_answer_stays_unverified() -> None:
    shape = LedgerShape.of(
        ledger_id=5, ensemble_size=3, write_quorum=2, ack_quorum=2, state="CLOSED", last_entry_id=LAST,
        segments=[(0, 0, (A, B, C))], version=4,
    )
    from bkaudit.job.combine import ledger_findings

    evidence = [
        BookieEvidence(A, "OK"), BookieEvidence(C, "OK"), failed_evidence(B, "UNAVAILABLE", "refused")
    ]
    (f,) = ledger_findings(shape, evidence, max_ranges=10, lost=frozenset())
    assert f.category is Category.LEDGER_UNVERIFIABLE and f.detail["reason_code"] == "bookie_unreachable"
    # a lost bookie that answered something (an error status) is reachable: not lost, unverified
    (g,) = ledger_findings(shape, [BookieEvidence(A, "OK"), BookieEvidence(C, "OK"),
                                   failed_evidence(B, "EIO", "disk")], max_ranges=10, lost={B})
    assert g.category is Category.LEDGER_UNVERIFIABLE and g.detail["reason_code"] == "bookie_error"


def test_lost_bookies_are_silent_and_unregistered_through_the_recheck() -> None:
    from bkaudit.job.bookie_stats import lost_bookies

    calls = pa.table(
        {
            "ledger_id": [1, 1, 1, 1, 1, 1],
            "bookie_id": [A, B, C, A, B, C],
            "status": ["UNAVAILABLE", "UNAVAILABLE", "UNAVAILABLE", "OK", "UNAVAILABLE", "UNAVAILABLE"],
            "error": ["x"] * 6,
            "call_id": ["1", "2", "3", "4", "5", "6"],
            "call_ms": [1.0] * 6,
            "attempt": [0, 0, 0, 1, 1, 1],
        }
    )
    view = ClusterView(registered={C: "writable"}, targets={})
    stats = bookie_stats(calls, view=view, evidence={})
    # A answered in its last attempt; C is registered; B is silent and unregistered, unless it came back
    assert lost_bookies(stats, registered_now=frozenset()) == {B}
    assert lost_bookies(stats, registered_now={B}) == frozenset()


def test_findings_cross_the_executor_boundary_unchanged_and_report_in_order() -> None:
    facts = DurabilityDetail(3, 2, 2, 9, 1, 0, 0, {1: 1, 2: 8}, ((1, 1),), (B,), (), False, (), False)
    f = Finding(Category.BELOW_WRITE_QUORUM, 3, 0, B, ((1, 2), (5, 5)), 1, facts)
    loc = Located(f, 7, 70, "ml")
    assert located_of(finding_row(loc)) == loc
    later = Located(Finding(Category.PLACEMENT_FAIL, 1))
    ordered = violations_of([later, loc])
    assert [v.finding.category.value for v in ordered] == ["below_write_quorum", "placement_fail"]
    assert ordered[0] == Violation(f, "ml") and ordered[0].row()["missing_entries"] == [
        {"first": 1, "last": 2},
        {"first": 5, "last": 5},
    ]


def test_selection_naming_bookies_picks_the_ledgers_whose_ensembles_name_them() -> None:
    segments = pa.table(
        {
            "ledger_id": pa.array([1, 1, 2, 3], pa.int64()),
            "ensemble": [[A, B], [B, C], [A, B], [C, A]],
        }
    )
    assert LedgerSelection().ledger_ids(segments) is None and LedgerSelection().complete
    picked = LedgerSelection.naming([C]).ledger_ids(segments)
    assert picked is not None and sorted(picked.to_pylist()) == [1, 3]
    assert not LedgerSelection.naming([C]).complete
    assert LedgerSelection.naming(["z:1"]).ledger_ids(segments).to_pylist() == []  # type: ignore[union-attr]


ARGS = [
    "--snapshot-id",
    "S",
    "--run-id",
    "R",
    "--publish-underreplicated",
    "--no-publish-placement",
    "--fail-on",
    "warning",
    "--metrics-file",
    "m.prom",
    "--pushgateway",
    "http://gw",
]


def test_flags_are_defined_once_for_click_and_argparse() -> None:
    seen: dict[str, object] = {}

    @click.command()
    @click_options
    def cmd(**flags: object) -> None:
        seen.update(flags)

    assert CliRunner().invoke(cmd, ARGS).exit_code == 0
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    parsed = vars(parser.parse_args(ARGS))
    from_click = options_from(seen, warehouse="w")
    from_argparse = options_from(parsed, warehouse="w")
    assert (
        from_click
        == from_argparse
        == CheckOptions(
            warehouse="w",
            snapshot_id="S",
            run_id="R",
            publish_underreplicated=True,
            publish_placement=False,
            fail_on="warning",
            metrics_file="m.prom",
            pushgateway_url="http://gw",
        )
    )
    assert options_from({}, warehouse="w") == CheckOptions(warehouse="w")
    assert len({f.option for f in CHECK_FLAGS}) == len(CHECK_FLAGS)
    with pytest.raises(SystemExit):
        parser.parse_args(["--fail-on", "sometimes"])


def test_flags_that_set_a_checker_key_are_its_overrides() -> None:
    """Every flag but --pushgateway (any address the push client takes) overrides its [checker] key; an
    empty fail_on (Python API only) means the setting, an empty metrics file means none."""
    parsed = vars(_parser().parse_args(ARGS))
    assert options_from(parsed, warehouse="w").setting_overrides() == {
        "checker.publish_underreplicated": True, "checker.publish_placement": False,
        "checker.fail_on": "warning", "checker.metrics_file": "m.prom"}
    assert CheckOptions(warehouse="w", fail_on="", metrics_file="").setting_overrides() == {
        "checker.publish_underreplicated": None, "checker.publish_placement": None,
        "checker.fail_on": None, "checker.metrics_file": ""}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser


@pytest.mark.parametrize("ledgers", [0, 1, 999, 1_000, 5_000, 199_999, 200_001, 1_000_000, 2_000_000])
@pytest.mark.parametrize("cores", [1, 2, 8])
def test_no_ledger_pass_task_holds_more_than_its_share(ledgers: int, cores: int) -> None:
    """A fan-out task keeps its partition's requests in memory, so the task count grows with the cluster:
    staging the ledgers into that many equal files never gives a task more than LEDGERS_PER_TASK, and every
    core gets a task once there are a thousand ledgers per core."""
    from bkaudit.job.inputs import LEDGERS_PER_TASK, ledger_pass_tasks

    tasks = ledger_pass_tasks(ledgers, cores=cores)
    assert tasks >= 1
    assert -(-ledgers // tasks) <= LEDGERS_PER_TASK  # the largest of `tasks` equal slices
    if ledgers >= 1_000 * cores:
        assert tasks >= cores
    if ledgers <= LEDGERS_PER_TASK * cores:
        assert tasks <= cores  # no more tasks than cores while each fits
