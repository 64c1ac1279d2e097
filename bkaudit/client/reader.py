"""Reading a ledger: entries from their write sets with replica fallback, and the non-fencing LAC.

A reader never writes, so it cannot harm a live writer; it can only read up to the last add confirmed, the
prefix the protocol guarantees every future reader will also see.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from types import TracebackType
from typing import Any

from bkaudit.errors import BookieError, DataLossError, LedgerStateError
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.model.quorum import write_set

log = logging.getLogger(__name__)

MISSING = {"ENOENTRY", "ENOLEDGER"}


def replicas(metadata: LedgerMetadata, entry_id: int) -> list[str]:
    """The bookies that store `entry_id`, in write-set order (the order reads try them)."""
    ensemble = metadata.ensemble_at(entry_id)
    return [ensemble[i] for i in write_set(entry_id, metadata.ensemble_size, metadata.write_quorum)]


def read_entry_async(
    pool: Any, digest: Any, ledger_id: int, metadata: LedgerMetadata, entry_id: int
) -> Future[Any]:
    """Read one entry, trying its replicas in order until one returns a body whose digest verifies."""
    result: Future[Any] = Future()
    bookies = replicas(metadata, entry_id)
    errors: list[tuple[str, BaseException]] = []

    def attempt(k: int) -> None:
        if k == len(bookies):
            result.set_exception(_unreadable(ledger_id, entry_id, errors))
            return
        bookie = bookies[k]
        try:
            fut = pool.get(bookie).read_entry(ledger_id, entry_id)
        except Exception as exc:
            errors.append((bookie, exc))
            attempt(k + 1)
            return

        def done(f: Future[bytes]) -> None:
            exc = f.exception()
            if exc is None:
                try:
                    entry = digest.verify(f.result(), entry_id=entry_id)
                except Exception as bad:  # corrupt replica: try the next one
                    errors.append((bookie, bad))
                    attempt(k + 1)
                    return
                result.set_result(entry)
            else:
                errors.append((bookie, exc))
                attempt(k + 1)

        fut.add_done_callback(done)

    attempt(0)
    return result


def _unreadable(ledger_id: int, entry_id: int, errors: list[tuple[str, BaseException]]) -> Exception:
    detail = "; ".join(f"{b}: {getattr(e, 'status', type(e).__name__)}" for b, e in errors)
    if errors and all(getattr(e, "status", None) in MISSING for _, e in errors):
        return DataLossError(
            f"entry {entry_id} is on none of its replicas ({detail})",
            ledger_id=ledger_id,
            entries=((entry_id, entry_id),),
        )
    status = (
        next((getattr(e, "status", "") for _, e in errors if getattr(e, "status", None) not in MISSING), "")
        or "UNAVAILABLE"
    )
    return BookieError(
        status,
        f"no replica could serve the entry ({detail})",
        ledger_id=ledger_id,
        entry_id=entry_id,
        bookie_id=errors[-1][0] if errors else None,
    )


def read_last_add_confirmed(
    pool: Any, digest: Any, ledger_id: int, metadata: LedgerMetadata, timeout: float
) -> int:
    """LAC without fencing: the max over the last ensemble of the explicit LAC and the last entry's LAC.

    Entries before the last segment were acknowledged before that segment began, so its first entry - 1 is a
    lower bound even if the new bookies have nothing yet. A CLOSED ledger's LAC is its last entry.
    """
    if metadata.is_closed:
        return metadata.last_entry_id
    segment = metadata.segments[-1]
    best = segment.first_entry_id - 1
    answered = 0
    errors: list[str] = []
    futures = []
    for bookie in segment.ensemble:
        try:
            futures.append((bookie, pool.get(bookie).read_lac(ledger_id)))
        except Exception as exc:
            errors.append(f"{bookie}: {exc}")
    for bookie, fut in futures:
        try:
            lac = _lac_from(fut.result(timeout), digest)
            answered += 1
        except BookieError as exc:
            if exc.status in MISSING:
                answered += 1
                continue
            fallback = _lac_from_last_entry(pool, digest, ledger_id, bookie, timeout, errors, exc)
            if fallback is None:
                continue
            lac = fallback
            answered += 1
        except Exception as exc:
            errors.append(f"{bookie}: {exc}")
            continue
        best = max(best, lac)
    if answered == 0:
        raise BookieError(
            "UNAVAILABLE",
            f"no bookie of the last ensemble answered ReadLAC ({'; '.join(errors)})",
            ledger_id=ledger_id,
        )
    return best


def _lac_from(result: Any, digest: Any) -> int:
    lac = -1
    if getattr(result, "lac_body", None):
        lac = max(lac, int(digest.verify_lac(result.lac_body)))
    if getattr(result, "last_entry_body", None):
        lac = max(lac, int(digest.verify(result.last_entry_body).last_add_confirmed))
    return lac


def _lac_from_last_entry(
    pool: Any,
    digest: Any,
    ledger_id: int,
    bookie: str,
    timeout: float,
    errors: list[str],
    first_error: BaseException,
) -> int | None:
    """Fallback for bookies without ReadLAC: read entry -1 (last entry) without fence and take its LAC."""
    try:
        body = pool.get(bookie).read_entry(ledger_id, -1).result(timeout)
        return int(digest.verify(body).last_add_confirmed)
    except BookieError as exc:
        if exc.status in MISSING:
            return -1
        errors.append(f"{bookie}: {first_error}; {exc}")
    except Exception as exc:
        errors.append(f"{bookie}: {first_error}; {exc}")
    return None


class ReadHandle:
    """Reads a ledger up to its last add confirmed (its last entry once CLOSED)."""

    def __init__(
        self,
        ledger_id: int,
        metadata: LedgerMetadata,
        last_add_confirmed: int,
        pool: Any,
        digest: Any,
        *,
        read_timeout_s: float = 30.0,
        window: int = 64,
    ) -> None:
        self.ledger_id = ledger_id
        self.metadata = metadata
        self.last_add_confirmed = last_add_confirmed
        self._pool = pool
        self._digest = digest
        self._timeout = read_timeout_s * max(1, metadata.write_quorum)
        self._window = window

    @property
    def length(self) -> int:
        return self.metadata.length

    def read_entry(self, entry_id: int) -> Any:
        """One entry (an `Entry` with ledger_id, entry_id, last_add_confirmed, length, payload)."""
        self._check_range(entry_id, entry_id)
        return read_entry_async(self._pool, self._digest, self.ledger_id, self.metadata, entry_id).result(
            self._timeout
        )

    def iter_entries(self, first: int = 0, last: int | None = None) -> Iterator[Any]:
        """Entries first..last (default: up to LAC) in order, with up to `window` reads in flight."""
        last = self.last_add_confirmed if last is None else last
        self._check_range(first, last)
        in_flight: deque[Future[Any]] = deque()
        nxt = first
        while nxt <= last or in_flight:
            while nxt <= last and len(in_flight) < self._window:
                in_flight.append(
                    read_entry_async(self._pool, self._digest, self.ledger_id, self.metadata, nxt)
                )
                nxt += 1
            yield in_flight.popleft().result(self._timeout)

    def read_entries(self, first: int = 0, last: int | None = None) -> list[Any]:
        """Entries first..last (inclusive) as a list."""
        return list(self.iter_entries(first, last))

    def _check_range(self, first: int, last: int) -> None:
        if first < 0 or last < first:
            raise ValueError(f"ledger {self.ledger_id}: invalid entry range {first}..{last}")
        if last > self.last_add_confirmed:
            raise LedgerStateError(
                f"entries {first}..{last} go beyond the last add confirmed ({self.last_add_confirmed})",
                ledger_id=self.ledger_id,
            )

    def close(self) -> None:
        """Nothing to release (the client owns the connections); kept for symmetry with WriteHandle."""

    def __enter__(self) -> ReadHandle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"ReadHandle(ledger_id={self.ledger_id}, state={self.metadata.state.name}, "
            f"last_add_confirmed={self.last_add_confirmed})"
        )
