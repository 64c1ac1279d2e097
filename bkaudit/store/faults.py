"""ZooKeeper-level damage and its inspection for fault injection (bkaudit.chaos, the demo): what no service
may do to a store, so it is not part of the ClusterStore Protocols.

The injector acts on the cluster's ZooKeeper store directly: a corrupt metadata znode is damage BookKeeper's
own readers must meet, and its reads of metadata are single attempts (a fault may be restarting ZooKeeper:
the injector looks again later, where a service's read would wait and retry).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bkaudit.zk import ledgers, paths

if TYPE_CHECKING:
    from bkaudit.model.ledger import LedgerMetadata
    from bkaudit.store.zookeeper import ZkStore


def corrupt_ledger(store: ZkStore, ledger_id: int, data: bytes) -> None:
    """Overwrite the ledger's metadata znode with `data`, whatever its version."""
    store.client.set(paths.ledger_path(ledger_id, root=store.root), data)


def read_metadata(store: ZkStore, ledger_id: int) -> LedgerMetadata:
    """The ledger's metadata, read once (FormatError when corrupt, kazoo's errors when ZooKeeper is away)."""
    return ledgers.read_ledger_metadata(store.client, ledger_id, root=store.root)[0]
