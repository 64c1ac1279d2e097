"""`bkaudit bookie ...`: run a bookie, format its cookie, list bookies, admin tools.

`bookie stop|kill|start` drive a local cluster's bookie processes: they live with the local cluster
(bkaudit.cluster.commands), which composes the full `bookie` group, so this package never imports `cluster`.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from bkaudit.cli_common import BOOKIE_ID, LEDGER_ID, ZkTarget, emit, exit_code_for, fail, zk_target
from bkaudit.errors import BkAuditError


@click.group()
def bookie() -> None:
    """Run and manage bookies (the companion runtime's storage servers)."""


@bookie.command()
@zk_target
@click.option("--port", type=int, required=True,
              help="BookKeeper native protocol port (bookie-rpc); default bookie id 127.0.0.1:PORT")
@click.option("--data-dir", type=click.Path(file_okay=False), required=True, help="storage directory")
@click.option("--rack", default=None, help="network location recorded in /bookies, e.g. /rack-1")
@click.option("--readonly", is_flag=True, help="serve reads only (registered under available/readonly)")
@click.option("--bookie-id", type=BOOKIE_ID, default=None, help="custom bookie id (default host:port)")
@click.option("--autorecovery", is_flag=True, help="also run AutoRecovery in this process (when available)")
@click.option("--no-listing", is_flag=True,
              help="never answer listing requests, like a Java bookie on DbLedgerStorage (tests, demos)")
@click.option("--events", "events_path", default=None, type=click.Path(dir_okay=False),
              help="append the data-integrity check's events (JSON lines) to FILE")
def run(target: ZkTarget, port: int, data_dir: str, rack: str | None, readonly: bool, bookie_id: str | None,
        autorecovery: bool, no_listing: bool, events_path: str | None) -> None:
    """Run a bookie until SIGTERM (graceful: read-only, drain, deregister)."""
    from bkaudit.bookie.server import BookieOptions, Services
    from bkaudit.bookie.server import run as run_bookie

    settings = target.settings(probe_zk=False)  # a service waits for ZK
    options = BookieOptions(data_dir=data_dir, port=port, bookie_id=bookie_id, rack=rack, readonly=readonly,
                            autorecovery=autorecovery, no_listing=no_listing, events_path=events_path)
    try:
        sys.exit(run_bookie(settings, options, Services(autorecovery=_autorecovery, integrity=_integrity)))
    except BkAuditError as exc:
        fail(str(exc), exit_code_for(exc))


@bookie.command("format")
@zk_target
@click.option("--bookie", "bookie_id", type=BOOKIE_ID, required=True, help="bookie id whose cookie to delete")
@click.option("--force", is_flag=True, help="even if the bookie is currently registered")
def format_cookie(target: ZkTarget, bookie_id: str, force: bool) -> None:
    """Delete a bookie's cookie so a wiped bookie may rejoin as a new, empty bookie."""
    with target.store() as cluster:
        state = cluster.registry.bookie_state(bookie_id)
        if state != "absent" and not force:
            fail(f"bookie {bookie_id} is running ({state}); stop it first or pass --force")
        deleted = cluster.registry.delete_cookie(bookie_id)
    click.echo(f"cookie of {bookie_id} {'deleted' if deleted else 'was already absent'}")


@bookie.command("list")
@zk_target
@click.option("--json", "as_json", is_flag=True)
def list_bookies(target: ZkTarget, as_json: bool) -> None:
    """Bookies known to ZooKeeper: cookie, registration state, endpoint, rack."""
    from bkaudit.store.derived import describe_bookies

    with target.store() as cluster:
        rows = describe_bookies(cluster.registry)
    emit(rows, as_json, lambda rs: "\n".join(
        f"{r['id']:24} {r['state']:9} {r['endpoint'] or '-':24} {r['rack'] or '-'}" for r in rs) or "(none)")


@bookie.group()
def admin() -> None:
    """Offline maintenance of a STOPPED bookie's data directory (fault injection for tests, cleanup)."""


@admin.command("delete-entries")
@click.option("--data-dir", type=click.Path(file_okay=False, exists=True), required=True)
@click.option("--ledger", "ledger_id", type=LEDGER_ID, required=True)
@click.option("--entries", required=True, help="ids and inclusive ranges, e.g. 3,5-9")
def delete_entries(data_dir: str, ledger_id: int, entries: str) -> None:
    """Durably remove entries from a stopped bookie (refused while the bookie holds its data directory)."""
    from bkaudit.bookie.storage import Storage

    try:
        ids = parse_id_list(entries)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--entries") from None
    try:
        with Storage(data_dir) as storage:
            removed = storage.delete_entries(ledger_id, ids)
    except BkAuditError as exc:
        fail(str(exc), exit_code_for(exc))
    click.echo(f"ledger {ledger_id}: removed {removed} of {len(ids)} entries")


@admin.command("delete-ledger")
@click.option("--data-dir", type=click.Path(file_okay=False, exists=True), required=True)
@click.option("--ledger", "ledger_id", type=LEDGER_ID, required=True)
def delete_ledger(data_dir: str, ledger_id: int) -> None:
    """Durably remove a whole ledger (state and entries) from a stopped bookie."""
    from bkaudit.bookie.storage import Storage

    try:
        with Storage(data_dir) as storage:
            removed = storage.delete_ledger(ledger_id)
    except BkAuditError as exc:
        fail(str(exc), exit_code_for(exc))
    click.echo(f"ledger {ledger_id}: removed with {removed} entries")


def parse_id_list(text: str) -> list[int]:
    """"3,5-9" -> [3, 5, 6, 7, 8, 9]."""
    ids: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        first, sep, last = part.partition("-")
        try:
            lo = int(first)
            hi = int(last) if sep else lo
        except ValueError:
            raise ValueError(f"not an id or range: {part!r}") from None
        if hi < lo or lo < 0:
            raise ValueError(f"bad range {part!r}")
        ids.extend(range(lo, hi + 1))
    if not ids:
        raise ValueError("no entry ids given")
    return ids


# AutoRecovery and the data-integrity check sit a layer above the bookie, so the command composes them in;
# imported when a bookie first needs them, not by every bookie process
def _autorecovery(settings: Any, zk: Any, bookie_id: str) -> Any:
    from bkaudit.autorecovery.service import start

    return start(settings, zk, bookie_id)


def _integrity(**kwargs: Any) -> Any:
    from bkaudit.autorecovery.integrity import for_bookie

    return for_bookie(**kwargs)
