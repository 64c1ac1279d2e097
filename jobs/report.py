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
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="report", description=__doc__.splitlines()[0])
    parser.add_argument("--warehouse", help="Delta tables directory or URI (default [snapshot] warehouse)")
    parser.add_argument("--run-id", help="checker run to report (default: the latest succeeded run)")
    parser.add_argument("--out", required=True, help="directory for report-<run_id>.html and index.html")
    parser.add_argument("--fail-on", choices=["never", "warning", "critical"], default="never",
                        help="exit 3 when the run's new violations reach this severity (default never)")
    parser.add_argument("--config", help="settings file (default conf/bkaudit.toml or $BKAUDIT_CONF)")
    args = parser.parse_args(argv)

    from bkaudit.cli_common import ZkTarget, job_settings, require_warehouse, run_job
    from bkaudit.report.outcome import write_and_judge
    from bkaudit.tables.settings import resolve_warehouse

    def work() -> int:
        settings = job_settings(ZkTarget(config_path=args.config), warehouse=args.warehouse)
        warehouse = resolve_warehouse(settings)
        require_warehouse(warehouse.uri)
        outcome = write_and_judge(warehouse=warehouse, run_id=args.run_id, out_dir=args.out,
                                  fail_on=args.fail_on)
        print(json.dumps(outcome.summary))
        if outcome.error:  # a table could not be read: the page says so, and the job fails (exit 1)
            print(f"error: {' '.join(outcome.error.split())}", file=sys.stderr)
        return outcome.exit_code

    return run_job(work)


if __name__ == "__main__":
    from bkaudit.shutdown import exit_process

    exit_process(main())  # not sys.exit: native threads can abort interpreter teardown (bkaudit.shutdown)
