"""The ReplicationWorker on the in-memory ClusterStore: no JVM, no ZooKeeper.

The bookies are real bkaudit bookies (Storage + BookieService + NativeServer on loopback, no registration),
reached through the real BookieClientPool; ledgers are written by the real bkaudit client. Only the
coordination records (the queue, its locks, data-loss records, registrations) and the ledger metadata are in
memory: MemoryStore is held to ZooKeeper by tests/store_contract.py. Ground truth is what each test did: the
bookie it stopped, the entries it deleted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bkaudit.audit.settings import PlacementSettings, policy_from_settings
from bkaudit.autorecovery import metrics as m
from bkaudit.autorecovery.events import EventLog
from bkaudit.autorecovery.settings import AutoRecoverySettings
from bkaudit.autorecovery.shared import Outcome, Shared
from bkaudit.autorecovery.view import BookieView
from bkaudit.autorecovery.worker import ReplicationWorker
from bkaudit.bookie.nativeserver import NativeServer
from bkaudit.bookie.service import BookieService
from bkaudit.bookie.storage import Storage
from bkaudit.client.bookkeeper import BookKeeper
from bkaudit.model.quorum import write_set
from bkaudit.rpc.pool import BookieClientPool
from bkaudit.store.memory import MemoryStore
from tests.client.test_client_fakes import StaticDirectory

IDS = ["bookie-a:3181", "bookie-b:3181", "bookie-c:3181", "bookie-d:3181"]
ENTRIES = 12


@dataclass
class Bookie:
    storage: Storage
    server: NativeServer


@dataclass
class Cluster:
    tmp: Path
    bookies: dict[str, Bookie] = field(default_factory=dict)
    store: MemoryStore = field(default_factory=MemoryStore)
    pool: BookieClientPool | None = None

    def start(self, bookie_id: str) -> None:
        storage = Storage(self.tmp / bookie_id.replace(":", "_"))
        server = NativeServer(BookieService(storage), "127.0.0.1", 0)
        port = server.start()
        self.bookies[bookie_id] = Bookie(storage, server)
        self.store.add_cookie(bookie_id)
        self.store.register(bookie_id)
        assert self.pool is not None
        self.pool.static[bookie_id] = f"127.0.0.1:{port}"

    def stop(self, bookie_id: str) -> None:
        """The bookie dies: its server and its registration go."""
        bookie = self.bookies.pop(bookie_id)
        bookie.server.stop(grace=0)
        bookie.storage.close()
        self.store.deregister(bookie_id)
        assert self.pool is not None
        self.pool.invalidate(bookie_id)

    def client(self) -> BookKeeper:
        assert self.pool is not None
        return BookKeeper(store=self.store.ledgers, pool=self.pool, directory=StaticDirectory(IDS[:3]))

    def worker(self, **settings: object) -> ReplicationWorker:
        assert self.pool is not None
        bk = self.client()
        shared = Shared(
            cluster=self.store, settings=AutoRecoverySettings(**settings),  # type: ignore[arg-type]
            view=BookieView(self.store.registry).start(), pool=self.pool, store=self.store.ledgers,
            policy=policy_from_settings(PlacementSettings()), metrics=m.AutoRecoveryMetrics(),
            events=EventLog(),
            holder="worker-1", recover=lambda ledger_id, lost: bk.open_ledger(ledger_id, recover=True,
                                                                              lost_copies=lost),
            read_timeout_s=5.0,
        )
        return ReplicationWorker(shared, "worker-1/w0")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, pool=BookieClientPool(request_timeout_s=5.0, connect_timeout_s=2.0))
    for bookie_id in IDS:
        c.start(bookie_id)
    yield c
    for bookie_id in list(c.bookies):
        c.stop(bookie_id)
    assert c.pool is not None
    c.pool.close()


def write_closed_ledger(cluster: Cluster) -> int:
    """A closed ledger of ENTRIES entries on bookies a, b, c (E=3, WQ=2, AQ=2)."""
    writer = cluster.client().create_ledger(3, 2, 2, password=b"pw")
    for n in range(ENTRIES):
        writer.add_entry(f"entry-{n}".encode())
    writer.close()
    return writer.ledger_id


def stored(cluster: Cluster, bookie_id: str, ledger_id: int) -> set[int]:
    storage = cluster.bookies[bookie_id].storage
    return {e for e in range(ENTRIES) if storage.has_entry(ledger_id, e)}


def test_a_lost_bookies_entries_are_copied_to_a_new_bookie_and_the_marker_resolved(cluster: Cluster) -> None:
    ledger_id = write_closed_ledger(cluster)
    lost_id = IDS[0]
    held_by_lost = stored(cluster, lost_id, ledger_id)
    assert held_by_lost  # the stripe gave it entries to lose
    cluster.stop(lost_id)
    assert cluster.store.queue.mark(ledger_id, [lost_id])

    assert cluster.worker().step() is Outcome.REPLICATED

    metadata, _ = cluster.store.ledgers.read(ledger_id)
    assert metadata.segments[0].ensemble == (IDS[3], IDS[1], IDS[2])  # d took a's index
    assert stored(cluster, IDS[3], ledger_id) == held_by_lost  # exactly what a held
    ensemble = metadata.segments[0].ensemble
    for entry_id in range(ENTRIES):  # every entry is on its whole write set again
        for index in write_set(entry_id, 3, 2):
            assert cluster.bookies[ensemble[index]].storage.has_entry(ledger_id, entry_id)
    assert cluster.store.queue.marked() == [] and cluster.store.queue.locked() == set()


def test_entries_no_replica_holds_end_in_a_data_loss_record(cluster: Cluster) -> None:
    ledger_id = write_closed_ledger(cluster)
    entry_id = 4
    holders = [IDS[i] for i in write_set(entry_id, 3, 2)]
    for bookie_id in holders:  # every copy of entry 4 is gone
        assert cluster.bookies[bookie_id].storage.delete_entries(ledger_id, [entry_id]) == 1
    assert cluster.store.queue.mark(ledger_id, holders)

    assert cluster.worker(data_loss_max_attempts=1).step() is Outcome.DATA_LOST

    record = cluster.store.data_loss.read(ledger_id)
    assert record is not None and record.lost_entry_ranges == ((entry_id, entry_id),)
    assert set(record.bookies) == set(holders) and record.detector == "worker-1"
    assert cluster.store.queue.marked() == [ledger_id]  # BookKeeper's marker stays for its tools
    assert cluster.store.queue.locked() == set()  # ... but no worker keeps it
    assert cluster.worker().step() is None  # recorded: skipped from then on


def test_a_deleted_ledgers_marker_and_record_are_removed(cluster: Cluster) -> None:
    ledger_id = write_closed_ledger(cluster)
    cluster.store.ledgers.delete(ledger_id)
    assert cluster.store.queue.mark(ledger_id, [IDS[0]])
    assert cluster.worker().step() is Outcome.DELETED
    assert cluster.store.queue.marked() == [] and cluster.store.data_loss.ids() == []


def test_nothing_is_taken_while_replication_is_disabled(cluster: Cluster) -> None:
    ledger_id = write_closed_ledger(cluster)
    cluster.stop(IDS[0])
    assert cluster.store.queue.mark(ledger_id, [IDS[0]])
    assert cluster.store.queue.set_enabled(False)
    worker = cluster.worker(idle_poll_s=0.05)
    assert worker.step() is None and worker.paused
    assert cluster.store.queue.locked() == set() and cluster.store.queue.marked() == [ledger_id]
    assert cluster.store.queue.set_enabled(True)
    assert worker.step() is Outcome.REPLICATED and not worker.paused
