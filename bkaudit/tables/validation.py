"""The Great Expectations suite run after every snapshot, on the staged (not yet visible) rows.

Why on staged rows: a snapshot that breaks a critical expectation (a decoding bug, or ZooKeeper content
BookKeeper itself could not have written, e.g. the same ledger id under both the short and the long path)
must not become the "latest" snapshot that the checker and data engineers read. Results of every
expectation go to the `validation_results` table; critical failures fail the job when
`[snapshot] fail_on_critical_validation` is on, warnings never do.

Expectations (severity):
- ledgers.ledger_id is unique within the snapshot (critical);
- 1 <= ack_quorum <= write_quorum <= ensemble_size (critical);
- CLOSED ledgers have last_entry_id >= -1 and length >= 0 (critical);
- every segment's ensemble has ensemble_size members (critical);
- a ledger's segments' first entry ids are non-decreasing (critical);
- every bookie named in an ensemble is a known bookie, i.e. registered or with a cookie (warning: a
  decommissioned bookie still in old ledgers is a fact about the cluster, not a broken snapshot; the
  unknown ones are listed in the result and reported as state 'unknown' in the `bookies` table).
Unparseable ledgers have null metadata columns, which the expectations skip: they are counted separately.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from bkaudit.tables.schemas import VALIDATION_RESULTS

if TYPE_CHECKING:
    from great_expectations.datasource.fluent.pandas_datasource import PandasDatasource
    from great_expectations.datasource.fluent.spark_datasource import SparkDatasource
    from pyspark.sql import DataFrame

CRITICAL = "critical"
WARNING = "warning"
PARTIAL_UNEXPECTED = 20

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Check:
    """One expectation of the suite: a stable key, the frame it runs on and how to build it."""

    key: str
    frame: str  # "ledgers", "segments" or "bookie_refs"
    table: str  # the table the rule is about (for the results row)
    expectation: str  # GX class name in great_expectations.expectations
    kwargs: dict[str, Any]
    severity: str = CRITICAL

    @property
    def column(self) -> str | None:
        kw = self.kwargs
        return kw.get("column") or ",".join(v for k, v in kw.items() if k in ("column_A", "column_B")) or None


def checks(known_bookies: Iterable[str], engine: str = "spark") -> list[Check]:
    """The suite; `known_bookies` are the bookie ids ZooKeeper knows (registered or with a cookie).

    The same expectations serve both engines (`engine` is accepted for callers that pass it).
    """
    from great_expectations.expectations.row_conditions import Column

    pair = {"or_equal": True, "ignore_row_if": "either_value_is_missing"}
    # a Condition object works on every GX engine (string row conditions are deprecated since GX 1.9)
    closed = {"row_condition": Column("state") == "CLOSED"}
    return [
        Check(
            "ledger_id_unique", "ledgers", "ledgers", "ExpectColumnValuesToBeUnique", {"column": "ledger_id"}
        ),
        Check(
            "ack_quorum_at_least_1",
            "ledgers",
            "ledgers",
            "ExpectColumnValuesToBeBetween",
            {"column": "ack_quorum", "min_value": 1},
        ),
        Check(
            "write_quorum_ge_ack_quorum",
            "ledgers",
            "ledgers",
            "ExpectColumnPairValuesAToBeGreaterThanB",
            {"column_A": "write_quorum", "column_B": "ack_quorum", **pair},
        ),
        Check(
            "ensemble_size_ge_write_quorum",
            "ledgers",
            "ledgers",
            "ExpectColumnPairValuesAToBeGreaterThanB",
            {"column_A": "ensemble_size", "column_B": "write_quorum", **pair},
        ),
        Check(
            "closed_last_entry_id_ge_minus_1",
            "ledgers",
            "ledgers",
            "ExpectColumnValuesToBeBetween",
            {"column": "last_entry_id", "min_value": -1, **closed},
        ),
        Check(
            "closed_length_ge_0",
            "ledgers",
            "ledgers",
            "ExpectColumnValuesToBeBetween",
            {"column": "length", "min_value": 0, **closed},
        ),
        Check(
            "ensemble_has_ensemble_size_members",
            "segments",
            "ledger_segments",
            "ExpectColumnPairValuesToBeEqual",
            {
                "column_A": "ensemble_members",
                "column_B": "ensemble_size",
                "ignore_row_if": "either_value_is_missing",
            },
        ),
        Check(
            "segment_first_entry_ids_non_decreasing",
            "segments",
            "ledger_segments",
            "ExpectColumnPairValuesAToBeGreaterThanB",
            {"column_A": "first_entry_id", "column_B": "previous_first_entry_id", **pair},
        ),
        Check(
            "ensemble_bookies_known",
            "bookie_refs",
            "bookies",
            "ExpectColumnValuesToBeInSet",
            {"column": "bookie_id", "value_set": sorted(set(known_bookies))},
            severity=WARNING,
        ),
    ]


LEDGER_COLUMNS = [
    "ledger_id",
    "state",
    "ensemble_size",
    "write_quorum",
    "ack_quorum",
    "last_entry_id",
    "length",
]
SEGMENT_COLUMNS = ["ledger_id", "segment_index", "first_entry_id", "ensemble"]


def spark_frames(ledgers: DataFrame, segments: DataFrame) -> dict[str, DataFrame]:
    """The Spark DataFrames the suite runs on, derived from one snapshot's ledgers and segments."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_ledger = Window.partitionBy("ledger_id").orderBy("segment_index")
    seg = (
        segments.select(*SEGMENT_COLUMNS)
        .join(ledgers.select("ledger_id", "ensemble_size"), "ledger_id", "left")
        .select(
            "ledger_id",
            "segment_index",
            "first_entry_id",
            "ensemble_size",
            F.size("ensemble").alias("ensemble_members"),
            F.lag("first_entry_id").over(by_ledger).alias("previous_first_entry_id"),
        )
    )
    refs = segments.select(F.explode("ensemble").alias("bookie_id")).distinct()
    return {"ledgers": ledgers.select(*LEDGER_COLUMNS), "segments": seg, "bookie_refs": refs}


