"""Feeding BookKeeper's under-replication queue from violation rows (`--publish-underreplicated`).

One code path for both entry points: `bkaudit check --publish-underreplicated` publishes the rows of the run
it just computed (before writing them, so the `published` flags land in the same commit), and
`jobs/publish_underreplicated.py --run-id R` publishes the rows of a finished run and rewrites that run's
rows with the new flags (one Delta commit replacing the run's rows).

What is published, exactly as BookKeeper marks ledgers (`zk.underreplication.mark_underreplicated`: the
`urL%010d` znode with TextFormat `replica` + `ctime`, merged into an existing marker with a version CAS):

* durability violations (no_replica, below_ack_quorum, below_write_quorum), with the bookies missing entries
  as the replicas: the ReplicationWorker re-replicates the fragments on them;
* placement_fail only with `--publish-placement`, with an EMPTY replica list (BookKeeper's BP-54
  `repairedPlacementPolicyNotAdheringBookieEnabled` behaviour: the worker relocates the ensemble).

Never published: rows already published, rows on ledgers already under repair (a second mark would only reset
the marker's grace-period clock), and rows whose ledger metadata changed or vanished since the check (the
finding may no longer hold; the next run re-checks it). Writes are rate-limited (BookKeeper PR #3541: marking
thousands of ledgers at once overloads ZooKeeper) and idempotent (merging known replicas writes nothing).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bkaudit.audit.base import DURABILITY_CATEGORIES, Category

if TYPE_CHECKING:
    from kazoo.client import KazooClient

log = logging.getLogger(__name__)

DURABILITY = frozenset(c.value for c in DURABILITY_CATEGORIES)


@dataclass
class PublishStats:
    marked: int = 0
    """Rows whose ledger now carries our replicas (newly written or merged)."""
    unchanged: int = 0
    """Rows whose ledger already carried every replica (idempotent re-run): published, nothing written."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Reason -> rows not published."""

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    @property
    def published(self) -> int:
        return self.marked + self.unchanged


def _detail(row: Mapping[str, Any]) -> dict[str, Any]:
    raw = row.get("detail")
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def replicas_to_publish(row: Mapping[str, Any], *, publish_placement: bool) -> tuple[str, ...] | None:
    """The replica list to mark for this row, or None when the row is not for the queue."""
    category = row.get("category")
    if row.get("ledger_id") is None:
        return None
    if category in DURABILITY:
        bookies = _detail(row).get("bookies_missing_entries") or (
            [row["bookie_id"]] if row.get("bookie_id") else []
        )
        return tuple(str(b) for b in bookies)
    if category == Category.PLACEMENT_FAIL.value and publish_placement:
        return ()
    return None


def publish_rows(
    zk: KazooClient,
    rows: Iterable[dict[str, Any]],
    *,
    root: str,
    publish_placement: bool = False,
    rate_per_s: float | None = None,
    layout: str | None = None,
    now_ms: int | None = None,
    check_metadata: bool = True,
) -> PublishStats:
    """Mark eligible rows' ledgers under-replicated; sets `row["published"] = True` on each row published.

    With `check_metadata`, the ledger znode's version must still be the one the finding was computed from
    (`detail.znode_version`); rows without a recorded version are published as they are.
    """
    from bkaudit.zk import paths
    from bkaudit.zk.client import rate_limiter
    from bkaudit.zk.underreplication import mark_underreplicated

    limiter = rate_limiter(rate_per_s) if rate_per_s else None
    stats = PublishStats()
    version_cache: dict[int, int | None] = {}
    for row in rows:
        if row.get("published"):
            continue
        replicas = replicas_to_publish(row, publish_placement=publish_placement)
        if replicas is None:
            continue
        if row.get("under_repair"):
            stats.skip("already_under_repair")
            continue
        ledger_id = int(row["ledger_id"])
        expected = _detail(row).get("znode_version")
        if check_metadata and expected is not None:
            if ledger_id not in version_cache:
                stat = zk.exists(paths.ledger_path(ledger_id, root=root, layout=layout or "hierarchical"))
                version_cache[ledger_id] = None if stat is None else int(stat.version)
            current = version_cache[ledger_id]
            if current is None:
                stats.skip("ledger_deleted")
                continue
            if current != int(expected):
                stats.skip("metadata_changed")
                continue
        written = mark_underreplicated(
            zk, ledger_id, replicas, root=root, now_ms=now_ms, rate_limiter=limiter
        )
        row["published"] = True
        if written:
            stats.marked += 1
        else:
            stats.unchanged += 1
    if stats.skipped:
        log.info(
            "publish: %d marked, %d already marked, skipped %s", stats.marked, stats.unchanged, stats.skipped
        )
    return stats


def publish_run(
    warehouse: str,
    run_id: str,
    zk: KazooClient,
    *,
    root: str,
    publish_placement: bool = False,
    rate_per_s: float | None = None,
    layout: str | None = None,
) -> PublishStats:
    """Publish a finished run's violations (jobs/publish_underreplicated.py) and record the flags.

    The run's `violations` rows are rewritten in one commit (replacing that run's rows) and its `audit_runs`
    row gets the new published total; a run that never succeeded is refused.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from bkaudit.errors import BkAuditError
    from bkaudit.tables.checker_schemas import AUDIT_RUNS, VIOLATIONS
    from bkaudit.tables.read import read_arrow
    from bkaudit.tables.schemas import conform
    from bkaudit.tables.store import write_table

    runs = read_arrow(warehouse, "audit_runs")
    runs = runs.filter(pc.equal(runs.column("run_id"), run_id))
    ok = [r for r in runs.to_pylist() if r["status"] == "succeeded"]
    if not ok:
        raise BkAuditError(f"no succeeded checker run {run_id!r} in {warehouse}")
    run = ok[0]
    data = read_arrow(warehouse, "violations")
    rows = data.filter(pc.equal(data.column("run_id"), run_id)).to_pylist()
    stats = publish_rows(
        zk, rows, root=root, publish_placement=publish_placement, rate_per_s=rate_per_s, layout=layout
    )
    if stats.published:
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
