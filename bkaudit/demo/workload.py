"""The demo's workload: a few hundred ledgers of mixed shapes, and one pinned to a single rack.

Deterministic from its seed, and `Written` keeps what was written: the ground truth the audit is held to.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bkaudit.model.ledger import DigestType
from bkaudit.model.placement import DefaultPolicy

if TYPE_CHECKING:
    from bkaudit.zk.settings import ZkSettings

SHAPES: tuple[tuple[int, int, int], ...] = ((3, 2, 2), (3, 3, 2), (4, 3, 2), (5, 3, 3), (4, 2, 2), (3, 3, 3))
"""(E, WQ, AQ) mixes seen in practice (Pulsar's default is 2/2/2; 3/3/2 and 5/3/3 are common choices)."""
MANAGED_LEDGER_KEY = "pulsar/managed-ledger"
PAYLOAD = b"bkaudit-demo-entry-" + b"x" * 100


@dataclass(frozen=True)
class Plan:
    """One ledger to write."""

    shape: tuple[int, int, int]
    entries: int
    leave_open: bool
    topic: str | None
    digest: DigestType


@dataclass
class Written:
    """What the workload wrote: the ground truth the audit is compared with."""

    ledgers: list[int] = field(default_factory=list)
    open_ledgers: list[int] = field(default_factory=list)
    managed: dict[int, str] = field(default_factory=dict)
    entries: int = 0
    shapes: dict[str, int] = field(default_factory=dict)


def plan(count: int, seed: int = 7, topics: int = 12) -> list[Plan]:
    """`count` ledgers: shapes round robin, 1-40 entries, ~10% open, ~40% on Pulsar topics (deterministic)."""
    rng = random.Random(seed)
    digests = (DigestType.CRC32C, DigestType.CRC32, DigestType.MAC)
    out = []
    for i in range(count):
        topic = None
        if rng.random() < 0.4:
            topic = f"public/default/persistent/demo-topic-{rng.randrange(topics)}"
        out.append(Plan(SHAPES[i % len(SHAPES)], rng.randint(1, 40), rng.random() < 0.1, topic,
                        digests[i % len(digests)]))
    return out


def write_ledgers(bk: Any, plans: Sequence[Plan], *, threads: int = 8,
                  progress: Callable[[int, int], None] | None = None) -> Written:
    """Write every planned ledger (adds pipelined per ledger, ledgers in parallel); open ones are abandoned
    by their writer, like a broker that crashed."""
    written = Written()

    def one(p: Plan) -> tuple[int, Plan]:
        custom = {MANAGED_LEDGER_KEY: p.topic} if p.topic else None
        handle = bk.create_ledger(*p.shape, digest_type=p.digest, password=b"demo", custom_metadata=custom)
        for future in [handle.add_entry_async(PAYLOAD) for _ in range(p.entries)]:
            future.result(timeout=60)
        if p.leave_open:
            handle.abandon()
        else:
            handle.close()
        return int(handle.ledger_id), p

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="demo-writer") as pool:
        for ledger_id, p in pool.map(one, plans):
            written.ledgers.append(ledger_id)
            written.entries += p.entries
            key = "E{}/WQ{}/AQ{}".format(*p.shape)
            written.shapes[key] = written.shapes.get(key, 0) + 1
            if p.leave_open:
                written.open_ledgers.append(ledger_id)
            if p.topic:
                written.managed[ledger_id] = p.topic
            if progress is not None:
                progress(len(written.ledgers), len(plans))
    return written


class PinnedEnsemble(DefaultPolicy):
    """A placement "policy" that always answers the same ensemble: how a misconfigured client (or a
    hand-edited znode) ends up with every copy on one rack."""

    def __init__(self, ensemble: Sequence[str]) -> None:
        super().__init__()
        object.__setattr__(self, "pinned", tuple(ensemble))

    def choose_ensemble(self, ensemble_size: int, write_quorum: int, ack_quorum: int,
                        candidates: Sequence[str], topology: Any, **_: Any) -> tuple[str, ...]:
        return tuple(self.pinned[:ensemble_size])  # type: ignore[attr-defined]


def write_pinned(zk: ZkSettings, ensemble: Sequence[str], entries: int, topic: str) -> int:
    """One closed ledger with E = WQ = AQ = len(ensemble) on exactly `ensemble`; returns its id."""
    from bkaudit.client import BookKeeper

    n = len(ensemble)
    with BookKeeper.connect(zk, placement=PinnedEnsemble(ensemble)) as bk:
        handle = bk.create_ledger(n, n, n, password=b"demo", custom_metadata={MANAGED_LEDGER_KEY: topic})
        for _ in range(entries):
            handle.add_entry(PAYLOAD)
        handle.close()
        return int(handle.ledger_id)
