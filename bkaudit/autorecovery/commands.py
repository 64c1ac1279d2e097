"""`bkaudit autorecovery ...`: run AutoRecovery, inspect it, and the operator switches.

    bkaudit autorecovery run --zk H:P [--once] [--json] [--workers N] [--timeout S] [--events FILE]
    bkaudit autorecovery status --zk H:P [--json]
    bkaudit autorecovery trigger-audit | disable | enable --zk H:P
    bkaudit autorecovery set-delay SECONDS | clear-data-loss --ledger N --zk H:P

`run --once` exit codes are in bkaudit.autorecovery.summary (0 drained, 1 timed out with work left,
2 error, 3 drained except ledgers recorded as data-lost).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import click

from bkaudit.cli_common import LEDGER_ID, SECONDS, ZkTarget, emit, exit_code_for, fail, zk_target
from bkaudit.errors import BkAuditError
from bkaudit.shutdown import STOP_GRACE_S, StopWatchdog, stop_signals


@click.group()
def autorecovery() -> None:
    """AutoRecovery: the elected Auditor and the ReplicationWorkers that drain the under-replication queue."""


@autorecovery.command()
@zk_target
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
    target: ZkTarget,
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
    settings = target.settings(probe_zk=False)  # a service waits for ZK
    stop = threading.Event()
    watchdog = StopWatchdog(STOP_GRACE_S, "autorecovery run")
    summary: Any = None
    # the handlers go in before the service starts: a SIGTERM while it starts (its election is already
    # running) only asks for the stop, which follows as soon as start() returns
    with stop_signals(stop.set, watchdog):
        try:
            service = AutoRecoveryService(
                settings, node_id=node_id, workers=workers, events_path=events_path, auditor=not no_auditor
            ).start()
        except BkAuditError as exc:
            fail(str(exc), exit_code_for(exc))
        try:
            if once:
                summary = _drain(service, stop, timeout)
            else:
                stop.wait(timeout)
                summary = _summary(service, timed_out=False)
        finally:
            released = _stop(service, watchdog)
    if summary is not None:
        emit(summary.data, as_json, lambda _d: summary.human())
    if not released:
        zs = service.zk_settings
        fail(f"stopped without releasing what this process holds: ZooKeeper ({zs.connect}) is unreachable; "
             f"its locks and auditor vote expire with its session ({zs.session_timeout_s:g}s)")
    if once:
        sys.exit(summary.exit_code if summary is not None else 1)
    sys.exit(0)


def _drain(service: Any, stop: threading.Event, timeout: float | None) -> Any:
    """service.drain on a helper thread so SIGTERM still ends the run (with a timed-out summary)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(service.drain(timeout)), daemon=True)
    thread.start()
    while thread.is_alive() and not stop.is_set():
        thread.join(0.2)
    if result:
        return result[0]
    return _summary(service, timed_out=True)


def _zk_connected(service: Any) -> bool:
    client = service.zk
    return bool(client is not None and client.connected)


def _summary(service: Any, *, timed_out: bool) -> Any:
    """The run's summary, read from ZooKeeper in a bounded time; None when ZooKeeper does not answer."""
    from bkaudit.shutdown import within

    if not _zk_connected(service):
        return None
    ok, summary = within(STOP_GRACE_S / 4, lambda: service.summary(service.left(), timed_out=timed_out),
                         name="autorecovery-summary")
    return summary if ok else None


