"""Entries in flight and the in-order acknowledgement rule, without any I/O.

BookKeeper acknowledges entry e to the application only once AQ bookies of e's write set acknowledged it AND
every entry before e was acknowledged. `AddQueue` is that rule; `PendingAdd` is one entry's quorum state
(BookKeeper's PendingAddOp + AckSet). The pipeline feeds them bookie replies; tests feed them directly.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future

from bkaudit.model.quorum import AckSet


class PendingAdd:
    """One entry sent (or about to be sent) to its write set, waiting for AQ acknowledgements."""

    __slots__ = (
        "ack_quorum",
        "acks",
        "body",
        "entry_id",
        "future",
        "length",
        "submitted_at",
        "write_quorum",
        "write_set",
    )

    def __init__(
        self,
        entry_id: int,
        body: bytes,
        length: int,
        write_set: tuple[int, ...],
        write_quorum: int,
        ack_quorum: int,
        future: Future[int] | None = None,
    ) -> None:
        self.entry_id = entry_id
        self.body = body
        self.length = length  # cumulative ledger length including this entry
        self.write_set = write_set  # bookie indexes into the (current) last ensemble
        self.write_quorum = write_quorum
        self.ack_quorum = ack_quorum
        self.acks = AckSet(write_quorum, ack_quorum)
        self.future: Future[int] = future if future is not None else Future()
        self.submitted_at = time.monotonic()

    def ack(self, index: int) -> bool:
        """Record bookie `index`'s acknowledgement; True once AQ distinct bookies acknowledged."""
        return self.acks.ack(index)

    def unset(self, index: int) -> None:
        """Forget bookie `index`'s ack: it was replaced by an ensemble change and must be written again.

        AckSet.fail withdraws the ack (BookKeeper's removeBookieAndCheck); the new bookie's ack re-adds it.
        """
        self.acks.fail(index)

    @property
    def complete(self) -> bool:
        return self.acks.complete

    def waiting_on(self) -> tuple[int, ...]:
        """Write-set indexes that have not acknowledged yet."""
        acked = self.acks.acked
        return tuple(i for i in self.write_set if i not in acked)


class AddQueue:
    """Pending adds in entry-id order; releases them strictly in order as they become complete."""

    def __init__(self, last_add_confirmed: int = -1, length: int = 0) -> None:
        self._queue: deque[PendingAdd] = deque()
        self.last_add_confirmed = last_add_confirmed
        self.length = length  # cumulative length up to last_add_confirmed

    def append(self, add: PendingAdd) -> None:
        expected = self._queue[-1].entry_id + 1 if self._queue else self.last_add_confirmed + 1
        if add.entry_id != expected:
            raise ValueError(f"entry {add.entry_id} added out of order (expected {expected})")
        self._queue.append(add)

    def pop_completed(self) -> list[PendingAdd]:
        """Remove and return the complete prefix of the queue, advancing last_add_confirmed."""
        done: list[PendingAdd] = []
        while self._queue and self._queue[0].complete:
            add = self._queue.popleft()
            self.last_add_confirmed = add.entry_id
            self.length = add.length
            done.append(add)
        return done

    def drain(self) -> list[PendingAdd]:
        """Remove and return everything still pending (the handle failed or closed)."""
        items = list(self._queue)
        self._queue.clear()
        return items

    def head(self) -> PendingAdd | None:
        return self._queue[0] if self._queue else None

    def __iter__(self) -> Iterator[PendingAdd]:
        return iter(self._queue)

    def __len__(self) -> int:
        return len(self._queue)
