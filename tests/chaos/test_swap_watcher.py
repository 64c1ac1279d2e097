"""The chaos run's SwapWatcher: a repair is recorded once a damaged segment's ensemble stops naming the bookie
whose copies were destroyed, whoever swapped it (Apache BookKeeper's worker writes no bkaudit events).

Real ZooKeeper; the metadata is what the test writes, the damage what it records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bkaudit.chaos.faults import SwapWatcher
from bkaudit.chaos.history import History
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.store import ZkStore
from bkaudit.zk.ledgers import (
    create_ledger_metadata,
    init_cluster,
    read_ledger_metadata,
    write_ledger_metadata,
)


@dataclass
class Cluster:  # what the watcher uses of a LocalCluster
    zk: Any
    root: str

    def store(self) -> ZkStore:
        return ZkStore(self.zk, root=self.root)


def md(*segments: tuple[int, tuple[str, ...]]) -> LedgerMetadata:
    return LedgerMetadata(3, 2, 2, LedgerState.CLOSED, 19, 160, DigestType.CRC32C, b"",
                          tuple(Segment(first, ens) for first, ens in segments), ctime=1_700_000_000_000)


def test_a_swap_of_the_damaged_bookie_is_a_repair_of_its_segment(zk, zk_root) -> None:
    init_cluster(zk, root=zk_root)
    create_ledger_metadata(zk, 5, md((0, ("a:1", "b:1", "c:1")), (10, ("a:1", "b:1", "d:1"))), root=zk_root)
    history = History()
    watcher = SwapWatcher(Cluster(zk, zk_root), history)  # type: ignore[arg-type]
    history.record("damage", ledger=5, bookie="b:1", segment=1, index=1, first=10, last=19)
    history.record("damage", ledger=5, bookie="c:1", segment=0, index=2, first=0, last=9)
    history.record("damage", ledger=5, kind="metadata")  # a corrupted znode is no copy: ignored
    watcher.poll()
    assert history.of_type("repair") == []

    _, version = read_ledger_metadata(zk, 5, root=zk_root)
    write_ledger_metadata(zk, 5, md((0, ("a:1", "b:1", "c:1")), (10, ("a:1", "e:1", "d:1"))),
                          expected_version=version.version, root=zk_root)
    watcher.poll()
    watcher.poll()  # once per damage
    (repair,) = history.of_type("repair")
    assert (repair["ledger"], repair["segment"], repair["node"]) == (5, 1, "metadata")
    assert repair["locked_t"] < repair["done_t"]
