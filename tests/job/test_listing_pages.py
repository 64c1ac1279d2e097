"""The listing-page count of Java bookies on Spark (the checker's path above DRIVER_INPUT_MAX_LEDGERS ledgers)
must equal the driver's Arrow count, on the same hand-built ledger rows."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from bkaudit.job.inputs import listing_pages
from bkaudit.spark.checker_inputs import RunInputs
from tests.job.test_java_listing_pages import ledgers


def test_spark_counts_the_pages_the_driver_counts(spark: Any) -> None:
    table = ledgers(
        (1, 1023, [["a", "b"]]),
        (2, 1024, [["a", "c"]]),
        (3, 5000, [["b", "c"], ["b", "d"]]),
        (4, None, [["a"]]),
        (5, -1, [["d"]]),
        (6, 3 * 1024 - 1, [["a", "b"], ["a", "c"], ["b", "c"]]),
    )
    empty = pa.table({"bookie_id": pa.array([], pa.string())})
    on_spark = RunInputs("s", empty, empty, None, None, lambda: spark.createDataFrame(table))
    assert on_spark.listing_pages() == listing_pages(table) == {"a": 7, "b": 9, "c": 10, "d": 6}
