"""spark-submit entry point: the HTML report of a checker run and its verdict (the DAG's last step).

    spark-submit jobs/report.py --warehouse s3a://bucket/bkaudit --run-id ID --out /srv/bkaudit/reports \
        [--fail-on never|warning|critical]

The same code path as `bkaudit report` (`bkaudit.report.outcome`): reads the run's tables with delta-rs on the
driver (no Spark context is started) and writes report-<run_id>.html and index.html into --out, a directory
on the driver (in client mode: the machine that ran spark-submit). Submitted like the other jobs so a
scheduler needs no second bkaudit environment for it. Prints {"report", "index", "run_id", "snapshot_id",
"status", "counts", "fail_on", "fail_on_reached", "unreadable"} as JSON; exits 0, 3 when the run's new
violations reach --fail-on (after the page is written), 1 when it could not run (no such run) or a table of
the run could not be read (the page says "could not read" there), 2 for invalid settings.
"""

from __future__ import annotations

import argparse
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="report", description=__doc__.splitlines()[0])
    parser.add_argument("--warehouse", help="Delta tables directory or URI (default [snapshot] warehouse)")
    parser.add_argument("--run-id", help="checker run to report (default: the latest succeeded run)")
    parser.add_argument("--out", required=True, help="directory for report-<run_id>.html and index.html")
    parser.add_argument("--fail-on", choices=["never", "warning", "critical"], default="never",
                        help="exit 3 when the run's new violations reach this severity (default never)")
    parser.add_argument("--config", help="settings file (default conf/bkaudit.toml or $BKAUDIT_CONF)")
    args = parser.parse_args(argv)

    from bkaudit.cli_common import ZkTarget, print_json, run_job
    from bkaudit.report.commands import report_job, verdict

    def show(outcome: Any) -> int:
        print_json(outcome.summary)
        return verdict(outcome)  # an unreadable table: the page says so, and the job fails (exit 1)

    job = report_job(warehouse=args.warehouse, run_id=args.run_id, out_dir=args.out, fail_on=args.fail_on,
                     check_out=False)
    return run_job(job, ZkTarget(config_path=args.config), show, submitted=True)


if __name__ == "__main__":
    from bkaudit.shutdown import exit_process

    exit_process(main())  # not sys.exit: native threads can abort interpreter teardown (bkaudit.shutdown)
