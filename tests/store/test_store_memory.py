"""The lifecycle rules and the drain on the in-memory ClusterStore: no JVM, the inner loop.

The assertions live in tests/store_contract.py; tests/store/test_store_contract_zk.py runs the
same ones on a real ZooKeeper, so a difference between the two stores fails there.
"""

from __future__ import annotations

import pytest

from bkaudit.model.dataloss import DataLossRecord
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.store.memory import MemoryStore
from tests.store_contract import *  # noqa: F403  (the shared tests, collected here)


class MemoryBackend:
    def __init__(self) -> None:
        self.store = MemoryStore()

    def add_cookie(self, bookie: str) -> None:
        self.store.add_cookie(bookie)

    def register(self, bookie: str, data: bytes, *, readonly: bool = False) -> None:
        self.store.register(bookie, data, readonly=readonly)

    def put_ledger(self, ledger_id: int, metadata: LedgerMetadata) -> None:
        self.store.put_ledger(ledger_id, metadata)

    def delete_ledger(self, ledger_id: int) -> None:
        self.store.delete_ledger(ledger_id)

    def record_data_loss(self, record: DataLossRecord) -> None:
        self.store.record_data_loss(record)

    def disable_replication(self) -> None:
        self.store.replication_enabled = False

    def marker(self, ledger_id: int) -> tuple[str, ...] | None:
        return self.store.markers.get(ledger_id)

    def corrupt_state(self, bookie: str) -> None:
        self.store.states[bookie] = (b"garbage", 0)

    def set_serving_bytes(self, bookie: str, data: bytes) -> None:
        self.store.serving[bookie] = data

    def lock(self, ledger_id: int, holder: str) -> None:
        self.store.locks[ledger_id] = holder

    def vote(self, bookie: str) -> None:
        self.store.election.vote(bookie)

    def deregister(self, bookie: str) -> None:
        self.store.deregister(bookie)

    def set_racks(self, data: bytes) -> None:
        self.store.set_racks(data)


@pytest.fixture
def cluster() -> MemoryBackend:
    return MemoryBackend()