def pandas_frames(ledgers: pa.Table, segments: pa.Table) -> dict[str, Any]:
    """The same frames as pandas DataFrames, from Arrow tables (the driver-side engine)."""
    import pandas as pd
    import pyarrow.compute as pc

    led = ledgers.select(LEDGER_COLUMNS).to_pandas()
    # GX's pandas "between" is vectorized only for int64 and float64 columns; on int32 it calls a Python
    # function per row (0.65 s of a 1M-ledger snapshot's validation). Same values, wider type.
    led = led.astype({name: "int64" for name, kind in led.dtypes.items() if kind == "int32"})
    seg_arrow = segments.select(SEGMENT_COLUMNS)
    unique_ids = led["ledger_id"].is_unique
    seg = _segment_frame_by_sort(led, seg_arrow) if unique_ids and seg_arrow.num_rows else None
    if seg is None:
        seg = _segment_frame_by_merge(led, seg_arrow)
    members = (
        pc.unique(pc.list_flatten(seg_arrow.column("ensemble")))
        if seg_arrow.num_rows
        else pa.array([], pa.string())
    )
    refs = pd.DataFrame({"bookie_id": pd.Series(members.to_pylist(), dtype="object")})
    return {"ledgers": led, "segments": seg, "bookie_refs": refs}


def _segment_columns(seg_arrow: pa.Table) -> dict[str, Any]:
    import pyarrow.compute as pc

    return {
        "ledger_id": seg_arrow.column("ledger_id").to_numpy(),
        "segment_index": seg_arrow.column("segment_index").to_numpy(),
        "first_entry_id": seg_arrow.column("first_entry_id").to_numpy(),
        "ensemble_members": pc.fill_null(pc.list_value_length(seg_arrow.column("ensemble")), 0).to_numpy(),
    }


def _segment_frame_by_merge(led: Any, seg_arrow: pa.Table) -> Any:
    """The segments frame by pandas merge, sort and group-wise shift: the definition, and what a snapshot
    whose ledger ids repeat (the breach `ledger_id_unique` reports) is validated on."""
    import pandas as pd

    seg = pd.DataFrame(_segment_columns(seg_arrow))
    seg = seg.merge(led[["ledger_id", "ensemble_size"]], on="ledger_id", how="left")
    seg = seg.sort_values(["ledger_id", "segment_index"], kind="stable").reset_index(drop=True)
    seg["previous_first_entry_id"] = seg.groupby("ledger_id")["first_entry_id"].shift(1)
    return seg


def _segment_frame_by_sort(led: Any, seg_arrow: pa.Table) -> Any:
    """The same frame as `_segment_frame_by_merge` when ledger ids are unique, with one numpy sort and a
    binary search instead of a hash join and a group-by: ~4x less of the driver's time at 1M ledgers."""
    import numpy as np
    import pandas as pd

    columns = _segment_columns(seg_arrow)
    columns = {name: values[_order(columns)] for name, values in columns.items()}
    ids = columns["ledger_id"]
    known = led["ledger_id"].to_numpy()
    by_id = np.argsort(known, kind="stable")  # sorted runs (one per staged file): timsort merges them
    at = np.minimum(np.searchsorted(known[by_id], ids), len(known) - 1) if len(known) else None
    matched = known[by_id][at] == ids if at is not None else np.zeros(len(ids), bool)
    sizes = led["ensemble_size"].to_numpy()
    size = sizes[by_id][at] if at is not None else np.zeros(len(ids), sizes.dtype)
    if not matched.all():  # a left join's unmatched rows: NaN, so the column becomes float
        size = np.where(matched, size, np.nan)
    columns["ensemble_size"] = size
    previous = np.full(len(ids), np.nan)
    same = ids[1:] == ids[:-1]
    previous[1:][same] = columns["first_entry_id"][:-1][same]
    columns["previous_first_entry_id"] = previous
    return pd.DataFrame(columns)


