"""Listing calls to one bookie: cut by count and answer bytes, paced to what the bookie keeps up with, behind
its circuit breaker (`ask`; the why is in bkaudit.job.fanout's docstring and `ask`'s).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any

from bkaudit.audit.batching import call_budget, plan_calls
from bkaudit.audit.statuses import (
    STATUS_CIRCUIT_OPEN,
    STATUS_INVALID_RESPONSE,
    STATUS_UNAVAILABLE,
    is_transport_failure,
)
from bkaudit.errors import BookieError
from bkaudit.job.breaker import Breaker

# the logger the fan-out's pacing messages have always carried
log = logging.getLogger("bkaudit.job.fanout")

CALL_BYTES = call_budget(5 * 1024 * 1024)
"""Expected answer bytes per listing call: half of BookKeeper's default frame (nettyMaxFrameSizeBytes), which
the task's clients apply to every response."""


@dataclass(frozen=True, slots=True)
class CallInfo:
    """The batch call an answer travelled in (for bookie_checks: calls, latency percentiles)."""

    call_id: str
    ms: float


@dataclass
class Pace:
    """How many listings `ask` keeps in flight to one bookie, carried over the calls of a fan-out task's
    chunks: a bookie found slow in one chunk starts the next at the window it had come down to."""

    window: int | None = None


SLOW_RETRIES = 3
"""Times a ledger whose listing timed out on a bookie that kept answering is asked again, with fewer listings
in flight, before its timeout is reported."""
POLL_S = 0.05
"""How often `ask` looks at the client's backlog while it waits for stale requests to drain."""


