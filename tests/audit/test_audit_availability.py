"""Availability: unverified ledgers and unreachable-but-registered bookies; nothing silently dropped."""

from __future__ import annotations

from bkaudit.audit.availability import (
    BookieAvailabilityCheck,
    BookieReport,
    LedgerAvailabilityCheck,
    latency_percentiles,
    reason_code,
    should_retry,
    unverifiable,
)
from bkaudit.audit.base import Category
from bkaudit.audit.durability import LedgerEvidence
from bkaudit.audit.evidence import compare_bookie, failed_evidence
from bkaudit.audit.statuses import STATUS_INVALID_RESPONSE, STATUS_NOT_REGISTERED, is_transport_failure
from bkaudit.formats.availability import decode, encode
from bkaudit.model.ledger import Segment
from bkaudit.model.shape import LedgerShape

S = LedgerShape(3, 3, 2, 2, True, 5, (Segment(0, ("a:1", "b:1", "c:1")),))


def healthy(bookie):
    idx = S.segments[0].ensemble.index(bookie)
    ids = [e for e in range(6) if (idx - e) % 3 < 2]
    return compare_bookie(S, bookie, decode(encode(ids)))


def test_transport_and_retry_rules():
    assert is_transport_failure("UNAVAILABLE") and is_transport_failure("DEADLINE_EXCEEDED")
    assert is_transport_failure("CIRCUIT_OPEN")
    assert not is_transport_failure("EIO") and not is_transport_failure(STATUS_INVALID_RESPONSE)
    assert not is_transport_failure("OK") and not is_transport_failure("ENOLEDGER")
    assert should_retry("UNAVAILABLE") and should_retry("EIO") and should_retry(STATUS_INVALID_RESPONSE)
    assert not should_retry("OK") and not should_retry("ENOLEDGER")
    assert reason_code("UNAVAILABLE") == "bookie_unreachable"
    assert reason_code("EIO") == "bookie_error"
    assert reason_code(STATUS_INVALID_RESPONSE) == "invalid_response"
    assert reason_code(STATUS_NOT_REGISTERED) == "bookie_not_registered"


def test_ledger_with_failed_bookie_is_unverifiable():
    ev = (healthy("a:1"), healthy("b:1"), failed_evidence("c:1", "UNAVAILABLE", "connection refused"))
    (f,) = LedgerAvailabilityCheck().evaluate(LedgerEvidence(S, ev))
    assert f.category is Category.LEDGER_UNVERIFIABLE
    assert f.ledger_id == 3 and f.bookie_id == "c:1"
    assert f.detail["reason_code"] == "bookie_unreachable"
    assert "c:1" in f.detail["reason"] and "connection refused" in f.detail["reason"]
    assert f.detail["bookies"][0]["status"] == "UNAVAILABLE"


def test_bookie_holding_the_ledger_in_limbo_makes_it_unverifiable_not_healthy():
    # a wiped bookie restarted with the data-integrity check answers EUNKNOWNLEDGERSTATE for the ledger
    assert not is_transport_failure("EUNKNOWNLEDGERSTATE") and should_retry("EUNKNOWNLEDGERSTATE")
    ev = (healthy("a:1"), healthy("b:1"), failed_evidence("c:1", "EUNKNOWNLEDGERSTATE", "ledger is in limbo"))
    (f,) = LedgerAvailabilityCheck().evaluate(LedgerEvidence(S, ev))
    assert f.category is Category.LEDGER_UNVERIFIABLE and f.bookie_id == "c:1"
    assert f.detail["reason_code"] == "bookie_error" and "EUNKNOWNLEDGERSTATE" in f.detail["reason"]


def test_missing_evidence_is_unverifiable_not_healthy():
    (f,) = LedgerAvailabilityCheck().evaluate(LedgerEvidence(S, (healthy("a:1"), healthy("b:1"))))
    assert f.detail["reason_code"] == "not_checked" and f.bookie_id == "c:1"


def test_several_reasons():
    ev = (
        healthy("a:1"),
        failed_evidence("b:1", "EIO"),
        failed_evidence("c:1", STATUS_INVALID_RESPONSE, "short"),
    )
    (f,) = LedgerAvailabilityCheck().evaluate(LedgerEvidence(S, ev))
    assert f.detail["reason_code"] == "multiple" and f.bookie_id is None
    assert {b["reason_code"] for b in f.detail["bookies"]} == {"bookie_error", "invalid_response"}


def test_fully_answered_ledger_is_verifiable():
    ev = (healthy("a:1"), healthy("b:1"), compare_bookie(S, "c:1", None))
    assert LedgerAvailabilityCheck().evaluate(LedgerEvidence(S, ev)) == []


def test_bookie_unreachable_but_registered():
    check = BookieAvailabilityCheck()
    (f,) = check.evaluate(
        BookieReport(
            "c:1",
            registered=True,
            reachable=False,
            attempts=2,
            state="writable",
            last_status="DEADLINE_EXCEEDED",
            ledgers_unverified=7,
        )
    )
    assert f.category is Category.BOOKIE_UNREACHABLE_BUT_REGISTERED and f.ledger_id is None
    assert f.bookie_id == "c:1" and f.detail["attempts"] == 2 and f.detail["ledgers_unverified"] == 7
    # gone from the registry: the auditor knows it is lost, not our finding
    assert check.evaluate(BookieReport("c:1", registered=False, reachable=False)) == []
    assert check.evaluate(BookieReport("c:1", registered=True, reachable=True)) == []
    assert check.evaluate(BookieReport("c:1", registered=True, reachable=None)) == []


def test_unverifiable_helper():
    f = unverifiable(4, "metadata kept changing", "metadata_changing", versions=[1, 2, 3])
    assert f.category is Category.LEDGER_UNVERIFIABLE and f.detail["versions"] == [1, 2, 3]


def test_latency_percentiles():
    assert latency_percentiles([]) == {}
    values = list(range(1, 101))
    assert latency_percentiles(values) == {"p50": 50.0, "p95": 95.0, "p99": 99.0}
    assert latency_percentiles([7.0]) == {"p50": 7.0, "p95": 7.0, "p99": 7.0}
