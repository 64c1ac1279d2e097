"""Severities, counts, exit codes, metadata findings, the re-read decision and the [checker] settings."""

from __future__ import annotations

import pytest

from bkaudit.audit.base import SEVERITY, Category, Finding, RunNotes, Severity, cap_ranges, merge_ranges
from bkaudit.audit.classification import (
    FailOn,
    count_findings,
    count_under_repair,
    durability_category,
    exit_code,
)
from bkaudit.audit.metadata import MetadataCheck, MetadataRecord
from bkaudit.audit.reconcile import MarkerState, Recheck, ZnodeVersion, apply_marker, recheck
from bkaudit.audit.settings import CheckerSettings
from bkaudit.config import load
from bkaudit.errors import ConfigError
from bkaudit.model.ledger import Segment
from bkaudit.model.shape import LedgerShape


def test_severity_table_is_the_issues():
    critical = {c.value for c, s in SEVERITY.items() if s is Severity.CRITICAL}
    warning = {c.value for c, s in SEVERITY.items() if s is Severity.WARNING}
    info = {c.value for c, s in SEVERITY.items() if s is Severity.INFO}
    assert critical == {"no_replica", "below_ack_quorum", "metadata_unparseable"}
    assert warning == {
        "below_write_quorum",
        "placement_fail",
        "underreplicated_too_long",
        "bookie_unreachable_but_registered",
        "ledger_unverifiable",
        "corrupt_entries",  # issue 11: a copy read back that fails its digest
    }
    assert info == {"placement_soft", "extra_entries"}
    assert set(SEVERITY) == set(Category)


@pytest.mark.parametrize(
    ("least", "wq", "aq", "expected"),
    [
        (0, 3, 2, Category.NO_REPLICA),
        (1, 3, 2, Category.BELOW_ACK_QUORUM),
        (2, 3, 2, Category.BELOW_WRITE_QUORUM),
        (3, 3, 2, None),
        (1, 2, 2, Category.BELOW_ACK_QUORUM),
        (1, 2, 1, Category.BELOW_WRITE_QUORUM),
        (0, 1, 1, Category.NO_REPLICA),
    ],
)
def test_durability_buckets(least, wq, aq, expected):
    assert durability_category(least, wq, aq) is expected


def test_exit_codes():
    counts = {c.value: 0 for c in Category}
    assert exit_code(counts, "critical") == 0
    counts["placement_soft"] = 3
    assert exit_code(counts, "warning") == 0
    counts["placement_fail"] = 1
    assert exit_code(counts, "warning") == 3
    assert exit_code(counts, "critical") == 0
    counts["no_replica"] = 1
    assert exit_code(counts, FailOn.CRITICAL) == 3
    assert exit_code(counts, "never") == 0
    with pytest.raises(ValueError):
        exit_code(counts, "sometimes")


def test_counts_exclude_under_repair_and_list_every_category():
    fs = [
        Finding(Category.NO_REPLICA, 1),
        Finding(Category.NO_REPLICA, 2, notes=RunNotes(under_repair=True)),
        Finding(Category.EXTRA_ENTRIES, 1, bookie_id="a"),
    ]
    counts = count_findings(fs)
    assert counts["no_replica"] == 1 and counts["extra_entries"] == 1
    assert set(counts) == {c.value for c in Category} and counts["placement_fail"] == 0
    assert count_under_repair(fs) == {"no_replica": 1}


def test_ranges_helpers():
    assert merge_ranges([(5, 6), (1, 2), (3, 3), (9, 9)]) == [(1, 3), (5, 6), (9, 9)]
    assert cap_ranges([(1, 1), (3, 3)], 1) == (((1, 1),), True)
    assert cap_ranges([(1, 1)], 0) == (((1, 1),), False)


def test_metadata_check():
    (f,) = MetadataCheck().evaluate(MetadataRecord(4, parse_error="bad varint at 3", raw_size=17))
    assert f.category is Category.METADATA_UNPARSEABLE and f.detail["parsed"] is False
    bad = LedgerShape(5, 2, 3, 2, True, 1, (Segment(0, ("a", "b")),))
    (g,) = MetadataCheck().evaluate(MetadataRecord(5, shape=bad))
    assert g.detail["parsed"] is True and "E >= WQ" in g.detail["error"]
    good = LedgerShape(6, 2, 2, 2, True, 1, (Segment(0, ("a", "b")),))
    assert MetadataCheck().evaluate(MetadataRecord(6, shape=good)) == []


def test_recheck():
    assert recheck(ZnodeVersion(3, 100), ZnodeVersion(3, 100)) is Recheck.UNCHANGED
    assert recheck(ZnodeVersion(3, 100), ZnodeVersion(4, 120)) is Recheck.CHANGED
    assert recheck(ZnodeVersion(0, 100), ZnodeVersion(0, 140)) is Recheck.CHANGED  # deleted and recreated
    assert recheck(ZnodeVersion(3, None), ZnodeVersion(3, 140)) is Recheck.UNCHANGED
    assert recheck(ZnodeVersion(3, 100), None) is Recheck.DELETED
    assert recheck(None, ZnodeVersion(3, 100)) is Recheck.CHANGED


def test_apply_marker_flags_ledger_findings_only():
    fs = [
        Finding(Category.BELOW_ACK_QUORUM, 1),
        Finding(Category.PLACEMENT_FAIL, 1),
        Finding(Category.UNDERREPLICATED_TOO_LONG, 1),
        Finding(Category.METADATA_UNPARSEABLE, 1),
    ]
    out = apply_marker(fs, MarkerState(("a:1",), 42))
    assert [f.under_repair for f in out] == [True, True, False, False]
    assert out[0].detail["marker_replicas"] == ["a:1"] and out[0].detail["marker_ctime_ms"] == 42
    assert apply_marker(fs, None) == fs


def test_checker_settings_defaults_and_validation(tmp_path):
    s = load(path=None, environ={}, overrides={}).get(CheckerSettings)
    assert s.fail_on == "critical" and s.publish_underreplicated is False
    env = {"BKAUDIT_CHECKER__GRACE_PERIOD_S": "60", "BKAUDIT_CHECKER__FAIL_ON": "warning"}
    s = load(path=None, environ=env).get(CheckerSettings)
    assert s.grace_period_s == 60.0 and s.fail_on == "warning"
    with pytest.raises(ConfigError, match=r"checker\.fail_on"):
        load(environ={"BKAUDIT_CHECKER__FAIL_ON": "loud"}).get(CheckerSettings)
    with pytest.raises(ConfigError, match=r"checker\.batch_size"):
        load(environ={"BKAUDIT_CHECKER__BATCH_SIZE": "0"}).get(CheckerSettings)
    with pytest.raises(ConfigError, match="pushgateway_url"):
        CheckerSettings(pushgateway_url="pushgateway:9091")
