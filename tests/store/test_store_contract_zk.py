"""The lifecycle rules and the drain on a real ZooKeeper: the same assertions as the in-memory store's
(tests/store_contract.py), so the unit tests' double is held to what ZooKeeper does.

The cluster is arranged as bookies and writers arrange it: cookies and registrations at BookKeeper's
paths, ledger metadata in its v3 format, data-loss records where the Auditor writes them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.exceptions import NodeExistsError

from bkaudit.formats import ledger_metadata, records
from bkaudit.model.dataloss import DataLossRecord
from bkaudit.model.ledger import LedgerMetadata
from bkaudit.store import ZkStore
from bkaudit.zk import dataloss, paths, registry
from bkaudit.zk import underreplication as ur
from tests.store_contract import *  # noqa: F403  (the shared tests, collected here)


class ZkBackend:
    def __init__(self, zk, root: str) -> None:  # type: ignore[no-untyped-def]
        self.zk, self.root = zk, root
        self.store = ZkStore(zk, root=root)
        self.racks_before: bytes | None = None  # /bookies before this test set it (b"": there was none)

    def add_cookie(self, bookie: str) -> None:
        registry.create_cookie(self.zk, records.Cookie(bookie, ("/d",), ("/d",), "inst"), root=self.root)

    def register(self, bookie: str, data: bytes, *, readonly: bool = False) -> None:
        self.zk.ensure_path(paths.available_root(root=self.root))
        registry.register(self.zk, bookie, data, readonly=readonly, root=self.root)

    def put_ledger(self, ledger_id: int, metadata: LedgerMetadata) -> None:
        path, data = paths.ledger_path(ledger_id, root=self.root), ledger_metadata.serialize(metadata)
        try:
            self.zk.create(path, data, makepath=True)
        except NodeExistsError:
            self.zk.set(path, data)

    def delete_ledger(self, ledger_id: int) -> None:
        self.zk.delete(paths.ledger_path(ledger_id, root=self.root))

    def record_data_loss(self, record: DataLossRecord) -> None:
        dataloss.write(self.zk, record, root=self.root)

    def disable_replication(self) -> None:
        ur.disable_replication(self.zk, root=self.root)

    def marker(self, ledger_id: int) -> tuple[str, ...] | None:
        found = ur.get_marker(self.zk, ledger_id, root=self.root)
        return None if found is None else found[0].replicas

    def corrupt_state(self, bookie: str) -> None:
        self.zk.create(paths.lifecycle_state_path(bookie, root=self.root), b"garbage")

    def set_serving_bytes(self, bookie: str, data: bytes) -> None:
        self.zk.set(paths.serving_path(bookie, root=self.root), data)

    def lock(self, ledger_id: int, holder: str) -> None:
        assert ur.acquire_lock(self.zk, ledger_id, root=self.root, holder=holder) is not None

    def vote(self, bookie: str) -> None:
        ur.create_vote(self.zk, bookie, root=self.root)

    def deregister(self, bookie: str) -> None:
        registry.deregister(self.zk, bookie, root=self.root)

    def set_racks(self, data: bytes) -> None:
        if self.racks_before is None:
            self.racks_before = self.zk.get(paths.RACKS_PATH)[0] if self.zk.exists(paths.RACKS_PATH) else b""
        self.zk.ensure_path(paths.RACKS_PATH)
        self.zk.set(paths.RACKS_PATH, data)

    def put_back_racks(self) -> None:
        if self.racks_before == b"" and self.zk.exists(paths.RACKS_PATH):
            self.zk.delete(paths.RACKS_PATH)
        elif self.racks_before:
            self.zk.set(paths.RACKS_PATH, self.racks_before)


@pytest.fixture
def cluster(zk, zk_root: str) -> Iterator[ZkBackend]:  # type: ignore[no-untyped-def]
    backend = ZkBackend(zk, zk_root)
    yield backend
    backend.put_back_racks()