def ask(
    client: Any,
    bookie_id: str,
    ledger_ids: Sequence[int],
    *,
    batch_size: int,
    max_in_flight: int,
    failure_threshold: int,
    call_prefix: str = "",
    sizes: Sequence[int | None] | None = None,
    max_call_bytes: int = CALL_BYTES,
    breaker: Breaker | None = None,
    pace: Pace | None = None,
) -> Iterator[tuple[int, bytes | BookieError | None, CallInfo | None]]:
    """Raw answers for `ledger_ids` (by position): one call per at most `batch_size` ids and `max_call_bytes`
    expected answer bytes (`sizes`, by position; `audit.batching.plan_calls`), with at most
    `max_in_flight` x `batch_size` listings outstanding (`batch_size` to a bookie without the batch operation,
    which serves each listing as its own request: BookKeeper's replicasCheck keeps 100 ledgers in flight in
    all).

    Every position is yielded exactly once: bytes, a BookieError (per ledger, or the whole call's failure,
    CIRCUIT_OPEN for ids not asked after the breaker opened), or None when the answer lacks that ledger.
    `breaker` and `pace`: the bookie's, when they span more than this call (a fan-out task's chunks).

    A slow bookie is not a dead one. A listing that timed out while the bookie sent anything after the call
    went out (another call's answer, or a late answer to an expired request: the client's `last_heard`) is
    queueing, not gone. Its ledgers are asked again, up to SLOW_RETRIES times, with half the listings in
    flight (a quarter of a call more after each clean answer), and the breaker is not told. The window
    counts listings, not calls, because a Java bookie serves a gathered call as that many requests; and it
    counts the client's `backlog` too, the timed-out requests the bookie still has to work through, since a
    retry sent behind them would only time out again. A bookie that sends nothing after a call went out
    (frozen, unreachable) fails that call as before, and `failure_threshold` of those open the breaker; calls
    that were in flight together through one silence count once (the others are asked again), so the
    breaker needs that many timeouts of silence one after another, not one timeout and a crowd of calls.
    """
    expected = [s or 0 for s in sizes] if sizes is not None else [0] * len(ledger_ids)
    chunks = iter(plan_calls(expected, max_bytes=max_call_bytes, max_count=batch_size))
    pending: dict[Future[Any], tuple[list[int], float, str, int]] = {}
    state = breaker if breaker is not None else Breaker(bookie_id, failure_threshold)
    per_listing = not getattr(client, "batch_listing", True)  # a Java bookie: one request per ledger
    most = max(1, batch_size if per_listing else max_in_flight * batch_size)
    pace = pace if pace is not None else Pace()
    window = min(most, pace.window or most)  # listings
    in_flight = 0
    again: deque[tuple[list[int], int]] = deque()  # (positions, times asked) of timed-out ledgers
    last_answer = float("-inf")
    counted_at = float("-inf")  # when the last transport failure was counted towards the breaker
    number = 0
    while True:
        while not state.open:
            if again:
                chunk, asked = again.popleft()
            else:
                planned = next(chunks, None)
                if planned is None:
                    break
                chunk, asked = planned, 0
            room = window - in_flight - _backlog(client)
            if room <= 0:
                if pending:
                    again.appendleft((chunk, asked))
                    break
                _await_backlog(client, window)
                room = window - _backlog(client)
            room = max(room, 1)
            if len(chunk) > room:  # the window is narrower than the planned call: ask the rest next
                again.appendleft((chunk[room:], asked))
                chunk = chunk[:room]
            number += 1
            call_id = f"{call_prefix}{bookie_id}#{number}"
            try:
                fut: Future[Any] = client.get_list_of_entries_batch([ledger_ids[p] for p in chunk])
            except Exception as exc:  # a client that cannot even queue the call
                fut = Future()
                fut.set_exception(BookieError(STATUS_UNAVAILABLE, str(exc), bookie_id=bookie_id))
            pending[fut] = (chunk, time.monotonic(), call_id, asked)
            in_flight += len(chunk)
        if not pending:
            break
        poll = POLL_S if _backlog(client) else None  # the backlog drains without any future of ours finishing
        done, _ = wait(list(pending), timeout=poll, return_when=FIRST_COMPLETED)
        for fut in done:
            chunk, started, call_id, asked = pending.pop(fut)
            in_flight -= len(chunk)
            call = CallInfo(call_id, (time.monotonic() - started) * 1000.0)
            try:
                answers = fut.result()
            except BaseException as exc:
                status = exc.status if isinstance(exc, BookieError) else STATUS_UNAVAILABLE
                heard = max(last_answer, _last_heard(client))
                transport = is_transport_failure(status)
                # queueing (the bookie sent something since), or in flight through a silence already counted
                if transport and asked < SLOW_RETRIES and (heard > started or started <= counted_at):
                    window = _slower(bookie_id, window, status)
                    again.append((chunk, asked + 1))
                    continue
                if transport:
                    counted_at = time.monotonic()
                error = (
                    exc
                    if isinstance(exc, BookieError)
                    else BookieError(status, str(exc), bookie_id=bookie_id)
                )
                state.failed(status, exc, doing="listing entries")
                for p in chunk:
                    yield p, error, call
                continue
            state.answered()
            last_answer = time.monotonic()
            if not isinstance(answers, Mapping):
                bad = BookieError(STATUS_INVALID_RESPONSE, "not a batch answer", bookie_id=bookie_id)
                for p in chunk:
                    yield p, bad, call
                continue
            get = answers.get
            timed_out = []
            for p in chunk:
                value = get(ledger_ids[p])
                if (asked < SLOW_RETRIES and isinstance(value, BookieError)
                        and is_transport_failure(value.status)):
                    timed_out.append(p)  # the rest of its call was answered: queueing, not gone
                    continue
                yield p, value, call
            if timed_out:
                window = _slower(bookie_id, window, "UNAVAILABLE")
                again.append((timed_out, asked + 1))
            else:
                window = min(most, window + max(1, len(chunk) // 4))
        pace.window = window
    if state.open:
        skipped = BookieError(STATUS_CIRCUIT_OPEN, state.skipped("asked"), bookie_id=bookie_id)
        for chunk in itertools.chain((c for c, _ in again), chunks):
            for p in chunk:
                yield p, skipped, None


def _backlog(client: Any) -> int:
    """The client's count of timed-out requests the bookie has not answered yet (0 for clients without)."""
    return int(getattr(client, "backlog", 0))


def _last_heard(client: Any) -> float:
    """When the bookie last sent any frame (-inf for clients that do not say)."""
    return float(getattr(client, "last_heard", float("-inf")))


def _await_backlog(client: Any, window: int) -> None:
    """With nothing of ours in flight, wait until the bookie's stale backlog leaves room in the window, or
    until it has been silent for a whole request timeout (it may have dropped those requests: the next call
    then succeeds or fails on its own, and a frozen bookie still meets the breaker)."""
    silent_after = float(getattr(client, "request_timeout_s", 0.0))
    while _backlog(client) >= window:
        if time.monotonic() - _last_heard(client) > silent_after:
            return
        time.sleep(POLL_S)


def _slower(bookie_id: str, window: int, status: str) -> int:
    """Half the listings in flight (at least one) after a timeout on a bookie that still answers."""
    if window > 1:
        log.info("bookie %s answers but some listings timed out (%s): %d listings in flight, was %d",
                 bookie_id, status, max(1, window // 2), window)
    return max(1, window // 2)
