"""spark-submit entry point of job 2: the cluster metadata checker (BP-34) over a snapshot.

    spark-submit --master yarn jobs/metadata_checker.py --zk zk1:2181 --warehouse s3a://bucket/bkaudit \
        [--snapshot-id ID | --fresh] [--publish-underreplicated] [--fail-on never|warning|critical]

The session (master, executors) comes from spark-submit; bkaudit must be importable on the executors. Prints
the run summary as JSON on stdout ({"run_id", "snapshot_id", "ledgers_checked", "counts", "seconds"}) and
exits like `bkaudit check`: 0 nothing reached --fail-on, 3 something did, 1 the run could not complete
(recorded as a 'failed' row in `audit_runs`).
"""

from __future__ import annotations

import argparse
from typing import Any


def main(argv: list[str] | None = None) -> int:
    from bkaudit.job.check_options import add_arguments

    parser = argparse.ArgumentParser(prog="metadata_checker", description=__doc__.splitlines()[0])
    parser.add_argument("--zk", help="ZooKeeper connect string (default [zk] connect / $BKAUDIT_ZK)")
    parser.add_argument("--root", help="ledgers root znode (default /ledgers)")
    parser.add_argument("--warehouse", help="Delta tables directory or URI (default [snapshot] warehouse)")
    parser.add_argument("--config", help="settings file (default conf/bkaudit.toml or $BKAUDIT_CONF)")
    add_arguments(parser)  # the checker's own flags, defined once (bkaudit.job.check_options)
    args = parser.parse_args(argv)

    from bkaudit.cli_common import ZkTarget, print_json, run_job
    from bkaudit.spark.checker_commands import check_job

    def show(result: Any) -> int:
        return print_json(result.summary(), int(result.exit_code))

    job = check_job(warehouse=args.warehouse, flags=vars(args))
    return run_job(job, ZkTarget(zk=args.zk, root=args.root, config_path=args.config), show, submitted=True)


if __name__ == "__main__":
    from bkaudit.shutdown import exit_process

    exit_process(main())  # not sys.exit: native threads can abort interpreter teardown (bkaudit.shutdown)
