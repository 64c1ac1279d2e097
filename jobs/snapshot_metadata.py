"""spark-submit entry point of job 1: snapshot ZooKeeper's BookKeeper metadata into Delta tables.

    spark-submit --master yarn jobs/snapshot_metadata.py --zk zk1:2181 --warehouse s3a://bucket/bkaudit

The session (master, executors) comes from spark-submit; bkaudit must be importable on the executors
(installed in their Python, or shipped with --py-files). Prints the run summary as JSON on stdout; exits 1
with a one-line error (and a 'failed' row in the `snapshots` table) when the run fails.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="snapshot_metadata", description=__doc__.splitlines()[0])
    parser.add_argument("--zk", help="ZooKeeper connect string (default [zk] connect / $BKAUDIT_ZK)")
    parser.add_argument("--root", help="ledgers root znode (default /ledgers)")
    parser.add_argument("--warehouse", help="Delta tables directory or URI (default [snapshot] warehouse)")
    parser.add_argument("--snapshot-id", help="snapshot id (default: UTC timestamp + random suffix)")
    parser.add_argument("--config", help="settings file (default conf/bkaudit.toml or $BKAUDIT_CONF)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")

    from bkaudit import config
    from bkaudit.errors import BkAuditError, ConfigError
    from bkaudit.spark.session import get_session
    from bkaudit.spark.snapshot import run_snapshot
    from bkaudit.tables import location

    settings = None
    try:
        settings = config.load(
            path=args.config,
            overrides={"zk.connect": args.zk, "zk.root": args.root, "snapshot.warehouse": args.warehouse},
        )
        location.configure_from(settings)  # [tables] storage options (executors get them: warehouse_conf)
        spark = get_session(None, app_name="bkaudit-snapshot", warehouse=config.warehouse(settings))
        result = run_snapshot(spark, settings, snapshot_id=args.snapshot_id)
    except (BkAuditError, ValueError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        if not isinstance(exc, ConfigError) and settings is not None:
            _metrics(settings, None)
        return 2 if isinstance(exc, ConfigError) else 1  # docs/cli.md: 2 = settings, 1 = could not run
    print(json.dumps(result.summary()))
    _metrics(settings, result.summary())
    return 0


def _metrics(settings: Any, summary: dict[str, Any] | None) -> None:
    from bkaudit.metrics import export_snapshot
    from bkaudit.spark.settings import SnapshotSettings

    problem = export_snapshot(settings.get(SnapshotSettings), summary)
    if problem:
        print(f"warning: metrics: {problem}", file=sys.stderr)


if __name__ == "__main__":
    from bkaudit.shutdown import exit_process

    exit_process(main())  # not sys.exit: native threads can abort interpreter teardown (bkaudit.shutdown)
