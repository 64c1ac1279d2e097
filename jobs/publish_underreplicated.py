"""Job 3: publish a finished checker run's durability violations into BookKeeper's under-replication queue.

    spark-submit jobs/publish_underreplicated.py --zk zk1:2181 --warehouse s3a://bucket/bkaudit --run-id R
    python jobs/publish_underreplicated.py --zk ... --warehouse ... --run-id R   (no Spark needed)

The same code path as `bkaudit check --publish-underreplicated` (`bkaudit.job.publish.publish`): each
durability violation's ledger is marked exactly as BookKeeper marks it (merged into an existing marker with a
version CAS), with the bookies missing entries as replicas; placement_fail too with --publish-placement (empty
replicas, BP-54). Rows already published or already under repair, and ledgers whose metadata changed since the
check, are left alone; the run's rows are rewritten with their `published` flags in one Delta commit.
Idempotent: publishing a run twice writes nothing the second time. Prints {"run_id", "published", "marked",
"already_marked", "skipped"} as JSON; exits 1 on failure.
"""

from __future__ import annotations

import argparse
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="publish_underreplicated", description=__doc__.splitlines()[0])
    parser.add_argument("--run-id", required=True, help="the checker run whose violations to publish")
    parser.add_argument("--zk", help="ZooKeeper connect string (default [zk] connect / $BKAUDIT_ZK)")
    parser.add_argument("--root", help="ledgers root znode (default /ledgers)")
    parser.add_argument("--warehouse", help="Delta tables directory or URI (default [snapshot] warehouse)")
    parser.add_argument(
        "--publish-placement",
        action="store_true",
        default=None,
        help="also mark placement_fail ledgers (default [checker] publish_placement)",
    )
    parser.add_argument("--config", help="settings file (default conf/bkaudit.toml or $BKAUDIT_CONF)")
    args = parser.parse_args(argv)

    from bkaudit.audit.settings import CheckerSettings
    from bkaudit.cli_common import Job, JobRun, ZkTarget, print_json, run_job, warehouse_of
    from bkaudit.config import ZkSettings
    from bkaudit.job.publish import publish_run
    from bkaudit.store import ZkStore
    from bkaudit.zk.client import acls, close, connect
    from bkaudit.zk.ledgers import read_layout

    def check(settings: Any) -> None:
        warehouse_of(settings, must_exist=False)
        settings.get(CheckerSettings)

    def work(run: JobRun) -> dict[str, Any]:
        conf = run.settings.get(CheckerSettings)
        zk_settings = run.settings.get(ZkSettings)
        zk = connect(zk_settings)
        try:
            cluster = ZkStore(zk, root=zk_settings.root, layout=read_layout(zk, root=zk_settings.root),
                              acl=acls(zk_settings))
            stats = publish_run(run.warehouse, args.run_id, cluster, publish_placement=conf.publish_placement,
                                rate_per_s=conf.publish_rate_per_s)
        finally:
            close(zk)
        return {"run_id": args.run_id, "published": stats.published, "marked": stats.marked,
                "already_marked": stats.unchanged, "skipped": stats.skipped}

    job = Job("bkaudit-publish", work, need_zk=True, check=check,
              overrides={"snapshot.warehouse": args.warehouse,
                         "checker.publish_placement": args.publish_placement})
    return run_job(job, ZkTarget(zk=args.zk, root=args.root, config_path=args.config), print_json,
                   submitted=True)


if __name__ == "__main__":
    from bkaudit.shutdown import exit_process

    exit_process(main())  # not sys.exit: native threads can abort interpreter teardown (bkaudit.shutdown)
