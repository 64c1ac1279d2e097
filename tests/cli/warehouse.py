"""A small checker warehouse written with bkaudit's own Delta writer (no Spark, no cluster): one succeeded run
with a known set of violations, for CLI tests that read tables (`violations`, `report`, exit codes, loops).

The rows are what the test injects: ground truth for the assertions is `VIOLATIONS`, not the code under test.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

RUN_ID = "run-cli"
SNAPSHOT_ID = "snap-cli"
RUN_DATE = "2026-11-24"
STARTED = datetime(2026, 11, 24, 10, 0, 0, tzinfo=UTC)
FINISHED = datetime(2026, 11, 24, 10, 0, 42, tzinfo=UTC)
# (ledger_id, category, severity)
VIOLATIONS = [
    (7, "no_replica", "critical"),
    (8, "placement_soft", "warning"),
    (9, "placement_soft", "warning"),
]


def make_warehouse(root: Path) -> str:
    """Write `audit_runs`, `violations` and `bookie_checks` for RUN_ID under `root`, as a succeeded checker
    run commits them; returns the warehouse path."""
    from bkaudit.tables import store
    from bkaudit.tables.catalog import spec

    warehouse = str(root)
    keys = {"run_id": RUN_ID, "snapshot_id": SNAPSHOT_ID, "run_date": RUN_DATE}
    rows = [
        {**keys, "ledger_id": lid, "category": cat, "severity": sev, "segment_index": 0, "bookie_id": None,
         "missing_entries": None, "min_replicas": 0 if cat == "no_replica" else None, "managed_ledger": None,
         "detail": "{}", "under_repair": False, "published": False, "detected_at": FINISHED}
        for lid, cat, sev in VIOLATIONS
    ]
    _write(store, warehouse, "violations", pa.Table.from_pylist(rows, schema=spec("violations").schema))
    # every succeeded run commits bookie_checks too (here: no bookie answered anything worth a row)
    _write(store, warehouse, "bookie_checks", spec("bookie_checks").schema.empty_table())
    counts: dict[str, int] = {}
    for _lid, cat, _sev in VIOLATIONS:
        counts[cat] = counts.get(cat, 0) + 1
    run = {**keys, "status": "succeeded", "error": None, "started_at": STARTED, "finished_at": FINISHED,
           "seconds": 42.0, "zk": "127.0.0.1:2181", "root": "/ledgers", "config": "{}", "ledgers_checked": 10,
           "ledgers_durability_checked": 10, "entries_checked": 100, "bookies_checked": 3,
           "counts": list(counts.items()), "under_repair": [], "reevaluated": 0, "deleted_during_run": 0,
           "published": 0, "phase_seconds": [("check", 40.0)]}
    _write(store, warehouse, "audit_runs", pa.Table.from_pylist([run], schema=spec("audit_runs").schema))
    return warehouse


def _write(store: object, warehouse: str, table: str, data: pa.Table) -> None:
    files = store.stage_table(warehouse, table, data, snapshot_id=SNAPSHOT_ID,  # type: ignore[attr-defined]
                              snapshot_date=RUN_DATE)
    store.commit(warehouse, table, files, replace={"run_id": RUN_ID})  # type: ignore[attr-defined]
