"""What a commit's `replace` filter matches (bkaudit.tables.store.commit): an equality on every column named.

A file is decided from its partition values and min/max stats when they suffice, else read: the rule by which
re-running a snapshot replaces exactly its own rows, kept apart from the Delta transaction that applies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bkaudit.tables import location
from bkaudit.tables.location import StorageOptions
from bkaudit.tables.schemas import TableSpec


def file_verdict(
    row: Mapping[str, Any], uri: str, table_spec: TableSpec, replace: Mapping[str, str], *,
    options: StorageOptions | None,
) -> str:
    """'all' (every row matches), 'none' or 'mixed' (rewrite), from stats if they decide, else the file."""
    undecided = False
    for column, value in replace.items():
        if column in table_spec.partition_by:
            if (row.get("partition") or {}).get(column) != value:
                return "keep"
            continue
        low, high = (row.get("min") or {}).get(column), (row.get("max") or {}).get(column)
        if low is not None and high is not None:
            if value < low or value > high:
                return "keep"
            if low != value or high != value:
                undecided = True
        else:
            undecided = True
    if not undecided:
        return "all"
    data = read_file(uri, row["path"], list(replace), options=options)
    mask = match_mask(data, replace)
    hits = pc.sum(mask).as_py() or 0
    if hits == 0:
        return "keep"
    return "all" if hits == data.num_rows else "mixed"


def match_mask(data: pa.Table, replace: Mapping[str, str]) -> pa.ChunkedArray:
    """True where a row equals every value of `replace` (a null never matches)."""
    mask = None
    for column, value in replace.items():
        test = pc.fill_null(pc.equal(data.column(column), value), False)
        mask = test if mask is None else pc.and_(mask, test)
    assert mask is not None
    return mask


def read_file(uri: str, rel: str, columns: list[str] | None, *, options: StorageOptions | None) -> pa.Table:
    """A committed file's rows (`rel`: its path in the table, as the Delta log names it)."""
    return location.read_parquet(location.resolve(uri, rel), options=options, columns=columns)
