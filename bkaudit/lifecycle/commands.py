"""`bkaudit lifecycle drain|state|mark-drained|remove|history BOOKIE`: the same service path as the HTTP API.

Works while the bookie host is down: everything lives in ZooKeeper. Exit codes: 0 done, 1 refused (the
transition is not allowed now; the ledgers in the way are listed), 2 ZooKeeper / input trouble.
"""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Any

import click

from bkaudit.cli_common import BOOKIE_ID, ZkTarget, emit, fail, zk_target
from bkaudit.errors import BkAuditError
from bkaudit.exitcodes import ExitCode

if TYPE_CHECKING:
    from bkaudit.store import ClusterStore


@click.group()
def lifecycle() -> None:
    """Bookie lifecycle: Active -> Draining -> Drained (or DrainingFailed) -> removed (docs/lifecycle.md)."""


def _run(target: ZkTarget, action: Any) -> Any:
    """`action(store)` on the target's cluster store; no session is a usage error (exit 2)."""
    with target.store(connect_failure_code=ExitCode.USAGE) as store:
        return action(store)


def _transition(bookie: str, to: str, reason: str, as_json: bool, *, target: ZkTarget,
                force: bool = False) -> None:
    from bkaudit.lifecycle import service
    from bkaudit.model import lifecycle as lc

    def act(store: ClusterStore) -> dict[str, Any]:
        done = _already(store, bookie, lc.LifecycleState.parse(to))
        if done is not None:  # a retried step (Airflow, scripts) finds its work done: success
            return done
        try:
            record = service.transition(
                store, bookie, lc.LifecycleState.parse(to), actor=lc.Actor.OPERATOR,
                by=f"cli:{getpass.getuser()}", reason=reason, force=force,
            )
        except lc.TransitionRefused as exc:
            emit({"bookie": bookie, "refused": str(exc), "blockers": list(exc.blockers)}, as_json,
                 lambda d: "\n".join([f"refused: {d['refused']}", *(f"  {b}" for b in d["blockers"])]))
            raise SystemExit(1) from None
        except (service.UnknownBookie, ValueError, BkAuditError) as exc:
            fail(str(exc), code=2)
        return {"bookie": bookie, **record.to_dict()}

    doc = _run(target, act)
    emit(doc, as_json, lambda d: f"{d['bookie']}: {d['previous']} -> {d['state']} (by {d['by']}, {d['at']})")
    if to == "Draining" and not doc.get("already"):
        _say_how_it_serves_reads_only(bookie, target)


def _say_how_it_serves_reads_only(bookie: str, target: ZkTarget) -> None:
    """On stderr: how a bookie that does not follow its state znode (a Java bookie) becomes read-only, or
    why it cannot (no HTTP endpoint), at once rather than when the drain ends DrainingFailed."""
    from bkaudit.lifecycle import serving

    def inspect(store: ClusterStore) -> serving.ServingCheck | None:
        try:
            return serving.inspect(store, bookie)
        except BkAuditError:
            return None  # advice only: a store error here stays silent (store() would print it)

    try:
        check = _run(target, inspect)
    except (SystemExit, Exception):  # advice only: the transition itself is done
        return
    if check is None or check.serving is not serving.Serving.WRITABLE:
        return
    if check.error:
        click.echo(f"warning: {bookie} is {check.error}. The drain moves its ledgers, but while it stays "
                   "writable it is never Drained (docs/lifecycle.md)", err=True)
    else:
        click.echo(f"note: {bookie} does not follow its lifecycle state itself (a BookKeeper bookie): the "
                   f"Auditor's next drain pass makes it read-only through PUT {check.url}", err=True)


def _already(store: ClusterStore, bookie: str, target: Any) -> dict[str, Any] | None:
    """The bookie's record when it is already in `target` (Removed: no cookie and a removal recorded)."""
    from bkaudit.lifecycle import service
    from bkaudit.model import lifecycle as lc

    try:
        store.check_bookie_id(bookie)
        if target is lc.LifecycleState.REMOVED:
            if store.registry.has_cookie(bookie):
                return None
            history = store.lifecycle.history(bookie)
            last = history[-1] if history else None
            if last is None or last.state is not target:
                return None
            return {"bookie": bookie, **last.to_dict(), "already": True}
        state, record, _ = service.current(store, bookie)
    except (ValueError, BkAuditError):
        return None  # the transition itself reports the problem
    return {"bookie": bookie, **record.to_dict(), "already": True} if record and state is target else None


def _common(func: Any) -> Any:
    func = click.option("--json", "as_json", is_flag=True, help="print JSON")(func)
    func = zk_target(func)
    return click.argument("bookie", type=BOOKIE_ID)(func)


@lifecycle.command()
@_common
@click.option("--reason", default="", help="why (kept in the history)")
def drain(bookie: str, reason: str, as_json: bool, target: ZkTarget) -> None:
    """Active -> Draining: the bookie serves reads only and the Auditor moves its ledgers out."""
    _transition(bookie, "Draining", reason, as_json, target=target)


@lifecycle.command("mark-drained")
@_common
@click.option("--reason", default="", help="why (kept in the history)")
def mark_drained(bookie: str, reason: str, as_json: bool, target: ZkTarget) -> None:
    """DrainingFailed -> Drained, once no ledger references the bookie any more (refused otherwise)."""
    _transition(bookie, "Drained", reason, as_json, target=target)


@lifecycle.command()
@_common
@click.option("--reason", default="", help="why (kept in the history)")
@click.option("--force", is_flag=True,
              help="remove it even while it is still registered (running); it then stays read-only until it "
                   "stops")
def remove(bookie: str, reason: str, as_json: bool, force: bool, target: ZkTarget) -> None:
    """Drained -> removed: delete the cookie and the state together (refused unless Drained, and while the
    bookie is still registered unless --force)."""
    _transition(bookie, "Removed", reason, as_json, target=target, force=force)


@lifecycle.command()
@_common
def state(bookie: str, as_json: bool, target: ZkTarget) -> None:
    """The bookie's lifecycle state, serving mode and drain progress."""
    from bkaudit.lifecycle import service

    doc = _run(target, lambda store: service.describe(store, bookie))

    def human(d: dict[str, Any]) -> str:
        lines = [f"{d['bookie']}: {d.get('state') or 'unreadable: ' + str(d.get('error'))}"
                 f" (registered {d.get('registration', '?')})"]
        if d.get("record"):
            rec = d["record"]
            lines.append(f"  set by {rec['by']} at {rec['at']}: {rec['reason'] or '-'}")
        if d.get("progress"):
            p = d["progress"]
            lines.append(f"  drain: {p.get('ledgers_left')} ledgers / {p.get('bytes_left')} bytes left, "
                         f"{p.get('failures')} failures, data loss {p.get('data_loss_ledgers')}")
            if p.get("serving_error"):
                passes = p.get("serving_attempts", 1)
                lines.append(f"  still writable ({passes} passes): {p['serving_error']}")
        return "\n".join(lines)

    emit(doc, as_json, human)


@lifecycle.command()
@_common
def history(bookie: str, as_json: bool, target: ZkTarget) -> None:
    """Every lifecycle transition of the bookie, oldest first (kept after removal)."""
    records = _run(target, lambda store: [h.to_dict() for h in store.lifecycle.history(bookie)])
    emit(records, as_json, lambda rs: "\n".join(
        f"{r['at']} {r['previous']} -> {r['state']} by {r['by']}: {r['reason'] or '-'}" for r in rs
    ) or "none")
