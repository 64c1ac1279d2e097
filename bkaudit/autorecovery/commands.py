"""`bkaudit autorecovery ...`: run AutoRecovery, inspect it, and the operator switches.

    bkaudit autorecovery run --zk H:P [--once] [--json] [--workers N] [--timeout S] [--events FILE]
    bkaudit autorecovery status --zk H:P [--json]
    bkaudit autorecovery trigger-audit | disable | enable --zk H:P
    bkaudit autorecovery set-delay SECONDS | clear-data-loss --ledger N --zk H:P

`run --once` exit codes are in bkaudit.autorecovery.summary (0 drained, 1 timed out with work left,
2 error, 3 drained except ledgers recorded as data-lost).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import click

from bkaudit.cli_common import LEDGER_ID, SECONDS, emit, exit_code_for, fail, load_settings, zk_options
from bkaudit.errors import BkAuditError


@click.group()
def autorecovery() -> None:
    """AutoRecovery: the elected Auditor and the ReplicationWorkers that drain the under-replication queue."""


@autorecovery.command()
@zk_options
@click.option("--once", is_flag=True, help="drain the queue, then exit (non-zero on --timeout)")
@click.option("--json", "as_json", is_flag=True, help="print the final summary as JSON")
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="worker threads (default [autorecovery] workers; 0 = auditor only)",
)
@click.option(
    "--timeout",
    type=SECONDS,
    default=None,
    help="seconds: with --once give up and exit 1; without, run this long",
)
@click.option("--id", "node_id", default=None, help="name in votes and locks (default host:pid)")
@click.option(
    "--events",
    "events_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="append a JSON line per action (locks, copies, swaps, data loss) to this file",
)
@click.option("--no-auditor", is_flag=True, help="only replicate; do not stand for auditor")
def run(
    zk: str | None,
    cluster_dir: str | None,
    root: str | None,
    config_path: str | None,
    once: bool,
    as_json: bool,
    workers: int | None,
    timeout: float | None,
    node_id: str | None,
    events_path: str | None,
    no_auditor: bool,
) -> None:
    """Run the auditor election (auditing while elected) and replication workers."""
    from bkaudit.autorecovery.service import AutoRecoveryService

    _setup_logging()
    settings = load_settings(zk, cluster_dir, root, config_path, probe_zk=False)  # a service waits for ZK
    try:
        service = AutoRecoveryService(
            settings, node_id=node_id, workers=workers, events_path=events_path, auditor=not no_auditor
        ).start()
    except BkAuditError as exc:
        fail(str(exc), exit_code_for(exc))
    stop = threading.Event()
    with _signals(stop.set):
        try:
            if once:
                summary = _drain(service, stop, timeout)
            else:
                stop.wait(timeout)
                summary = service.summary(service.left(), timed_out=False)
        finally:
            service.stop()
    emit(summary.data, as_json, lambda _d: summary.human())
    sys.exit(summary.exit_code if once else 0)


def _drain(service: Any, stop: threading.Event, timeout: float | None) -> Any:
    """service.drain on a helper thread so SIGTERM still ends the run (with a timed-out summary)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(service.drain(timeout)), daemon=True)
    thread.start()
    while thread.is_alive() and not stop.is_set():
        thread.join(0.2)
    if result:
        return result[0]
    return service.summary(service.left(), timed_out=True)


@autorecovery.command()
@zk_options
@click.option("--json", "as_json", is_flag=True)
def status(
    zk: str | None, cluster_dir: str | None, root: str | None, config_path: str | None, as_json: bool
) -> None:
    """Who is auditor, whether replication is enabled, queue size, locks, data-lost ledgers, lost bookies."""
    from bkaudit.autorecovery import admin

    state = _state_root(zk, cluster_dir, root, config_path)
    doc = _with_zk(
        zk, cluster_dir, root, config_path, lambda client, r: admin.status(client, root=r, state_root=state)
    )
    emit(doc, as_json, admin.human_status)


@autorecovery.command("trigger-audit")
@zk_options
def trigger_audit(zk: str | None, cluster_dir: str | None, root: str | None, config_path: str | None) -> None:
    """Make the elected auditor audit lost bookies now (BookKeeper's triggeraudit); exit 1 if none runs."""
    from bkaudit.autorecovery import admin
    from bkaudit.autorecovery.settings import AutoRecoverySettings

    settings = _settings(zk, cluster_dir, root, config_path)
    default = settings.get(AutoRecoverySettings).lost_bookie_recovery_delay_s

    def act(client: Any, r: str) -> tuple[int, str | None]:
        return admin.trigger_audit(client, root=r, default_delay_s=default), admin.who_is_auditor(
            client, root=r
        )

    delay, auditor = _with_zk(zk, cluster_dir, root, config_path, act)
    if auditor is None:
        fail("no auditor is elected (is any `bkaudit autorecovery run` up?); the request stays in ZooKeeper")
    click.echo(f"audit triggered on auditor {auditor} (lostBookieRecoveryDelay {delay}s)")


