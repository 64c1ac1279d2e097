"""spark-submit entry point: may these bookies be removed? (the bk_decommission_audit DAG's job)

    spark-submit jobs/decommission_audit.py --zk zk1:2181 --warehouse s3a://bucket/bkaudit \
        --bookies bk1:3181,bk2:3181 [--snapshot-id ID] [--audit-id ID] [--min-copies 1]

Takes a fresh snapshot unless --snapshot-id names one, checks the ledgers whose ensembles name those bookies
(the metadata checker, restricted; its own tables untouched), answers per bookie whether removing them all
together leaves every entry with at least --min-copies copies, and writes one `decommission_audits` row per
bookie (bkaudit.decommission). Prints {"audit_id", "snapshot_id", "safe", "min_copies", "bookies": [...],
"evidence": {"verified_by_reads", "verification_percentage", "exact"}} as
JSON; exits 0 when the audit ran (whatever the answer: it is in the JSON and the table), 1 when it could not.
"""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="decommission_audit", description=__doc__.splitlines()[0])
    parser.add_argument("--zk", help="ZooKeeper connect string (default [zk] connect / $BKAUDIT_ZK)")
    parser.add_argument("--root", help="ledgers root znode (default /ledgers)")
    parser.add_argument("--warehouse", help="Delta tables directory or URI (default [snapshot] warehouse)")
    parser.add_argument("--bookies", required=True, help="comma-separated ids of the bookies to remove")
    parser.add_argument("--audit-id", help="audit id (default: decommission-<UTC time>); re-use replaces")
    parser.add_argument("--snapshot-id", help="existing snapshot to use (default: take a fresh one)")
    parser.add_argument("--min-copies", type=int, default=1, help="copies each entry must keep (default 1)")
    parser.add_argument("--config", help="settings file (default conf/bkaudit.toml or $BKAUDIT_CONF)")
    args = parser.parse_args(argv)

    from bkaudit.cli_common import ZkTarget, print_json, run_job
    from bkaudit.spark.decommission import audit_job

    bookies = [b.strip() for b in args.bookies.split(",") if b.strip()]
    job = audit_job(warehouse=args.warehouse, bookies=bookies, audit_id=args.audit_id,
                    snapshot_id=args.snapshot_id, min_copies=args.min_copies)
    # exit 0 whatever the answer (it is in the JSON and the table), unlike the CLI's 3 for "not safe"
    return run_job(job, ZkTarget(zk=args.zk, root=args.root, config_path=args.config), print_json,
                   submitted=True)


if __name__ == "__main__":
    from bkaudit.shutdown import exit_process

    exit_process(main())  # not sys.exit: native threads can abort interpreter teardown (bkaudit.shutdown)
