"""Delta file statistics (`add.stats`) computed from the Arrow rows of a staged file.

Why by hand, and why exactly this way: executors stage Parquet files that the driver commits later, and
delta-rs's transaction API takes the stats of such files as given. Readers prune files with these stats
(delta-rs turns them into the fragment guarantees of `to_pyarrow_dataset()`; DuckDB, polars and Spark skip
files on them). A column present in the table but missing from a file's min/max makes delta-rs guarantee
`col >= null`, which prunes the file for every filter on that column: a filtered read silently returns
nothing. So every file gets min, max and null count for every column delta-rs's writer indexes (all
primitive columns, struct fields recursively; lists and maps get none, as with delta-rs), in the format
delta-rs writes:

- integers, floats, booleans as JSON numbers/booleans;
- timestamps as ISO-8601 UTC with milliseconds (`2026-11-24T14:15:00.123Z`). Delta stores milliseconds;
  the minimum is rounded down and the maximum UP, so both are valid bounds for any reader (delta-rs and
  Spark's Delta add 1 ms to a maximum themselves because writers truncate it; a reader that does not
  would prune a file holding a later microsecond in the same millisecond);
- strings longer than 32 characters (Delta's `dataSkippingStringPrefixLength`) keep a 32-character prefix
  as the minimum and the prefix plus U+10FFFF (the greatest code point) as the maximum: valid bounds that
  keep the log small when a column holds JSON documents;
- floats never hold NaN or infinities here (the writer stores them as null): JSON cannot carry them and
  readers disagree on how they compare, so a bound could not be trusted.

A column whose values are all null gets no min/max and nullCount = numRecords, which readers handle.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

STRING_PREFIX = 32
_TIE_BREAK = "\U0010ffff"


@dataclass
class _Leaf:
    nulls: int = 0
    low: Any = None
    high: Any = None


@dataclass
class FileStats:
    """Accumulates one file's stats over the chunks written to it."""

    schema: pa.Schema
    rows: int = 0
    _leaves: dict[tuple[str, ...], _Leaf] = field(default_factory=dict)

    def update(self, chunk: pa.Table) -> None:
        self.rows += chunk.num_rows
        for f in self.schema:
            self._column((f.name,), f.type, chunk.column(f.name))

    def to_json(self) -> str:
        mins: dict[str, Any] = {}
        maxs: dict[str, Any] = {}
        nulls: dict[str, Any] = {}
        for path, leaf in self._leaves.items():
            _put(nulls, path, leaf.nulls)
            if leaf.low is not None:
                _put(mins, path, json_value(leaf.low, upper=False))
                _put(maxs, path, json_value(leaf.high, upper=True))
        return json.dumps(
            {"numRecords": self.rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls},
            ensure_ascii=False,
            allow_nan=False,
        )

    def _column(self, path: tuple[str, ...], type_: pa.DataType, col: pa.ChunkedArray) -> None:
        if pa.types.is_struct(type_):
            # children with the parent's nulls merged (a null struct has null fields), as Delta counts them
            flat = [c.flatten() for c in col.chunks] if col.num_chunks else []
            for i in range(type_.num_fields):
                child = type_.field(i)
                parts = [f[i] for f in flat]
                self._column(
                    (*path, child.name), child.type, pa.chunked_array(parts, type=child.type)
                )
            return
        if not _indexed(type_):
            return
        leaf = self._leaves.setdefault(path, _Leaf())
        leaf.nulls += col.null_count
        if col.null_count == len(col):
            return
        mm = pc.min_max(col)
        low, high = mm["min"].as_py(), mm["max"].as_py()
        leaf.low = low if leaf.low is None else min(leaf.low, low)
        leaf.high = high if leaf.high is None else max(leaf.high, high)


def _indexed(type_: pa.DataType) -> bool:
    """Types delta-rs keeps min/max/nullCount for (not lists, maps or binary)."""
    return bool(
        pa.types.is_integer(type_)
        or pa.types.is_floating(type_)
        or pa.types.is_boolean(type_)
        or pa.types.is_string(type_)
        or pa.types.is_large_string(type_)
        or pa.types.is_timestamp(type_)
        or pa.types.is_date(type_)
    )


def _put(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value


def json_value(value: Any, *, upper: bool) -> Any:
    """A min (`upper=False`) or max (`upper=True`) bound as Delta's stats JSON spells it."""
    if isinstance(value, datetime):
        ts = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        ts = ts.astimezone(UTC)
        extra = ts.microsecond % 1000
        ts = ts - timedelta(microseconds=extra)
        if upper and extra:
            ts += timedelta(milliseconds=1)
        return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"
    if isinstance(value, str) and len(value) > STRING_PREFIX:
        prefix = value[:STRING_PREFIX]
        return prefix + _TIE_BREAK if upper else prefix
    if hasattr(value, "isoformat"):  # date
        return value.isoformat()
    return value


def from_add_action(row: Mapping[str, Any]) -> str:
    """The stats JSON of a file already in the log, from `get_add_actions(flatten=False)` (for re-adding)."""
    return json.dumps(
        {
            "numRecords": row.get("num_records") or 0,
            "minValues": _bounds(row.get("min"), upper=False),
            "maxValues": _bounds(row.get("max"), upper=True),
            "nullCount": _bounds(row.get("null_count"), upper=False),
        },
        ensure_ascii=False,
        allow_nan=False,
    )


def _bounds(values: Mapping[str, Any] | None, *, upper: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in (values or {}).items():
        if value is None:
            continue
        if isinstance(value, Mapping):
            nested = _bounds(value, upper=upper)
            if nested:
                out[key] = nested
        else:
            out[key] = json_value(value, upper=upper)
    return out


def finite_floats(table: pa.Table) -> pa.Table:
    """`table` with NaN and +/-inf in float columns (top level) stored as null (see the module doc)."""
    for i, f in enumerate(table.schema):
        if not pa.types.is_floating(f.type):
            continue
        col = table.column(i)
        bad = pc.invert(pc.is_finite(col))
        if pc.any(bad).as_py():
            table = table.set_column(i, f, pc.if_else(bad, pa.scalar(None, f.type), col))
    return table


__all__ = ["STRING_PREFIX", "FileStats", "finite_floats", "from_add_action", "json_value"]
