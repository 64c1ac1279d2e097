"""`bkaudit underreplicated list`: the under-replication queue, as BookKeeper's `shell listunderreplicated`.

The same filters and switches as BookKeeper's command (its long and short option names are accepted):
`--missingreplica/-mr BOOKIE` keeps ledgers whose marker names that bookie as missing a replica,
`--excludingmissingreplica/-emr BOOKIE` drops them, `--printmissingreplica/-pmr` prints the marker's
replicas, `--printreplicationworkerid/-prw` the holder of the ledger's re-replication lock, and
`--onlydisplayledgercount/-c` only the count. It reads BookKeeper's own znodes (markers under
`{root}/underreplication/ledgers`, locks under `.../locks`), so it lists a BookKeeper cluster's queue too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from bkaudit.cli_common import ZkTarget, emit, zk_target

if TYPE_CHECKING:
    from bkaudit.store.base import ReplicationQueue


@click.group(name="underreplicated")
def underreplicated() -> None:
    """The under-replication queue in ZooKeeper (BookKeeper's listunderreplicated)."""


@underreplicated.command("list", context_settings={"ignore_unknown_options": False})
@zk_target
@click.option("--missingreplica", "-mr", "missing", default=None, metavar="BOOKIE",
              help="only ledgers missing a replica on this bookie")
@click.option("--excludingmissingreplica", "-emr", "excluding", default=None, metavar="BOOKIE",
              help="skip ledgers missing a replica on this bookie")
@click.option("--printmissingreplica", "-pmr", "print_missing", is_flag=True,
              help="print each ledger's missing replicas (the marker's replica list)")
@click.option("--printreplicationworkerid", "-prw", "print_worker", is_flag=True,
              help="print the replication worker holding each ledger's lock")
@click.option("--onlydisplayledgercount", "-c", "only_count", is_flag=True, help="print only the count")
@click.option("--json", "as_json", is_flag=True,
              help="one JSON document: {count, ledgers: [{ledger_id, missing_replicas, marked_at, worker}]}")
def list_command(target: ZkTarget, missing: str | None, excluding: str | None, print_missing: bool,
                 print_worker: bool, only_count: bool, as_json: bool) -> None:
    """Ledgers marked under-replicated, in ledger id order."""
    with target.store() as cluster:
        rows = queue(cluster.queue, missing=missing, excluding=excluding, with_worker=print_worker or as_json,
                     only_count=only_count)
    data = {"count": len(rows), "ledgers": [] if only_count else rows}
    emit(data, as_json, lambda d: _human(d, print_missing=print_missing, print_worker=print_worker,
                                         only_count=only_count))


def queue(marked: ReplicationQueue, *, missing: str | None = None, excluding: str | None = None,
          with_worker: bool = False, only_count: bool = False) -> list[dict[str, Any]]:
    """The marked ledgers after the filters, with their markers (read once each) and lock holders."""
    from datetime import UTC, datetime

    out: list[dict[str, Any]] = []
    for ledger_id in marked.marked():
        needs_marker = missing or excluding or not only_count
        marker = None
        if needs_marker:
            marker = marked.marker(ledger_id)
            if marker is None:
                continue  # resolved while we listed
        replicas = tuple(marker.replicas) if marker is not None else ()
        if missing and missing not in replicas:
            continue
        if excluding and excluding in replicas:
            continue
        row: dict[str, Any] = {"ledger_id": ledger_id}
        if marker is not None:
            row["missing_replicas"] = list(replicas)
            row["marked_at"] = (datetime.fromtimestamp(marker.ctime / 1000, tz=UTC)
                                if marker.ctime is not None else None)
        if with_worker:
            row["worker"] = marked.lock_holder(ledger_id)
        out.append(row)
    return out


def _human(data: dict[str, Any], *, print_missing: bool, print_worker: bool, only_count: bool) -> str:
    if only_count:
        return f"{data['count']} under-replicated ledger(s)"
    lines = []
    for row in data["ledgers"]:
        lines.append(str(row["ledger_id"]))
        if print_missing:
            lines.append(f"\tMissingReplica : {', '.join(row['missing_replicas']) or '(not recorded)'}")
            if row.get("marked_at"):
                lines.append(f"\tMarkedAt : {row['marked_at'].isoformat()}")
        if print_worker:
            lines.append(f"\tReplicationWorkerId : {row.get('worker') or '(not locked)'}")
    lines.append(f"{data['count']} under-replicated ledger(s)")
    return "\n".join(lines)


__all__ = ["queue", "underreplicated"]
