"""The mutations a bookie's storage queues for its writer thread, and the rules a write is accepted by.

Kept apart from the thread and the transaction (bkaudit.bookie.storage) because these change with
BookKeeper's protocol (master keys, fencing, recovery adds, limbo), the machinery with SQLite.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future

from bkaudit.bookie.ledgerdb import LedgerState
from bkaudit.errors import BookieError

Done = Callable[[str], None]
"""Completion callback of a mutation: receives a BookKeeper status name ("EOK", "EFENCED", "EUA", ...)."""


class Write:
    """An add, a fence or a WriteLac, queued for the writer thread; `done` gets its status."""

    __slots__ = ("body", "done", "entry_id", "key", "kind", "ledger_id", "recovery")

    def __init__(self, kind: str, ledger_id: int, entry_id: int, key: bytes | None, body: bytes | None,
                 recovery: bool, done: Done) -> None:
        self.kind = kind
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.key = key
        self.body = body
        self.recovery = recovery
        self.done = done


class AdminOp:
    """An admin operation run alone by the writer thread (fault injection, ledger deletion, with `reload`
    the storage check's re-read of the index, with `limbo` a limbo change, with `flag` a state flag)."""

    __slots__ = ("entry_ids", "flag", "future", "ledger_id", "limbo", "reload")

    def __init__(self, ledger_id: int, entry_ids: list[int] | None, *, reload: bool = False,
                 limbo: bool | None = None, flag: tuple[str, bool] | None = None) -> None:
        self.ledger_id = ledger_id
        self.entry_ids = entry_ids
        self.reload = reload
        self.limbo = limbo
        self.flag = flag
        self.future: Future[int] = Future()


def stage(op: Write, durable: dict[int, LedgerState], overlay: dict[int, LedgerState],
      rows: list[tuple[int, int, bytes]]) -> str:
    """Validate one write against the durable state and the batch's own (`overlay`); stage its changes in
    `overlay` and `rows`; return its status (BookKeeper's rules: the master key, fencing, recovery adds)."""
    lid = op.ledger_id
    state = overlay.get(lid)
    if state is None:
        state = durable.get(lid)
    if state is None:
        state = overlay[lid] = LedgerState(op.key, False, None)
    elif not state.master_key and op.key:
        # created without a key by the data-integrity check: the first real key is adopted, as
        # BookKeeper's LedgerMetadataIndex.setMasterKey replaces an all-zero stored key
        state = overlay[lid] = state._replace(master_key=op.key)
    elif state.master_key != op.key:
        return "EUA"
    if op.kind == "add":
        if state.fenced and not op.recovery:
            return "EFENCED"
        assert op.body is not None
        rows.append((lid, op.entry_id, op.body))
    elif op.kind == "fence":
        if not state.fenced:
            overlay[lid] = state._replace(fenced=True)
    else:  # explicit LAC
        overlay[lid] = state._replace(lac_body=op.body)
    return "EOK"


def resolver(fut: Future[None], *, ledger_id: int, entry_id: int | None = None) -> Done:
    """A completion callback that resolves a future (the future-style API of tests and admin commands)."""
    def done(status: str) -> None:
        if status == "EOK":
            fut.set_result(None)
        else:
            fut.set_exception(BookieError(status, ledger_id=ledger_id, entry_id=entry_id))

    return done
