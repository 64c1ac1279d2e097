"""spark-submit'ed by test_standalone_cluster.py: reads bkaudit's tables on `s3a://` with Spark, both ways.

`spark.read.format("delta")` (Delta's own reader, jars from `make delta`) and bkaudit's reader without Delta
(`bkaudit.tables.load(native=False)`: delta-rs's file list, Spark's Parquet reader over S3A). Prints one JSON
line: {table: {"delta": digest, "files": digest}}, digests as tests/spark/delta_engine.py makes them.

    spark-submit --jars ... tests/spark/s3a_readers.py --config bkaudit.toml --warehouse s3a://b/wh TABLE...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.spark.delta_engine import digest_rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("tables", nargs="+")
    args = parser.parse_args()
    from bkaudit import config
    from bkaudit.spark.session import get_session
    from bkaudit.tables import location
    from bkaudit.tables.read import DELTA_SESSION_CONF, load
    from bkaudit.tables.store import table_uri

    location.configure_from(config.load(path=args.config))
    spark = get_session(None, app_name="bkaudit-s3a-readers", warehouse=args.warehouse,
                        conf=DELTA_SESSION_CONF)
    out = {}
    for table in args.tables:
        native = spark.read.format("delta").load(location.spark_uri(table_uri(args.warehouse, table)))
        files = load(spark, args.warehouse, table, latest=False, native=False)
        out[table] = {"delta": digest_rows(native.select(*files.columns).toArrow().to_pylist()),
                      "files": digest_rows(files.toArrow().to_pylist())}
    print("READERS " + json.dumps(out))


if __name__ == "__main__":
    main()
