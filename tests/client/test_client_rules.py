"""Pure pieces of the ledger client: CAS-conflict rules, in-order acks, fencing coverage, recovery reads."""

from __future__ import annotations

import pytest

from bkaudit.client import rules
from bkaudit.client.fencing import FenceTracker
from bkaudit.client.pending import AddQueue, PendingAdd
from bkaudit.client.recovery import RecoveryRead
from bkaudit.client.settings import ClientSettings, digest_from_name
from bkaudit.errors import ConfigError
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.model.quorum import write_set


def md(state: LedgerState = LedgerState.OPEN, last: int = -1, segments=None) -> LedgerMetadata:
    return LedgerMetadata(
        3, 2, 2, state, last, 0, DigestType.CRC32C, b"", segments or (Segment(0, ("a", "b", "c")),)
    )


# -- writer close --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("state", "last", "acked", "outcome"),
    [
        (LedgerState.OPEN, -1, 5, rules.Outcome.RETRY),
        (LedgerState.IN_RECOVERY, -1, 5, rules.Outcome.FAIL),
        (LedgerState.CLOSED, 5, 5, rules.Outcome.DONE),
        (LedgerState.CLOSED, 6, 5, rules.Outcome.FAIL),
        (LedgerState.CLOSED, 4, 5, rules.Outcome.FAIL),
    ],
)
def test_writer_close_rules(state: LedgerState, last: int, acked: int, outcome: rules.Outcome) -> None:
    got, why = rules.writer_close(md(state, last), acked)
    assert got is outcome
    assert why


def test_writer_ensemble_change_rules() -> None:
    assert rules.writer_ensemble_change(md())[0] is rules.Outcome.RETRY
    assert rules.writer_ensemble_change(md(LedgerState.IN_RECOVERY))[0] is rules.Outcome.FAIL
    assert rules.writer_ensemble_change(md(LedgerState.CLOSED, 3))[0] is rules.Outcome.FAIL


def test_recovery_close_rules() -> None:
    start = md(LedgerState.IN_RECOVERY)
    assert rules.recovery_close(md(LedgerState.CLOSED, 7), start)[0] is rules.Outcome.DONE
    assert rules.recovery_close(start, start)[0] is rules.Outcome.RETRY
    moved = md(LedgerState.IN_RECOVERY, segments=(Segment(0, ("a", "b", "d")),))
    assert rules.recovery_close(moved, start)[0] is rules.Outcome.FAIL
    assert rules.recovery_close(md(LedgerState.OPEN), start)[0] is rules.Outcome.FAIL


def test_with_replacements_adds_a_segment_at_first_unacked_entry() -> None:
    new = rules.with_replacements(md(), 12, {0: "d"})
    assert new.segments == (Segment(0, ("a", "b", "c")), Segment(12, ("d", "b", "c")))


def test_with_replacements_replaces_an_empty_last_segment_in_place() -> None:
    base = rules.with_replacements(md(), 12, {0: "d"})
    again = rules.with_replacements(base, 12, {1: "e"})
    assert again.segments == (Segment(0, ("a", "b", "c")), Segment(12, ("d", "e", "c")))
    assert rules.with_replacements(md(), 0, {2: "z"}).segments == (Segment(0, ("a", "b", "z")),)


def test_with_replacements_never_goes_back_before_the_last_segment() -> None:
    base = rules.with_replacements(md(), 12, {0: "d"})
    with pytest.raises(ValueError):
        rules.with_replacements(base, 11, {0: "e"})


# -- in-order acknowledgement ----------------------------------------------------------------------------
def _add(entry_id: int, length: int = 0) -> PendingAdd:
    return PendingAdd(entry_id, b"", length, write_set(entry_id, 3, 2), 2, 1 + 1)


def test_acks_are_released_in_entry_order() -> None:
    q = AddQueue()
    adds = [_add(i, 10 * (i + 1)) for i in range(3)]
    for a in adds:
        q.append(a)
    adds[1].ack(adds[1].write_set[0])
    adds[1].ack(adds[1].write_set[1])
    assert q.pop_completed() == []  # entry 1 has AQ acks but entry 0 does not
    assert q.last_add_confirmed == -1
    adds[0].ack(0)
    assert q.pop_completed() == []
    adds[0].ack(1)
    assert [a.entry_id for a in q.pop_completed()] == [0, 1]
    assert (q.last_add_confirmed, q.length) == (1, 20)
    assert len(q) == 1


