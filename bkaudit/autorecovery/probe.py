"""What the bookies of a ledger hold, asked the cheapest way each answers: listings, else reads.

A bookie that leaves a listing unanswered but answers reads (a Java bookie on DbLedgerStorage, for every
ledger it holds) is judged from reads, as BookKeeper's LedgerChecker judges every bookie; `Shared` remembers
it for `LISTING_RETRY_S`. Also the ledger's LAC and where an open last segment is checked to.
"""

from __future__ import annotations

import logging
from collections import Counter
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from bkaudit.autorecovery.fragments import (
    Answer,
    ReadEvidence,
    entries_to_read,
    first_entry_unconfirmed,
    last_expected,
)
from bkaudit.autorecovery.shared import LISTING_RETRY_S, Shared
from bkaudit.errors import BkAuditError, BookieError, FormatError
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.model.quorum import write_set
from bkaudit.rpc.listing import confirm_tail

log = logging.getLogger(__name__)

READS_IN_FLIGHT = 500  # entry reads outstanding while judging bookies from reads


class Prober:
    """One worker's questions to bookies (`name` labels its events)."""

    def __init__(self, shared: Shared, name: str) -> None:
        self.shared = shared
        self.name = name

    def marked(self, ledger_id: int) -> set[str]:
        """The bookies the marker names (read only when a bookie could not be asked: see find_fragments)."""
        found = self.shared.cluster.queue.marker(ledger_id)
        return set(found.replicas) if found is not None else set()

    def probe(
        self,
        ledger_id: int,
        metadata: LedgerMetadata,
        bookies: list[str],
        lac: int | None,
        open_end: int | None = None,
    ) -> dict[str, Answer]:
        """What each bookie to judge holds, in parallel: Availability, None (no ledger), ReadEvidence, error.

        GetListOfEntries first; a bookie known to leave listings unanswered, or that leaves this one
        unanswered, is judged from reads (`_read_evidence`). One that answers neither stays an error.
        """
        from bkaudit.formats import availability

        sh = self.shared
        by_reads = [b for b in bookies if sh.judged_by_reads(b)]
        futures: dict[str, Any] = {}
        answers: dict[str, Answer] = {}
        for bookie in bookies:
            if bookie in by_reads:
                continue
            try:
                futures[bookie] = sh.pool.get(bookie).get_list_of_entries(ledger_id)
            except Exception as exc:
                answers[bookie] = exc
        silent: list[str] = []
        for bookie, fut in futures.items():
            try:
                listed = confirm_tail(
                    sh.pool.get(bookie),
                    ledger_id,
                    fut.result(sh.read_timeout_s),
                    last_expected(metadata, bookie, lac, open_end=open_end),
                    timeout_s=sh.read_timeout_s,
                )
                answers[bookie] = availability.decode(listed)
            except BookieError as exc:
                answers[bookie] = None if exc.status == "ENOLEDGER" else exc
                if exc.status == "UNAVAILABLE":
                    silent.append(bookie)
            except FutureTimeout as exc:
                answers[bookie] = exc
                silent.append(bookie)
            except FormatError as exc:
                answers[bookie] = exc
        if by_reads or silent:
            marked = self.marked(ledger_id)
            read = self.read_evidence(ledger_id, metadata, by_reads + silent, lac, marked, open_end)
            for bookie in silent:
                if isinstance(read[bookie], BaseException):
                    continue  # no answer to reads either: unreachable, keep the listing's error
                if sh.learn_listing_silent(bookie):
                    sh.events.emit(
                        "listing_unanswered", bookie=bookie, ledger=ledger_id, judged_by="reads",
                        for_s=LISTING_RETRY_S, worker=self.name,
                    )
                answers[bookie] = read[bookie]
            answers.update({b: read[b] for b in by_reads})
        return answers

    def read_evidence(
        self,
        ledger_id: int,
        metadata: LedgerMetadata,
        bookies: list[str],
        lac: int | None,
        marked: set[str],
        open_end: int | None = None,
    ) -> dict[str, Answer]:
        """Judge bookies from reads (BookKeeper's LedgerChecker): the first and last entry each stores per
        fragment, every entry of a bookie the marker names. ENOENTRY or a digest that does not verify = the
        entry is absent; ENOLEDGER = nothing held (None); any other failure = the bookie stays unjudged."""
        from bkaudit.formats.entry import DigestManager

        sh = self.shared
        digest = DigestManager(ledger_id, metadata.password, metadata.digest_type)
        work = [
            (b, e)
            for b in bookies
            for e in entries_to_read(metadata, b, lac, every=b in marked, open_end=open_end)
        ]
        absent: dict[str, set[int]] = {b: set() for b in bookies}
        failed: dict[str, Answer] = {}
        for start in range(0, len(work), READS_IN_FLIGHT):
            sent = []
            for bookie, entry_id in work[start : start + READS_IN_FLIGHT]:
                if bookie in failed:
                    continue
                try:
                    sent.append((bookie, entry_id, sh.pool.get(bookie).read_entry(ledger_id, entry_id)))
                except Exception as exc:
                    failed[bookie] = exc
            for bookie, entry_id, fut in sent:
                if bookie in failed:
                    continue
                try:
                    digest.verify(fut.result(sh.read_timeout_s), entry_id=entry_id)
                except BookieError as exc:
                    if exc.status == "ENOENTRY":
                        absent[bookie].add(entry_id)
                    else:
                        failed[bookie] = None if exc.status == "ENOLEDGER" else exc
                except FormatError:  # the stored bytes do not verify: not a replica
                    absent[bookie].add(entry_id)
                except FutureTimeout as exc:
                    failed[bookie] = exc
        counts = Counter(b for b, _ in work)
        return {
            b: failed[b] if b in failed else ReadEvidence(frozenset(absent[b]), counts[b]) for b in bookies
        }

    def lac(self, ledger_id: int, metadata: LedgerMetadata) -> int | None:
        from bkaudit.client.reader import read_last_add_confirmed
        from bkaudit.formats.entry import DigestManager

        digest = DigestManager(ledger_id, metadata.password, metadata.digest_type)
        try:
            return read_last_add_confirmed(
                self.shared.pool, digest, ledger_id, metadata, self.shared.read_timeout_s
            )
        except BkAuditError as exc:
            log.info("ledger %s: LAC unknown (%s); its non-last segments wait", ledger_id, exc)
            return None

    def open_end(self, ledger_id: int, metadata: LedgerMetadata, lac: int | None) -> int | None:
        """Where the open last segment is checked to, when not at the LAC: LedgerChecker's first-entry probe.
        With the LAC below the segment's first entry, that entry is read from its write set; unless every
        bookie says NoSuchEntry / NoSuchLedger it may have been written, and the fragment [first, first] is
        checked (as the checker does: audit.open_segments)."""
        from bkaudit.audit.open_segments import first_entry_may_exist

        first = first_entry_unconfirmed(metadata, lac)
        if first is None:
            return None
        sh = self.shared
        ensemble = metadata.segments[-1].ensemble
        statuses = []
        for index in write_set(first, metadata.ensemble_size, metadata.write_quorum):
            try:
                sh.pool.get(ensemble[index]).read_entry(ledger_id, first).result(sh.read_timeout_s)
                statuses.append("OK")
            except BookieError as exc:
                statuses.append(exc.status)
            except Exception as exc:  # no answer: it cannot say the entry was never written
                statuses.append(type(exc).__name__)
        return first if first_entry_may_exist(statuses) else None
