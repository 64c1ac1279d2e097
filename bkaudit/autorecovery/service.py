"""One AutoRecovery process: the auditor election (and the auditor while elected) plus N ReplicationWorkers.

Used three ways: `bkaudit autorecovery run` (long-running, until SIGTERM), `bkaudit autorecovery run --once`
(drain the queue, then exit with a summary: what batch pipelines and tests call) and embedded in a bookie
(`bkaudit bookie run --autorecovery` calls `start(settings, zk, bookie_id)`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

from bkaudit.autorecovery import metrics as m
from bkaudit.autorecovery.auditor import Auditor
from bkaudit.autorecovery.election import AuditorElector
from bkaudit.autorecovery.events import EventLog
from bkaudit.autorecovery.settings import AutoRecoverySettings
from bkaudit.autorecovery.shared import Shared
from bkaudit.autorecovery.summary import DrainSummary, LeftLedger, drain_summary
from bkaudit.autorecovery.view import BookieView
from bkaudit.autorecovery.worker import ReplicationWorker
from bkaudit.config import Settings, ZkSettings
from bkaudit.lifecycle.drain import Drainer, LifecycleCache
from bkaudit.lifecycle.settings import LifecycleSettings
from bkaudit.store import ZkStore, bind
from bkaudit.zk import client as zkclient

log = logging.getLogger(__name__)

DRAIN_CHECK_S = 0.2


def default_node_id() -> str:
    """How a standalone process names itself in votes and locks (BookKeeper uses the local bookie id)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def check_vote_id(node_id: str) -> None:
    """ConfigError unless `node_id` is a BookKeeper BookieId: the elected auditor's vote is parsed as one by
    BookKeeper (ZkLedgerAuditorManager.getCurrentAuditor: `shell whoisauditor`, BookKeeperAdmin, the HTTP
    API's who_is_auditor), which would fail on anything else for as long as this process is the auditor."""
    from bkaudit.errors import ConfigError
    from bkaudit.formats.bookie_id import invalid_bookie_id_reason

    reason = invalid_bookie_id_reason(node_id)
    if reason is not None:
        raise ConfigError(
            "autorecovery --id",
            f"{reason}; BookKeeper reads the auditor's vote as a BookieId (whoisauditor): only a valid one "
            "may stand in the election (or run --no-auditor)",
        )


