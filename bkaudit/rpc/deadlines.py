"""The one timer thread of every bookie client (native and gRPC): requests that outlive their timeout fail.

A thread per client or per request would cost more than the requests; one thread polling every connection's
FIFO of deadlines costs one wake-up per tick, whatever the number of requests in flight.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any


class Deadlines:
    """One timer thread for every client: fails requests still pending at their deadline.

    Requests of one connection share one timeout, so their deadlines grow in send order: each connection keeps
    a FIFO of (deadline, txn) appended without any lock, and this thread pops from its front every TICK_S,
    failing what is still pending past its deadline and dropping what was answered.
    A "stream" is anything with `pending` (txn -> Pending), `client` (with `_timeout`) and `closed`.
    """

    TICK_S = 0.05
    LATE_FACTOR = 8
    """A timed-out request not answered within this many timeouts more is presumed dropped by the bookie."""

    def __init__(self) -> None:
        self._streams: set[Any] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, stream: Any) -> deque[tuple[float, int]]:
        """Register a stream; returns the FIFO its sender appends (deadline, txn) to."""
        stream.deadlines = deque()
        with self._lock:
            self._streams.add(stream)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="bookie-client-deadlines", daemon=True)
                self._thread.start()
        return stream.deadlines  # type: ignore[no-any-return]

    def add(self, deadline: float, stream: Any, txn: int) -> None:
        fifo = getattr(stream, "deadlines", None)
        if fifo is None:
            fifo = self.watch(stream)
        fifo.append((deadline, txn))

    def _run(self) -> None:
        while True:
            time.sleep(self.TICK_S)
            now = time.monotonic()
            with self._lock:
                streams = list(self._streams)
            for stream in streams:
                fifo, pending = stream.deadlines, stream.pending
                expired = getattr(stream, "expired", None)
                while fifo:
                    deadline, txn = fifo[0]
                    if txn in pending:
                        if deadline > now:
                            break
                        if expired is not None:
                            expired[txn] = now  # before the pop: an answer racing it then finds no pending
                        p = pending.pop(txn, None)
                        if p is not None:
                            stream.client._timeout(p)
                        elif expired is not None:
                            expired.pop(txn, None)  # answered in time after all
                    fifo.popleft()
                if expired:
                    self._forget(expired, now - self.LATE_FACTOR * stream.client.request_timeout_s)
                if stream.closed and not fifo:
                    with self._lock:
                        self._streams.discard(stream)

    @staticmethod
    def _forget(expired: dict[int, float], before: float) -> None:
        """Drop timed-out requests older than `before` (the oldest come first)."""
        while True:
            try:  # the loop thread pops late answers meanwhile: a changed dict ends this tick's pass
                txn, when = next(iter(expired.items()))
            except (StopIteration, RuntimeError):
                return
            if when > before:
                return
            expired.pop(txn, None)


DEADLINES = Deadlines()
