"""Lifecycle state in a real ZooKeeper: `cookies/<id>/state`, CAS, history, refusals, removal.

No bookie runs here: the point is that the state is managed while the bookie host is down.
"""

from __future__ import annotations

import threading

import pytest

from bkaudit.errors import MetadataConflict
from bkaudit.formats import ledger_metadata, records
from bkaudit.lifecycle import service
from bkaudit.model import lifecycle as lc
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
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
    assert service.current(zk, BOOKIE, root=zk_root)[0] is S.ACTIVE
    service.transition(zk, BOOKIE, S.DRAINING, actor=OP, by="alice", reason="scale down", root=zk_root)
    data, _ = zk.get(f"{zk_root}/cookies/{BOOKIE}/state")
    record = lc.parse(data)
    got = (record.state, record.previous, record.by, record.reason)
    assert got == (S.DRAINING, S.ACTIVE, "alice", "scale down")
    # the cookie itself is untouched (BookKeeper still parses it)
    assert registry.read_cookie(zk, BOOKIE, zk_root) is not None


def test_unknown_bookie_and_bad_transitions_are_refused(zk, zk_root: str) -> None:
    with pytest.raises(service.UnknownBookie):
        service.transition(zk, "nobody:1", S.DRAINING, actor=OP, by="a", root=zk_root)
    add_cookie(zk, zk_root, BOOKIE)
    with pytest.raises(lc.TransitionRefused):
        service.transition(zk, BOOKIE, S.DRAINED, actor=OP, by="a", root=zk_root)
    with pytest.raises(lc.TransitionRefused):
        service.transition(zk, BOOKIE, S.REMOVED, actor=OP, by="a", root=zk_root)
    assert not zk.exists(paths.lifecycle_state_path(BOOKIE, root=zk_root))


def test_history_is_append_only_and_complete(zk, zk_root: str) -> None:
    add_cookie(zk, zk_root, BOOKIE)
    service.transition(zk, BOOKIE, S.DRAINING, actor=OP, by="alice", root=zk_root)
    service.transition(zk, BOOKIE, S.DRAINED, actor=AUD, by="auditor", reason="no ledger left", root=zk_root)
    service.transition(zk, BOOKIE, S.REMOVED, actor=OP, by="bob", root=zk_root)
    assert registry.read_cookie(zk, BOOKIE, zk_root) is None
    assert not zk.exists(paths.lifecycle_state_path(BOOKIE, root=zk_root))
    hist = store.history(zk, BOOKIE, root=zk_root)
    assert [(h.previous, h.state, h.by) for h in hist] == [
        (S.ACTIVE, S.DRAINING, "alice"), (S.DRAINING, S.DRAINED, "auditor"), (S.DRAINED, S.REMOVED, "bob")
    ]


def test_racing_writers_one_wins(sessions, zk_root: str) -> None:
    """Two operators drain at once: exactly one transition and one history record."""
    first = sessions()
    add_cookie(first, zk_root, BOOKIE)
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def drain(client) -> None:
        barrier.wait()
        try:
            service.transition(client, BOOKIE, S.DRAINING, actor=OP, by="x", root=zk_root)
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


def test_mark_drained_and_remove_list_ledgers_still_referencing(zk, zk_root: str) -> None:
    add_cookie(zk, zk_root, BOOKIE)
    add_ledger(zk, zk_root, 7, (BOOKIE, "10.0.0.2:3181"))
    service.transition(zk, BOOKIE, S.DRAINING, actor=OP, by="a", root=zk_root)
    service.transition(zk, BOOKIE, S.DRAINING_FAILED, actor=AUD, by="auditor", root=zk_root)
    with pytest.raises(lc.TransitionRefused) as refused:
        service.transition(zk, BOOKIE, S.DRAINED, actor=OP, by="a", root=zk_root)
    assert refused.value.blockers == ("ledger 7",)
    zk.delete(paths.ledger_path(7, root=zk_root))  # the operator dealt with the bad ledger
    service.transition(zk, BOOKIE, S.DRAINED, actor=OP, by="a", root=zk_root)
    assert service.current(zk, BOOKIE, root=zk_root)[0] is S.DRAINED


def test_stale_expectation_is_refused(zk, zk_root: str) -> None:
    add_cookie(zk, zk_root, BOOKIE)
    with pytest.raises(lc.TransitionRefused):
        service.transition(zk, BOOKIE, S.DRAINED, actor=AUD, by="auditor", root=zk_root, expected=S.DRAINING)


def test_malformed_state_znode_is_reported_not_guessed(zk, zk_root: str) -> None:
    add_cookie(zk, zk_root, BOOKIE)
    zk.create(paths.lifecycle_state_path(BOOKIE, root=zk_root), b"garbage")
    assert "error" in service.describe(zk, BOOKIE, root=zk_root)
    assert BOOKIE not in service.states(zk, root=zk_root)
    with pytest.raises(Exception, match="lifecycle state"):
        service.transition(zk, BOOKIE, S.DRAINING, actor=OP, by="a", root=zk_root)


def test_drain_failures_and_progress_records(zk, zk_root: str) -> None:
    assert store.record_failure(zk, BOOKIE, 3, "boom", "t", root=zk_root) == 1
    assert store.record_failure(zk, BOOKIE, 3, "boom", "t", root=zk_root) == 2
    assert store.list_failures(zk, BOOKIE, root=zk_root)[3]["count"] == 2
    store.write_progress(zk, BOOKIE, {"ledgers_left": 4}, root=zk_root)
    assert store.read_progress(zk, BOOKIE, root=zk_root) == {"ledgers_left": 4}
    store.clear_drain_records(zk, BOOKIE, root=zk_root)
    assert store.list_failures(zk, BOOKIE, root=zk_root) == {}
