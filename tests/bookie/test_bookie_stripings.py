"""Bulk-loaded stripings (bookie storage): a bookie answers for striped ledgers exactly as for entry rows.

Ground truth is an independent per-entry model: the ids of a striping are enumerated with BookKeeper's own
rule (`stores_entry`, or `(e - start) mod period < size` directly), loaded one row per entry with
`bulk_load_index`, and every answer of the striped bookie is compared with that bookie's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bkaudit.bookie.bulkload import bulk_load_index, bulk_load_stripings
from bkaudit.bookie.ledgerdb import connect_db, current_dir
from bkaudit.bookie.runs import EntryRuns, StripedIds
from bkaudit.bookie.storage import Storage
from bkaudit.errors import BookieError
from bkaudit.formats import availability
from bkaudit.formats.entry import DigestManager, master_key
from bkaudit.model.ledger import DigestType
from bkaudit.model.quorum import Striping, entries_of_bookie, stores_entry


def ids_of(stripings: list[Striping]) -> list[int]:
    """The naive model: every id of every striping, by the definition, one at a time."""
    out: set[int] = set()
    for s in stripings:
        out.update(e for e in range(s.first, s.last + 1) if (e - s.start) % s.period < s.size)
    return sorted(out)


def runs_of(ids: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for x in ids:
        if out and out[-1][1] + 1 == x:
            out[-1] = (out[-1][0], x)
        else:
            out.append((x, x))
    return out


def segments() -> list[Striping]:
    """A bookie at index 1 of E3/WQ2 for entries 0-999, then at index 0 of E5/WQ3 for 1000-1999 (an ensemble
    change), then E2/WQ2 for 2000-2099: runs touch across the boundaries and must merge."""
    return [
        entries_of_bookie(1, 0, 999, 3, 2),
        entries_of_bookie(0, 1000, 1999, 5, 3),
        entries_of_bookie(1, 2000, 2099, 2, 2),
    ]


def test_bookkeeper_rule_and_the_striping_agree() -> None:
    for e in range(0, 1000):
        assert (e in entries_of_bookie(1, 0, 999, 3, 2)) == stores_entry(1, e, 3, 2)


def test_striped_ledger_lists_reads_and_restarts_like_entry_rows(tmp_path: Path) -> None:
    stripings = segments()
    ids = ids_of(stripings)
    rows, striped = tmp_path / "rows", tmp_path / "striped"
    assert bulk_load_index(rows, [(9, runs_of(ids))]) == len(ids)
    assert bulk_load_stripings(striped, [(9, stripings), (10, [])]) == len(ids)
    with Storage(rows) as want, Storage(striped) as got:
        assert got.availability(9) == want.availability(9) == availability.encode(ids)
        assert got.entry_runs(9) == runs_of(ids)
        assert got.listing_items([9, 10, 11]) == [(9, want.listing_items([9])[0][1]),
                                                    (10, got.listing_items([10])[0][1]), (11, None)]
        assert got.availability(10) == availability.encode([])  # known ledger, no entries
        for e in (0, 1, 2, 3, 999, 1000, 1001, 1003, 1998, 2000, 2099):
            assert got.has_entry(9, e) == (e in set(ids))
            if e in set(ids):
                assert got.read_entry(9, e) == want.read_entry(9, e)
                assert DigestManager(9, b"", DigestType.DUMMY).verify(got.read_entry(9, e), e).entry_id == e
            else:
                with pytest.raises(BookieError, match="ENOENTRY"):
                    got.read_entry(9, e)
        assert got.read_entry(9, -1) == want.read_entry(9, -1)  # the last entry stands for the LAC
        assert got.read_lac(9) == want.read_lac(9)
        assert got.ledger_state(9).master_key == master_key(b"")  # type: ignore[union-attr]
    with Storage(striped) as again:  # restart: the index is rebuilt from the stripings table
        assert again.availability(9) == availability.encode(ids)


def test_deleting_striped_entries_makes_durable_holes(tmp_path: Path) -> None:
    stripings = segments()
    ids = ids_of(stripings)
    lost = {ids[0], ids[5], ids[6], ids[-1]}
    bulk_load_stripings(tmp_path, [(9, stripings)])
    with Storage(tmp_path) as s:
        assert s.delete_entries(9, lost | {5_000}) == len(lost)  # 5,000 is not stored: not counted
        left = [e for e in ids if e not in lost]
        assert s.availability(9) == availability.encode(left)
        with pytest.raises(BookieError, match="ENOENTRY"):
            s.read_entry(9, ids[5])
        assert s.read_entry(9, ids[1])[:16] == ids_body_prefix(9, ids[1])
    with Storage(tmp_path) as s:
        assert s.availability(9) == availability.encode(left)
        assert s.read_entry(9, -1)[:16] == ids_body_prefix(9, left[-1])


def ids_body_prefix(ledger_id: int, entry_id: int) -> bytes:
    return ledger_id.to_bytes(8, "big") + entry_id.to_bytes(8, "big")


def test_writes_over_a_striped_ledger_keep_both(tmp_path: Path) -> None:
    stripings = [entries_of_bookie(0, 0, 29, 3, 2)]  # 0, 2,3, 5,6, ... 26,27, 29
    ids = ids_of(stripings)
    assert 1 not in ids and 2 in ids
    bulk_load_stripings(tmp_path, [(4, stripings)])
    dm = DigestManager(4, b"", DigestType.DUMMY)
    hole, over = dm.package(1, 0, 0, b"re-replicated"), dm.package(2, 1, 0, b"written again")
    with Storage(tmp_path) as s:
        for e, body in ((1, hole), (2, over), (30, dm.package(30, 29, 0, b"x"))):
            s.add_entry(4, e, master_key(b""), body, recovery=True).result(10)
        assert s.availability(4) == availability.encode(sorted({*ids, 1, 30}))
        assert s.read_entry(4, 1) == hole and s.read_entry(4, 2) == over  # the last write wins
        assert s.read_entry(4, -1)[8:16] == (30).to_bytes(8, "big")
        assert s.read_entry(4, 27)[:16] == ids_body_prefix(4, 27)
    with Storage(tmp_path) as s:
        assert s.availability(4) == availability.encode(sorted({*ids, 1, 30}))
        assert s.read_entry(4, 2) == over
        assert s.delete_entries(4, [0, 1, 2]) == 3  # striped, written, and striped then written
        assert s.availability(4) == availability.encode(sorted({*ids, 30} - {0, 2}))
        with pytest.raises(BookieError, match="ENOENTRY"):
            s.read_entry(4, 2)
        assert s.read_entry(4, 3)[:16] == ids_body_prefix(4, 3)


def test_deleting_a_striped_ledger_removes_its_stripings(tmp_path: Path) -> None:
    bulk_load_stripings(tmp_path, [(1, segments()), (2, [entries_of_bookie(0, 0, 9, 2, 2)])])
    with Storage(tmp_path) as s:
        assert s.delete_ledger(1) == len(ids_of(segments()))  # every striped entry counted as removed
        assert s.availability(1) is None and s.availability(2) == availability.encode(range(10))
    with Storage(tmp_path) as s:
        assert not s.knows(1) and s.availability(1) is None
        with pytest.raises(BookieError, match="ENOLEDGER"):
            s.read_entry(1, 1)


def test_stripings_removed_behind_the_bookie_are_listed_missing(tmp_path: Path) -> None:
    bulk_load_stripings(tmp_path, [(7, [Striping(first=0, last=99, start=0, period=1, size=1)]),
                                   (8, [Striping(first=0, last=9, start=0, period=1, size=1)])])
    with Storage(tmp_path) as s:
        assert s.availability(7) == availability.encode(range(100))
        other = connect_db(current_dir(tmp_path) / "ledgers.db")  # a repair tool, not the bookie
        other.execute("DELETE FROM stripings WHERE ledger_id = 7")
        other.close()
        assert s.check() is None
        assert s.availability(7) == availability.encode([])
        with pytest.raises(BookieError, match="ENOENTRY"):
            s.read_entry(7, 3)
        assert s.entry_runs(8) == [(0, 9)]


def test_a_corrupt_striping_row_fails_the_open_with_a_clear_error(tmp_path: Path) -> None:
    import sqlite3

    bulk_load_stripings(tmp_path, [(7, [Striping(first=0, last=9, start=0, period=3, size=2)])])
    other = connect_db(current_dir(tmp_path) / "ledgers.db")
    other.execute("UPDATE stripings SET size = 0")
    other.close()
    with pytest.raises(sqlite3.DatabaseError, match="ledger 7: corrupt striping row"):
        Storage(tmp_path)


stripings_st = st.lists(
    st.tuples(st.integers(0, 300), st.integers(0, 120), st.integers(-5, 10), st.integers(1, 6),
              st.integers(1, 6)).map(
        lambda t: Striping(first=t[0], last=t[0] + t[1] - 5, start=t[2], period=max(t[3], t[4]),
                           size=min(t[3], t[4]))),
    max_size=4,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stripings=stripings_st)
def test_any_stripings_answer_as_their_ids_would(stripings: list[Striping]) -> None:
    ids = ids_of(stripings)
    striped = StripedIds(stripings)
    assert striped.runs() == runs_of(ids)
    assert striped.encoded() == availability.encode(ids) == EntryRuns(runs_of(ids)).encoded()
    assert striped.count() == len(ids)
    assert striped.last == (ids[-1] if ids else None)
    assert list(striped) == ids
    assert all((e in striped) == (e in set(ids)) for e in range(-6, 430))
    assert striped.materialized().runs() == runs_of(ids)


@settings(max_examples=15, deadline=None)
@given(stripings=stripings_st, probe=st.integers(-6, 430))
def test_any_stripings_read_back_from_storage(tmp_path_factory: pytest.TempPathFactory,
                                             stripings: list[Striping], probe: int) -> None:
    d = tmp_path_factory.mktemp("striped")
    bulk_load_stripings(d, [(3, stripings)])
    ids = ids_of(stripings)
    with Storage(d) as s:
        assert s.availability(3) == availability.encode(ids)
        if probe in set(ids):
            assert s.read_entry(3, probe)[:16] == ids_body_prefix(3, probe)
        elif probe >= 0:
            with pytest.raises(BookieError, match="ENOENTRY"):
                s.read_entry(3, probe)
