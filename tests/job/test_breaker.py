"""The per-task circuit breaker: transport failures in a row open it, an answer (even an error) resets it."""

from __future__ import annotations

from bkaudit.job.breaker import Breaker


def test_opens_after_threshold_transport_failures_in_a_row() -> None:
    b = Breaker("b:1", 3)
    for _ in range(2):
        b.failed("UNAVAILABLE", OSError("reset"), doing="listing")
    assert not b.open
    b.failed("UNAVAILABLE", OSError("timed out"), doing="listing")
    assert b.open and "UNAVAILABLE: timed out" in b.skipped("asked")
    assert b.skipped("asked").startswith("not asked after 3 consecutive transport failures")


def test_an_answer_or_a_bookie_error_breaks_the_run() -> None:
    b = Breaker("b:1", 2)
    b.failed("UNAVAILABLE", OSError("reset"), doing="reads")
    b.answered()
    b.failed("UNAVAILABLE", OSError("reset"), doing="reads")
    b.failed("EIO", OSError("disk"), doing="reads")  # the bookie answered: it is alive
    b.failed("UNAVAILABLE", OSError("reset"), doing="reads")
    assert not b.open and b.consecutive == 1
