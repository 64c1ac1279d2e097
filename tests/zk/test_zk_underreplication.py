"""bkaudit.zk.underreplication against a real ZooKeeper, several sessions where concurrency matters."""

from __future__ import annotations

import threading
import time

import pytest

from bkaudit.errors import FormatError, MetadataError
from bkaudit.zk import paths
from bkaudit.zk import underreplication as ur
from bkaudit.zk.client import RateLimiter, close
from tests import shared_vectors

VECTORS = shared_vectors.load("zk_paths_and_texts.json")
TEXTS = VECTORS["texts"]
A, B = "192.0.2.1:3181", "192.0.2.2:3181"


# -- markers -----------------------------------------------------------------------------------------------
def test_marker_bytes_and_path_match_bookkeeper(zk, zk_root: str) -> None:
    assert ur.mark_underreplicated(zk, 1, [A, B], root=zk_root, now_ms=1700000000000) is True
    vector_path = VECTORS["underreplicated_paths"][0]["path"].replace("/ledgers", zk_root, 1)
    data, stat = zk.get(vector_path)
    assert data == TEXTS["underreplicated"].encode()
    marker, got_stat = ur.get_marker(zk, 1, root=zk_root)
    assert marker.replicas == (A, B) and marker.ctime == 1700000000000
    assert got_stat.version == stat.version == 0
    assert ur.get_marker(zk, 2, root=zk_root) is None


def test_remark_appends_missing_replicas_only(zk, zk_root: str) -> None:
    ur.mark_underreplicated(zk, 3, [A], root=zk_root, now_ms=1000)
    assert ur.mark_underreplicated(zk, 3, [A], root=zk_root, now_ms=2000) is False
    marker, stat = ur.get_marker(zk, 3, root=zk_root)
    assert (marker.replicas, marker.ctime, stat.version) == ((A,), 1000, 0)
    assert ur.mark_underreplicated(zk, 3, [B, A, B], root=zk_root, now_ms=3000) is True
    marker, stat = ur.get_marker(zk, 3, root=zk_root)
    assert (marker.replicas, marker.ctime, stat.version) == ((A, B), 3000, 1)


def test_concurrent_marks_never_lose_a_replica(sessions, zk_root: str) -> None:
    clients = [sessions(), sessions()]
    rounds = 15
    barrier = threading.Barrier(len(clients))
    errors: list[BaseException] = []

    def mark(index: int) -> None:
        try:
            for k in range(rounds):
                barrier.wait()
                ur.mark_underreplicated(clients[index], 11, [f"10.{index}.0.{k}:3181"], root=zk_root)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=mark, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    marker, stat = ur.get_marker(clients[0], 11, root=zk_root)
    expected = {f"10.{i}.0.{k}:3181" for i in range(len(clients)) for k in range(rounds)}
    assert len(marker.replicas) == len(expected) and set(marker.replicas) == expected
    assert stat.version == len(expected) - 1  # one create, then one successful CAS per added replica


def test_list_underreplicated_walks_the_hex_tree(zk, zk_root: str) -> None:
    assert list(ur.list_underreplicated(zk, root=zk_root)) == []
    ids = [2**40 + 3, 0x7AFEBEEF0000FEED, 1, 65536, 2]
    limiter = RateLimiter(1000)
    for lid in ids:
        ur.mark_underreplicated(zk, lid, [A], root=zk_root, rate_limiter=limiter)
    zk.create(f"{paths.ur_ledgers_root(root=zk_root)}/0000/0000/0000/0001/junk", b"")
    assert list(ur.list_underreplicated(zk, root=zk_root)) == sorted(ids)


def test_incompatible_underreplication_layout_is_refused(zk, zk_root: str) -> None:
    ur.ensure_underreplication_layout(zk, root=zk_root)
    assert zk.get(paths.ur_layout_path(root=zk_root))[0] == TEXTS["underreplication_layout"].encode()
    ur.ensure_underreplication_layout(zk, root=zk_root)  # idempotent
    zk.set(paths.ur_layout_path(root=zk_root), b'type: "FANCY"\nversion: 1\n')
    with pytest.raises(MetadataError, match="incompatible"):
        ur.ensure_underreplication_layout(zk, root=zk_root)


