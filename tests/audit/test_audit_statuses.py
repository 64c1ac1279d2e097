"""The one definition of bookie answer statuses: answered, judged, transport failure."""

from __future__ import annotations

import pytest

from bkaudit.audit import statuses as st
from bkaudit.audit.availability import should_retry
from bkaudit.audit.evidence import BookieEvidence


@pytest.mark.parametrize("status", ["OK", "ENOLEDGER"])
def test_answers_are_final_and_not_transport(status: str) -> None:
    assert st.is_answered(status) and not should_retry(status) and not st.is_transport_failure(status)
    assert BookieEvidence("b:1", status).answered


JUDGED_ERRORS = ["EIO", "ENOENTRY", "EBADREQ", "EFENCED", "ETOOMANYREQUESTS",
                 st.STATUS_INVALID_RESPONSE, st.STATUS_NOT_REGISTERED, st.STATUS_NOT_CHECKED]


@pytest.mark.parametrize("status", JUDGED_ERRORS)
def test_judged_errors_are_retried_but_prove_the_bookie_answered(status: str) -> None:
    assert not st.is_answered(status) and should_retry(status) and not st.is_transport_failure(status)
    assert not BookieEvidence("b:1", status).answered


@pytest.mark.parametrize("status", ["UNAVAILABLE", "CIRCUIT_OPEN", "DEADLINE_EXCEEDED", "something new"])
def test_anything_else_is_a_transport_failure(status: str) -> None:
    assert st.is_transport_failure(status) and should_retry(status) and status not in st.JUDGED
