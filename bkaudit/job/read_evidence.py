"""Verification by reads, for bookies that cannot list a ledger's entries (a Java bookie on DbLedgerStorage).

`probe_listing` decides per bookie and run whether the listing works; `read_and_verify` reads the planned
entries (LedgerChecker's choice, `bkaudit.audit.reads.plan_reads`) with bounded pipelining and a circuit
breaker, and checks each entry's digest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from bkaudit.audit.reads import (
    EVIDENCE_LISTING,
    EVIDENCE_READS,
    ReadSummary,
    summarise_reads,
    verify_entry,
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
from bkaudit.job.breaker import Breaker
from bkaudit.job.fanout import CallInfo


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
        if not pending:
            break
        done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
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
                    pw = passwords[p] if passwords is not None else None
                    problem = verify_entry(ledger_ids[p], entry, bytes(data), digest_types[p], pw)
                    outcomes[p][entry] = STATUS_OK if problem is None else STATUS_CORRUPT
                    if problem is not None:
                        errors[p][entry] = problem
            remaining[p] -= 1
            if remaining[p] == 0:
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




def probe_listing(client: Any, *, timeout_s: float, ledger_id: int = 0) -> tuple[str, str]:
    """(evidence mode, why) for one bookie: does GET_LIST_OF_ENTRIES_OF_LEDGER work on it this run?

    A listing request and an entry read go out together. Any answer to the listing (entries, ENOLEDGER,
    EUNKNOWNLEDGERSTATE from a bookie holding the ledger in limbo, even bytes that later fail to decode) means
    listing works. No answer in `timeout_s` (a Java bookie on
    DbLedgerStorage sends none) or an error status means it does not, provided the bookie answers the read
    (with anything: ENOLEDGER, ENOENTRY, an entry); a bookie that answers neither is simply unreachable and
    keeps the listing path, which reports it as such.
    """
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

    deadline = time.monotonic() + timeout_s
    futures: list[Future[Any] | None] = []
    sends: tuple[Callable[[], Future[Any]], ...] = (
        lambda: client.get_list_of_entries(ledger_id),
        lambda: client.read_entry(ledger_id, 0),
    )
    for send in sends:
        try:
            futures.append(send())
        except Exception:
            futures.append(None)
    listed, why = outcome(futures[0])
    if listed in (STATUS_OK, STATUS_NO_LEDGER, STATUS_UNKNOWN_LEDGER_STATE):
        return EVIDENCE_LISTING, "listing answered"
    alive, read_why = outcome(futures[1])
    if alive is not None:
        return EVIDENCE_READS, f"listing probe failed ({why}); reads answered"
    return EVIDENCE_LISTING, f"unreachable (listing: {why}; read: {read_why})"
