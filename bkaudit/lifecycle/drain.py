"""The Auditor's drain: publish a Draining bookie's ledgers, gather progress, decide Drained / DrainingFailed.

Runs beside the elected Auditor (one per cluster), every `[lifecycle] drain_check_interval_s`:
1. read the lifecycle states; for each Draining bookie, list the ledgers whose ensembles still name it;
2. mark each of them under-replicated naming every draining bookie of that ledger (BookKeeper's marker, so
   workers - bkaudit's or anything reading the queue - pick them up); the workers copy the entries from a
   surviving replica or the draining bookie itself, never onto a non-Active bookie, and swap by CAS;
3. record progress (ledgers left, bytes left, failures) at `<state root>/lifecycle/progress/<id>`;
4. no ledger left -> Drained; every ledger left is bad (data-loss record, or `drain_max_failures` failed
   replications reported by workers) -> DrainingFailed, naming the bad ledgers. Good ledgers are always
   drained first: DrainingFailed means "everything that could move has moved".

Before that, every pass makes each Draining, DrainingFailed and Drained bookie that is registered writable
and does not follow its state znode itself (Apache BookKeeper's bookie) serve reads only, through its HTTP
admin API (`bkaudit.lifecycle.serving`). A bookie still registered writable is never declared Drained: a
writable bookie can be given a new ledger at any moment. When nothing references it any more but it stays
writable (no HTTP endpoint, or its API refuses; or `drain_max_failures` passes in a row failed to reach it),
the drain ends DrainingFailed with that reason, and the operator stops it (or makes it read-only) and marks
it drained.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bkaudit.errors import BkAuditError, MetadataConflict
from bkaudit.lifecycle import service, serving
from bkaudit.lifecycle.settings import LifecycleSettings
from bkaudit.model import lifecycle as lc

if TYPE_CHECKING:
    from bkaudit.store import ClusterStore

log = logging.getLogger(__name__)

S = lc.LifecycleState
AUDITOR = "auditor"


class LifecycleCache:
    """The workers' view of lifecycle states, re-read at most every `ttl_s` (one read per cookie)."""

    def __init__(self, store: ClusterStore, *, ttl_s: float = 1.0) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self._states: dict[str, lc.LifecycleState] = {}
        self._at = float("-inf")
        self._lock = threading.Lock()

    def _fresh(self) -> dict[str, lc.LifecycleState]:
        with self._lock:
            if time.monotonic() - self._at > self.ttl_s:
                try:
                    self._states = service.states(self.store)
                    self._at = time.monotonic()
                except Exception as exc:  # keep the last reading; ZooKeeper trouble shows elsewhere
                    log.warning("could not read lifecycle states: %s", exc)
            return self._states

    def draining(self) -> frozenset[str]:
        """Bookies whose copies must move out (their fragments are replaced even while readable)."""
        return frozenset(b for b, s in self._fresh().items() if s is S.DRAINING)

    def not_active(self) -> frozenset[str]:
        """Bookies that must never receive a copy (Draining, DrainingFailed, Drained)."""
        return frozenset(b for b, s in self._fresh().items() if s is not S.ACTIVE)


def report_failure(store: ClusterStore, draining: frozenset[str], ensemble_bookies: frozenset[str],
                   ledger_id: int, error: str) -> None:
    """A worker's failed pass over a ledger that a draining bookie is leaving: counted per bookie."""
    for bookie in sorted(draining & ensemble_bookies):
        try:
            store.lifecycle.record_failure(bookie, ledger_id, error[:500], service.now_iso())
        except Exception as exc:
            log.warning("could not record drain failure of ledger %s on %s: %s", ledger_id, bookie, exc)


