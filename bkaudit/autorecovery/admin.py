"""Operator actions on a running AutoRecovery, through the cluster store only (usable from any process).

`trigger_audit` and the store's `queue.auditor()` are what BookKeeper's shell and admin offer
(`triggeraudit`, `whoisauditor`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bkaudit.store.base import ClusterStore


def trigger_audit(cluster: ClusterStore, *, default_delay_s: int = 0) -> int:
    """Make the auditor audit lost bookies now: re-set `lostBookieRecoveryDelay` to its current value.

    That is BookKeeper's triggerAudit: the auditor treats "changed to the previous value" (or to 0) as a
    request to audit at once. Returns the delay written.
    """
    current = cluster.queue.recovery_delay()
    value = default_delay_s if current is None else current
    cluster.queue.set_recovery_delay(value)
    return value


def status(cluster: ClusterStore) -> dict[str, Any]:
    """Who audits, whether replication is enabled, the queue, the locks, data-lost ledgers, bookie states."""
    queue, registry = cluster.queue, cluster.registry
    marked = queue.marked()
    locks = sorted(queue.locked())
    writable = set(registry.writable())
    readonly = set(registry.readonly())
    cookies = set(registry.cookies())
    records = []
    for ledger_id in cluster.data_loss.ids():
        record = cluster.data_loss.read(ledger_id)
        if record is not None:
            records.append(record.to_json())
    return {
        "auditor": queue.auditor(),
        "votes": len(queue.votes()),
        "enabled": queue.is_enabled(),
        "lost_bookie_recovery_delay_s": queue.recovery_delay(),
        "queue_size": len(marked),
        "underreplicated": marked,
        "locked": [{"ledger_id": lid, "holder": queue.lock_holder(lid)} for lid in locks],
        "data_lost": records,
        "bookies": {
            "writable": sorted(writable),
            "readonly": sorted(readonly),
            "lost": sorted(cookies - writable - readonly),
        },
    }


def human_status(doc: dict[str, Any]) -> str:
    lines = [
        f"auditor:      {doc['auditor'] or '(none elected)'} ({doc['votes']} votes)",
        f"replication:  {'enabled' if doc['enabled'] else 'DISABLED'}",
        f"lost bookie recovery delay: {doc['lost_bookie_recovery_delay_s']}s",
        f"queue:        {doc['queue_size']} under-replicated ledgers, {len(doc['locked'])} locked",
        f"bookies:      {len(doc['bookies']['writable'])} writable, "
        f"{len(doc['bookies']['readonly'])} read-only, "
        f"lost: {', '.join(doc['bookies']['lost']) or '-'}",
        f"data lost:    {len(doc['data_lost'])} ledgers",
    ]
    for record in doc["data_lost"]:
        lines.append(
            f"  ledger {record['ledger_id']}: {record['lost_entries']} entries "
            f"{record['lost_entry_ranges']} (detected {record['detected_at']})"
        )
    return "\n".join(lines)
