"""Where a checker run's results go: the checker's Delta tables, or nowhere but the returned result.

`DeltaSink` (`bkaudit check`): `violations` and `bookie_checks` replace this run id's rows, one Delta commit
each, then the `audit_runs` row, committed last, is the visibility marker. A failure reverts what the run
committed and records one 'failed' `audit_runs` row, so nothing of a failed run is visible as violations.
`MemorySink` (the decommission audit): an ad hoc what-if must not become "the latest audit" that reports,
trends and alerts read; its findings live in the returned `CheckResult` only.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import pyarrow as pa

from bkaudit.job.inputs import quorums_of
from bkaudit.job.result import FAILED, SUCCEEDED, CheckResult
from bkaudit.tables import store
from bkaudit.tables.checker_schemas import AUDIT_RUNS, BOOKIE_CHECKS, VIOLATIONS
from bkaudit.tables.location import Warehouse

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunInfo:
    """What an `audit_runs` row says about the run besides its result."""

    zk: str
    root: str
    config: Mapping[str, Any]
    started: datetime
    t0: float
    """`time.monotonic()` at the start of the run."""


class ResultSink(Protocol):
    def write(self, result: CheckResult, info: RunInfo) -> None:
        """Record a completed run's result."""

    def fail(self, result: CheckResult, info: RunInfo) -> None:
        """Record that the run failed (`result.error`), undoing what `write` recorded of it. Never raises."""


class MemorySink:
    """The result stays in the returned CheckResult: no table is touched."""

    def write(self, result: CheckResult, info: RunInfo) -> None:
        pass

    def fail(self, result: CheckResult, info: RunInfo) -> None:
        pass


class DeltaSink:
    """The checker's tables in `warehouse`."""

    def __init__(self, warehouse: Warehouse | str) -> None:
        self.warehouse = warehouse
        self.commits: list[store.Commit] = []

    def write(self, result: CheckResult, info: RunInfo) -> None:
        assert result.snapshot_id is not None
        key = {"snapshot_id": result.snapshot_id, "snapshot_date": result.run_date}
        run = {"run_id": result.run_id, "snapshot_id": result.snapshot_id, "run_date": result.run_date}
        detected = datetime.now(UTC)
        quorums = quorums_of(
            self.warehouse,
            result.snapshot_id,
            (v.finding.ledger_id for v in result.violations if v.finding.ledger_id is not None),
        )
        violations = pa.Table.from_pylist(
            [
                {
                    **run,
                    **v.row(),
                    "detected_at": detected,
                    **(quorums.get(v.finding.ledger_id, {}) if v.finding.ledger_id is not None else {}),
                }
                for v in result.violations
            ],
            schema=VIOLATIONS.schema,
        )
        bookies = pa.Table.from_pylist(
            [{**run, **b.row()} for b in result.bookies], schema=BOOKIE_CHECKS.schema
        )
        for table, data in (("violations", violations), ("bookie_checks", bookies)):
            files = store.stage_table(self.warehouse, table, data, **key)
            try:
                self.commits.append(
                    store.commit(
                        self.warehouse,
                        table,
                        files,
                        replace={"run_id": result.run_id},
                        info={"run_id": result.run_id},
                    )
                )
            except BaseException:
                store.discard(store.table_uri(self.warehouse, table), files,
                              options=Warehouse.of(self.warehouse).options)
                raise
        self._run_row(result, info, SUCCEEDED)

    def fail(self, result: CheckResult, info: RunInfo) -> None:
        for done in reversed(self.commits):
            try:
                store.revert(done)
            except Exception as exc:  # keep going: the failed run row below still says what happened
                log.error("could not revert %s v%s: %s", done.table, done.version, exc)
        self.commits = []
        try:
            self._run_row(result, info, FAILED)
        except Exception as exc:
            log.error("could not record the failed run: %s", exc)

    def _run_row(self, result: CheckResult, info: RunInfo, status: str) -> None:
        """The `audit_runs` row, committed last. A succeeded run replaces every row of its id; a failed one
        only earlier failed rows, so a failed re-run never hides the rows of an earlier successful run (its
        own commits were reverted, so those rows are what the tables hold)."""
        replace = {"run_id": result.run_id}
        if status == FAILED:
            replace["status"] = FAILED
        table = pa.Table.from_pylist([run_row(result, info, status)], schema=AUDIT_RUNS.schema)
        self.commits.append(
            store.write_table(
                self.warehouse,
                "audit_runs",
                table,
                snapshot_id=result.snapshot_id or "none",
                snapshot_date=result.run_date,
                replace=replace,
            )
        )


def run_row(r: CheckResult, info: RunInfo, status: str) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "snapshot_id": r.snapshot_id or "none",
        "run_date": r.run_date,
        "status": status,
        "error": r.error,
        "started_at": info.started,
        "finished_at": datetime.now(UTC),
        "seconds": round(time.monotonic() - info.t0, 3),
        "zk": info.zk,
        "root": info.root,
        "config": json.dumps(info.config, sort_keys=True, default=str),
        "ledgers_checked": r.ledgers_checked,
        "ledgers_durability_checked": r.ledgers_durability_checked,
        "entries_checked": r.entries_checked,
        "bookies_checked": r.bookies_checked,
        "counts": list(r.counts.items()),
        "under_repair": list(r.under_repair.items()),
        "reevaluated": r.reevaluated,
        "deleted_during_run": r.deleted_during_run,
        "published": r.published,
        "phase_seconds": list(r.phase_seconds.items()),
    }
