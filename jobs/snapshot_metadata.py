"""spark-submit entry point of job 1: snapshot ZooKeeper's BookKeeper metadata into Delta tables.

    spark-submit --master yarn jobs/snapshot_metadata.py --zk zk1:2181 --warehouse s3a://bucket/bkaudit

The session (master, executors) comes from spark-submit; bkaudit must be importable on the executors
(installed in their Python, or shipped with --py-files). Prints the run summary as JSON on stdout; exits 1
with a one-line error (and a 'failed' row in the `snapshots` table) when the run fails.
"""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="snapshot_metadata", description=__doc__.splitlines()[0])
    parser.add_argument("--zk", help="ZooKeeper connect string (default [zk] connect / $BKAUDIT_ZK)")
    parser.add_argument("--root", help="ledgers root znode (default /ledgers)")
    parser.add_argument("--warehouse", help="Delta tables directory or URI (default [snapshot] warehouse)")
    parser.add_argument("--snapshot-id", help="snapshot id (default: UTC timestamp + random suffix)")
    parser.add_argument("--config", help="settings file (default conf/bkaudit.toml or $BKAUDIT_CONF)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")

    from bkaudit.cli_common import ZkTarget, print_json, run_job
    from bkaudit.spark.commands import snapshot_job

    job = snapshot_job(warehouse=args.warehouse, snapshot_id=args.snapshot_id)
    target = ZkTarget(zk=args.zk, root=args.root, config_path=args.config)
    return run_job(job, target, print_json, submitted=True)


if __name__ == "__main__":
    from bkaudit.shutdown import exit_process

    exit_process(main())  # not sys.exit: native threads can abort interpreter teardown (bkaudit.shutdown)
