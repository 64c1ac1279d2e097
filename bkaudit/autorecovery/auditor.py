"""The elected Auditor: notice lost bookies and mark every ledger that has one in an ensemble.

Behaviour follows BookKeeper's Auditor (shared/spec/bookkeeper-behavior.md 1.3):
- lost = known bookies - writable - read-only; read-only bookies still serve their data. Known bookies start
  as the cookies; a bookie found lost leaves them until it registers again (BookKeeper's `knownBookies`), so
  an audited dead bookie does not make a later single loss (a rolling restart) count as "two or more";
- `lostBookieRecoveryDelay` lives in ZooKeeper (seeded from the config when absent) and is watched: with one
  lost bookie the audit waits that long and is cancelled if the bookie returns; with two or more, or a delay
  of 0, it runs at once; setting the delay to 0 or re-setting its current value audits at once (that is how
  `trigger-audit` works, as BookKeeper's triggerAudit);
- the audit reads every ledger's metadata (pipelined, bounded in flight: #2802), and marks each ledger whose
  ensembles (any segment) contain a bookie that is neither writable nor read-only, naming those bookies;
- publishing is rate-limited (#3529/#3541) and stops while replication is disabled; a run interrupted by the
  switch is redone once it is enabled again;
- the bookie check (AuditorBookieCheckTask) runs that audit at election and then every
  `auditorPeriodicBookieCheckInterval`, whatever the delay says, unless a delayed audit is pending:
  registration events alone miss a lost bookie that has no cookie (it was never "known"), and a missed loss
  must not stay unmarked forever.
The periodic checkAllLedgers / placement / replicas checks do not run here: the scheduled Spark checks do
that.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bkaudit.autorecovery import metrics as m
from bkaudit.zk.client import RateLimiter

if TYPE_CHECKING:
    from bkaudit.autorecovery.events import EventLog
    from bkaudit.autorecovery.settings import AutoRecoverySettings
    from bkaudit.autorecovery.view import BookieView
    from bkaudit.store.base import ClusterStore

log = logging.getLogger(__name__)

IDLE_RECHECK_S = 30.0  # a missed watch can delay an audit at most this long
ENABLED_CHECK_EVERY = 20  # markers published between two checks of the disable switch


# -- the lost-bookie delay, as a pure state machine -------------------------------------------------------
@dataclass(frozen=True)
class Action:
    audit: bool = False
    scheduled_for: float | None = None  # monotonic time of a newly scheduled delayed audit
    cancelled: bool = False  # a delayed audit was dropped because its bookie came back
    reason: str = ""


class LostBookieDelay:
    """BookKeeper's submitAuditTask / lostBookieRecoveryDelayChanged decisions, with no I/O or clock.

    Like BookKeeper's Auditor it keeps `knownBookies` (seeded from the cookies): a bookie found lost is
    removed from it, so once audited it no longer counts as lost; it rejoins when it registers again. Hence
    with bookie A dead and audited, a restart of bookie B is one lost bookie, delayed like any other.
    """

    def __init__(self, delay_s: int, *, known: set[str] | frozenset[str] = frozenset()) -> None:
        self.delay_s = delay_s
        self.known: set[str] = set(known)
        self.to_audit: set[str] = set()  # BookKeeper's bookiesToBeAudited
        self.pending_due: float | None = None

    @property
    def pending(self) -> bool:
        return self.pending_due is not None

    @property
    def pending_bookie(self) -> str | None:
        return next(iter(self.to_audit)) if self.pending and len(self.to_audit) == 1 else None

    def _audit_now(self, reason: str) -> Action:
        self.pending_due = None
        self.to_audit.clear()
        return Action(audit=True, reason=reason)

    def bookies_changed(self, *, available: set[str] | frozenset[str], now: float) -> Action:
        """`available` = writable | read-only bookies now registered."""
        self.known |= set(available)
        cancelled = False
        if self.to_audit and self.to_audit <= self.known:  # the lost bookie came back before its audit
            cancelled = self.pending
            self.pending_due = None
            self.to_audit.clear()
        self.to_audit |= self.known - set(available)
        if not self.to_audit:
            return Action(cancelled=cancelled, reason="no bookie lost")
        self.known -= self.to_audit
        lost = sorted(self.to_audit)
        if self.delay_s == 0:
            return self._audit_now(f"lost {lost}, no delay")
        if len(self.to_audit) > 1:
            return self._audit_now(f"{len(lost)} bookies lost: {lost}")
        if self.pending:
            return Action(reason=f"audit for {lost[0]} already scheduled")
        self.pending_due = now + self.delay_s
        return Action(
            scheduled_for=self.pending_due, cancelled=cancelled,
            reason=f"lost {lost[0]}; auditing in {self.delay_s}s",
        )

    def delay_changed(self, new_delay_s: int, now: float) -> Action:
        previous, self.delay_s = self.delay_s, new_delay_s
        if new_delay_s == 0 or new_delay_s == previous:
            return self._audit_now(f"lostBookieRecoveryDelay set to {new_delay_s} (trigger)")
        if self.pending:
            self.pending_due = now + new_delay_s
            return Action(scheduled_for=self.pending_due, reason=f"rescheduled in {new_delay_s}s")
        return Action(reason=f"lostBookieRecoveryDelay now {new_delay_s}s")

    def due(self, now: float) -> bool:
        if self.pending_due is not None and now >= self.pending_due:
            self.pending_due = None
            self.to_audit.clear()
            return True
        return False


class BookieCheckSchedule:
    """When the bookie check is due: BookKeeper's scheduleBookieCheckTask, with no I/O or clock.

    At election, then at a fixed rate of `interval_s` (scheduleAtFixedRate with an initial delay of 0); an
    interval of 0 runs it at election only. `ran()` is called once a due check has run or been skipped.
    """

    def __init__(self, interval_s: int, *, now: float) -> None:
        self.interval_s = interval_s
        self.next_due: float | None = now
        self.runs = 0

    def due(self, now: float) -> bool:
        return self.next_due is not None and now >= self.next_due

    def ran(self) -> None:
        self.runs += 1
        if self.next_due is not None:
            self.next_due = None if self.interval_s == 0 else self.next_due + self.interval_s


# -- the auditor ------------------------------------------------------------------------------------------
class Auditor:
    """One term of office: created when elected, stopped when demoted."""

    def __init__(
        self,
        cluster: ClusterStore,
        *,
        settings: AutoRecoverySettings,
        view: BookieView,
        metrics: m.AutoRecoveryMetrics,
        events: EventLog,
    ) -> None:
        self.cluster = cluster
        self.settings = settings
        self.view = view
        self.metrics = metrics
        self.events = events
        self.delay = LostBookieDelay(settings.lost_bookie_recovery_delay_s)
        self.bookie_check = BookieCheckSchedule(
            settings.auditor_periodic_bookie_check_interval_s, now=time.monotonic()
        )  # due at once: the check at election
        self.publish_limiter = RateLimiter(settings.publish_rate_limit or None)
        self.audits = 0
        self._auditing = False
        self._stepping = False
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._bookies_changed = True  # check once at start
        self._new_delays: list[int] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="auditor", daemon=True)

    def start(self) -> Auditor:
        queue = self.cluster.queue
        self.delay.delay_s = queue.seed_recovery_delay(self.settings.lost_bookie_recovery_delay_s)
        self.delay.known = set(self.view.cookies())  # BookKeeper: knownBookies = admin.getAllBookies()
        self.view.add_listener(self._on_bookies)
        first = [True]

        def on_delay(data: bytes | None) -> bool | None:
            if self._stop.is_set():
                return False  # stop watching
            if first[0]:  # the current value, not a change
                first[0] = False
                return None
            try:
                value = int(data.decode("ascii")) if data else self.settings.lost_bookie_recovery_delay_s
            except (UnicodeDecodeError, ValueError):
                log.warning("ignoring non-numeric lostBookieRecoveryDelay %r", data)
                return None
            with self._lock:
                self._new_delays.append(value)
            self._wake.set()
            return None

        queue.watch_recovery_delay(on_delay)
        self._thread.start()
        self.events.emit("auditor_started", lost_bookie_recovery_delay_s=self.delay.delay_s)
        return self

    def stop(self) -> None:
        self.view.remove_listener(self._on_bookies)
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)

    @property
    def busy(self) -> bool:
        """An audit is running, due (the bookie check) or delayed (a `--once` run waits for it)."""
        return (
            self._stepping
            or self._auditing
            or self.delay.pending
            or self._bookies_changed
            or self.bookie_check.due(time.monotonic())
        )

    def _on_bookies(self) -> None:
        self._bookies_changed = True
        self._wake.set()

    # -- loop ------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except Exception as exc:
                log.warning("auditor step failed (retrying): %s", exc)
                self._stop.wait(1.0)
                self._bookies_changed = True
            due = self.delay.pending_due
            wait = IDLE_RECHECK_S if due is None else max(0.0, due - time.monotonic())
            check = self.bookie_check.next_due
            if check is not None:
                wait = min(wait, max(0.0, check - time.monotonic()))
            woke = self._wake.wait(wait)
            self._wake.clear()
            if not woke and due is None:
                self._bookies_changed = True  # periodic re-check, in case a watch event was missed

    def _step(self) -> None:
        self._stepping = True
        try:
            self._decide_and_audit()
        finally:
            self._stepping = False

    def _decide_and_audit(self) -> None:
        now = time.monotonic()
        actions: list[Action] = []
        with self._lock:
            delays, self._new_delays = self._new_delays, []
        for value in delays:
            actions.append(self.delay.delay_changed(value, now))
        check_due = self.bookie_check.due(now)
        if check_due:  # before registration changes, as BookKeeper queues it at election before them
            actions.append(self._bookie_check_action())
        if self._bookies_changed:
            self._bookies_changed = False
            actions.append(self.delay.bookies_changed(available=self.view.available(), now=now))
        if self.delay.due(now):
            actions.append(Action(audit=True, reason="lostBookieRecoveryDelay elapsed"))
        for action in actions:
            if action.scheduled_for is not None:
                self.metrics.inc(m.NUM_BOOKIE_AUDITS_DELAYED)
                self.events.emit("audit_delayed", reason=action.reason)
            if action.cancelled:
                self.metrics.inc(m.NUM_DELAYED_BOOKIE_AUDITS_CANCELLED)
                self.events.emit("audit_cancelled", reason=action.reason)
        audits = [a for a in actions if a.audit]
        if audits:
            self.audit(audits[-1].reason)
        if check_due:  # only once it ran: a bookie check that failed is retried at the next step
            self.bookie_check.ran()

    def _bookie_check_action(self) -> Action:
        """AuditorBookieCheckTask.runTask: audit now, unless a delayed audit is pending (the operator asked,
        through lostBookieRecoveryDelay, not to mark that bookie's ledgers yet)."""
        if self.delay.pending:
            self.metrics.inc(m.NUM_SKIPPING_CHECK_TASK_TIMES)
            self.events.emit("bookie_check_skipped", reason="a delayed audit is pending")
            return Action(reason="bookie check skipped: a delayed audit is pending")
        if self.bookie_check.runs == 0:
            return Action(audit=True, reason="bookie check at election")
        interval = self.settings.auditor_periodic_bookie_check_interval_s
        return Action(audit=True, reason=f"periodic bookie check (every {interval}s)")

    # -- the audit -------------------------------------------------------------------------------------------
    def audit(self, reason: str = "") -> int:
        """Mark every ledger with a lost bookie; returns the markers written (redone if disabled)."""
        self._auditing = True
        paused = False
        try:
            while not self._stop.is_set():
                if not self.cluster.queue.wait_until_enabled(1.0):
                    if not paused:  # once per audit: the evidence that a requested audit is held back
                        paused = True
                        self.events.emit("audit_paused", reason=reason, why="replication disabled")
                    continue
                marked = self._audit_once(reason)
                if marked is not None:
                    return marked
                self.events.emit("audit_interrupted", reason="replication disabled; redoing once enabled")
            return 0
        finally:
            self._auditing = False

    def _audit_once(self, reason: str) -> int | None:
        started = time.monotonic()
        self.events.emit("audit_started", reason=reason)
        index = self.cluster.index.every_bookie()  # BookKeeper's BookieLedgerIndexer
        self.metrics.observe_ms(m.BOOKIE_TO_LEDGERS_MAP_CREATION_TIME, 1000 * (time.monotonic() - started))
        registry, queue = self.cluster.registry, self.cluster.queue
        available = set(registry.writable()) | set(registry.readonly())
        lost = sorted(set(index) - available)
        wanted: dict[int, list[str]] = defaultdict(list)
        for bookie in lost:
            for ledger_id in index[bookie]:
                wanted[ledger_id].append(bookie)
        publish_started = time.monotonic()
        marked = 0
        for n, (ledger_id, bookies) in enumerate(sorted(wanted.items())):
            if self._stop.is_set():
                return marked
            if n % ENABLED_CHECK_EVERY == 0 and not queue.is_enabled():
                return None
            if queue.mark(ledger_id, bookies, rate_limiter=self.publish_limiter):
                marked += 1
                self.metrics.inc(m.MARKERS_PUBLISHED)
        self.audits += 1
        self.metrics.observe_ms(
            m.URL_PUBLISH_TIME_FOR_LOST_BOOKIE, 1000 * (time.monotonic() - publish_started)
        )
        self.metrics.observe_ms(m.NUM_UNDER_REPLICATED_LEDGERS, len(wanted))
        self.metrics.observe_ms(m.AUDIT_BOOKIES_TIME, 1000 * (time.monotonic() - started))
        self.events.emit(
            "audit_done",
            reason=reason,
            lost=lost,
            ledgers=len(wanted),
            marked=marked,
            seconds=round(time.monotonic() - started, 3),
        )
        return marked
