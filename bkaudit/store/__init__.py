"""The cluster's coordination state behind one object: what bkaudit's services read and write in ZooKeeper.

Callers take a `ClusterStore` (bkaudit.store.base) and never a raw client, a root or a state root, as
BookKeeper's auditor tasks take an injected LedgerManager and LedgerUnderreplicationManager. `ZkStore`
(bkaudit.store.zookeeper) is bound once to its client, ledgers root, state root and ACL; `MemoryStore`
(bkaudit.store.memory) keeps the same records in dicts for unit tests that need no JVM, and
tests/store_contract.py holds one set of assertions that runs against both.
"""

from bkaudit.store.base import ClusterStore
from bkaudit.store.zookeeper import ZkStore, bind, connect

__all__ = ["ClusterStore", "ZkStore", "bind", "connect"]