def _stop(service: Any, watchdog: StopWatchdog) -> bool:
    """Stop the service within the watchdog's grace, whatever ZooKeeper's state; True when it released its
    locks and vote itself (ZooKeeper connected and the stop finished), False otherwise (exit 1).

    With ZooKeeper unreachable, its session is closed first: requests waiting for a reconnect (a worker's
    lock, the vote's delete) fail at once instead of holding the stop, and the ephemeral nodes go with the
    session."""
    import logging

    from bkaudit.shutdown import within
    from bkaudit.zk import client as zkclient

    watchdog.arm()
    log = logging.getLogger("bkaudit.autorecovery")
    connected = _zk_connected(service)
    if not connected:
        log.error("stopping with ZooKeeper unreachable: locks and the auditor vote are left to expire with "
                  "the session")
        within(2.0, lambda: zkclient.close(service.zk), name="autorecovery-zk-close")

    def stop_service() -> bool:
        try:
            service.stop()
        except Exception as exc:
            log.warning("stopping: %s", exc)
            return False
        return True

    finished, ok = within(watchdog.grace_s - 3.0, stop_service, name="autorecovery-stop")
    watchdog.done()
    return connected and finished and bool(ok)


@autorecovery.command()
@zk_target
@click.option("--json", "as_json", is_flag=True)
def status(target: ZkTarget, as_json: bool) -> None:
    """Who is auditor, whether replication is enabled, queue size, locks, data-lost ledgers, lost bookies."""
    from bkaudit.autorecovery import admin

    with target.store() as cluster:
        doc = admin.status(cluster)
    emit(doc, as_json, admin.human_status)


@autorecovery.command("trigger-audit")
@zk_target
def trigger_audit(target: ZkTarget) -> None:
    """Make the elected auditor audit lost bookies now (BookKeeper's triggeraudit); exit 1 if none runs."""
    from bkaudit.autorecovery import admin
    from bkaudit.autorecovery.settings import AutoRecoverySettings

    settings = target.settings()
    default = settings.get(AutoRecoverySettings).lost_bookie_recovery_delay_s
    with target.store(settings) as cluster:
        delay = admin.trigger_audit(cluster, default_delay_s=default)
        auditor = cluster.queue.auditor()
    if auditor is None:
        fail("no auditor is elected (is any `bkaudit autorecovery run` up?); the request stays in ZooKeeper")
    click.echo(f"audit triggered on auditor {auditor} (lostBookieRecoveryDelay {delay}s)")


@autorecovery.command()
@zk_target
def disable(target: ZkTarget) -> None:
    """Stop auditors publishing and workers replicating (creates underreplication/disable)."""
    with target.store() as cluster:
        changed = cluster.queue.set_enabled(False)
    click.echo("replication disabled" if changed else "replication was already disabled")


@autorecovery.command()
@zk_target
def enable(target: ZkTarget) -> None:
    """Let auditors and workers resume (deletes underreplication/disable)."""
    with target.store() as cluster:
        changed = cluster.queue.set_enabled(True)
    click.echo("replication enabled" if changed else "replication was already enabled")


@autorecovery.command("set-delay")
@zk_target
@click.argument("seconds", type=click.IntRange(min=0, max=2**31 - 1))
def set_delay(target: ZkTarget, seconds: int) -> None:
    """Set lostBookieRecoveryDelay in ZooKeeper (0, or the current value, audits at once)."""
    with target.store() as cluster:
        cluster.queue.set_recovery_delay(seconds)
    click.echo(f"lostBookieRecoveryDelay = {seconds}s")


@autorecovery.command("clear-data-loss")
@zk_target
@click.option("--ledger", "ledger_id", type=LEDGER_ID, required=True)
def clear_data_loss(target: ZkTarget, ledger_id: int) -> None:
    """Delete a ledger's data-loss record so workers try it again (e.g. after restoring a bookie)."""
    with target.store() as cluster:
        removed = cluster.data_loss.delete(ledger_id)
    click.echo(f"ledger {ledger_id}: data-loss record {'deleted' if removed else 'was absent'}")


# -- helpers ------------------------------------------------------------------------------------------------
def _setup_logging() -> None:
    import logging
    import os

    logging.basicConfig(
        level=os.environ.get("BKAUDIT_LOG_LEVEL", "INFO"),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s",
    )
    logging.getLogger("kazoo.client").setLevel(logging.WARNING)
