"""The Spark session bkaudit's jobs run in, and registration of the "bookkeeper" data source.

`spark-submit` supplies its own session (cluster settings come from the submit command); the CLI and tests
build a local one here. Either way `prepare()` applies what the jobs rely on: UTC session time zone (the
tables hold UTC timestamps and dates), Arrow transfers, and the registered Python data source.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2]"

# Settings every bkaudit session needs, whatever the master.
BASE_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",  # snapshot_date stays a string
}

# Extra settings for a local session (CLI, tests, benchmark): no UI, few shuffle partitions.
LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
}


def get_session(
    master: str | None = DEFAULT_MASTER,
    *,
    app_name: str = "bkaudit",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """The active session or a new one; local masters get the local settings and this interpreter.

    Workers must run the same Python as the driver (the system python3 lacks pyarrow and bkaudit), so a
    local session sets PYSPARK_PYTHON to sys.executable unless the caller chose one.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    local = master is not None and master.startswith("local")
    if master is not None:
        builder = builder.master(master)
    if local:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        for key, value in LOCAL_CONF.items():
            builder = builder.config(key, value)
        from bkaudit.logs import spark_java_options

        quiet = spark_java_options()
        if quiet and not (conf or {}).get("spark.driver.extraJavaOptions"):
            builder = builder.config("spark.driver.extraJavaOptions", quiet)
        # Spark's stage progress bar for a person at a terminal (it would spam a log file)
        builder = builder.config("spark.ui.showConsoleProgress", str(sys.stderr.isatty()).lower())
    for key, value in {**BASE_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if local:
        spark.sparkContext.setLogLevel("ERROR")
    return prepare(spark)


def prepare(spark: SparkSession) -> SparkSession:
    """Apply the runtime settings bkaudit relies on and register its data source (idempotent)."""
    for key, value in BASE_CONF.items():
        spark.conf.set(key, value)
    from bkaudit.spark.datasource import register

    register(spark)
    return spark