@autorecovery.command()
@zk_options
def disable(zk: str | None, cluster_dir: str | None, root: str | None, config_path: str | None) -> None:
    """Stop auditors publishing and workers replicating (creates underreplication/disable)."""
    from bkaudit.zk import underreplication as ur

    changed = _with_zk(zk, cluster_dir, root, config_path, lambda c, r: ur.disable_replication(c, root=r))
    click.echo("replication disabled" if changed else "replication was already disabled")


@autorecovery.command()
@zk_options
def enable(zk: str | None, cluster_dir: str | None, root: str | None, config_path: str | None) -> None:
    """Let auditors and workers resume (deletes underreplication/disable)."""
    from bkaudit.zk import underreplication as ur

    changed = _with_zk(zk, cluster_dir, root, config_path, lambda c, r: ur.enable_replication(c, root=r))
    click.echo("replication enabled" if changed else "replication was already enabled")


@autorecovery.command("set-delay")
@zk_options
@click.argument("seconds", type=click.IntRange(min=0, max=2**31 - 1))
def set_delay(
    zk: str | None, cluster_dir: str | None, root: str | None, config_path: str | None, seconds: int
) -> None:
    """Set lostBookieRecoveryDelay in ZooKeeper (0, or the current value, audits at once)."""
    from bkaudit.zk import underreplication as ur

    _with_zk(
        zk, cluster_dir, root, config_path, lambda c, r: ur.set_lost_bookie_recovery_delay(c, seconds, root=r)
    )
    click.echo(f"lostBookieRecoveryDelay = {seconds}s")


@autorecovery.command("clear-data-loss")
@zk_options
@click.option("--ledger", "ledger_id", type=LEDGER_ID, required=True)
def clear_data_loss(
    zk: str | None, cluster_dir: str | None, root: str | None, config_path: str | None, ledger_id: int
) -> None:
    """Delete a ledger's data-loss record so workers try it again (e.g. after restoring a bookie)."""
    from bkaudit.zk import dataloss

    state = _state_root(zk, cluster_dir, root, config_path)
    removed = _with_zk(
        zk, cluster_dir, root, config_path,
        lambda c, r: dataloss.delete(c, ledger_id, root=r, state_root=state),
    )
    click.echo(f"ledger {ledger_id}: data-loss record {'deleted' if removed else 'was absent'}")


# -- helpers ------------------------------------------------------------------------------------------------
def _settings(zk: str | None, cluster_dir: str | None, root: str | None, config_path: str | None) -> Any:

    return load_settings(zk, cluster_dir, root, config_path)


def _state_root(
    zk: str | None, cluster_dir: str | None, root: str | None, config_path: str | None
) -> str | None:
    """`[zk] state_root` (None: derived from the ledgers root)."""
    from bkaudit.config import ZkSettings

    return _settings(zk, cluster_dir, root, config_path).get(ZkSettings).state_root or None


def _with_zk(
    zk: str | None,
    cluster_dir: str | None,
    root: str | None,
    config_path: str | None,
    action: Callable[[Any, str], Any],
) -> Any:
    from bkaudit.config import ZkSettings
    from bkaudit.zk import client as zkclient

    zk_settings = _settings(zk, cluster_dir, root, config_path).get(ZkSettings)
    try:
        client = zkclient.connect(zk_settings)
        try:
            return action(client, zk_settings.root)
        finally:
            zkclient.close(client)
    except BkAuditError as exc:
        fail(str(exc), exit_code_for(exc))


@contextlib.contextmanager
def _signals(handler: Callable[[], None]) -> Iterator[None]:
    """SIGTERM / SIGINT end the run gracefully (locks released, vote deleted, summary printed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in previous:
        signal.signal(sig, lambda _signum, _frame: handler())
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _setup_logging() -> None:
    import logging
    import os

    logging.basicConfig(
        level=os.environ.get("BKAUDIT_LOG_LEVEL", "INFO"),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s",
    )
    logging.getLogger("kazoo.client").setLevel(logging.WARNING)
