"""The listing budget of Java bookies: the index pages a run's listings would pin, and which bookies it sends
to reads instead. Pure functions over hand-built ledger rows; the pinning itself is shown on a real Java
bookie in tests/job/test_java_listing_pins_pages.py."""

from __future__ import annotations

import pyarrow as pa
import pytest

from bkaudit.audit.reads import EVIDENCE_LISTING, EVIDENCE_READS
from bkaudit.audit.settings import CheckerSettings
from bkaudit.errors import ConfigError
from bkaudit.job.fanout import SEGMENT_STRUCT
from bkaudit.job.inputs import listing_pages
from bkaudit.job.read_evidence import java_listers, limit_pinned_listing


def ledgers(*rows: tuple[int, int | None, list[list[str]]]) -> pa.Table:
    """(ledger id, last entry, ensembles of its segments) rows, as the ledger input carries them."""
    return pa.table({
        "ledger_id": pa.array([r[0] for r in rows], pa.int64()),
        "last_entry_id": pa.array([r[1] for r in rows], pa.int64()),
        "segments": pa.array(
            [[{"segment_index": i, "first_entry_id": 10 * i, "ensemble": ens} for i, ens in enumerate(r[2])]
             for r in rows],
            pa.list_(SEGMENT_STRUCT),
        ),
    })


def test_pages_count_1024_entries_each_from_entry_0_once_per_ledger_and_bookie() -> None:
    table = ledgers(
        (1, 1023, [["a", "b"]]),  # entries 0..1023: one page
        (2, 1024, [["a", "c"]]),  # entry 1024 starts a second page
        (3, 5000, [["b", "c"], ["b", "d"]]),  # 5 pages; b in both segments still lists one index file
        (4, None, [["a"]]),  # open, no last entry known: one page
        (5, -1, [["d"]]),  # empty: its index file still has a page to read
    )
    assert listing_pages(table) == {"a": 1 + 2 + 1, "b": 1 + 5, "c": 2 + 5, "d": 5 + 1}
    assert listing_pages(table.slice(0, 0)) == {}


MODES = {
    "java-big": (EVIDENCE_LISTING, "listing of ledger 1 answered"),
    "java-small": (EVIDENCE_LISTING, "listing of ledger 2 answered"),
    "bkaudit-big": (EVIDENCE_LISTING, "listing of ledger 3 answered"),
    "db": (EVIDENCE_READS, "configured in [checker] listing_unsupported"),
}
PAGES = {"java-big": 50_001, "java-small": 50_000, "bkaudit-big": 10**6, "db": 10**6}


def test_only_java_bookies_above_the_budget_go_to_reads() -> None:
    out = limit_pinned_listing(MODES, pages=PAGES, batch_listing={"bkaudit-big"}, max_pages=50_000)
    assert out["java-big"][0] == EVIDENCE_READS
    why = out["java-big"][1]
    assert "50,001 index pages" in why and "java_listing_max_pages (50,000)" in why
    assert {b: out[b] for b in ("java-small", "bkaudit-big", "db")} == {
        b: MODES[b] for b in ("java-small", "bkaudit-big", "db")
    }
    assert MODES["java-big"][0] == EVIDENCE_LISTING  # the input is not modified
    assert java_listers(MODES, batch_listing={"bkaudit-big"}) == ["java-big", "java-small"]
    assert java_listers(out, batch_listing={"bkaudit-big"}) == ["java-small"]


def test_a_zero_budget_never_lists_a_java_bookie_that_holds_anything() -> None:
    out = limit_pinned_listing(MODES, pages={**PAGES, "java-small": 1}, batch_listing={"bkaudit-big"},
                               max_pages=0)
    assert {b for b, (mode, _) in out.items() if mode == EVIDENCE_LISTING} == {"bkaudit-big"}
    empty = limit_pinned_listing({"idle": (EVIDENCE_LISTING, "x")}, pages={}, batch_listing=(), max_pages=0)
    assert empty == {"idle": (EVIDENCE_LISTING, "x")}  # nothing to list, nothing pinned


def test_the_budget_setting_is_checked() -> None:
    assert CheckerSettings().java_listing_max_pages == 40_000
    assert CheckerSettings(java_listing_max_pages=0).java_listing_max_pages == 0
    with pytest.raises(ConfigError, match="java_listing_max_pages"):
        CheckerSettings(java_listing_max_pages=-1)
