"""The client workloads of a chaos run: pipelined writers, readers and recoverers of crashed writers.

They use the product's ledger client unchanged; only its bookie connections go through the chaos proxies.
Every acknowledgement, close, crash and recovery goes to the history. Errors are expected while faults are
active: a writer that cannot go on abandons its ledger (a crashed writer) and a recoverer closes it later.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import random
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass

from bkaudit.chaos.history import History
from bkaudit.chaos.proxy import ProxiedPool, ProxySet
from bkaudit.client import BookKeeper
from bkaudit.client.directory import ZkBookieDirectory
from bkaudit.client.settings import ClientSettings
from bkaudit.config import ZkSettings
from bkaudit.store import connect as connect_store

log = logging.getLogger(__name__)

PASSWORD = b"chaos"


@dataclass(frozen=True)
class WorkloadSettings:
    seed: int
    bookies: int
    max_bookie_failures: int
    writers: int = 2
    readers: int = 1
    entries_per_ledger: tuple[int, int] = (20, 120)
    window: int = 8  # adds in flight per writer
    entry_bytes: int = 256
    crash_probability: float = 0.3  # a writer stops without closing (recovered later)
    add_timeout_s: float = 8.0


def connect_client(*, zk: ZkSettings, proxies: ProxySet, add_timeout_s: float) -> BookKeeper:
    """A ledger client on the cluster `zk` names, whose bookie connections go through the chaos proxies."""
    settings = ClientSettings(
        add_timeout_s=add_timeout_s, read_timeout_s=add_timeout_s, close_timeout_s=4 * add_timeout_s
    )
    cluster = connect_store(zk)
    session = cluster.client
    pool = ProxiedPool(proxies=proxies, registry=cluster.registry, request_timeout_s=add_timeout_s)
    return BookKeeper(
        store=cluster.ledgers,
        pool=pool,
        directory=ZkBookieDirectory(cluster),
        settings=settings,
        owns=(pool, session),
    )


def payload(seed: int, ledger: int, entry: int, size: int) -> bytes:
    """The bytes of an entry: a function of (seed, ledger, entry), so a digest pins them."""
    block = hashlib.blake2b(f"{seed}:{ledger}:{entry}".encode(), digest_size=64).digest()
    return (block * (size // 64 + 1))[:size]


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def pick_quorum(rng: random.Random, *, bookies: int, max_bookie_failures: int) -> tuple[int, int, int]:
    """Random E/WQ/AQ under which the guarantee applies: AQ > max failures, E leaves spares to replace."""
    aq = rng.randint(max_bookie_failures + 1, max(max_bookie_failures + 1, min(3, bookies - 1)))
    wq = rng.randint(aq, max(aq, min(aq + 1, bookies - max_bookie_failures)))
    e = rng.randint(wq, max(wq, bookies - max_bookie_failures))
    return e, wq, aq


class Shared:
    """What the workload threads share: the history, the stop flag, crashed and closed ledgers."""

    def __init__(self, history: History) -> None:
        self.history = history
        self.stop = threading.Event()
        self.crashed: queue.Queue[int] = queue.Queue()
        self.crashed_at: dict[int, float] = {}  # monotonic time of each writer crash
        self.lock = threading.Lock()
        self.closed: list[int] = []
        self.acks: dict[int, dict[int, str]] = {}
        self.open: set[int] = set()
        self.acked = 0
        self.ensembles: dict[int, tuple[str, ...]] = {}
        self.written: set[str] = set()  # bookies of ledgers with an acknowledged entry (for the warm-up)

    def closed_ledgers(self) -> list[int]:
        with self.lock:
            return sorted(self.closed)

    def max_ack(self, ledger: int) -> int:
        with self.lock:
            acks = self.acks.get(ledger)
            return max(acks) if acks else -1


class Writer(threading.Thread):
    def __init__(self, *, index: int, bk: BookKeeper, shared: Shared, conf: WorkloadSettings) -> None:
        super().__init__(name=f"chaos-writer-{index}", daemon=True)
        self.bk = bk
        self.shared = shared
        self.conf = conf
        self.rng = random.Random(f"{conf.seed}-writer-{index}")

    def run(self) -> None:
        while not self.shared.stop.is_set():
            try:
                self.one_ledger()
            except Exception as exc:  # a writer never dies: it records and goes on
                log.warning("writer: %s", exc)
                self.shared.stop.wait(1)

    def one_ledger(self) -> None:
        h, conf = self.shared.history, self.conf
        e, wq, aq = pick_quorum(self.rng, bookies=conf.bookies, max_bookie_failures=conf.max_bookie_failures)
        try:
            handle = self.bk.create_ledger(e, wq, aq, password=PASSWORD)
        except Exception as exc:
            h.record("create_failed", e=e, wq=wq, aq=aq, error=str(exc)[:200])
            self.shared.stop.wait(1)
            return
        ledger = handle.ledger_id
        with self.shared.lock:
            self.shared.acks[ledger] = {}
            self.shared.open.add(ledger)
            self.shared.ensembles[ledger] = tuple(handle.metadata.segments[0].ensemble)
        h.record(
            "create", ledger=ledger, e=e, wq=wq, aq=aq, ensemble=list(handle.metadata.segments[0].ensemble)
        )
        count = self.rng.randint(*conf.entries_per_ledger)
        pending: deque[tuple[int, str, Future[int]]] = deque()
        failure = ""
        for i in range(count):
            if self.shared.stop.is_set():
                break
            data = payload(conf.seed, ledger, i, conf.entry_bytes)
            try:
                pending.append((i, digest(data), handle.add_entry_async(data)))
            except Exception as exc:
                failure = f"add {i}: {exc}"
                break
            while pending and (len(pending) >= conf.window or pending[0][2].done()):
                failure = self._settle(ledger, pending.popleft())
                if failure:
                    break
            if failure:
                break
        while pending and not failure:
            failure = self._settle(ledger, pending.popleft())
        if failure or self.rng.random() < conf.crash_probability:
            handle.abandon()
            self._crashed(ledger, failure or "writer crash (chosen)")
            return
        try:
            md = handle.close()
        except Exception as exc:
            self._crashed(ledger, f"close failed: {exc}")
            return
        h.record("close", ledger=ledger, last_entry=md.last_entry_id, by="writer", segments=len(md.segments))
        with self.shared.lock:
            self.shared.open.discard(ledger)
            self.shared.closed.append(ledger)

    def _settle(self, ledger: int, item: tuple[int, str, Future[int]]) -> str:
        index, dig, fut = item
        try:
            entry = fut.result(4 * self.conf.add_timeout_s)
        except Exception as exc:
            return f"add {index}: {type(exc).__name__}: {str(exc)[:200]}"
        if entry != index:
            return f"add {index} acknowledged as entry {entry}"
        self.shared.history.record("ack", ledger=ledger, entry=entry, digest=dig)
        with self.shared.lock:
            if not self.shared.acks[ledger]:
                self.shared.written.update(self.shared.ensembles.get(ledger, ()))
            self.shared.acks[ledger][entry] = dig
            self.shared.acked += 1
        return ""

    def _crashed(self, ledger: int, reason: str) -> None:
        self.shared.history.record("crash", ledger=ledger, reason=reason[:300])
        with self.shared.lock:
            self.shared.crashed_at[ledger] = time.monotonic()
        self.shared.crashed.put(ledger)


class Reader(threading.Thread):
    """Reads closed ledgers while faults run; a payload that differs from its acknowledgement is recorded."""

    def __init__(self, *, index: int, bk: BookKeeper, shared: Shared, conf: WorkloadSettings) -> None:
        super().__init__(name=f"chaos-reader-{index}", daemon=True)
        self.bk, self.shared, self.conf = bk, shared, conf
        self.rng = random.Random(f"{conf.seed}-reader-{index}")
        self.reads = 0
        self.errors = 0

    def run(self) -> None:
        while not self.shared.stop.wait(0.3):
            closed = self.shared.closed_ledgers()
            if not closed:
                continue
            ledger = closed[self.rng.randrange(len(closed))]
            with self.shared.lock:
                acks = dict(self.shared.acks.get(ledger, {}))
            if not acks:
                continue
            first = self.rng.choice(sorted(acks))
            last = min(max(acks), first + 10)
            try:
                reader = self.bk.open_ledger(ledger, recover=False)
                for entry in reader.iter_entries(first, last):
                    self.reads += 1
                    want = acks.get(entry.entry_id)
                    if want is not None and digest(bytes(entry.payload)) != want:
                        self.shared.history.record(
                            "read", ledger=ledger, entry=entry.entry_id, status="mismatch"
                        )
            except Exception:
                self.errors += 1  # unavailability under faults is allowed; wrong data is not


class Recoverer(threading.Thread):
    """Opens crashed writers' ledgers with recovery (fencing), as a new owner would, and records the close."""

    def __init__(self, *, bk: BookKeeper, shared: Shared, delay_s: float = 2.0) -> None:
        super().__init__(name="chaos-recoverer", daemon=True)
        self.bk, self.shared, self.delay_s = bk, shared, delay_s

    def run(self) -> None:
        while not self.shared.stop.is_set():
            try:
                ledger = self.shared.crashed.get(timeout=0.5)
            except queue.Empty:
                continue
            with self.shared.lock:  # a new owner takes over `delay_s` after the crash, not after the backlog
                due = self.shared.crashed_at.get(ledger, 0.0) + self.delay_s
            if self.shared.stop.wait(max(0.0, due - time.monotonic())):
                self.shared.crashed.put(ledger)
                return
            if not recover(self.bk, self.shared, ledger):
                self.shared.crashed.put(ledger)
                self.shared.stop.wait(1.0)


