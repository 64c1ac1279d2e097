"""The one code path every lifecycle change takes (CLI, HTTP API, dashboard, Airflow and the Auditor).

It applies the model's transition rules (bkaudit.model.lifecycle), adds the checks that need the cluster
(a bookie must have a cookie to be drained; DrainingFailed -> Drained and removal are refused while a ledger
still references the bookie, and the refusal lists those ledgers; removal is refused while the bookie is
registered, writable or read-only, unless forced, as BookKeeperAdmin.decommissionBookie refuses a bookie
that "is not shutdown yet"), then writes through the cluster store (bkaudit.store) with a compare-and-set
plus a history record.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bkaudit.errors import FormatError
from bkaudit.model import lifecycle as lc

if TYPE_CHECKING:
    from bkaudit.store import ClusterStore

BLOCKERS_LISTED = 100  # ledgers named in a refusal (the count is always exact)


class UnknownBookie(LookupError):
    """The bookie has no cookie: it was never part of the cluster (or was removed)."""


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def current(store: ClusterStore, bookie_id: str) -> tuple[lc.LifecycleState, lc.StateRecord | None, int]:
    """(state, record, version); Active with no record when the bookie has no state record."""
    record, version = store.lifecycle.read_state(bookie_id)
    return (record.state if record else lc.LifecycleState.ACTIVE), record, version


def states(store: ClusterStore) -> dict[str, lc.LifecycleState]:
    """Every known bookie (cookie) -> its lifecycle state (a malformed state record is skipped here and
    reported by `describe`)."""
    known = store.registry.cookies()
    recorded = store.lifecycle.list_states()
    out: dict[str, lc.LifecycleState] = {}
    for bookie in known:
        value = recorded.get(bookie)
        if isinstance(value, FormatError):
            continue
        out[bookie] = value.state if value else lc.LifecycleState.ACTIVE
    return out


def in_state(store: ClusterStore, *wanted: lc.LifecycleState) -> set[str]:
    return {b for b, s in states(store).items() if s in wanted}


@dataclass(frozen=True)
class Blockers:
    """Ledgers that still reference the bookie, with the data-loss records among them."""

    ledgers: tuple[int, ...]
    data_lost: tuple[int, ...]

    def __bool__(self) -> bool:
        return bool(self.ledgers)

    def describe(self) -> tuple[str, ...]:
        lost = set(self.data_lost)
        return tuple(
            f"ledger {lid}" + (" (data loss recorded)" if lid in lost else "")
            for lid in self.ledgers[:BLOCKERS_LISTED]
        )


def blockers(store: ClusterStore, bookie_id: str) -> Blockers:
    """Ledgers referencing the bookie, and which of them have a data-loss record."""
    referencing = sorted(store.index.ledgers_of([bookie_id])[bookie_id])
    lost = tuple(lid for lid in referencing if store.data_loss.exists(lid))
    return Blockers(tuple(referencing), lost)


def transition(
    store: ClusterStore,
    bookie_id: str,
    target: lc.LifecycleState,
    *,
    actor: lc.Actor,
    by: str,
    reason: str = "",
    expected: lc.LifecycleState | None = None,
    force: bool = False,
) -> lc.StateRecord:
    """Move `bookie_id` to `target` (or remove it) by compare-and-set.

    UnknownBookie without a cookie; TransitionRefused when the rules or the cluster forbid it (its
    `blockers` name the ledgers in the way); MetadataConflict when another writer changed the state between
    our read and write. `expected` refuses unless the bookie is in that state now (an Auditor decision
    made on an older reading must not apply to a newer state). Removal of a bookie still registered
    (running) is refused unless `force`: removed while it runs, a bkaudit bookie stays read-only until it
    stops (bkaudit.bookie.lifecycle) and a Java one stays as its HTTP switch left it, but both keep serving
    reads of ledgers nobody references any more, and an operator should stop it first.
    """
    store.check_bookie_id(bookie_id)
    if store.registry.read_cookie(bookie_id) is None:
        raise UnknownBookie(f"bookie {bookie_id} has no cookie under {store.registry.cookie_home}")
    state, _, version = current(store, bookie_id)
    if expected is not None and state is not expected:
        raise lc.TransitionRefused(f"{bookie_id} is {state.value}, not {expected.value}")
    lc.check_transition(state, target, actor=actor)
    if target is lc.LifecycleState.REMOVED and not force:
        registered = store.registry.bookie_state(bookie_id)
        if registered != "absent":
            raise lc.TransitionRefused(
                f"{bookie_id} is still registered ({registered}): stop the bookie first (BookKeeper's "
                "decommissionbookie refuses a bookie that is not shut down), or force the removal",
                blockers=(f"registered {registered}",),
            )
    if actor is lc.Actor.OPERATOR and target in (lc.LifecycleState.DRAINED, lc.LifecycleState.REMOVED):
        found = blockers(store, bookie_id)
        if found:
            raise lc.TransitionRefused(
                f"{bookie_id}: {len(found.ledgers)} ledgers still reference it "
                f"({len(found.data_lost)} with data loss recorded); deal with them first",
                blockers=found.describe(),
            )
    record = lc.StateRecord(target, by, now_iso(), reason, state)
    if target is lc.LifecycleState.REMOVED:
        store.lifecycle.remove_bookie(bookie_id, record, version=version)
        store.lifecycle.clear_drain_records(bookie_id)
    else:
        store.lifecycle.write_state(bookie_id, record, version=version)
    return record


def describe(store: ClusterStore, bookie_id: str) -> dict[str, Any]:
    """The bookie's lifecycle as JSON: state, who set it, serving mode, drain progress."""
    try:
        state, record, _ = current(store, bookie_id)
    except FormatError as exc:
        return {"bookie": bookie_id, "state": None, "error": str(exc)}
    return {
        "bookie": bookie_id,
        "state": state.value,
        "record": record.to_dict() if record else None,
        "registration": store.registry.bookie_state(bookie_id),
        "read_only_requested": store.lifecycle.read_serving(bookie_id),
        "progress": store.lifecycle.read_progress(bookie_id),
    }
