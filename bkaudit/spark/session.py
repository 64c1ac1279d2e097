"""The Spark session bkaudit's jobs run in, and registration of the "bookkeeper" data source.

`spark-submit` supplies its own session (cluster settings come from the submit command); the CLI and tests
build a local one here. Either way `prepare()` applies what the jobs rely on: UTC session time zone (the
tables hold UTC timestamps and dates), Arrow transfers, and the registered Python data source.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from bkaudit.tables.location import Warehouse

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
    warehouse: Warehouse | str | None = None,
) -> SparkSession:
    """The active session or a new one; local masters get the local settings and this interpreter.

    Workers must run the same Python as the driver (the system python3 lacks pyarrow and bkaudit), so a
    local session sets PYSPARK_PYTHON to sys.executable unless the caller chose one. `master=None` is a
    spark-submit job: the master and everything else come from spark-submit. With a `warehouse`, the session
    also gets what that store needs (`warehouse_conf`) and is checked for the jars it needs
    (bkaudit.spark.engines: a missing or mismatched jar is one line, before anything is staged).
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
    given = dict(conf or {})
    for key, value in {**BASE_CONF, **given}.items():
        builder = builder.config(key, value)
    launched = _submitted_conf() if master is None else set()
    for key, value in warehouse_conf(warehouse).items():
        if key not in given and key not in launched:  # what the user set wins
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if local:
        spark.sparkContext.setLogLevel("ERROR")
    if warehouse is not None:
        from bkaudit.spark.engines import require_engines

        require_engines(spark, str(warehouse))
    return prepare(spark)


def warehouse_conf(warehouse: Warehouse | str | None) -> dict[str, str]:
    """Spark settings that let a session and its executors reach `warehouse` with its storage options
    (`Warehouse.options`: bkaudit's `[tables] storage_options`; a plain URI has none).

    - bkaudit's own executor code gets the options in its tasks; the executors' environment also gets them
      as `spark.executorEnv.BKAUDIT_STORAGE_OPTIONS` (Spark redacts the value in its UI and logs, since it
      names a secret key), as it always did.
    - Spark's own reads of `s3a://` go through Hadoop's S3A: the same options as `spark.hadoop.fs.s3a.*`.
    """
    from bkaudit.tables import location
    from bkaudit.tables.location import Warehouse
    from bkaudit.tables.settings import ENV

    if warehouse is None:
        return {}
    wh = Warehouse.of(warehouse)
    options = location.storage_options(wh.uri, options=wh.options)
    if not options:
        return {}
    out = {f"spark.executorEnv.{ENV}": json.dumps(options, sort_keys=True)}
    if location.scheme(wh.uri) == "s3":
        out.update({f"spark.hadoop.{k}": v for k, v in location.hadoop_s3a(options).items()})
    return out


def _submitted_conf() -> set[str]:
    """Keys spark-submit already set (its --conf and spark-defaults.conf reach the driver as JVM
    properties)."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):  # not under spark-submit: nothing launched yet
        return set()
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return {key for key, _ in SparkConf().getAll()}


def prepare(spark: SparkSession) -> SparkSession:
    """Apply the runtime settings bkaudit relies on and register its data source (idempotent)."""
    for key, value in BASE_CONF.items():
        spark.conf.set(key, value)
    from bkaudit.spark.datasource import register

    register(spark)
    return spark