def _order(columns: dict[str, Any]) -> Any:
    """The stable (ledger_id, segment_index) order of the segment rows, as `np.lexsort` gives it.

    Staged files are runs already in that order (a task lists ids ascending and writes a ledger's segments
    in index order), so a stable sort by ledger id alone, which merges the runs, is nearly always enough;
    the result is checked and lexsort decides otherwise."""
    import numpy as np

    ids, index = columns["ledger_id"], columns["segment_index"]
    order = np.argsort(ids, kind="stable")
    a, b = ids[order], index[order]
    if bool(np.all((a[1:] > a[:-1]) | ((a[1:] == a[:-1]) & (b[1:] >= b[:-1])))):
        return order
    return np.lexsort((index, ids))


@dataclass
class ValidationReport:
    """Results of one suite run: rows for `validation_results` and the failures by severity."""

    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def critical_failures(self) -> list[str]:
        return [r["expectation"] for r in self.rows if not r["success"] and r["severity"] == CRITICAL]

    @property
    def warnings(self) -> list[str]:
        return [r["expectation"] for r in self.rows if not r["success"] and r["severity"] != CRITICAL]

    @property
    def failures(self) -> int:
        return sum(1 for r in self.rows if not r["success"])

    def describe_failures(self) -> str:
        parts = [
            f"{r['expectation']} ({r['unexpected_count']} unexpected, e.g. {r['partial_unexpected'][:3]})"
            for r in self.rows
            if not r["success"] and r["severity"] == CRITICAL
        ]
        return "critical expectations failed: " + "; ".join(parts)

    def table(self) -> pa.Table:
        schema = pa.schema(
            [f for f in VALIDATION_RESULTS.schema if f.name not in ("snapshot_id", "snapshot_date")]
        )
        return pa.Table.from_pylist(self.rows, schema=schema)


def validate(
    frames: dict[str, Any], known_bookies: Iterable[str], *, engine: str, suite_name: str = "bkaudit_snapshot"
) -> ValidationReport:
    """Run the suite with Great Expectations on `frames` (from `spark_frames` or `pandas_frames`).

    `engine` is "spark" or "pandas": the same expectations either way. An ephemeral context keeps GX from
    writing anything itself; progress bars are off (this runs inside a batch job).
    """
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.data_context.types.base import ProgressBarsConfig

    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    suite_checks = checks(known_bookies, engine)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    source: SparkDatasource | PandasDatasource
    if engine == "spark":
        source = context.data_sources.add_spark(f"{suite_name}_spark")
    else:
        source = context.data_sources.add_pandas(f"{suite_name}_pandas")
    report = ValidationReport()
    validated_at = int(time.time() * 1_000_000)
    for frame_name, df in frames.items():
        frame_checks = [c for c in suite_checks if c.frame == frame_name]
        suite = context.suites.add(gx.ExpectationSuite(name=f"{suite_name}_{frame_name}"))
        for c in frame_checks:
            expectation_cls = getattr(gxe, c.expectation)
            suite.add_expectation(expectation_cls(**c.kwargs, severity=c.severity, meta={"check": c.key}))
        batch = source.add_dataframe_asset(frame_name).add_batch_definition_whole_dataframe(frame_name)
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(data=batch, suite=suite, name=f"{suite_name}_{frame_name}")
        )
        if engine == "spark":
            df = df.cache()
        try:
            result = definition.run(
                batch_parameters={"dataframe": df},
                # BASIC holds every value a results row keeps (counts, percent, partial unexpected list);
                # SUMMARY would add value counts and indexes, a fifth of the suite's time at 1M ledgers
                result_format={"result_format": "BASIC", "partial_unexpected_count": PARTIAL_UNEXPECTED},
            )
        finally:
            if engine == "spark":
                df.unpersist()
        by_key = {c.key: c for c in frame_checks}
        for r in result.results:
            config = r.expectation_config
            check = by_key[((config.meta if config is not None else None) or {})["check"]]
            report.rows.append(_row(check, r, validated_at))
    return report


def _row(check: Check, r: Any, validated_at: int) -> dict[str, Any]:
    res = dict(r.result or {})
    exc = (r.exception_info or {}) if isinstance(r.exception_info, dict) else {}
    raised = bool(exc.get("raised_exception"))
    partial = res.get("partial_unexpected_list") or []
    return {
        "expectation": check.key,
        "table_name": check.table,
        "expectation_type": r.expectation_config.type,
        "column": check.column,
        "severity": check.severity,
        "success": bool(r.success) and not raised,
        "element_count": res.get("element_count"),
        "unexpected_count": res.get("unexpected_count") if not raised else None,
        "unexpected_percent": res.get("unexpected_percent"),
        "partial_unexpected": [_text(v) for v in partial],
        "details": json.dumps(
            {
                "kwargs": {k: v for k, v in check.kwargs.items() if k != "value_set"},
                "exception": exc.get("exception_message") if raised else None,
            },
            default=str,
        ),
        "validated_at": validated_at,
    }


def _text(value: Any) -> str:
    """An unexpected value as text: numpy scalars unwrapped, whole floats (pandas nullable ints) as ints."""
    if hasattr(value, "item") and not isinstance(value, list | tuple | dict):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, default=lambda v: _text(v))
    return str(value)
