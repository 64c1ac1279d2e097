"""Feeding BookKeeper's under-replication queue from violation rows (`--publish-underreplicated`).

One code path for both entry points: `bkaudit check --publish-underreplicated` publishes the rows of the run
it just computed (before writing them, so the `published` flags land in the same commit), and
`jobs/publish_underreplicated.py --run-id R` publishes the rows of a finished run and rewrites that run's
rows with the new flags (one Delta commit replacing the run's rows).

What is published, and with which replicas, is the domain rule `bkaudit.audit.queue.replicas_to_publish`;
the markers are written exactly as BookKeeper marks ledgers (the store's `queue.mark`: the `urL%010d` znode
with TextFormat `replica` + `ctime`, merged into an existing marker with a version CAS).

Never published: rows already published, rows on ledgers already under repair (a second mark would only reset
the marker's grace-period clock), and rows whose ledger metadata changed or vanished since the check (the
finding may no longer hold; the next run re-checks it). Writes are rate-limited (BookKeeper PR #3541: marking
thousands of ledgers at once overloads ZooKeeper) and idempotent (merging known replicas writes nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from bkaudit.audit.queue import replicas_to_publish
from bkaudit.errors import BkAuditError
from bkaudit.job.findings import Violation, violation_of_row
from bkaudit.tables.checker_schemas import AUDIT_RUNS, VIOLATIONS
from bkaudit.tables.read import read_arrow
from bkaudit.tables.schemas import conform
from bkaudit.tables.store import write_table
from bkaudit.zk.client import rate_limiter

if TYPE_CHECKING:
    from bkaudit.store import ClusterStore
    from bkaudit.tables.location import Warehouse

log = logging.getLogger(__name__)


@dataclass
class PublishStats:
    marked: int = 0
    """Violations whose ledger now carries our replicas (newly written or merged)."""
    unchanged: int = 0
    """Violations whose ledger already carried every replica (idempotent re-run): published, no write."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Reason -> violations not published."""

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    @property
    def published(self) -> int:
        return self.marked + self.unchanged


def publish(
    store: ClusterStore,
    violations: Sequence[Violation],
    *,
    publish_placement: bool = False,
    rate_per_s: float | None = None,
    check_metadata: bool = True,
) -> tuple[list[Violation], PublishStats]:
    """Mark eligible violations' ledgers under-replicated; the violations again, `published` where they were.

    With `check_metadata`, the ledger znode's version must still be the one the finding was computed from
    (`detail.znode_version`); violations without a recorded version are published as they are.
    """
    limiter = rate_limiter(rate_per_s) if rate_per_s else None
    stats = PublishStats()
    version_cache: dict[int, int | None] = {}
    out: list[Violation] = []
    for v in violations:
        out.append(v)
        if v.published or v.finding.ledger_id is None:
            continue
        replicas = replicas_to_publish(v.finding, publish_placement=publish_placement)
        if replicas is None:
            continue
        if v.finding.under_repair:
            stats.skip("already_under_repair")
            continue
        ledger_id = int(v.finding.ledger_id)
        expected = v.finding.znode_version
        if check_metadata and expected is not None:
            if ledger_id not in version_cache:
                version_cache[ledger_id] = store.ledgers.version(ledger_id)
            current = version_cache[ledger_id]
            if current is None:
                stats.skip("ledger_deleted")
                continue
            if current != expected:
                stats.skip("metadata_changed")
                continue
        if limiter is not None:
            limiter.acquire()
        written = store.queue.mark(ledger_id, replicas)
        out[-1] = replace(v, published=True)
        if written:
            stats.marked += 1
        else:
            stats.unchanged += 1
    if stats.skipped:
        log.info(
            "publish: %d marked, %d already marked, skipped %s", stats.marked, stats.unchanged, stats.skipped
        )
    return out, stats


def publish_run(
    warehouse: Warehouse | str,
    run_id: str,
    store: ClusterStore,
    *,
    publish_placement: bool = False,
    rate_per_s: float | None = None,
) -> PublishStats:
    """Publish a finished run's violations (jobs/publish_underreplicated.py) and record the flags.

    The run's `violations` rows are rewritten in one commit (replacing that run's rows) and its `audit_runs`
    row gets the new published total; a run that never succeeded is refused.
    """
    runs = read_arrow(warehouse, "audit_runs")
    runs = runs.filter(pc.equal(runs.column("run_id"), run_id))
    ok = [r for r in runs.to_pylist() if r["status"] == "succeeded"]
    if not ok:
        raise BkAuditError(f"no succeeded checker run {run_id!r} in {warehouse}")
    run = ok[0]
    data = read_arrow(warehouse, "violations")
    rows = data.filter(pc.equal(data.column("run_id"), run_id)).to_pylist()
    done, stats = publish(
        store,
        [violation_of_row(r) for r in rows],
        publish_placement=publish_placement,
        rate_per_s=rate_per_s,
    )
    if stats.published:
        for row, v in zip(rows, done, strict=True):
            row["published"] = v.published
        table = conform(pa.Table.from_pylist(rows, schema=VIOLATIONS.schema), VIOLATIONS.schema)
        write_table(
            warehouse,
            "violations",
            table,
            snapshot_id=run["snapshot_id"],
            snapshot_date=run["run_date"],
            replace={"run_id": run_id},
        )
        run["published"] = sum(1 for r in rows if r.get("published"))
        write_table(
            warehouse,
            "audit_runs",
            pa.Table.from_pylist([run], schema=AUDIT_RUNS.schema),
            snapshot_id=run["snapshot_id"],
            snapshot_date=run["run_date"],
            replace={"run_id": run_id},
        )
    return stats
