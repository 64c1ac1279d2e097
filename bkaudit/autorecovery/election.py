"""Auditor election exactly as BookKeeper's AuditorElector: EPHEMERAL_SEQUENTIAL votes, lowest wins.

Every AutoRecovery process votes under `underreplication/auditorelection` (`V_%010d`, AuditorVoteFormat with
its id). The lowest vote is the auditor and writes its vote text onto the election node (for humans and
BookKeeper's `whoisauditor`). Every other process watches only its predecessor, so the auditor's death wakes
exactly one process, not a herd. When a session expires its vote is gone: the process stops auditing at once
and votes again with its new session (BookKeeper's AutoRecoveryMain shuts down instead; re-voting keeps a
long-running `bkaudit autorecovery run` useful after a ZooKeeper blip).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from bkaudit.autorecovery import metrics as m
from bkaudit.errors import MetadataError
from bkaudit.zk.client import is_transient

if TYPE_CHECKING:
    from bkaudit.autorecovery.events import EventLog
    from bkaudit.store.base import AuditorElection

log = logging.getLogger(__name__)

RETRY_PAUSE_S = 0.5


class AuditorElector:
    """Runs the election on its own thread; `on_elected` / `on_demoted` are called from that thread."""

    def __init__(
        self,
        election: AuditorElection,
        node_id: str,
        *,
        on_elected: Callable[[], None],
        on_demoted: Callable[[], None],
        metrics: m.AutoRecoveryMetrics,
        events: EventLog | None = None,
    ) -> None:
        self.election = election
        self.node_id = node_id
        self.on_elected = on_elected
        self.on_demoted = on_demoted
        self.metrics = metrics
        self.events = events
        self.vote: str | None = None
        self.leader = False
        self.decided = threading.Event()
        """Set once a round has an outcome: this process leads (Auditor started) or waits behind a vote."""
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._session_lost = threading.Event()
        self._unlisten: Callable[[], None] | None = None
        self._thread = threading.Thread(target=self._run, name=f"auditor-elector-{node_id}", daemon=True)

    @property
    def is_auditor(self) -> bool:
        return self.leader

    def start(self) -> AuditorElector:
        self._unlisten = self.election.on_session_lost(self._on_session_lost)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Leave the election: step down and delete the vote so the successor takes over at once."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)
        if self._unlisten is not None:
            self._unlisten()
        self._demote("stopped")
        vote, self.vote = self.vote, None
        if vote is not None:
            try:
                self.election.withdraw(vote)
            except Exception as exc:  # session already gone: the vote went with it
                log.debug("deleting vote %s: %s", vote, exc)

    # -- the store's event thread: flags only ----------------------------------------------------------------
    def _on_session_lost(self) -> None:
        self._session_lost.set()
        self._wake.set()

    # -- the election loop ---------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._round()
            except Exception as exc:
                if not is_transient(exc) and not isinstance(exc, MetadataError):
                    log.exception("auditor election round failed")
                self._stop.wait(RETRY_PAUSE_S)

    def _round(self) -> None:
        if self._session_lost.is_set():
            self._session_lost.clear()
            self._demote("ZooKeeper session lost")
            self.vote = None
        if self.vote is None:
            self.vote = self.election.vote(self.node_id)
            self.metrics.inc(m.ELECTION_ATTEMPTS)
            self._emit("voted", vote=self.vote)
        try:
            before = self.election.predecessor(self.vote)
        except MetadataError:  # our vote vanished (session expired before we noticed)
            self._demote("vote vanished")
            self.vote = None
            return
        self._wake.clear()
        if before is None:
            if not self.leader:
                self.election.announce(self.node_id)
                self.leader = True
                self._emit("elected", vote=self.vote)
                self.on_elected()
            self.decided.set()
            if self.election.watch_gone(self.vote, self._wake.set):
                self._wake.wait()  # until our vote goes (session lost, deleted by hand) or we stop
            return
        if not self.election.watch_gone(before, self._wake.set):
            return  # predecessor already gone: re-run at once
        self.decided.set()
        self._wake.wait()

    def _demote(self, why: str) -> None:
        if self.leader:
            self.leader = False
            self._emit("demoted", reason=why)
            try:
                self.on_demoted()
            except Exception:
                log.exception("stopping the auditor failed")

    def _emit(self, event: str, **fields: object) -> None:
        if self.events is not None:
            self.events.emit(event, **fields)
        else:
            log.info("%s %s", event, fields)
