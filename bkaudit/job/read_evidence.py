"""Verification by reads, for bookies that cannot list a ledger's entries (a Java bookie on DbLedgerStorage).

`probe_listing` decides per bookie and run whether the listing works, asked about ledgers the bookie should
hold (`probe_targets`); `read_and_verify` reads the planned
entries (LedgerChecker's choice, `bkaudit.audit.reads.plan_reads`) with bounded pipelining and a circuit
breaker, and checks each entry's digest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from queue import SimpleQueue
from typing import Any

import pyarrow as pa

from bkaudit.audit.expected import expected_by_bookie
from bkaudit.audit.reads import (
    EVIDENCE_LISTING,
    EVIDENCE_READS,
    EntryVerifier,
    ReadSummary,
    plan_reads,
    summarise_reads,
)
from bkaudit.audit.statuses import (
    STATUS_CIRCUIT_OPEN,
    STATUS_CORRUPT,
    STATUS_INVALID_RESPONSE,
    STATUS_NO_LEDGER,
    STATUS_OK,
    STATUS_UNAVAILABLE,
    STATUS_UNKNOWN_LEDGER_STATE,
    is_transport_failure,
)
from bkaudit.errors import BookieError
from bkaudit.job.bookie_calls import CallInfo
from bkaudit.job.breaker import Breaker
from bkaudit.job.ledger_pass import iter_shapes


def read_and_verify(
    client: Any,
    bookie_id: str,
    ledger_ids: Sequence[int],
    plans: Sequence[Sequence[int]],
    digest_types: Sequence[str | None],
    *,
    max_in_flight: int,
    failure_threshold: int,
    call_prefix: str = "",
    passwords: Sequence[bytes | None] | None = None,
    breaker: Breaker | None = None,
) -> Iterator[tuple[int, ReadSummary, CallInfo | None]]:
    """Verify (ledger, bookie) pairs by reading entries: one ReadSummary per position, in completion order.

    At most `max_in_flight` entry reads are outstanding (BookKeeper's inFlightReadEntryNumInLedgerChecker);
    each entry read back is verified with its ledger's digest. After `failure_threshold` consecutive
    transport failures the bookie is not read again in this attempt: what is left is CIRCUIT_OPEN, so a bookie
    that never answers costs a few deadlines, not one per entry (`breaker`: one spanning more than this call).

    Per entry read, the loop does O(1) work: answered futures arrive on a queue (a `wait` over every future
    in flight would cost `max_in_flight` waiter installs per answer), and each ledger's verifier is built
    once.
    """
    work = ((p, e) for p in range(len(ledger_ids)) for e in plans[p])
    remaining = [len(plan) for plan in plans]
    outcomes: list[dict[int, str]] = [{} for _ in plans]
    errors: list[dict[int, str]] = [{} for _ in plans]
    started: list[float | None] = [None] * len(plans)
    for p, n in enumerate(remaining):
        if n == 0:
            yield p, ReadSummary(STATUS_OK, 0), None
    pending: dict[Future[Any], tuple[int, int]] = {}
    answered: SimpleQueue[Future[Any]] = SimpleQueue()
    verifiers: list[EntryVerifier | None] = [None] * len(plans)
    state = breaker if breaker is not None else Breaker(bookie_id, failure_threshold)

    def finish(p: int) -> tuple[int, ReadSummary, CallInfo | None]:
        t0 = started[p]
        ms = None if t0 is None else (time.monotonic() - t0) * 1e3
        call = None if ms is None else CallInfo(f"{call_prefix}{bookie_id}#r{p}", ms)
        return p, summarise_reads(outcomes[p], errors[p]), call

    while True:
        while not state.open and len(pending) < max_in_flight:
            item = next(work, None)
            if item is None:
                break
            p, entry = item
            if started[p] is None:
                started[p] = time.monotonic()
            try:
                fut: Future[Any] = client.read_entry(ledger_ids[p], entry)
            except Exception as exc:  # a client that cannot even queue the call
                fut = Future()
                fut.set_exception(BookieError(STATUS_UNAVAILABLE, str(exc), bookie_id=bookie_id))
            pending[fut] = item
            fut.add_done_callback(answered.put)
        if not pending:
            break
        done = [answered.get()]
        while not answered.empty():
            done.append(answered.get_nowait())
        for fut in done:
            p, entry = pending.pop(fut)
            try:
                data = fut.result()
            except BaseException as exc:
                status = exc.status if isinstance(exc, BookieError) else STATUS_UNAVAILABLE
                outcomes[p][entry] = status
                errors[p][entry] = str(exc) or status
                state.failed(status, exc, doing="reading entries")
            else:
                state.answered()
                if not isinstance(data, bytes | bytearray | memoryview):
                    outcomes[p][entry] = STATUS_INVALID_RESPONSE
                    errors[p][entry] = f"not entry bytes: {type(data).__name__}"
                else:
                    verify = verifiers[p]
                    if verify is None:
                        pw = passwords[p] if passwords is not None else None
                        verify = verifiers[p] = EntryVerifier(ledger_ids[p], digest_types[p], pw)
                    problem = verify(entry, bytes(data))
                    outcomes[p][entry] = STATUS_OK if problem is None else STATUS_CORRUPT
                    if problem is not None:
                        errors[p][entry] = problem
            remaining[p] -= 1
            if remaining[p] == 0:
                verifiers[p] = None
                yield finish(p)
    if state.open:
        skipped = state.skipped("read")
        for item in work:
            p, entry = item
            outcomes[p][entry] = STATUS_CIRCUIT_OPEN
            errors[p][entry] = skipped
            remaining[p] -= 1
            if remaining[p] == 0:
                yield finish(p)


def java_listers(modes: Mapping[str, tuple[str, str]], *, batch_listing: Collection[str]) -> list[str]:
    """The bookies `modes` lists that did not advertise bkaudit's batch listing: Java bookies, whose
    listings pin index pages (limit_pinned_listing)."""
    return sorted(b for b, (mode, _why) in modes.items()
                  if mode == EVIDENCE_LISTING and b not in batch_listing)


def limit_pinned_listing(
    modes: Mapping[str, tuple[str, str]], *, pages: Mapping[str, int], batch_listing: Collection[str],
    max_pages: int,
) -> dict[str, tuple[str, str]]:
    """`modes` with every listing Java bookie whose listing would read more than `max_pages` index pages
    (`pages`, per bookie) verified by reads instead.

    A Java bookie on Interleaved or SortedLedgerStorage never releases the index pages a listing reads
    (LedgerCacheImpl.getEntriesIterator takes each page with getLEP(), which marks it in use, and nothing
    marks it unused), so they stay pinned until it restarts; once every one of its pageLimit pages is pinned,
    any request that needs another page spins in IndexInMemPageMgr.grabCleanPage and is never answered,
    adds and reads alike (docs/compatibility.md). Reads release their page. A bookie that advertised bkaudit's
    batch listing is bkaudit's own and pins nothing.
    """
    out = dict(modes)
    for bookie in java_listers(modes, batch_listing=batch_listing):
        wanted = pages.get(bookie, 0)
        if wanted <= max_pages:
            continue
        out[bookie] = (EVIDENCE_READS, (
            f"listing would pin {wanted:,} index pages of this Java bookie until it restarts, above "
            f"[checker] java_listing_max_pages ({max_pages:,})"
        ))
    return out


PROBE_LEDGERS = 3
"""Ledgers each bookie is probed with (closed, with entries the metadata places on it)."""
PROBE_SCAN_LEDGERS = 200_000
"""At most this many closed ledgers are looked at to find each bookie its probe ledgers."""


def probe_targets(
    batches: Iterable[pa.RecordBatch], bookies: Iterable[str], *, per_bookie: int = PROBE_LEDGERS,
    max_ledgers: int = PROBE_SCAN_LEDGERS,
) -> dict[str, list[tuple[int, int]]]:
    """Per bookie, up to `per_bookie` (ledger, entry) pairs to probe it with: closed ledgers with entries
    whose metadata places some on it, and the first entry it must store of each (LedgerChecker's first read).

    Only ledgers a bookie should hold tell its evidence mode: a Java bookie answers ENOLEDGER to a listing of
    a ledger it does not hold (HandleFactoryImpl.getReadOnlyHandle → LedgerDescriptor.createReadOnly throws
    NoLedgerException, which GetListOfEntriesOfLedgerProcessorV3 answers), on any storage; only for a ledger
    it holds does DbLedgerStorage throw UnsupportedOperationException, and no answer is sent.
    `batches`: LEDGER_INPUT rows, in a stable order (the same probes on every run of one snapshot).
    """
    wanted = set(bookies)
    out: dict[str, list[tuple[int, int]]] = {}
    seen = 0
    for batch in batches:
        for row, shape in iter_shapes(batch):
            if not wanted:
                return out
            seen += 1
            if seen > max_ledgers:
                return out
            if shape is None or not shape.closed or shape.last_entry_id < 0 or shape.problems():
                continue
            if not wanted.intersection(b for seg in shape.segments for b in seg.ensemble):
                continue
            for bookie, expected in expected_by_bookie(shape).items():
                if bookie not in wanted:
                    continue
                entries = plan_reads(shape, bookie, 0.0, expected=expected).entries
                if not entries:
                    continue
                got = out.setdefault(bookie, [])
                got.append((int(row["ledger_id"]), entries[0]))
                if len(got) >= per_bookie:
                    wanted.discard(bookie)
    return out


def probe_listing(client: Any, *, timeout_s: float, probes: Sequence[tuple[int, int]]) -> tuple[str, str]:
    """(evidence mode, why) for one bookie: does GET_LIST_OF_ENTRIES_OF_LEDGER work on it this run?

    `probes`: (ledger, entry) pairs the metadata says the bookie stores (`probe_targets`). For each, a
    listing request and a read of that entry go out together, all bounded by one deadline of `timeout_s`.

    * A listing answered with entries (even bytes that later fail to decode) or EUNKNOWNLEDGERSTATE (a
      bkaudit bookie holding the ledger in limbo; a Java bookie with limbo support is DbLedgerStorage, which
      never lists) → listing works.
    * A listing with no answer in time (DbLedgerStorage sends none for a ledger it holds) or an error status,
      for a ledger whose read the bookie answered (an entry, ENOENTRY, ENOLEDGER, any status) → reads; so is
      a listing answering ENOLEDGER for a ledger whose entry the bookie returns.
    * Every listing answered ENOLEDGER, reads agreeing: the bookie holds none of them, on any storage, and
      the mode is not told → listing; should listings go unanswered later in the run while reads are
      answered, the bookie switches to reads then (`bkaudit.job.live.switch_to_reads`).
    * Neither answered → the bookie is unreachable and keeps the listing path, which reports it.
    * No probe (no closed ledger with entries places any on it) → listing, with the same in-run switch.
    """
    if not probes:
        return EVIDENCE_LISTING, "no closed ledger with entries on it to probe with"

    def outcome(fut: Future[Any] | None) -> tuple[str | None, str]:
        """(the status of a BookKeeper answer — OK included — or None without one, what happened)."""
        if fut is None:
            return None, "could not be sent"
        try:
            fut.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            return None, f"no answer within {timeout_s:g}s"
        except BookieError as exc:
            if is_transport_failure(exc.status):
                return None, f"{exc.status}: {exc}"
            return exc.status, f"{exc.status}: {exc}"
        except Exception as exc:
            return None, f"{type(exc).__name__}: {exc}"
        return STATUS_OK, "answered"

    def send(call: Callable[..., Future[Any]], *args: int) -> Future[Any] | None:
        try:
            return call(*args)
        except Exception:
            return None

    deadline = time.monotonic() + timeout_s
    sent = [
        (ledger, entry, send(client.get_list_of_entries, ledger), send(client.read_entry, ledger, entry))
        for ledger, entry in probes
    ]
    unreachable: list[str] = []
    undecided = 0
    for ledger, entry, listing, read in sent:
        listed, why = outcome(listing)
        if listed in (STATUS_OK, STATUS_UNKNOWN_LEDGER_STATE):
            return EVIDENCE_LISTING, f"listing of ledger {ledger} answered"
        alive, read_why = outcome(read)
        if alive is None:
            unreachable.append(f"ledger {ledger}: listing {why}; read {read_why}")
            continue
        if listed is None or listed != STATUS_NO_LEDGER:
            return EVIDENCE_READS, (
                f"listing of ledger {ledger}, which it stores, failed ({why}); the read of entry {entry} "
                f"was answered ({read_why})"
            )
        if alive == STATUS_OK:
            return EVIDENCE_READS, (
                f"listing of ledger {ledger} answered ENOLEDGER, yet it returned entry {entry}"
            )
        undecided += 1
    if undecided:
        return EVIDENCE_LISTING, (
            f"listing answered ENOLEDGER for the {undecided} probed ledger(s) it lacks; reads take over if "
            "listing stops answering during the run"
        )
    return EVIDENCE_LISTING, "unreachable (" + "; ".join(unreachable) + ")"
