"""Read models the API and the dashboard share: bookies, queue, data loss, drain progress, audit verdicts.

Each function reads ZooKeeper (or the Delta tables) once and returns plain JSON-ready dicts; no rules here
beyond arranging what is stored.
"""

from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from bkaudit.errors import FormatError
from bkaudit.lifecycle import service

if TYPE_CHECKING:
    from bkaudit.store import ClusterStore
    from bkaudit.tables.location import Warehouse

log = logging.getLogger(__name__)

QUEUE_LISTED = 1000


def _racks(cluster: ClusterStore) -> dict[str, str]:
    try:
        racks = cluster.registry.racks()
    except FormatError:
        return {}
    out: dict[str, str] = {}
    for group in racks.values():
        for bookie, info in group.items():
            out[bookie] = getattr(info, "rack", None) or ""
    return out


def disk_usage(pool: Any, bookies: list[str], timeout_s: float) -> dict[str, dict[str, int] | None]:
    """GetBookieInfo from each registered bookie, in parallel; None for one that does not answer."""
    def ask(bookie: str) -> dict[str, int] | None:
        try:
            info = pool.get(bookie).get_bookie_info().result(timeout_s)
            return {"total_disk": info.total_disk, "free_disk": info.free_disk}
        except Exception:
            return None

    if not bookies:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(bookies))) as ex:
        return dict(zip(bookies, ex.map(ask, bookies), strict=True))


def bookies(cluster: ClusterStore, *, pool: Any = None, timeout_s: float = 2.0) -> list[dict[str, Any]]:
    """Every bookie with a cookie or a registration: rack, registration, lifecycle, disk, drain progress."""
    writable = set(cluster.registry.writable())
    readonly = set(cluster.registry.readonly())
    cookies = set(cluster.registry.cookies())
    recorded = cluster.lifecycle.list_states()
    racks = _racks(cluster)
    ids = sorted(cookies | writable | readonly)
    disks = disk_usage(pool, sorted(writable | readonly), timeout_s) if pool is not None else {}
    out = []
    for b in ids:
        rec = recorded.get(b)
        state = "Active" if rec is None else "unreadable" if isinstance(rec, FormatError) else rec.state.value
        out.append({
            "bookie": b,
            "rack": racks.get(b, ""),
            "registration": "writable" if b in writable else "readonly" if b in readonly else "absent",
            "cookie": b in cookies,
            "state": state,
            "read_only_requested": cluster.lifecycle.read_serving(b),
            "disk": disks.get(b),
            "progress": cluster.lifecycle.read_progress(b) if state != "Active" else None,
        })
    return out


def queue(cluster: ClusterStore, *, limit: int = QUEUE_LISTED) -> dict[str, Any]:
    """The under-replication queue: marked ledgers with their missing replicas and lock holders."""
    ids = cluster.queue.marked()
    rows = []
    for lid in ids[:limit]:
        try:
            marker = cluster.queue.marker(lid)
        except FormatError as exc:
            rows.append({"ledger_id": lid, "error": str(exc)})
            continue
        if marker is None:
            continue
        rows.append({"ledger_id": lid, "replicas": list(marker.replicas), "ctime": marker.ctime,
                     "locked_by": cluster.queue.lock_holder(lid)})
    return {"count": len(ids), "ledgers": rows}


def data_loss(cluster: ClusterStore) -> list[dict[str, Any]]:
    out = []
    for lid in cluster.data_loss.ids():
        try:
            record = cluster.data_loss.read(lid)
        except FormatError as exc:
            out.append({"ledger_id": lid, "error": str(exc)})
            continue
        if record is not None:
            out.append(record.to_json())
    return out


def drain_progress(cluster: ClusterStore, *, bookie: str | None = None) -> list[dict[str, Any]]:
    """Per non-Active bookie: its state and the Auditor's latest progress record."""
    states = service.states(cluster)
    out = []
    for b, state in sorted(states.items()):
        if (bookie is not None and b != bookie) or (bookie is None and state.value == "Active"):
            continue
        progress = cluster.lifecycle.read_progress(b) or {}
        found = cluster.lifecycle.list_failures(b)
        failures = {str(k): v for k, v in found.items()}
        kept = {k: v for k, v in progress.items() if k != "state"}
        out.append({"bookie": b, "state": state.value, **kept, "failures_by_ledger": failures})
    return out


def audit_verdict(warehouse: Warehouse | str, *, limit: int = 200) -> dict[str, Any]:
    """The latest succeeded checker run: verdict (worst severity or clean), counts, violations."""
    from bkaudit.tables.read import read_violations, select_run

    run = select_run(warehouse, None)
    rows = read_violations(warehouse, run["run_id"])
    severities = {r["severity"] for r in rows}
    verdict = next((s for s in ("critical", "warning", "info") if s in severities), "clean")
    counts = dict(run.get("counts") or {})
    categories: dict[str, dict[str, Any]] = {}
    for r in rows:
        c = categories.setdefault(r["category"], {"count": 0, "severity": r["severity"]})
        c["count"] += 1
    return {
        "run_id": run["run_id"],
        "snapshot_id": run.get("snapshot_id"),
        "finished_at": str(run.get("finished_at")),
        "verdict": verdict,
        "counts": counts,
        "categories": categories,
        "violations": [_jsonable(r) for r in rows[:limit]],
        "violations_total": len(rows),
    }


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in row.items():
        if dataclasses.is_dataclass(v):
            v = dataclasses.asdict(v)  # type: ignore[arg-type]
        out[k] = v if isinstance(v, str | int | float | bool | list | dict | type(None)) else str(v)
    return out