# -- locks -------------------------------------------------------------------------------------------------
def test_locks_are_exclusive_and_die_with_the_session(sessions, zk_root: str) -> None:
    first, second = sessions(), sessions()
    ur.mark_underreplicated(first, 5, [A], root=zk_root)
    assert ur.acquire_lock(first, 5, root=zk_root, holder="worker-1") == 0
    lock = paths.lock_path(5, root=zk_root)
    data, stat = second.get(lock)
    assert data == b'bookieId: "worker-1"\n'
    assert stat.ephemeralOwner == first.client_id[0]
    assert ur.acquire_lock(second, 5, root=zk_root, holder="worker-2") is None
    assert ur.lock_holder(second, 5, root=zk_root) == "worker-1"
    assert ur.is_locked(second, 5, root=zk_root)
    assert ur.release_lock(second, 5, root=zk_root) is False  # not its lock
    assert second.exists(lock) is not None

    close(first)  # the holder crashes: its ephemeral lock goes with the session
    assert ur.lock_holder(second, 5, root=zk_root) is None
    assert ur.acquire_lock(second, 5, root=zk_root, holder=None) == 0
    assert second.get(lock)[0] == b""
    assert ur.lock_holder(second, 5, root=zk_root) is None and ur.is_locked(second, 5, root=zk_root)
    assert ur.release_lock(second, 5, root=zk_root) is True
    assert not ur.is_locked(second, 5, root=zk_root)


def test_no_lock_without_a_marker(zk, zk_root: str) -> None:
    assert ur.acquire_lock(zk, 6, root=zk_root, holder="w") is None
    assert zk.exists(paths.lock_path(6, root=zk_root)) is None


def test_mark_replicated_with_stale_version_keeps_the_marker(zk, zk_root: str) -> None:
    ur.mark_underreplicated(zk, 9, [A], root=zk_root)
    seen = ur.acquire_lock(zk, 9, root=zk_root, holder="w")
    ur.mark_underreplicated(zk, 9, [B], root=zk_root)  # re-marked while being repaired
    assert ur.mark_replicated(zk, 9, version=seen, root=zk_root) is False
    assert ur.get_marker(zk, 9, root=zk_root)[0].replicas == (A, B)
    assert not ur.is_locked(zk, 9, root=zk_root)  # lock released either way

    seen = ur.acquire_lock(zk, 9, root=zk_root, holder="w")
    assert seen == 1
    assert ur.mark_replicated(zk, 9, version=seen, root=zk_root) is True
    assert ur.get_marker(zk, 9, root=zk_root) is None
    assert zk.get_children(paths.ur_ledgers_root(root=zk_root)) == []  # 4 hex levels cleaned up
    assert not ur.is_locked(zk, 9, root=zk_root)
    assert ur.mark_replicated(zk, 9, version=0, root=zk_root) is True  # already gone


def test_mark_replicated_keeps_shared_parents(zk, zk_root: str) -> None:
    for lid in (1, 2):
        ur.mark_underreplicated(zk, lid, [A], root=zk_root)
    ur.mark_replicated(zk, 1, version=0, root=zk_root)
    assert zk.get_children(f"{paths.ur_ledgers_root(root=zk_root)}/0000/0000/0000") == ["0002"]
    assert list(ur.list_underreplicated(zk, root=zk_root)) == [2]


# -- switches ----------------------------------------------------------------------------------------------
def test_disable_enable_and_wait(zk, sessions, zk_root: str) -> None:
    ur.ensure_underreplication_layout(zk, root=zk_root)
    assert ur.is_replication_enabled(zk, root=zk_root)
    assert ur.wait_until_enabled(zk, timeout=0.1, root=zk_root) is True
    assert ur.disable_replication(zk, root=zk_root) is True
    assert ur.disable_replication(zk, root=zk_root) is False
    assert zk.get(paths.disable_path(root=zk_root))[0] == b""
    assert not ur.is_replication_enabled(zk, root=zk_root)
    start = time.monotonic()
    assert ur.wait_until_enabled(zk, timeout=0.3, root=zk_root) is False
    assert time.monotonic() - start >= 0.3

    other = sessions()
    timer = threading.Timer(0.3, lambda: ur.enable_replication(other, root=zk_root))
    timer.start()
    start = time.monotonic()
    assert ur.wait_until_enabled(zk, timeout=10, root=zk_root) is True
    assert 0.2 < time.monotonic() - start < 5
    timer.join()
    assert ur.is_replication_enabled(zk, root=zk_root)
    assert ur.enable_replication(zk, root=zk_root) is False