class AutoRecoveryService:
    """Start with `start()`; `drain()` for `--once`; `stop()` releases locks, leaves the election."""

    def __init__(
        self,
        settings: Settings,
        *,
        zk: Any = None,
        node_id: str | None = None,
        workers: int | None = None,
        embedded: bool = False,
        events_path: str | None = None,
        auditor: bool = True,
    ) -> None:

        self.settings = settings
        self.conf = settings.get(AutoRecoverySettings)
        self.zk_settings = settings.get(ZkSettings)
        self.root = self.zk_settings.root
        self.node_id = node_id or default_node_id()
        self.n_workers = self.conf.workers if workers is None else workers
        self.run_auditor = auditor
        if auditor:
            check_vote_id(self.node_id)
        self.metrics = m.AutoRecoveryMetrics(embedded=embedded)
        self.events = EventLog(events_path, node=self.node_id)
        self._zk = zk
        self._owns_zk = zk is None
        self._closers: list[Any] = []
        self.auditor: Auditor | None = None
        self.drainer: Drainer | None = None
        self.cluster: ZkStore | None = None  # lifecycle records and the drain's index, bound at start
        self.elector: AuditorElector | None = None
        self.workers: list[ReplicationWorker] = []
        self._threads: list[threading.Thread] = []
        self._auditor_lock = threading.Lock()
        self.shared: Shared | None = None
        self.started_at = time.monotonic()

    # -- lifecycle -------------------------------------------------------------------------------------------
    @property
    def zk(self) -> Any:
        return self._zk

    def start(self) -> AutoRecoveryService:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        if self._zk is None:
            self._zk = zkclient.connect(self.zk_settings)
        self.cluster = cluster = bind(self._zk, self.zk_settings,
                                      max_in_flight=self.conf.max_concurrent_metadata_reads)
        cluster.queue.ensure_layout()
        self.view = BookieView(cluster.registry, settings=self.settings).start()
        self.shared = self._shared(cluster)
        # ledgers already recorded as data-lost are left alone from the first pick on (no lock, no probe)
        moved = cluster.data_loss.migrate_legacy()
        if moved:
            self.events.emit("data_loss_records_migrated", ledgers=moved)
        self.shared.data_lost.update(cluster.data_loss.ids())
        self.events.emit("started", workers=self.n_workers, root=self.root)
        for i in range(self.n_workers):
            worker = ReplicationWorker(self.shared, f"{self.node_id}/w{i}")
            self.workers.append(worker)
            thread = threading.Thread(target=worker.run, name=f"replication-worker-{i}", daemon=True)
            self._threads.append(thread)
            thread.start()
        if self.run_auditor:
            self.elector = AuditorElector(
                cluster.election,
                self.node_id,
                on_elected=self._elected,
                on_demoted=self._demoted,
                metrics=self.metrics,
                events=self.events,
            ).start()
        if self.conf.metrics_file:
            thread = threading.Thread(
                target=self._write_metrics_loop, name="autorecovery-metrics", daemon=True
            )
            thread.start()

    def _shared(self, cluster: ZkStore) -> Shared:
        from bkaudit.audit.settings import policy_from_settings
        from bkaudit.client.bookkeeper import BookKeeper
        from bkaudit.client.directory import ZkBookieDirectory
        from bkaudit.client.settings import ClientSettings
        from bkaudit.rpc.pool import BookieClientPool
        from bkaudit.rpc.settings import RpcSettings
        from bkaudit.rpc.tls import TlsConfig
        from bkaudit.zk.client import RateLimiter

        rpc = self.settings.get(RpcSettings)
        client_settings = self.settings.get(ClientSettings)
        pool = BookieClientPool(
            registry=cluster.registry,
            tls=TlsConfig.from_settings(self.settings),
            request_timeout_s=rpc.request_timeout_s,
            connect_timeout_s=rpc.connect_timeout_s,
            transport=rpc.transport,
            max_frame_bytes=rpc.max_frame_bytes,
        )
        self._closers.append(pool.close)
        store = cluster.ledgers
        policy = policy_from_settings(self.settings)
        directory = ZkBookieDirectory(cluster, policy=policy, settings=self.settings)
        bk = BookKeeper(store=store, pool=pool, directory=directory, settings=client_settings)
        self._closers.append(bk.close)
        conf = self.conf
        return Shared(
            cluster=cluster,
            settings=conf,
            view=self.view,
            pool=pool,
            store=store,
            policy=policy,
            metrics=self.metrics,
            events=self.events,
            holder=self.node_id,
            recover=lambda ledger_id, lost: bk.open_ledger(ledger_id, recover=True, lost_copies=lost),
            lifecycle=LifecycleCache(cluster),
            read_timeout_s=min(client_settings.read_timeout_s, rpc.request_timeout_s * 2),
            task_limiter=RateLimiter(conf.zk_replication_task_rate_limit)
            if conf.zk_replication_task_rate_limit
            else None,
            byte_limiter=RateLimiter(conf.replication_rate_by_bytes, max(1, conf.replication_rate_by_bytes))
            if conf.replication_rate_by_bytes > 0
            else None,
        )

    def stop(self) -> None:
        """Stop workers (held locks released), leave the election, write the final metrics."""
        if self.shared is not None:
            self.shared.stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        if self.elector is not None:
            self.elector.stop()
        self._demoted()
        while self._closers:
            closer = self._closers.pop()
            try:
                closer()
            except Exception as exc:
                log.debug("closing: %s", exc)
        self._write_metrics()
        self.events.emit("stopped")
        self.events.close()
        if self._owns_zk and self._zk is not None:
            zkclient.close(self._zk)
            self._zk = None

    # -- the auditor's term ----------------------------------------------------------------------------------
    @property
    def is_auditor(self) -> bool:
        return self.elector is not None and self.elector.is_auditor

    def _elected(self) -> None:
        assert self.shared is not None and self.cluster is not None
        with self._auditor_lock:
            if self.auditor is None:
                self.auditor = Auditor(
                    self.cluster, settings=self.conf, view=self.view, metrics=self.metrics,
                    events=self.events,
                ).start()
            if self.drainer is None:  # the lifecycle drain runs beside the Auditor, for its term
                self.drainer = Drainer(
                    self.cluster, settings=self.settings.get(LifecycleSettings), emit=self.events.emit,
                ).start()

    def _demoted(self) -> None:
        with self._auditor_lock:
            auditor, self.auditor = self.auditor, None
            drainer, self.drainer = self.drainer, None
        if auditor is not None:
            auditor.stop()
        if drainer is not None:
            drainer.stop()

    # -- --once ----------------------------------------------------------------------------------------------
    def drain(self, timeout_s: float | None = None) -> DrainSummary:
        """Wait until nothing is left this process can do: every marker resolved or terminally data-lost.

        When this process is the Auditor, an empty queue is followed by one drain pass: the bookie drains
        it started end Drained (or DrainingFailed) in this run, with fresh progress, rather than at the next
        interval of a process that is about to exit. Work queued meanwhile keeps the run going: markers that
        pass wrote, or that the interval pass running beside it wrote first (then this one writes none).
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = self._left_if_idle()
            if left is not None and _only_data_lost(left):
                marked = self._settle_drains()
                after = self._left_if_idle()
                if marked > 0 or after is None or not _only_data_lost(after):
                    continue
                return self.summary(after, timed_out=False)
            if deadline is not None and time.monotonic() >= deadline:
                return self.summary(self.left(), timed_out=True)
            time.sleep(DRAIN_CHECK_S)

    def _settle_drains(self) -> int:
        """The Auditor's drain pass once the queue is empty; markers it wrote (0 when not the Auditor)."""
        drainer = self.drainer
        if drainer is None:
            return 0
        try:
            return drainer.settle()
        except Exception as exc:  # ZooKeeper trouble: the drain is decided by a later pass or run
            log.warning("final drain pass failed: %s", exc)
            return 0

    def _left_if_idle(self) -> list[LeftLedger] | None:
        """What is left, or None while this process still has work in hand (or has not yet learnt whether it
        is the Auditor: before that, an empty queue says nothing about the drain pass it may run)."""
        if self.elector is not None and not self.elector.decided.is_set():
            return None
        auditor = self.auditor
        if auditor is not None and auditor.busy:
            return None
        if not all(w.idle and not w.held and w.current is None for w in self.workers):
            return None
        return self.left()

    def left(self) -> list[LeftLedger]:
        assert self.shared is not None and self.cluster is not None
        sh, queue = self.shared, self.cluster.queue
        remaining = queue.marked()
        lost = set(self.cluster.data_loss.ids())
        locked = queue.locked()
        held = {lid: h for w in self.workers for lid, h in w.held.items()}
        out = []
        for lid in remaining:
            if lid in lost:
                reason, detail = "data_lost", sh.last_error.get(lid, "recorded")
            elif lid in held:
                reason = "deferred_open" if held[lid].kind == "open" else "failing"
                detail = sh.last_error.get(lid, "open ledger within its grace period")
            elif lid in locked:
                reason, detail = "locked_elsewhere", str(queue.lock_holder(lid))
            elif lid in sh.failures:
                reason, detail = "failing", sh.last_error.get(lid, "")
            elif not queue.is_enabled():
                reason, detail = "disabled", "replication is disabled"
            else:
                reason, detail = "pending", "not yet taken"
            out.append(LeftLedger(lid, reason, detail))
        return out

    def summary(self, left: list[LeftLedger], *, timed_out: bool) -> DrainSummary:
        assert self.cluster is not None
        records = []
        for item in left:
            if item.reason == "data_lost":
                record = self.cluster.data_loss.read(item.ledger_id)
                if record is not None:
                    records.append(record.to_json())
        return drain_summary(
            self.node_id,
            left,
            records,
            self.metrics,
            timed_out=timed_out,
            elapsed_s=time.monotonic() - self.started_at,
            auditor=self.is_auditor,
            audits=self.auditor.audits if self.auditor else 0,
        )

    # -- metrics ---------------------------------------------------------------------------------------------
    def _progress_gauges(self) -> None:
        """Queue size and the replication switch, read at each metrics write (AutoRecovery progress)."""
        if self.cluster is None:
            return
        queued = len(self.cluster.queue.marked())
        enabled = self.cluster.queue.is_enabled()
        self.metrics.set_gauge("queue_ledgers", queued)
        self.metrics.set_gauge("replication_enabled", 1 if enabled else 0)

    def _write_metrics_loop(self) -> None:
        assert self.shared is not None
        while not self.shared.stop.wait(self.conf.metrics_interval_s):
            self._write_metrics()

    def _write_metrics(self) -> None:
        if not self.conf.metrics_file:
            return
        try:
            self._progress_gauges()
        except Exception as exc:  # ZooKeeper away: the counters are still worth writing
            log.debug("progress gauges not refreshed: %s", exc)
        try:
            self.metrics.write(self.conf.metrics_file)
        except Exception as exc:
            log.warning("cannot write metrics: %s", exc)


def start(settings: Settings, zk: Any, bookie_id: str) -> AutoRecoveryService:
    """The bookie's `--autorecovery` hook: run the auditor election and workers on the bookie's session."""
    return AutoRecoveryService(settings, zk=zk, node_id=bookie_id, embedded=True).start()


def _only_data_lost(left: list[LeftLedger]) -> bool:
    """Nothing left a worker can still do: every remaining marker is a ledger with recorded data loss."""
    return all(item.reason == "data_lost" for item in left)
