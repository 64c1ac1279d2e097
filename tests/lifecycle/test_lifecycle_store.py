"""Lifecycle state in a real ZooKeeper: the `cookies/<id>/state` znode and racing sessions.

No bookie runs here: the point is that the state is managed while the bookie host is down. The rules
(refusals, history, blockers, removal, drain records) are asserted on ZooKeeper and on the in-memory store
alike in tests/store_contract.py (run on ZooKeeper by tests/store/test_store_contract_zk.py).
"""

from __future__ import annotations

import threading

from bkaudit.errors import MetadataConflict
from bkaudit.formats import ledger_metadata, records
from bkaudit.lifecycle import service
from bkaudit.model import lifecycle as lc
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.store import ZkStore
from bkaudit.zk import lifecycle as store
from bkaudit.zk import paths, registry

S = lc.LifecycleState
OP, AUD = lc.Actor.OPERATOR, lc.Actor.AUDITOR
BOOKIE = "10.0.0.1:3181"


def add_cookie(zk, root: str, bookie: str) -> None:
    registry.create_cookie(zk, records.Cookie(bookie, ("/d",), ("/d",), "inst"), root=root)


def add_ledger(zk, root: str, ledger_id: int, ensemble: tuple[str, ...]) -> None:
    metadata = LedgerMetadata(
        ensemble_size=len(ensemble), write_quorum=len(ensemble), ack_quorum=len(ensemble),
        state=LedgerState.CLOSED, last_entry_id=9, length=1000, digest_type=DigestType.CRC32C, password=b"",
        segments=(Segment(0, ensemble),), ctime=0, custom_metadata={},
    )
    zk.create(paths.ledger_path(ledger_id, root=root), ledger_metadata.serialize(metadata), makepath=True)


def test_default_is_active_and_drain_writes_the_designed_znode(zk, zk_root: str) -> None:
    add_cookie(zk, zk_root, BOOKIE)
    cs = ZkStore(zk, root=zk_root)
    assert service.current(cs, BOOKIE)[0] is S.ACTIVE
    service.transition(cs, BOOKIE, S.DRAINING, actor=OP, by="alice", reason="scale down")
    data, _ = zk.get(f"{zk_root}/cookies/{BOOKIE}/state")
    record = lc.parse(data)
    got = (record.state, record.previous, record.by, record.reason)
    assert got == (S.DRAINING, S.ACTIVE, "alice", "scale down")
    # the cookie itself is untouched (BookKeeper still parses it)
    assert registry.read_cookie(zk, BOOKIE, zk_root) is not None


def test_racing_writers_one_wins(sessions, zk_root: str) -> None:
    """Two operators drain at once: exactly one transition and one history record."""
    first = sessions()
    add_cookie(first, zk_root, BOOKIE)
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def drain(client) -> None:
        barrier.wait()
        try:
            service.transition(ZkStore(client, root=zk_root), BOOKIE, S.DRAINING, actor=OP, by="x")
            outcomes.append("ok")
        except (MetadataConflict, lc.TransitionRefused):
            outcomes.append("refused")

    threads = [threading.Thread(target=drain, args=(sessions(),)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["ok", "refused", "refused", "refused"]
    assert len(store.history(first, BOOKIE, root=zk_root)) == 1
