"""The bookie's data-integrity check: BookKeeper's DataIntegrityCheckImpl for a bookie that lost its data.

A bookie that comes back with new storage under an id ledger metadata still names must not answer "I have no
such entry / ledger" for those ledgers: recovery counts such answers as "absent" and, with WQ = AQ, one of
them closes an OPEN ledger before entries AQ bookies acknowledged (chaos seed 7, docs/reliability.md).

1. **Pre-boot** (`preboot`, before the bookie serves): set NEEDS_INTEGRITY_CHECK, read every ledger's
   metadata, keep those whose ensembles name this bookie, and put each one that is not CLOSED and has this
   bookie in its last ensemble in limbo + fenced (the bookie may have acknowledged entries or a fence it no
   longer holds). Limbo ledgers answer EUNKNOWNLEDGERSTATE instead of ENOENTRY / ENOLEDGER
   (`bkaudit.bookie.storage`), which clients treat as an error, never as "absent".
2. **Full check** (`full_check`, in the background while serving, every `interval_s` while the flag is
   set): recover each limbo ledger with the ledger client (open with recovery: fence, read forward, close;
   this bookie takes no part, it answers EUNKNOWN), clear its limbo, then copy every entry this bookie
   should store up to the last known entry (CLOSED: the last entry; OPEN: the entry before the last
   segment) from the other replicas with AutoRecovery's `FragmentCopier` (a recovery add to itself).
   Ledgers that failed stay for the next round; once none is left the flag is cleared.

It lives with AutoRecovery (it is a repair service over the ledger client and the fragment copier) and runs
inside the bookie process, which loads it as it loads `--autorecovery` (`bkaudit.bookie.server`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bkaudit.autorecovery.copier import CopyTask, FragmentCopier
from bkaudit.autorecovery.events import EventLog
from bkaudit.bookie.storage import NEEDS_INTEGRITY_CHECK, Storage
from bkaudit.client.context import digest_for, master_key_for
from bkaudit.errors import NoSuchLedger
from bkaudit.model.ledger import LedgerMetadata, Segment
from bkaudit.model.quorum import write_set

if TYPE_CHECKING:
    from bkaudit.store.base import ClusterStore

log = logging.getLogger(__name__)

MetadataSource = Callable[[], Iterable[tuple[int, LedgerMetadata]]]
"""Every ledger's (id, metadata) (the cluster store's `index.every_ledger`)."""


def names_bookie(metadata: LedgerMetadata, bookie_id: str) -> bool:
    """ensemblesContainBookie: any segment's ensemble holds the bookie."""
    return bookie_id in metadata.bookies()


def needs_limbo(metadata: LedgerMetadata, bookie_id: str) -> bool:
    """processPreBoot's rule: not CLOSED and the bookie is in the last ensemble."""
    return not metadata.is_closed and bookie_id in metadata.segments[-1].ensemble


def last_known_entry(metadata: LedgerMetadata) -> int:
    """The last entry whose copies can be checked: CLOSED, its last entry; else the last segment's start-1."""
    if metadata.is_closed:
        return metadata.last_entry_id
    return metadata.segments[-1].first_entry_id - 1


def missing_entries(metadata: LedgerMetadata, bookie_id: str,
                    has: Callable[[int], bool]) -> list[tuple[Segment, list[int]]]:
    """Per segment naming the bookie, the entries up to `last_known_entry` whose write set holds it and that
    it does not store (isEntryMissing)."""
    out: list[tuple[Segment, list[int]]] = []
    last = last_known_entry(metadata)
    for _, segment, seg_last in metadata.segment_ranges():
        if bookie_id not in segment.ensemble:
            continue
        me = segment.ensemble.index(bookie_id)
        end = last if seg_last is None else min(seg_last, last)
        ids = [e for e in range(segment.first_entry_id, end + 1)
               if me in write_set(e, metadata.ensemble_size, metadata.write_quorum) and not has(e)]
        if ids:
            out.append((segment, ids))
    return out