def test_lost_bookie_recovery_delay(zk, zk_root: str) -> None:
    assert ur.get_lost_bookie_recovery_delay(zk, root=zk_root) is None
    ur.set_lost_bookie_recovery_delay(zk, 0, root=zk_root)
    path = paths.lost_bookie_recovery_delay_path(root=zk_root)
    assert zk.get(path)[0] == b"0"
    assert zk.get_acls(path)[0][0].id.scheme == "world"
    ur.set_lost_bookie_recovery_delay(zk, 3600, root=zk_root)
    assert zk.get(path)[0] == b"3600"
    assert ur.get_lost_bookie_recovery_delay(zk, root=zk_root) == 3600
    with pytest.raises(ValueError):
        ur.set_lost_bookie_recovery_delay(zk, 2**31, root=zk_root)
    zk.set(path, b"soon")
    with pytest.raises(FormatError):
        ur.get_lost_bookie_recovery_delay(zk, root=zk_root)


def test_check_ctimes(zk, zk_root: str) -> None:
    assert ur.read_check_ctime(zk, "checkallledgers", root=zk_root) == -1
    ur.write_check_ctime(zk, "checkallledgers", 1700000000000, root=zk_root)
    assert zk.get(paths.check_ctime_path("checkallledgers", root=zk_root))[0].hex() == (
        TEXTS["checkallledgersctime_hex_for_1700000000000"]
    )
    ur.write_check_ctime(zk, "checkallledgers", 1700000000001, root=zk_root)
    assert ur.read_check_ctime(zk, "checkallledgers", root=zk_root) == 1700000000001
    assert ur.read_check_ctime(zk, "replicascheck", root=zk_root) == -1
    ur.write_check_ctime(zk, "replicascheck", 5, root=zk_root)
    assert ur.read_check_ctime(zk, "replicascheck", root=zk_root) == 5
    assert ur.read_check_ctime(zk, "placementpolicycheck", root=zk_root) == -1


# -- auditor election --------------------------------------------------------------------------------------
def test_election_order_and_predecessor_failover(sessions, zk_root: str) -> None:
    voters = [sessions() for _ in range(3)]
    votes = [ur.create_vote(c, f"10.0.0.{i}:3181", root=zk_root) for i, c in enumerate(voters)]
    election = paths.election_root(root=zk_root)
    assert all(v.startswith(f"{election}/V_") for v in votes)
    assert ur.list_votes(voters[2], root=zk_root) == votes
    assert voters[2].get(votes[0])[0] == b'bookieId: "10.0.0.0:3181"\n'
    assert voters[2].get(votes[0])[1].ephemeralOwner == voters[0].client_id[0]
    assert ur.current_auditor(voters[1], root=zk_root) == "10.0.0.0:3181"
    assert ur.predecessor(voters[1], votes[1], root=zk_root) == votes[0]
    assert ur.predecessor(voters[2], votes[2], root=zk_root) == votes[1]
    assert ur.predecessor(voters[0], votes[0], root=zk_root) is None

    ur.announce_auditor(voters[0], "10.0.0.0:3181", root=zk_root)
    assert voters[1].get(election)[0] == b'bookieId: "10.0.0.0:3181"\n'

    predecessor_gone = threading.Event()
    voters[1].exists(votes[0], watch=lambda event: predecessor_gone.set())
    close(voters[0])  # the auditor's session ends
    assert predecessor_gone.wait(10)
    assert ur.predecessor(voters[1], votes[1], root=zk_root) is None
    assert ur.current_auditor(voters[2], root=zk_root) == "10.0.0.1:3181"

    voters[2].delete(votes[1])  # a vote removed explicitly
    assert ur.list_votes(voters[2], root=zk_root) == [votes[2]]
    assert ur.current_auditor(voters[2], root=zk_root) == "10.0.0.2:3181"
    with pytest.raises(MetadataError):
        ur.predecessor(voters[2], votes[1], root=zk_root)


def test_no_auditor_without_votes(zk, zk_root: str) -> None:
    assert ur.list_votes(zk, root=zk_root) == []
    assert ur.current_auditor(zk, root=zk_root) is None
