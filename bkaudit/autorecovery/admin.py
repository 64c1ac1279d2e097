"""Operator actions on a running AutoRecovery, through ZooKeeper only (usable from any process).

`who_is_auditor` and `trigger_audit` are what BookKeeper's shell and admin offer (`whoisauditor`,
`triggeraudit`); the lifecycle work (decommission) calls `trigger_audit` after moving a bookie out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bkaudit.autorecovery.queue import locked_ids
from bkaudit.zk import dataloss, paths, registry
from bkaudit.zk import underreplication as ur

if TYPE_CHECKING:
    from kazoo.client import KazooClient


def who_is_auditor(zk: KazooClient, *, root: str = paths.DEFAULT_ROOT) -> str | None:
    """The elected auditor's id (data of the lowest vote), or None when no AutoRecovery process runs."""
    return ur.current_auditor(zk, root=root)


def trigger_audit(zk: KazooClient, *, root: str = paths.DEFAULT_ROOT, default_delay_s: int = 0) -> int:
    """Make the auditor audit lost bookies now: re-set `lostBookieRecoveryDelay` to its current value.

    That is BookKeeper's triggerAudit: the auditor treats "changed to the previous value" (or to 0) as a
    request to audit at once. Returns the delay written.
    """
    current = ur.get_lost_bookie_recovery_delay(zk, root=root)
    value = default_delay_s if current is None else current
    ur.set_lost_bookie_recovery_delay(zk, value, root=root)
    return value


def status(
    zk: KazooClient, *, root: str = paths.DEFAULT_ROOT, state_root: str | None = None
) -> dict[str, Any]:
    """Who audits, whether replication is enabled, the queue, the locks, data-lost ledgers, bookie states."""
    queue = list(ur.list_underreplicated(zk, root=root))
    locks = sorted(locked_ids(zk, root=root))
    writable = set(registry.list_writable(zk, root))
    readonly = set(registry.list_readonly(zk, root))
    cookies = set(registry.list_cookies(zk, root))
    records = []
    for ledger_id in dataloss.list_ids(zk, root=root, state_root=state_root):
        record = dataloss.read(zk, ledger_id, root=root, state_root=state_root)
        if record is not None:
            records.append(record.to_json())
    return {
        "auditor": who_is_auditor(zk, root=root),
        "votes": len(ur.list_votes(zk, root=root)),
        "enabled": ur.is_replication_enabled(zk, root=root),
        "lost_bookie_recovery_delay_s": ur.get_lost_bookie_recovery_delay(zk, root=root),
        "queue_size": len(queue),
        "underreplicated": queue,
        "locked": [{"ledger_id": lid, "holder": ur.lock_holder(zk, lid, root=root)} for lid in locks],
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
