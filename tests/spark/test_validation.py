"""The Great Expectations suite: every expectation catches the breach it is about, on both engines.

The job itself can only produce some breaches from real ZooKeeper content (test_snapshot.py covers the
duplicate ledger id); here rows are crafted directly so each rule is exercised on its own.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from bkaudit.tables.validation import CRITICAL, WARNING, checks, pandas_frames, spark_frames, validate

LEDGER_SCHEMA = pa.schema(
    [
        ("ledger_id", pa.int64()),
        ("state", pa.string()),
        ("ensemble_size", pa.int32()),
        ("write_quorum", pa.int32()),
        ("ack_quorum", pa.int32()),
        ("last_entry_id", pa.int64()),
        ("length", pa.int64()),
    ]
)
SEGMENT_SCHEMA = pa.schema(
    [
        ("ledger_id", pa.int64()),
        ("segment_index", pa.int32()),
        ("first_entry_id", pa.int64()),
        ("ensemble", pa.list_(pa.string())),
    ]
)
KNOWN = ["a:1", "b:1", "c:1"]


def _ledgers(rows: list[tuple[Any, ...]]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(LEDGER_SCHEMA.names, r, strict=True)) for r in rows], LEDGER_SCHEMA)


def _segments(rows: list[tuple[Any, ...]]) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(SEGMENT_SCHEMA.names, r, strict=True)) for r in rows], SEGMENT_SCHEMA
    )


GOOD_LEDGERS = [
    (1, "CLOSED", 3, 2, 2, 9, 10),
    (2, "OPEN", 3, 3, 2, -1, 0),
    (3, "CLOSED", 3, 2, 1, -1, 0),  # closed empty ledger: last -1, length 0 are fine
    (4, None, None, None, None, None, None),  # unparseable: skipped by every rule
]
GOOD_SEGMENTS = [
    (1, 0, 0, ["a:1", "b:1", "c:1"]),
    (1, 1, 5, ["a:1", "b:1", "c:1"]),
    (2, 0, 0, ["a:1", "b:1", "c:1"]),
    (3, 0, 0, ["a:1", "b:1", "c:1"]),
]
BAD_LEDGERS = [
    (10, "CLOSED", 3, 2, 2, 9, 10),
    (10, "CLOSED", 3, 2, 2, 9, 10),  # duplicate id
    (11, "OPEN", 3, 2, 0, -1, 0),  # ack quorum 0
    (12, "OPEN", 3, 2, 3, -1, 0),  # AQ > WQ
    (13, "OPEN", 2, 3, 2, -1, 0),  # WQ > E
    (14, "CLOSED", 3, 2, 2, -5, 0),  # closed with last entry < -1
    (15, "CLOSED", 3, 2, 2, 3, -1),  # closed with negative length
    (16, "OPEN", 3, 2, 2, -7, -1),  # open: the CLOSED rules do not apply
]
BAD_SEGMENTS = [
    (10, 0, 0, ["a:1", "b:1", "c:1"]),
    (11, 0, 0, ["a:1", "b:1"]),  # 2 members, ensemble size 3
    (12, 0, 7, ["a:1", "b:1", "c:1"]),
    (12, 1, 3, ["a:1", "b:1", "c:1"]),  # first entry ids decrease
    (13, 0, 0, ["a:1", "b:1", "z:9"]),  # unknown bookie (warning)
]
EXPECTED_FAILURES = {
    "ledger_id_unique": 2,
    "ack_quorum_at_least_1": 1,
    "write_quorum_ge_ack_quorum": 1,
    "ensemble_size_ge_write_quorum": 1,
    "closed_last_entry_id_ge_minus_1": 1,
    "closed_length_ge_0": 1,
    "ensemble_has_ensemble_size_members": 2,  # ledger 11, and ledger 13 (3 members, ensemble size 2)
    "segment_first_entry_ids_non_decreasing": 1,
    "ensemble_bookies_known": 1,
}


def _outcome(report: Any) -> dict[str, tuple[bool, int | None]]:
    return {r["expectation"]: (r["success"], r["unexpected_count"]) for r in report.rows}


def test_suite_shape() -> None:
    suite = checks(KNOWN)
    assert [c.key for c in suite] == list(EXPECTED_FAILURES)
    assert {c.key for c in suite if c.severity == WARNING} == {"ensemble_bookies_known"}
    assert all(c.severity in (CRITICAL, WARNING) for c in suite)


def test_clean_snapshot_passes_pandas() -> None:
    report = validate(pandas_frames(_ledgers(GOOD_LEDGERS), _segments(GOOD_SEGMENTS)), KNOWN, engine="pandas")
    assert report.failures == 0 and report.critical_failures == [] and len(report.rows) == 9
    table = report.table()
    assert table.num_rows == 9 and set(table.column("severity").to_pylist()) == {CRITICAL, WARNING}


def test_each_breach_is_caught_pandas() -> None:
    frames = pandas_frames(_ledgers(GOOD_LEDGERS + BAD_LEDGERS), _segments(GOOD_SEGMENTS + BAD_SEGMENTS))
    report = validate(frames, KNOWN, engine="pandas")
    assert {k: n for k, (ok, n) in _outcome(report).items() if not ok} == EXPECTED_FAILURES
    assert report.warnings == ["ensemble_bookies_known"]
    assert set(report.critical_failures) == set(EXPECTED_FAILURES) - {"ensemble_bookies_known"}
    rows = {r["expectation"]: r for r in report.rows}
    assert rows["ledger_id_unique"]["partial_unexpected"] == ["10", "10"]
    assert rows["ensemble_bookies_known"]["partial_unexpected"] == ["z:9"]
    assert "ledger_id_unique (2 unexpected" in report.describe_failures()


@pytest.mark.slow
def test_spark_engine_agrees_with_pandas(spark: Any) -> None:
    ledgers, segments = _ledgers(GOOD_LEDGERS + BAD_LEDGERS), _segments(GOOD_SEGMENTS + BAD_SEGMENTS)
    on_spark = validate(
        spark_frames(spark.createDataFrame(ledgers), spark.createDataFrame(segments)), KNOWN, engine="spark"
    )
    on_pandas = validate(pandas_frames(ledgers, segments), KNOWN, engine="pandas")
    assert _outcome(on_spark) == _outcome(on_pandas)