def runs_of(ids: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for i in ids:
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


@dataclass
class CheckRound:
    """What one full check did (logged; tests read it)."""

    recovered: list[int] = field(default_factory=list)
    copied: int = 0
    errors: dict[int, str] = field(default_factory=dict)
    gone: list[int] = field(default_factory=list)


class IntegrityCheck:
    """Pre-boot marking and the full check of one bookie; `client` builds a ledger client on demand."""

    def __init__(self, *, storage: Storage, bookie_id: str, metadata: MetadataSource,
                 client: Callable[[], Any], interval_s: float = 3.0, events: EventLog | None = None) -> None:
        self.storage = storage
        self.events = events or EventLog(node=bookie_id)
        self.bookie_id = bookie_id
        self._metadata = metadata
        self._client = client
        self.interval_s = interval_s
        self._ledgers: dict[int, LedgerMetadata] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0
        self.done = threading.Event()
        """Set once the flag is clear (nothing left to check)."""

    # -- pre-boot ------------------------------------------------------------------------------------------
    def preboot(self, reason: str) -> int:
        """Mark the ledgers in limbo (before serving); returns how many. Errors stop the bookie's start."""
        log.info("data-integrity pre-boot check of bookie %s (%s)", self.bookie_id, reason)
        self.storage.set_flag(NEEDS_INTEGRITY_CHECK, True)
        ledgers: dict[int, LedgerMetadata] = {}
        marked = 0
        for ledger_id, metadata in self._metadata():
            if not names_bookie(metadata, self.bookie_id):
                continue
            ledgers[ledger_id] = metadata
            if needs_limbo(metadata, self.bookie_id):
                log.info("ledger %d is OPEN with bookie %s in its last ensemble: in limbo and fenced until "
                         "recovered", ledger_id, self.bookie_id)
                self.storage.enter_limbo(ledger_id)
                marked += 1
        self._ledgers = ledgers
        log.info("data-integrity pre-boot: %d ledgers name bookie %s, %d in limbo", len(ledgers),
                 self.bookie_id, marked)
        return marked

    @property
    def needed(self) -> bool:
        return NEEDS_INTEGRITY_CHECK in self.storage.flags

    # -- full check ----------------------------------------------------------------------------------------
    def full_check(self) -> CheckRound:
        """One round over the ledgers still to check; clears the flag once none is left."""
        ledgers = self._ledgers
        if ledgers is None:  # restarted with the flag set: read the metadata again
            ledgers = {lid: md for lid, md in self._metadata() if names_bookie(md, self.bookie_id)}
            self._ledgers = ledgers
        result = CheckRound()
        if ledgers:
            bk = self._client()
            try:
                for ledger_id in sorted(ledgers, reverse=True):
                    self._check_ledger(bk, ledger_id, ledgers, result)
            finally:
                bk.close()
        self.rounds += 1
        if not ledgers:
            self.storage.set_flag(NEEDS_INTEGRITY_CHECK, False)
            self.done.set()
            log.info("data-integrity check of bookie %s complete", self.bookie_id)
        else:
            log.warning("data-integrity check of bookie %s: %d ledgers left for the next round (first error: "
                        "%s)", self.bookie_id, len(ledgers), next(iter(result.errors.values()), "-"))
        return result

    def _check_ledger(self, bk: Any, ledger_id: int, ledgers: dict[int, LedgerMetadata],
                      result: CheckRound) -> None:
        metadata = ledgers[ledger_id]
        limbo = self.storage.in_limbo(ledger_id)
        self.events.emit("integrity_checking", ledger=ledger_id, bookie=self.bookie_id, limbo=limbo)
        try:
            if limbo:
                metadata = bk.open_ledger(ledger_id, recover=True).metadata
                result.recovered.append(ledger_id)
                self.storage.clear_limbo(ledger_id)
                log.info("limbo ledger %d recovered (last entry %d); limbo cleared", ledger_id,
                         metadata.last_entry_id)
            copied = self._copy_missing(bk, ledger_id, metadata)
        except NoSuchLedger:
            result.gone.append(ledger_id)  # deleted meanwhile: nothing to check (BookKeeper: MISSING)
            del ledgers[ledger_id]
            return
        except Exception as exc:
            result.errors[ledger_id] = f"{type(exc).__name__}: {exc}"
            ledgers[ledger_id] = metadata
            self.events.emit("integrity_failed", ledger=ledger_id, bookie=self.bookie_id,
                             error=result.errors[ledger_id][:300])
            return
        result.copied += copied
        del ledgers[ledger_id]
        self.events.emit("integrity_checked", ledger=ledger_id, bookie=self.bookie_id, recovered=limbo,
                         copied=copied)

    def _copy_missing(self, bk: Any, ledger_id: int, metadata: LedgerMetadata) -> int:
        missing = missing_entries(metadata, self.bookie_id, lambda e: self.storage.has_entry(ledger_id, e))
        if not missing:
            return 0
        digest = digest_for(ledger_id, metadata.password, metadata.digest_type)
        key = master_key_for(metadata.password)
        copier = FragmentCopier(bk.pool)
        copied = 0
        for segment, seg_ids in missing:  # a task per segment: its sources are that ensemble's bookies
            task = CopyTask(ledger_id, key, digest, segment.ensemble, metadata.ensemble_size,
                            metadata.write_quorum, runs_of(seg_ids), self.bookie_id,
                            excluded=frozenset({self.bookie_id}))
            res = copier.copy(task, should_stop=self._stop.is_set)
            copied += res.copied
            if not res.ok:
                first = min({**res.missing, **res.errors})
                why = res.missing.get(first) or res.errors.get(first)
                raise RuntimeError(f"{len(res.missing) + len(res.errors)} entries not copied back "
                                   f"(entry {first}: {why})")
        log.info("ledger %d: copied %d entries back to bookie %s", ledger_id, copied, self.bookie_id)
        return copied

    # -- the background service (DataIntegrityService) -----------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="bookie-data-integrity", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.needed:
                self.done.set()
                return
            try:
                self.full_check()
            except Exception:
                log.exception("data-integrity check round failed")
            if self.done.is_set():
                return
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.events.close()


def for_bookie(*, settings: Any, storage: Storage, cluster: ClusterStore, bookie_id: str,
               interval_s: float, events_path: str | None = None) -> IntegrityCheck:
    """The check of a bookie process: metadata from its cluster store, a ledger client per round."""
    from bkaudit.client import BookKeeper

    return IntegrityCheck(storage=storage, bookie_id=bookie_id, metadata=cluster.index.every_ledger,
                          client=lambda: BookKeeper.connect(settings=settings), interval_s=interval_s,
                          events=EventLog(events_path, node=bookie_id))