class Drainer:
    """One drain pass per interval while this process is the Auditor."""

    def __init__(
        self,
        store: ClusterStore,
        *,
        settings: LifecycleSettings,
        emit: Callable[..., None] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.emit = emit or (lambda event, **fields: None)
        self.passes = 0
        self._pass = threading.Lock()  # one pass at a time: the interval thread and `settle` (`--once`)
        self._serving_failures: dict[str, int] = {}  # bookie -> passes in a row it stayed writable
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drainer", daemon=True)

    def start(self) -> Drainer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as exc:
                log.warning("drain pass failed (retrying): %s", exc)
            self._stop.wait(self.settings.drain_check_interval_s)

    def settle(self) -> int:
        """One pass now, for a caller that saw the queue empty (`autorecovery run --once`): the bookies whose
        ledgers have all moved become Drained in the same run instead of waiting for the next interval.
        Returns the markers that pass wrote; more than 0 means there is work again."""
        return sum(int(p.get("marked", 0)) for p in self.step().values())

    def step(self) -> dict[str, dict[str, Any]]:
        """One pass; returns the progress recorded per Draining bookie."""
        with self._pass:
            return self._step()

    def _step(self) -> dict[str, dict[str, Any]]:
        states = service.states(self.store)
        self.passes += 1
        leaving = sorted(b for b, s in states.items() if s.serves_reads_only)
        checks = {b: self._serve_reads_only(b, states[b]) for b in leaving}
        for gone in set(self._serving_failures) - set(leaving):
            del self._serving_failures[gone]
        draining = [b for b in leaving if states[b] is S.DRAINING]
        if not draining:
            return {}
        open_ledgers: set[int] = set()
        index = self.store.index.ledgers_of(draining, open_ledgers=open_ledgers)
        by_ledger: dict[int, list[str]] = defaultdict(list)
        for bookie in draining:
            for ledger_id in index[bookie]:
                by_ledger[ledger_id].append(bookie)
        lost = {lid for lid in by_ledger if self.store.data_loss.exists(lid)}
        enabled = self.store.queue.is_enabled()
        out: dict[str, dict[str, Any]] = {}
        published: set[int] = set()
        for bookie in draining:
            out[bookie] = self._one(bookie, index[bookie], lost, by_ledger, published, enabled=enabled,
                                    open_ledgers=open_ledgers, check=checks[bookie])
        return out

    def _serve_reads_only(self, bookie: str, state: lc.LifecycleState) -> serving.ServingCheck:
        """Make a leaving bookie that does not follow its state znode read-only (its HTTP admin API)."""
        try:
            check = serving.ensure_read_only(self.store, bookie,
                                             timeout_s=self.settings.bookie_http_timeout_s)
        except Exception as exc:  # ZooKeeper trouble reading its registration: asked again next pass
            check = serving.ServingCheck(bookie, serving.Serving.WRITABLE, f"could not look: {exc!r}")
        if check.serving is serving.Serving.MADE_READ_ONLY:
            self.emit("drain_read_only", bookie=bookie, state=state.value, url=check.url)
        if check.ok:
            self._serving_failures.pop(bookie, None)
            return check
        attempts = self._serving_failures[bookie] = self._serving_failures.get(bookie, 0) + 1
        log.warning("%s bookie %s is still registered writable (pass %d): %s", state.value, bookie, attempts,
                    check.error)
        self.emit("drain_read_only_failed", bookie=bookie, state=state.value, error=check.error,
                  permanent=check.permanent, attempts=attempts)
        return check

    def _one(
        self,
        bookie: str,
        ledgers: dict[int, int],
        lost: set[int],
        by_ledger: dict[int, list[str]],
        published: set[int],
        *,
        enabled: bool,
        open_ledgers: set[int] | None = None,
        check: serving.ServingCheck | None = None,
    ) -> dict[str, Any]:
        failures = self.store.lifecycle.list_failures(bookie)
        # an OPEN ledger is waiting (for its writer, or the grace + fencing that closes it), not failing: its
        # failed passes never make it bad while it is open; it is marked again and moves once closed
        waiting = set(ledgers) & (open_ledgers or set())
        failed = {
            lid for lid, f in failures.items()
            if lid in ledgers and lid not in waiting and _count(f) >= self.settings.drain_max_failures
        }
        bad = sorted((failed | lost) & set(ledgers))
        progress: dict[str, Any] = {
            "bookie": bookie,
            "ledgers_left": len(ledgers),
            "bytes_left": sum(ledgers.values()),
            "failures": sum(_count(f) for lid, f in failures.items() if lid in ledgers),
            "failed_ledgers": sorted(failed & set(ledgers))[:100],
            "data_loss_ledgers": sorted(lost & set(ledgers))[:100],
            "waiting_open_ledgers": sorted(waiting - lost)[:100],
            "updated": service.now_iso(),
        }
        check = check or serving.ServingCheck(bookie, serving.Serving.ABSENT)
        progress.update(check.to_dict())
        attempts = self._serving_failures.get(bookie, 0)
        if attempts:
            progress["serving_attempts"] = attempts
        if not ledgers and check.ok:
            self._decide(bookie, S.DRAINED, "no ledger references the bookie any more", progress)
        elif not ledgers:
            # never Drained while registered writable: a new ledger may land on it at any moment
            if check.permanent or attempts >= self.settings.drain_max_failures:
                why = (
                    f"no ledger references the bookie any more, but it is still registered writable and "
                    f"bkaudit cannot make it read-only ({check.error}); stop it (or make it read-only), "
                    f"then `bkaudit lifecycle mark-drained`"
                )
                self._decide(bookie, S.DRAINING_FAILED, why, progress)
        elif len(bad) == len(ledgers):
            why = (
                f"{len(bad)} ledgers cannot be replicated: data loss recorded "
                f"{sorted(lost & set(ledgers))[:20]}, failed {self.settings.drain_max_failures}+ times "
                f"{sorted(failed)[:20]}"
            )
            self._decide(bookie, S.DRAINING_FAILED, why, progress)
        elif enabled:
            marked = 0
            for ledger_id in sorted(set(ledgers) - set(bad) - published):
                if self._stop.is_set():
                    break
                published.add(ledger_id)
                replicas = by_ledger[ledger_id]
                if self.store.queue.mark(ledger_id, replicas):
                    marked += 1
            progress["marked"] = marked
        progress["state"] = service.current(self.store, bookie)[0].value
        self.store.lifecycle.write_progress(bookie, progress)
        self.emit("drain_progress", **{k: v for k, v in progress.items() if k != "updated"})
        return progress

    def _decide(self, bookie: str, target: lc.LifecycleState, why: str, progress: dict[str, Any]) -> None:
        try:
            service.transition(self.store, bookie, target, actor=lc.Actor.AUDITOR, by=AUDITOR, reason=why,
                               expected=S.DRAINING)
        except (MetadataConflict, lc.TransitionRefused, service.UnknownBookie, BkAuditError) as exc:
            log.info("drain of %s: not moving to %s (%s)", bookie, target.value, exc)
            return
        self.emit("drain_" + ("done" if target is S.DRAINED else "failed"), bookie=bookie, reason=why)
        log.info("bookie %s is %s: %s", bookie, target.value, why)


def _count(record: dict[str, Any]) -> int:
    try:
        return int(record.get("count", 0))
    except (TypeError, ValueError):
        return 0
