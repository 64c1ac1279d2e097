"""A full checker run's Prometheus metrics (text file and/or push gateway). Metrics never fail an audit."""

from __future__ import annotations

import logging
import time

from bkaudit.audit.settings import CheckerSettings
from bkaudit.job.result import CheckResult
from bkaudit.metrics import CheckerRunMetrics, MetricsError, export

log = logging.getLogger(__name__)


def export_run_metrics(
    result: CheckResult, *, success: bool, conf: CheckerSettings, pushgateway_url: str | None = None
) -> None:
    """Export where `conf` (the run's `[checker]`, its flags applied) says; `pushgateway_url`: the run's
    --pushgateway, which is no override (`check_options.CHECK_FLAGS`). An export error is kept in
    `result.metrics_error`."""
    path = conf.metrics_file
    url = pushgateway_url if pushgateway_url is not None else conf.pushgateway_url
    if not path and not url:
        return
    m = CheckerRunMetrics(
        run_id=result.run_id,
        snapshot_id=result.snapshot_id or "",
        success=success,
        counts=result.counts,
        under_repair=result.under_repair,
        ledgers_total=result.ledgers_checked,
        ledgers_checked=result.ledgers_durability_checked,
        entries_checked=result.entries_checked,
        published=result.published,
        reevaluated=result.reevaluated,
        seconds=result.seconds,
        phase_seconds=result.phase_seconds,
        finished_at_s=time.time(),
        bookies=result.bookies,
    )
    try:
        export(
            m.families(conf.metrics_scope),
            metrics_file=path or "",
            pushgateway_url=url or "",
            job=conf.metrics_job,
        )
    except MetricsError as exc:
        result.metrics_error = str(exc)
        log.warning("%s", exc)
