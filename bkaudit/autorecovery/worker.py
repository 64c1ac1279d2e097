"""ReplicationWorker: take a marked ledger, bring every closed fragment back to full replication, resolve it.

One pass over a locked ledger (BookKeeper's `rereplicate`, shared/spec/bookkeeper-behavior.md 2.2-2.5):
1. read the marker and the metadata; a deleted ledger's marker is simply removed;
2. find the under-replicated fragments: lost bookies, and bookies that GetListOfEntries shows lacking entries;
3. per closed segment: choose targets with the placement policy, copy only the entries each bad index
   stores (`FragmentCopier`), then swap the targets into that segment's ensemble with a metadata CAS;
4. re-evaluate; when clean, delete the marker at the version seen at lock time (a re-marked ledger stays
   queued) and release the lock.
A bookie that leaves a listing unanswered but answers reads (a Java bookie on DbLedgerStorage, for every
ledger it holds) is judged from reads, as BookKeeper's LedgerChecker judges every bookie, and for
`LISTING_RETRY_S` this process no longer asks it to list: one deadline per bookie, not one per ledger.
The last segment of an OPEN ledger is never copied: the lock is held for `open_ledger_rereplication_grace`,
then the ledger is fenced and recovered (closed) if it still has a missing bookie, and replicated as closed.
A failed pass holds the lock for an exponential delay. Entries no surviving replica holds are retried
`data_loss_max_attempts` times, then recorded as data lost (terminal, visible) and the ledger is left alone.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING

from bkaudit.autorecovery import metrics as m
from bkaudit.autorecovery.copier import FragmentCopier
from bkaudit.autorecovery.fragments import (
    Answer,
    BookieState,
    Reason,
    SegmentRepair,
    bookie_state,
    bookies_to_probe,
    choose_targets,
    find_fragments,
    open_last_segment_at_risk,
    plan_repairs,
    segment_closed,
)
from bkaudit.autorecovery.probe import Prober
from bkaudit.autorecovery.queue import LedgerPicker
from bkaudit.autorecovery.segment import SegmentMover
from bkaudit.autorecovery.shared import Held, Outcome, RepairReport, Shared
from bkaudit.errors import (
    BkAuditError,
    NoSuchLedger,
    NotEnoughBookies,
    ZooKeeperError,
)
from bkaudit.model.dataloss import DataLossRecord, merge_ranges, now_iso
from bkaudit.model.ledger import LedgerMetadata

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

MAX_EVALUATIONS = 4  # passes over one ledger while its metadata keeps changing under us
LOST_COPIES = (Reason.MISSING_ENTRIES, Reason.READONLY_INCOMPLETE)  # answered, without entries it stored


class ReplicationWorker:
    """One worker thread's loop; `step()` does one unit of work (tests and `--once` drive it directly)."""

    def __init__(
        self,
        shared: Shared,
        name: str,
        *,
        copier: FragmentCopier | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.shared = shared
        self.name = name
        s = shared.settings
        self.copier = copier or FragmentCopier(
            shared.pool,
            window=s.rereplication_entry_batch_size,
            metrics=shared.metrics,
            byte_limiter=shared.byte_limiter,
            timeout_s=max(60.0, shared.read_timeout_s * 2),
        )
        self.rng = rng or random.Random()
        self.held: dict[int, Held] = {}
        self.prober = Prober(shared, name)
        self.mover = SegmentMover(shared, name, self.copier)
        self.picker = LedgerPicker(
            shared.cluster.queue, holder=shared.holder, rng=self.rng, on_refresh=self._reload_data_lost
        )
        self.idle = False
        self.paused = False  # replication found disabled (an event says so once per disabled period)
        self.current: int | None = None
        self._draining: frozenset[str] = frozenset()  # Draining bookies as of the current evaluation
        self._ensemble_bookies: frozenset[str] = frozenset()
        self._wake = threading.Event()

    # -- loop ------------------------------------------------------------------------------------------------
    def run(self) -> None:
        while not self.shared.stop.is_set():
            try:
                outcome = self.step()
            except Exception as exc:
                log.warning("worker %s: step failed: %s", self.name, exc)
                outcome = Outcome.FAILED
                self.shared.stop.wait(self.shared.settings.rw_rereplicate_backoff_s)
            if outcome is None:
                self.shared.stop.wait(self._idle_wait())
        self.release_all()

    def _idle_wait(self) -> float:
        wait = self.shared.settings.idle_poll_s
        if self.held:
            wait = min(wait, max(0.0, min(h.due for h in self.held.values()) - time.monotonic()))
        return wait

    def step(self) -> Outcome | None:
        """Handle one due held lock or one new ledger; None when there was nothing to do."""
        sh = self.shared
        due = self._due_held()
        if due is not None:
            return due
        if not sh.cluster.queue.is_enabled():
            self.idle = True
            if not self.paused:  # once per disabled period: the evidence that the queue is left alone
                self.paused = True
                sh.events.emit("paused", worker=self.name, why="replication disabled")
            sh.cluster.queue.wait_until_enabled(sh.settings.idle_poll_s)
            return None
        self.paused = False
        if sh.task_limiter is not None:
            sh.task_limiter.acquire()
        picked = self.picker.pick(skip=lambda lid: lid in sh.data_lost or lid in self.held)
        if picked is None:
            self.idle = True
            return None
        self.idle = False
        ledger_id, version = picked
        sh.events.emit("locked", ledger=ledger_id, version=version, worker=self.name)
        return self._timed(ledger_id, version, self._rereplicate)

    def _reload_data_lost(self) -> None:
        """Ledgers other workers recorded as data-lost are skipped too (re-read with every queue listing)."""
        sh = self.shared
        sh.data_lost.update(sh.cluster.data_loss.ids())

    def _due_held(self) -> Outcome | None:
        now = time.monotonic()
        for ledger_id, held in sorted(self.held.items(), key=lambda kv: kv[1].due):
            if held.due > now:
                break
            del self.held[ledger_id]
            if held.kind == "open":
                self.idle = False
                return self._timed(ledger_id, held.version, self._after_grace)
            self._release(ledger_id, "failed-ledger backoff over")
        return None

    def _timed(self, ledger_id: int, version: int, action: Callable[[int, int], Outcome]) -> Outcome:
        started = time.monotonic()
        self.current = ledger_id
        self._draining = self._ensemble_bookies = frozenset()  # set by this ledger's evaluation only
        try:
            return action(ledger_id, version)
        except (BkAuditError, FutureTimeout, OSError) as exc:
            problem = isinstance(exc, NotEnoughBookies | ZooKeeperError)
            return self._fail(ledger_id, version, f"{type(exc).__name__}: {exc}", cluster_problem=problem)
        except Exception as exc:
            if type(exc).__module__.startswith("kazoo"):
                return self._fail(ledger_id, version, f"ZooKeeper: {exc!r}", cluster_problem=True)
            # a bug must not strand the ledger under a lock nobody will release: back off, then let go
            log.exception("worker %s: unexpected error on ledger %s", self.name, ledger_id)
            return self._fail(ledger_id, version, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            self.current = None
            self.shared.metrics.observe_ms(m.REREPLICATE_OP, 1000 * (time.monotonic() - started))

    def release_all(self) -> None:
        """Give every held lock back (shutdown): other workers may take those ledgers at once."""
        for ledger_id in list(self.held):
            del self.held[ledger_id]
            try:
                self._release(ledger_id, "worker stopping")
            except Exception as exc:
                log.debug("releasing %s on stop: %s", ledger_id, exc)

    # -- one ledger ------------------------------------------------------------------------------------------
    def _rereplicate(self, ledger_id: int, version: int, *, grace_over: bool = False) -> Outcome:
        """`grace_over`: the open-ledger grace has passed, so an open fragment still missing copies is fenced
        and recovered now (ReplicationWorker.deferLedgerLockRelease), not deferred again."""
        sh = self.shared
        repaired_any = False
        known: tuple[LedgerMetadata, int] | None = None  # the metadata our own clean repair just wrote
        for _ in range(MAX_EVALUATIONS):
            if known is None:
                try:
                    known = sh.store.read(ledger_id)
                except NoSuchLedger:
                    return self._resolve_deleted(ledger_id, version)
                verified = False
            else:
                verified = True
            outcome, report = self._evaluate_and_repair(
                ledger_id, version, known, verified=verified, grace_over=grace_over
            )
            if report is not None and report.repaired:
                repaired_any = True
            if outcome is not None:
                if outcome is Outcome.REPLICATED and not repaired_any:
                    sh.events.emit("nothing_to_repair", ledger=ledger_id)
                if repaired_any:
                    sh.metrics.inc(m.NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED)
                return outcome
            known = report.known if report is not None and report.clean else None
        if repaired_any:
            sh.metrics.inc(m.NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED)
        return self._fail(ledger_id, version, "metadata kept changing during repair")

    def _evaluate_and_repair(
        self,
        ledger_id: int,
        version: int,
        known: tuple[LedgerMetadata, int],
        *,
        verified: bool,
        grace_over: bool = False,
    ) -> tuple[Outcome | None, RepairReport | None]:
        """One evaluation: the final outcome, or None to evaluate again (after a repair or a change).

        `verified`: `known` is what this worker's clean repair just wrote (every copy acknowledged), so only
        bookie states are re-checked (did another bookie go missing meanwhile?); probing again would only
        confirm the writes. Anything left over falls back to a full evaluation.
        """
        sh = self.shared
        metadata = known[0]
        writable, readonly = sh.view.writable(), sh.view.readonly()
        states = {b: bookie_state(b, writable, readonly) for b in metadata.bookies()}
        draining = self._draining = sh.lifecycle.draining() if sh.lifecycle is not None else frozenset()
        self._ensemble_bookies = frozenset(metadata.bookies())
        lac = None if metadata.is_closed else self.prober.lac(ledger_id, metadata)
        end = self.prober.open_end(ledger_id, metadata, lac)
        if verified:
            left = find_fragments(metadata, states, {}, lac=lac, draining=draining, open_end=end)
            if not left and not open_last_segment_at_risk(metadata, writable, draining):
                return self._resolve(ledger_id, version), None
            return None, RepairReport()  # not clean: re-read and evaluate fully
        answers = self.prober.probe(
            ledger_id, metadata, bookies_to_probe(metadata, states, lac, open_end=end), lac, end
        )
        unanswered = any(isinstance(a, BaseException) for a in answers.values())
        marked = self.prober.marked(ledger_id) if unanswered else ()
        fragments = find_fragments(
            metadata, states, answers, lac=lac, marked=marked, draining=draining, open_end=end
        )
        repairs = plan_repairs(metadata, fragments)
        if not repairs:
            at_risk = open_last_segment_at_risk(metadata, writable, draining)
            if at_risk or any(not f.closed for f in fragments):
                if grace_over and not metadata.is_closed:
                    lost = frozenset(f.bookie for f in fragments if f.reason in LOST_COPIES)
                    self._fence_and_recover(ledger_id, metadata, "open fragment under-replicated", lost)
                    return None, None  # evaluate the closed ledger again
                return self._defer_open(ledger_id, version), None
            return self._resolve(ledger_id, version), None
        report = self._repair(ledger_id, known, repairs, answers, states)
        if report.lock_lost:
            sh.events.emit("lock_lost", ledger=ledger_id, worker=self.name)
            return Outcome.LOCK_LOST, report
        if report.gone:
            return self._resolve_deleted(ledger_id, version), report
        if report.disabled:
            self._release(ledger_id, "replication disabled")
            return Outcome.SKIPPED, report
        if report.copy.missing:
            return self._data_loss(ledger_id, version, report), report
        if report.errors:
            return self._fail(
                ledger_id, version, report.errors[0], cluster_problem=report.cluster_problem
            ), report
        return None, report

    def _repair(
        self,
        ledger_id: int,
        known: tuple[LedgerMetadata, int],
        repairs: list[SegmentRepair],
        answers: Mapping[str, Answer],
        states: Mapping[str, BookieState],
    ) -> RepairReport:
        from bkaudit.formats.entry import DigestManager, master_key

        sh = self.shared
        metadata = known[0]
        report = RepairReport(known=known)
        digest = DigestManager(ledger_id, metadata.password, metadata.digest_type)
        key = master_key(metadata.password)
        unusable = {b for b, s in states.items() if s is not BookieState.WRITABLE}
        lost = {b for b, s in states.items() if s is BookieState.LOST}
        grace = sh.settings.data_loss_lost_bookie_grace_s
        unreachable = frozenset(
            b for b in lost if b not in self._draining and sh.view.absent_for(b) < grace
        )  # restarting, perhaps: its copies are unknown, not gone (docs/autorecovery.md, data loss)
        not_active = sh.lifecycle.not_active() if sh.lifecycle is not None else frozenset()
        unusable |= not_active  # never copy onto a bookie that is leaving (plan against every draining one)
        candidates = sorted(b for b in sh.view.writable() if b not in not_active)
        topology = sh.view.topology()
        for n, repair in enumerate(repairs):
            if self._should_stop():
                report.errors.append("worker stopping")
                break
            if n and not sh.cluster.queue.is_enabled():  # step() checked before segment 0
                report.disabled = True
                break
            try:
                choose_targets(
                    repair, metadata, sh.policy, candidates, topology, exclude=unusable, rng=self.rng
                )
            except NotEnoughBookies as exc:
                report.errors.append(f"segment {repair.segment_index}: {exc}")
                report.cluster_problem = True
                continue
            if not self.mover.copy(
                ledger_id, metadata, repair, digest, key, answers, lost, report, unreachable, self._draining
            ):
                continue
            if not repair.targets:
                report.repaired += 1  # refilled in place: no metadata change
                continue
            swapped = self.mover.swap(ledger_id, metadata, known, repair, report)
            if swapped is None:
                break
            known = report.known = swapped
        return report

    # -- open ledgers ----------------------------------------------------------------------------------------
    def _defer_open(self, ledger_id: int, version: int) -> Outcome:
        grace = self.shared.settings.open_ledger_rereplication_grace
        self.held[ledger_id] = Held(time.monotonic() + grace, version, "open")
        self.shared.metrics.inc(m.LEDGERS_DEFERRED_OPEN)
        self.shared.events.emit("deferred_open", ledger=ledger_id, grace_s=grace, worker=self.name)
        return Outcome.DEFERRED

    def _after_grace(self, ledger_id: int, version: int) -> Outcome:
        """The grace is over: fence and recover if the writer did not fix its ensemble, then replicate; an
        open fragment that still misses copies is fenced too (`_rereplicate(grace_over=True)`), as
        BookKeeper's ReplicationWorker.deferLedgerLockRelease recovery-opens the ledger for an
        under-replicated fragment that is not closed."""
        sh = self.shared
        if not sh.cluster.queue.holds_lock(ledger_id):
            return Outcome.LOCK_LOST
        try:
            metadata, _ = sh.store.read(ledger_id)
        except NoSuchLedger:
            return self._resolve_deleted(ledger_id, version)
        draining = sh.lifecycle.draining() if sh.lifecycle is not None else frozenset()
        if not metadata.is_closed and (
            open_last_segment_at_risk(metadata, sh.view.writable(), draining)
            or self._draining_waits_on_lac(ledger_id, metadata, draining)
        ):
            self._fence_and_recover(ledger_id, metadata, "last segment at risk")
        return self._rereplicate(ledger_id, version, grace_over=True)

    def _fence_and_recover(
        self, ledger_id: int, metadata: LedgerMetadata, why: str, lost: frozenset[str] = frozenset()
    ) -> None:
        """Recovery-open the ledger (its writer, if any, loses it), as BookKeeper's worker after the grace.
        `lost`: live bookies the probe found missing entries they stored; their "no such entry" must not end
        the ledger before an acknowledged entry (client/recovery.py)."""
        sh = self.shared
        sh.events.emit(
            "fencing", ledger=ledger_id, state=metadata.state.name, reason=why, worker=self.name,
            lost_copies=sorted(lost),
        )
        sh.recover(ledger_id, lost)
        sh.metrics.inc(m.LEDGERS_FENCED)
        closed, _ = sh.store.read(ledger_id)
        sh.events.emit(
            "recovered", ledger=ledger_id, last_entry_id=closed.last_entry_id, state=closed.state.name
        )

    def _draining_waits_on_lac(
        self, ledger_id: int, metadata: LedgerMetadata, draining: frozenset[str]
    ) -> bool:
        """A draining bookie is in an earlier segment of this OPEN ledger that is still not closed (the LAC
        has not reached the last segment, or is unknown) after the grace: only fencing makes it movable."""
        earlier = {b for seg in metadata.segments[:-1] for b in seg.ensemble}
        if not earlier & draining:
            return False
        lac = self.prober.lac(ledger_id, metadata)
        return not all(segment_closed(metadata, i, lac) for i in range(len(metadata.segments) - 1))

    # -- endings ---------------------------------------------------------------------------------------------
    def _resolve(self, ledger_id: int, version: int) -> Outcome:
        sh = self.shared
        sh.events.emit("unlocking", ledger=ledger_id, worker=self.name)
        if sh.cluster.queue.resolve(ledger_id, version=version):
            sh.forget(ledger_id)
            sh.events.emit("replicated", ledger=ledger_id, worker=self.name)
            return Outcome.REPLICATED
        sh.events.emit("remarked", ledger=ledger_id, worker=self.name)
        return Outcome.REMARKED

    def _resolve_deleted(self, ledger_id: int, version: int) -> Outcome:
        sh = self.shared
        sh.cluster.data_loss.delete(ledger_id)
        sh.events.emit("unlocking", ledger=ledger_id, worker=self.name)
        sh.cluster.queue.resolve(ledger_id, version=version)
        sh.forget(ledger_id)
        sh.metrics.inc(m.LEDGERS_DELETED)
        sh.events.emit("deleted", ledger=ledger_id, worker=self.name)
        return Outcome.DELETED

    def _release(self, ledger_id: int, why: str) -> None:
        self.shared.events.emit("unlocking", ledger=ledger_id, worker=self.name, reason=why)
        self.shared.cluster.queue.release(ledger_id)

    def _fail(self, ledger_id: int, version: int, why: str, *, cluster_problem: bool = False) -> Outcome:
        sh = self.shared
        failures = sh.count_failure(ledger_id, why)
        delay = sh.settings.failed_ledger_backoff_s(failures)
        self.held[ledger_id] = Held(time.monotonic() + delay, version, "failed")
        sh.metrics.inc(m.NUM_DEFER_LEDGER_LOCK_RELEASE_OF_FAILED_LEDGER)
        sh.metrics.inc(m.LEDGERS_FAILED)
        sh.events.emit(
            "failed", ledger=ledger_id, attempt=failures, hold_s=round(delay, 3), error=why, worker=self.name
        )
        if self._draining & self._ensemble_bookies:  # the Auditor counts these toward DrainingFailed
            from bkaudit.lifecycle.drain import report_failure

            report_failure(sh.cluster, self._draining, self._ensemble_bookies, ledger_id, why)
        if cluster_problem:  # e.g. NotEnoughBookies: BookKeeper's rwRereplicateBackoffMs pause
            sh.stop.wait(sh.settings.rw_rereplicate_backoff_s)
        return Outcome.FAILED

    def _data_loss(self, ledger_id: int, version: int, report: RepairReport) -> Outcome:
        sh = self.shared
        with sh.lock:
            attempts = sh.data_loss_attempts[ledger_id] = sh.data_loss_attempts.get(ledger_id, 0) + 1
        missing = sorted(report.copy.missing)
        sh.events.emit(
            "entries_unreadable",
            ledger=ledger_id,
            attempt=attempts,
            entries=len(missing),
            first=missing[0],
            worker=self.name,
        )
        if attempts < sh.settings.data_loss_max_attempts:
            return self._fail(
                ledger_id,
                version,
                f"{len(missing)} entries on no surviving replica "
                f"(attempt {attempts}/{sh.settings.data_loss_max_attempts})",
            )
        record = DataLossRecord(
            ledger_id,
            merge_ranges(missing),
            now_iso(),
            tuple(sorted(report.lost_bookies)),
            attempts,
            sh.holder,
        )
        sh.cluster.data_loss.write(record)
        sh.data_lost.add(ledger_id)
        sh.metrics.inc(m.LEDGERS_DATA_LOST)
        sh.events.emit(
            "data_lost",
            ledger=ledger_id,
            ranges=[list(r) for r in record.lost_entry_ranges],
            bookies=list(record.bookies),
            attempts=attempts,
            worker=self.name,
        )
        with sh.lock:
            sh.last_error[ledger_id] = f"data lost: {record.lost_entries} entries"
        self._release(ledger_id, "data lost (terminal)")
        return Outcome.DATA_LOST

    def _should_stop(self) -> bool:
        return self.shared.stop.is_set()
