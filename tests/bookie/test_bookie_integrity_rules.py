"""The data-integrity check's rules (DataIntegrityCheckImpl): which ledgers go into limbo, which entries a
bookie must copy back; and the pre-boot marking on a real Storage (the full check runs on real bookie
processes in tests/bookie/test_bookie_integrity.py)."""

from __future__ import annotations

from pathlib import Path

from bkaudit.autorecovery.integrity import (
    IntegrityCheck,
    last_known_entry,
    missing_entries,
    needs_limbo,
    runs_of,
)
from bkaudit.bookie.storage import NEEDS_INTEGRITY_CHECK, Storage
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment


def md(state: LedgerState, last: int, *segments: tuple[int, tuple[str, ...]], e: int = 3,
       wq: int = 2) -> LedgerMetadata:
    return LedgerMetadata(e, wq, 2, state, last, 0, DigestType.CRC32C, b"",
                          tuple(Segment(f, ens) for f, ens in segments))


OPEN, CLOSED = LedgerState.OPEN, LedgerState.CLOSED


def test_limbo_only_for_unclosed_ledgers_with_the_bookie_in_the_last_ensemble() -> None:
    assert needs_limbo(md(OPEN, -1, (0, ("a", "b", "c"))), "a")
    assert needs_limbo(md(LedgerState.IN_RECOVERY, -1, (0, ("a", "b", "c"))), "a")
    assert not needs_limbo(md(CLOSED, 9, (0, ("a", "b", "c"))), "a")
    assert not needs_limbo(md(OPEN, -1, (0, ("a", "b", "c")), (5, ("d", "b", "c"))), "a")  # replaced at 5


def test_last_known_entry_and_missing_entries_follow_the_write_sets() -> None:
    closed = md(CLOSED, 9, (0, ("a", "b", "c")), (6, ("d", "b", "c")))
    assert last_known_entry(closed) == 9
    assert last_known_entry(md(OPEN, -1, (0, ("a", "b", "c")), (6, ("d", "b", "c")))) == 5
    # a is index 0 of segment 0 (entries 0..5): E3 WQ2 stores e with (0 - e) % 3 < 2 -> 0, 2, 3, 5
    held = {3}
    got = missing_entries(closed, "a", lambda e: e in held)
    assert [(seg.first_entry_id, ids) for seg, ids in got] == [(0, [0, 2, 5])]
    # b is index 1 of both segments: stores e with (1 - e) % 3 < 2, in each segment up to the last entry
    got_b = missing_entries(closed, "b", lambda e: False)
    assert [(seg.first_entry_id, ids) for seg, ids in got_b] == [(0, [0, 1, 3, 4]), (6, [6, 7, 9])]
    assert runs_of([0, 1, 3, 4, 6]) == [(0, 1), (3, 4), (6, 6)]


def test_preboot_marks_limbo_and_fences_only_what_it_must(tmp_path: Path) -> None:
    ledgers = {
        1: md(OPEN, -1, (0, ("me", "b", "c"))),  # limbo
        2: md(CLOSED, 9, (0, ("me", "b", "c"))),  # checked (copied back), not limbo
        3: md(OPEN, -1, (0, ("me", "b", "c")), (4, ("d", "b", "c"))),  # me replaced: copy only
        4: md(OPEN, -1, (0, ("x", "b", "c"))),  # does not name me
    }

    def no_client() -> object:
        raise AssertionError("pre-boot needs no ledger client")

    with Storage(tmp_path) as storage:
        check = IntegrityCheck(storage=storage, bookie_id="me", metadata=lambda: ledgers.items(),
                               client=no_client)
        assert check.preboot("NEW_ENVIRONMENT") == 1
        assert storage.limbo_ledgers() == [1]
        state = storage.ledger_state(1)
        assert state is not None and state.fenced and not state.master_key
        assert NEEDS_INTEGRITY_CHECK in storage.flags and check.needed
        assert not storage.knows(4)


def test_full_check_with_nothing_naming_the_bookie_clears_the_flag_without_a_client(tmp_path: Path) -> None:
    def no_client() -> object:
        raise AssertionError("nothing to recover or copy")

    with Storage(tmp_path) as storage:
        check = IntegrityCheck(storage=storage, bookie_id="me", metadata=lambda: [], client=no_client)
        check.preboot("NEW_ENVIRONMENT")
        check.full_check()
        assert not check.needed and check.done.is_set()
    with Storage(tmp_path) as storage:
        assert NEEDS_INTEGRITY_CHECK not in storage.flags
