"""The queue picker and the auditor election against a real ZooKeeper (no bookies), several sessions."""

from __future__ import annotations

import random
import threading

from bkaudit.autorecovery import admin
from bkaudit.autorecovery import metrics as m
from bkaudit.autorecovery.election import AuditorElector
from bkaudit.autorecovery.queue import LedgerPicker
from bkaudit.model.dataloss import DataLossRecord, now_iso
from bkaudit.store import ZkStore
from bkaudit.zk import dataloss
from bkaudit.zk import underreplication as ur
from bkaudit.zk.client import close
from bkaudit.zk.ledgers import init_cluster
from tests.autorecovery.support import wait_for

IDS = [0, 1, 7, 65535, 65536, 2**31 + 5, 0x4AFEBEEF0000FEED]


def test_queued_ids_come_from_the_hex_directories(zk, zk_root) -> None:
    init_cluster(zk, root=zk_root)
    for lid in IDS:
        ur.mark_underreplicated(zk, lid, ["b:1"], root=zk_root)
    assert ZkStore(zk, root=zk_root).queue.queued() == sorted(IDS)
    assert list(ur.list_underreplicated(zk, root=zk_root)) == sorted(IDS)


def test_picker_takes_each_unlocked_ledger_once_in_random_order(zk, sessions, zk_root) -> None:
    init_cluster(zk, root=zk_root)
    for lid in IDS:
        ur.mark_underreplicated(zk, lid, ["b:1"], root=zk_root)
    other = sessions()
    assert ur.acquire_lock(other, 7, root=zk_root, holder="other") is not None
    queue = ZkStore(zk, root=zk_root).queue
    picker = LedgerPicker(queue, holder="me", rng=random.Random(1))
    taken = []
    while (picked := picker.pick(skip=lambda lid: lid == 1)) is not None:
        lid, version = picked
        assert version == 0 and queue.holds_lock(lid)
        assert ur.lock_holder(zk, lid, root=zk_root) == "me"
        taken.append(lid)
    assert sorted(taken) == sorted(set(IDS) - {1, 7})  # locked elsewhere and skipped ones are left
    assert taken != sorted(taken)  # shuffled
    assert queue.locked() == set(IDS) - {1}
    assert not queue.holds_lock(7)


def test_picker_survives_markers_resolved_under_it(zk, sessions, zk_root) -> None:
    init_cluster(zk, root=zk_root)
    for lid in range(20):
        ur.mark_underreplicated(zk, lid, ["b:1"], root=zk_root)
    picker = LedgerPicker(ZkStore(zk, root=zk_root).queue, holder="me", rng=random.Random(2))
    first = picker.pick()
    assert first is not None
    other = sessions()
    for lid in range(20):  # another worker resolves everything else meanwhile
        version = ur.acquire_lock(other, lid, root=zk_root, holder="other")
        if version is not None:
            assert ur.mark_replicated(other, lid, version=version, root=zk_root)
    assert picker.pick() is None
    assert ZkStore(zk, root=zk_root).queue.queued() == [first[0]]


def test_status_reports_queue_locks_and_data_loss(zk, zk_root) -> None:
    init_cluster(zk, root=zk_root)
    ur.mark_underreplicated(zk, 3, ["b:1"], root=zk_root)
    ur.mark_underreplicated(zk, 4, ["b:1"], root=zk_root)
    ur.acquire_lock(zk, 4, root=zk_root, holder="w")
    record = DataLossRecord(3, ((5, 9),), now_iso(), ("b:1",), 3, "w")
    dataloss.write(zk, record, root=zk_root)
    doc = admin.status(ZkStore(zk, root=zk_root))
    assert doc["queue_size"] == 2 and doc["underreplicated"] == [3, 4]
    assert doc["locked"] == [{"ledger_id": 4, "holder": "w"}]
    assert doc["data_lost"][0]["lost_entry_ranges"] == [[5, 9]]
    assert doc["auditor"] is None and doc["enabled"] is True
    assert list(dataloss.list_ids(zk, root=zk_root)) == [3]
    assert dataloss.delete(zk, 3, root=zk_root) and not dataloss.exists(zk, 3, root=zk_root)
    assert "data lost:    0 ledgers" in admin.human_status(admin.status(ZkStore(zk, root=zk_root)))


def test_election_lowest_vote_wins_and_the_successor_takes_over(sessions, zk_root) -> None:
    init_cluster(sessions(), root=zk_root)
    terms: list[tuple[str, str]] = []
    lock = threading.Lock()
    electors = []
    clients = []
    metrics = m.AutoRecoveryMetrics()
    for name in ("a", "b", "c"):
        client = sessions()
        clients.append(client)

        def on_elected(name: str = name) -> None:
            with lock:
                terms.append(("elected", name))

        def on_demoted(name: str = name) -> None:
            with lock:
                terms.append(("demoted", name))

        electors.append(
            AuditorElector(
                ZkStore(client, root=zk_root).election, name, on_elected=on_elected, on_demoted=on_demoted,
                metrics=metrics,
            ).start()
        )
        wait_for(lambda n=len(electors): len(ur.list_votes(clients[0], root=zk_root)) == n, 10, "votes")
    observer = sessions()
    wait_for(lambda: terms == [("elected", "a")], 10, "a elected")
    # every elector knows its place: a leads (its term started before `decided`), b and c wait behind a vote
    wait_for(lambda: all(e.decided.is_set() for e in electors), 10, "decided")
    assert ZkStore(observer, root=zk_root).queue.auditor() == "a"
    close(clients[0])  # a's session ends: its vote goes, b (a's successor) is elected, c keeps waiting
    wait_for(lambda: ("elected", "b") in terms, 10, "b elected")
    assert ZkStore(observer, root=zk_root).queue.auditor() == "b"
    electors[1].stop()  # graceful: vote deleted, c takes over at once
    wait_for(lambda: ("elected", "c") in terms, 10, "c elected")
    assert [t for t in terms if t[0] == "elected"] == [("elected", "a"), ("elected", "b"), ("elected", "c")]
    assert terms.index(("demoted", "b")) < terms.index(("elected", "c"))
    assert metrics.get(m.ELECTION_ATTEMPTS) == 3
    electors[2].stop()
    electors[0].stop()
    assert ZkStore(observer, root=zk_root).queue.auditor() is None