def recover(bk: BookKeeper, shared: Shared, ledger: int) -> bool:
    """Open `ledger` with recovery; records the close (True) or the failure (False, retry later)."""
    try:
        md = bk.open_ledger(ledger, recover=True).metadata
    except Exception as exc:
        shared.history.record(
            "recovery_failed", ledger=ledger, error=f"{type(exc).__name__}: {str(exc)[:200]}"
        )
        return False
    shared.history.record(
        "close", ledger=ledger, last_entry=md.last_entry_id, by="recovery", segments=len(md.segments)
    )
    with shared.lock:
        shared.open.discard(ledger)
        if ledger not in shared.closed:
            shared.closed.append(ledger)
    return True


def drain_recoveries(bk: BookKeeper, shared: Shared, *, timeout_s: float) -> list[int]:
    """Recover every crashed ledger still waiting (after faults stopped); the ones that failed throughout."""
    deadline = time.monotonic() + timeout_s
    waiting: list[int] = []
    while True:
        try:
            waiting.append(shared.crashed.get_nowait())
        except queue.Empty:
            break
    failed = []
    for ledger in sorted(set(waiting)):
        while not recover(bk, shared, ledger):
            if time.monotonic() > deadline:
                failed.append(ledger)
                break
            time.sleep(1)
    return failed