def test_queue_rejects_out_of_order_entries() -> None:
    q = AddQueue(last_add_confirmed=4)
    with pytest.raises(ValueError):
        q.append(_add(6))
    q.append(_add(5))


def test_unset_forgets_a_replaced_bookie() -> None:
    a = _add(0)
    a.ack(0)
    a.ack(1)
    assert a.complete
    a.unset(1)
    assert not a.complete
    assert a.waiting_on() == (1,)


# -- fencing coverage ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("e", "wq", "aq", "answered", "complete"),
    [
        (3, 2, 2, {0, 1}, True),  # E3 WQ2 AQ2, one bookie down: each write set has 1 responder
        (3, 2, 2, {0}, False),  # two down: write set (1, 2) has nobody
        (3, 3, 2, {0}, False),  # E3 WQ3 AQ2, two down: needs WQ-AQ+1 = 2 responders
        (3, 3, 2, {0, 2}, True),  # one down: fine
        (3, 3, 3, {1}, True),  # AQ = WQ: a single fenced bookie per write set suffices
        (3, 3, 1, {0, 1}, False),  # AQ 1: every bookie must answer
        (3, 3, 1, {0, 1, 2}, True),
        (5, 3, 2, {0, 2, 4}, False),  # two down: write set (1, 2, 3) has only 1 responder
        (5, 3, 2, {0, 1, 3, 4}, True),  # one down: every write set keeps 2 responders
    ],
)
def test_fence_coverage(e: int, wq: int, aq: int, answered: set[int], complete: bool) -> None:
    t = FenceTracker(e, wq, aq)
    for i in answered:
        t.nothing(i)
    assert t.complete is complete


def test_fence_needs_one_valid_answer_and_reports_uncovered_write_sets() -> None:
    t = FenceTracker(3, 3, 2)
    assert not t.complete
    t.entry(0, 41)
    t.failed(1, "UNAVAILABLE")
    assert not t.impossible
    t.failed(2, "EIO")
    assert t.impossible
    assert t.uncovered_write_sets() == [(0, 1, 2), (1, 2, 0), (2, 0, 1)]
    assert t.max_lac == 41


def test_fence_max_lac_is_over_valid_entries() -> None:
    t = FenceTracker(3, 2, 2)
    t.entry(0, 5)
    t.entry(1, 9)
    t.nothing(2)
    assert t.complete and t.max_lac == 9


# -- recovery read decisions --------------------------------------------------------------------------------
def test_recovery_read_absent_after_threshold_missing() -> None:
    r = RecoveryRead(10, replicas=3, absent_threshold=2)  # WQ3 AQ2
    r.nothing()
    assert not r.decided
    r.nothing()
    assert r.is_absent and r.decided


def test_recovery_read_found_wins() -> None:
    r = RecoveryRead(10, replicas=2, absent_threshold=1)
    r.found("entry", b"body")
    assert r.is_found and not r.is_absent and r.decided


def test_recovery_read_errors_everywhere_is_a_failure() -> None:
    r = RecoveryRead(10, replicas=3, absent_threshold=2)
    r.failed("a: EIO")
    r.nothing()
    assert not r.decided
    r.failed("c: UNAVAILABLE")
    assert r.decided and not r.is_found and not r.is_absent


# -- settings ------------------------------------------------------------------------------------------------
def test_client_settings_validation() -> None:
    assert ClientSettings().digest is DigestType.CRC32C
    assert digest_from_name("MAC") is DigestType.MAC
    with pytest.raises(ConfigError):
        ClientSettings(digest_type="md5")
    with pytest.raises(ConfigError):
        ClientSettings(ensemble_size=2, write_quorum=3)
    with pytest.raises(ConfigError):
        ClientSettings(add_timeout_s=0)


def test_client_settings_load_from_config(tmp_path) -> None:
    from bkaudit import config

    path = tmp_path / "c.toml"
    path.write_text("[client]\nadd_timeout_s = 5\nrecovery_read_batch_size = 2\n")
    s = config.load(path=path, environ={"BKAUDIT_CLIENT__READ_TIMEOUT_S": "7"})
    c = s.get(ClientSettings)
    assert (c.add_timeout_s, c.recovery_read_batch_size, c.read_timeout_s) == (5.0, 2, 7.0)
