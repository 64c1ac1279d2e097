"""The snapshot validation's segments frame: the sort-based build (unique ledger ids, every snapshot the job
can commit) gives exactly the frame of the merge-based definition, dtypes and NaNs included."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from bkaudit.tables.validation import (
    LEDGER_COLUMNS,
    _segment_frame_by_merge,
    _segment_frame_by_sort,
    pandas_frames,
)

LEDGERS = pa.schema([("ledger_id", pa.int64()), ("state", pa.string()), ("ensemble_size", pa.int32()),
                     ("write_quorum", pa.int32()), ("ack_quorum", pa.int32()), ("last_entry_id", pa.int64()),
                     ("length", pa.int64())])  # fmt: skip
SEGMENTS = pa.schema([("ledger_id", pa.int64()), ("segment_index", pa.int32()),
                      ("first_entry_id", pa.int64()), ("ensemble", pa.list_(pa.string()))])  # fmt: skip


@st.composite
def snapshot(draw: st.DrawFn) -> tuple[pa.Table, pa.Table]:
    ids = draw(st.lists(st.integers(0, 40), unique=True, max_size=15))
    ledgers = [
        {"ledger_id": i, "state": "CLOSED", "ensemble_size": draw(st.none() | st.integers(1, 5)),
         "write_quorum": 2, "ack_quorum": 2, "last_entry_id": 9, "length": 10}
        for i in ids
    ]  # fmt: skip
    segments = []
    for owner in draw(st.lists(st.integers(0, 45), max_size=30)):  # some segments name no listed ledger
        segments.append({
            "ledger_id": owner, "segment_index": draw(st.integers(0, 3)),
            "first_entry_id": draw(st.integers(-1, 100)),
            "ensemble": draw(st.none() | st.lists(st.sampled_from(["a:1", "b:1"]), max_size=4)),
        })  # fmt: skip
    return pa.Table.from_pylist(ledgers, LEDGERS), pa.Table.from_pylist(segments, SEGMENTS)


@settings(max_examples=300, deadline=None)
@given(snapshot())
def test_sort_based_frame_is_the_merge_based_frame(tables: tuple[pa.Table, pa.Table]) -> None:
    ledgers, segments = tables
    led = ledgers.select(LEDGER_COLUMNS).to_pandas()
    if not segments.num_rows:
        return
    by_sort = _segment_frame_by_sort(led, segments)
    by_merge = _segment_frame_by_merge(led, segments)
    pd.testing.assert_frame_equal(by_sort, by_merge, check_exact=True)


def test_repeated_ledger_ids_take_the_merge() -> None:
    """A repeated id (the breach `ledger_id_unique` reports) joins each of its segments once per row."""
    row = {"ledger_id": 7, "state": "OPEN", "ensemble_size": 3, "write_quorum": 2, "ack_quorum": 2,
           "last_entry_id": -1, "length": 0}  # fmt: skip
    ledgers = pa.Table.from_pylist([row, row], LEDGERS)
    segment = {"ledger_id": 7, "segment_index": 0, "first_entry_id": 0, "ensemble": ["a:1", "b:1", "c:1"]}
    segments = pa.Table.from_pylist([segment], SEGMENTS)
    assert len(pandas_frames(ledgers, segments)["segments"]) == 2


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3)), max_size=12), max_size=5),
       st.booleans())  # fmt: skip
def test_segment_order_is_lexsorts(runs: list[list[tuple[int, int]]], presorted: bool) -> None:
    """`_order` (a stable sort by ledger id, checked) is the order np.lexsort gives, on what staged files
    hold (sorted runs, one per file) and on anything else (repeats and unsorted rows included)."""
    import numpy as np

    from bkaudit.tables.validation import _order

    rows = [pair for run in runs for pair in (sorted(run) if presorted else run)]
    ids = np.array([r[0] for r in rows], np.int64)
    index = np.array([r[1] for r in rows], np.int32)
    got = _order({"ledger_id": ids, "segment_index": index})
    assert got.tolist() == np.lexsort((index, ids)).tolist()
