"""In-memory bookies and directory for the client's unit tests (plus tests of the fakes); the metadata is
the memory store's (bkaudit.store.memory_ledgers).

The fakes follow the real contracts closely enough for protocol tests: a bookie fences a ledger on a FENCE
read and then rejects normal adds with EFENCED but accepts recovery adds; entry -1 reads the last entry.
Bookies can be switched to fail or to hold replies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from bkaudit.client.context import ClientContext
from bkaudit.client.settings import ClientSettings
from bkaudit.errors import BookieError, FencedError, MetadataConflict, NotEnoughBookies
from bkaudit.formats.entry import master_key
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.store.memory_ledgers import MemoryMetadataStore


@dataclass
class LacResult:
    lac_body: bytes | None
    last_entry_body: bytes | None


def _done(value: object = None, exc: BaseException | None = None) -> Future:
    fut: Future = Future()
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)
    return fut


class _AddReply(Future):  # type: ignore[type-arg]
    """An add's reply that records when the client's handler for it has returned: the evidence an ordering
    test waits for (the client has seen this acknowledgement) instead of sleeping."""

    def __init__(self, on_handled: Callable[[], None]) -> None:
        super().__init__()
        self._on_handled = on_handled

    def add_done_callback(self, fn: Callable[[Future], object]) -> None:  # type: ignore[override,type-arg]
        def handled(fut: Future) -> None:  # type: ignore[type-arg]
            try:
                fn(fut)
            finally:
                self._on_handled()

        super().add_done_callback(handled)


class FakeBookie:
    """One bookie: entries per ledger, fenced ledgers, and switches to fail or hold replies."""

    def __init__(self, bookie_id: str) -> None:
        self.id = bookie_id
        self.entries: dict[int, dict[int, bytes]] = {}
        self.fenced: set[int] = set()
        self.lacs: dict[int, bytes] = {}
        self.down = False  # every request fails with UNAVAILABLE
        self.fail_status: str | None = None  # every add fails with this status
        self.hold = False  # adds are stored but their replies are held until release()
        self.held: list[Callable[[], None]] = []
        self.read_errors: dict[int, str] = {}  # entry id -> status every read of it fails with
        self.adds: list[tuple[int, int, bool]] = []
        self.acks_handled: list[tuple[int, int]] = []  # (ledger, entry) whose ack the client has processed
        self.reads: list[tuple[int, int, bool]] = []
        self.limbo: set[int] = set()  # ledgers in limbo: negative answers become EUNKNOWNLEDGERSTATE
        self.lock = threading.Lock()

    def _unavailable(self, ledger_id: int, entry_id: int | None = None) -> BookieError:
        return BookieError(
            "UNAVAILABLE", "bookie down", bookie_id=self.id, ledger_id=ledger_id, entry_id=entry_id
        )

    def add_entry(
        self, ledger_id: int, entry_id: int, key: bytes, body: bytes, *, recovery: bool = False
    ) -> Future:
        with self.lock:
            self.adds.append((ledger_id, entry_id, recovery))
            if self.down:
                return _done(exc=self._unavailable(ledger_id, entry_id))
            if self.fail_status:
                return _done(
                    exc=BookieError(
                        self.fail_status, bookie_id=self.id, ledger_id=ledger_id, entry_id=entry_id
                    )
                )
            if ledger_id in self.fenced and not recovery:
                return _done(exc=FencedError(bookie_id=self.id, ledger_id=ledger_id, entry_id=entry_id))
            self.entries.setdefault(ledger_id, {})[entry_id] = bytes(body)
            fut = _AddReply(lambda: self.acks_handled.append((ledger_id, entry_id)))
            if self.hold:
                self.held.append(lambda: fut.set_result(None))
                return fut
        fut.set_result(None)
        return fut

    def release(self) -> None:
        with self.lock:
            held, self.held = self.held, []
            self.hold = False
        for complete in held:
            complete()

    def read_entry(
        self,
        ledger_id: int,
        entry_id: int,
        *,
        fence: bool = False,
        master_key: bytes | None = None,
        high_priority: bool = False,
    ) -> Future:
        with self.lock:
            self.reads.append((ledger_id, entry_id, fence))
            if self.down:
                return _done(exc=self._unavailable(ledger_id, entry_id))
            if fence:
                self.fenced.add(ledger_id)
            if entry_id in self.read_errors:
                return _done(
                    exc=BookieError(
                        self.read_errors[entry_id], bookie_id=self.id, ledger_id=ledger_id, entry_id=entry_id
                    )
                )
            ledger = self.entries.get(ledger_id)
            if ledger_id in self.limbo and (ledger is None or entry_id == -1 or entry_id not in ledger):
                # as bkaudit.bookie.storage (BookKeeper's throwIfLimbo): only negative answers are unknown
                return _done(exc=BookieError("EUNKNOWNLEDGERSTATE", bookie_id=self.id, ledger_id=ledger_id,
                                             entry_id=entry_id))
            if ledger is None:
                return _done(exc=BookieError("ENOLEDGER", bookie_id=self.id, ledger_id=ledger_id))
            if entry_id == -1:
                if not ledger:
                    return _done(exc=BookieError("ENOENTRY", bookie_id=self.id, ledger_id=ledger_id))
                return _done(ledger[max(ledger)])
            if entry_id not in ledger:
                return _done(
                    exc=BookieError("ENOENTRY", bookie_id=self.id, ledger_id=ledger_id, entry_id=entry_id)
                )
            return _done(ledger[entry_id])

    def read_lac(self, ledger_id: int) -> Future:
        with self.lock:
            if self.down:
                return _done(exc=self._unavailable(ledger_id))
            if ledger_id in self.limbo:
                return _done(exc=BookieError("EUNKNOWNLEDGERSTATE", bookie_id=self.id, ledger_id=ledger_id))
            ledger = self.entries.get(ledger_id) or {}
            last = ledger[max(ledger)] if ledger else None
            if last is None and ledger_id not in self.lacs:
                return _done(exc=BookieError("ENOENTRY", bookie_id=self.id, ledger_id=ledger_id))
            return _done(LacResult(self.lacs.get(ledger_id), last))


class FakePool:
    def __init__(self, bookies: Sequence[FakeBookie]) -> None:
        self.bookies = {b.id: b for b in bookies}

    def get(self, bookie_id: str) -> FakeBookie:
        try:
            return self.bookies[bookie_id]
        except KeyError:
            raise BookieError("UNAVAILABLE", "unknown bookie", bookie_id=bookie_id) from None

    def __getitem__(self, bookie_id: str) -> FakeBookie:
        return self.bookies[bookie_id]


class StaticDirectory:
    """Ensembles are the first E healthy bookies; a replacement is the first one not in the ensemble."""

    def __init__(self, bookie_ids: Sequence[str]) -> None:
        self.bookie_ids = list(bookie_ids)
        self.replacements: list[tuple[str, str]] = []

    def choose_ensemble(self, ensemble_size: int, write_quorum: int, ack_quorum: int) -> tuple[str, ...]:
        if len(self.bookie_ids) < ensemble_size:
            raise NotEnoughBookies("not enough")
        return tuple(self.bookie_ids[:ensemble_size])

    def replace_bookie(
        self, ensemble: Sequence[str], index: int, write_quorum: int, ack_quorum: int, exclude: Sequence[str]
    ) -> str:
        for b in self.bookie_ids:
            if b not in ensemble and b not in exclude:
                self.replacements.append((ensemble[index], b))
                return b
        raise NotEnoughBookies(f"no replacement for {ensemble[index]}")


class FakeCluster:
    """Bookies + store + directory wired into a ClientContext, and a BookKeeper over them."""

    def __init__(self, n: int = 5, **settings: object) -> None:
        self.bookies = [FakeBookie(f"10.0.0.{i}:3181") for i in range(1, n + 1)]
        self.pool = FakePool(self.bookies)
        self.store = MemoryMetadataStore()
        self.directory = StaticDirectory([b.id for b in self.bookies])
        self.settings = ClientSettings(**settings)  # type: ignore[arg-type]
        self.executor = ThreadPoolExecutor(max_workers=2)
        self.ctx = ClientContext(
            store=self.store,
            pool=self.pool,
            directory=self.directory,
            executor=self.executor,
            settings=self.settings,
        )

    def client(self):
        from bkaudit.client.bookkeeper import BookKeeper

        return BookKeeper(store=self.store, pool=self.pool, directory=self.directory, settings=self.settings)

    def bookie(self, bookie_id: str) -> FakeBookie:
        return self.pool[bookie_id]

    def close(self) -> None:
        self.executor.shutdown(wait=True)


@pytest.fixture
def fake() -> FakeCluster:
    cluster = FakeCluster()
    yield cluster
    cluster.close()


# -- tests of the fakes themselves (so the protocol tests stand on solid ground) ---------------------------
def test_fake_bookie_fences_normal_adds_but_not_recovery_adds() -> None:
    b = FakeBookie("b:1")
    assert b.add_entry(1, 0, master_key(b""), b"x").result() is None
    assert b.read_entry(1, -1, fence=True, master_key=master_key(b"")).result() == b"x"
    with pytest.raises(FencedError):
        b.add_entry(1, 1, master_key(b""), b"y").result()
    assert b.add_entry(1, 1, master_key(b""), b"y", recovery=True).result() is None


def test_fake_bookie_missing_statuses() -> None:
    b = FakeBookie("b:1")
    with pytest.raises(BookieError) as e:
        b.read_entry(7, 0).result()
    assert e.value.status == "ENOLEDGER"
    b.add_entry(7, 0, b"k", b"x")
    with pytest.raises(BookieError) as e:
        b.read_entry(7, 3).result()
    assert e.value.status == "ENOENTRY"


def test_memory_store_cas() -> None:
    from bkaudit.model.ledger import DigestType, LedgerState, Segment

    s = MemoryMetadataStore()
    md = LedgerMetadata(
        3, 2, 2, LedgerState.OPEN, -1, 0, DigestType.CRC32C, b"", (Segment(0, ("a", "b", "c")),)
    )
    v = s.create(0, md)
    v2 = s.write(0, md, v)
    with pytest.raises(MetadataConflict):
        s.write(0, md, v)
    assert s.read(0)[1] == v2
