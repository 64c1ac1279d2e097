"""Whether the bookie takes writes, and why not: the read-only reasons and who is told of a change.

Separate from request processing because three parties set it (the operator's --readonly, the disk checker,
shutdown and drain) and registration listens to it, none of which is about any request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class BookieMode:
    """Why the bookie is read-only, if it is: "forced" (--readonly), "disk" (free space low), "shutdown".

    Listeners (registration) are told about every writable <-> read-only transition.
    """

    def __init__(self) -> None:
        self._reasons: set[str] = set()
        self._lock = threading.Lock()
        self._listeners: list[Callable[[bool], None]] = []

    @property
    def readonly(self) -> bool:
        return bool(self._reasons)

    @property
    def reasons(self) -> frozenset[str]:
        return frozenset(self._reasons)

    def high_priority_writes(self) -> bool:
        """BookKeeper's isAvailableForHighPriorityWrites: recovery adds still land while only the disk
        threshold made the bookie read-only (there is room, just not for new ledgers' traffic)."""
        return not (self._reasons - {"disk"})

    def set(self, reason: str, on: bool) -> None:
        with self._lock:
            before = self.readonly
            (self._reasons.add if on else self._reasons.discard)(reason)
            after = self.readonly
            listeners = list(self._listeners)
        if before != after:
            for listener in listeners:
                listener(after)

    def listen(self, listener: Callable[[bool], None], *, assumed: bool | None = None) -> None:
        """Tell `listener` of every later transition. `assumed` is the mode the caller already acted on (the
        registration it made): a transition between that and this call is told now, else it would be lost
        (a bookie drained while it started stayed registered writable)."""
        with self._lock:
            self._listeners.append(listener)
            current = self.readonly
        if assumed is not None and current != assumed:
            listener(current)
