"""Ensemble changes with real bookie processes: kill -9 mid-write, and CAS conflicts during the change."""

from __future__ import annotations

import time

import pytest

from bkaudit.client import BookKeeper, ClientSettings
from bkaudit.errors import FencedError
from bkaudit.formats import availability, ledger_metadata
from bkaudit.model.ledger import LedgerState
from bkaudit.model.quorum import entries_of_bookie
from bkaudit.zk import ledgers as zk_ledgers
from tests.client.test_fencing import Writer, connect, payload


def test_kill_9_mid_write_changes_the_ensemble_and_loses_nothing(cluster4) -> None:
    with connect(cluster4) as bk:
        handle = bk.create_ledger(3, 2, 2)
        victim = handle.metadata.segments[0].ensemble[0]
        writer = Writer(handle, window=64)
        writer.start()
        writer.wait_for(500)
        acked_before_kill = max(writer.acked)
        cluster4.kill_bookie(victim)  # SIGKILL: no goodbye, connections reset
        writer.wait_for(len(writer.acked) + 500)
        writer.stop.set()
        writer.join(60)
        assert writer.error is None, writer.error
        md = handle.close()
        assert md.state is LedgerState.CLOSED and md.last_entry_id == max(writer.acked)

        # one ensemble change, recorded as a new segment at the first unacknowledged entry
        assert len(md.segments) == 2, md.segments
        first = md.segments[1].first_entry_id
        assert first > acked_before_kill
        assert victim not in md.segments[1].ensemble
        assert md.segments[1].ensemble[1:] == md.segments[0].ensemble[1:]
        assert bk.ledger_metadata(handle.ledger_id) == md
        zk = cluster4.zk_client()  # the fixture's own session: the client keeps its store to itself
        raw, _ = zk_ledgers.read_ledger_bytes(zk, handle.ledger_id, root=cluster4.root)
        assert ledger_metadata.format_version(raw) == 3
        assert ledger_metadata.parse(raw) == md and ledger_metadata.serialize(md) == raw  # BookKeeper bytes

        # every acknowledged entry reads back with its payload (replicas on the dead bookie skipped)
        reader = bk.open_ledger(handle.ledger_id)
        entries = reader.read_entries(0, md.last_entry_id)
        assert all(e.payload == payload(e.entry_id) for e in entries)
        assert set(writer.acked) == set(range(md.last_entry_id + 1))

    # the killed bookie, restarted, still has every entry it acknowledged: with WQ = AQ = 2 every entry of
    # segment 0 was acknowledged by both bookies of its write set, the victim (index 0) included
    cluster4.start_bookie(victim)
    pool = cluster4.client_pool()
    try:
        listed = availability.decode(pool.get(victim).get_list_of_entries(handle.ledger_id).result(30))
        expected = entries_of_bookie(0, 0, first - 1, 3, 2)
        assert not listed.missing(0, first - 1, expected=expected)
        last_on_victim = max(e for e in range(first) if 0 in _ws(e))
        for entry_id in (0, last_on_victim):
            body = pool.get(victim).read_entry(handle.ledger_id, entry_id).result(30)
            assert body.endswith(payload(entry_id))
    finally:
        pool.close()


def _ws(entry_id: int) -> tuple[int, ...]:
    return (entry_id % 3, (entry_id + 1) % 3)


def test_ensemble_change_retries_after_a_concurrent_metadata_change(cluster4) -> None:
    with connect(cluster4) as bk:
        handle = bk.create_ledger(3, 2, 2, custom_metadata={"owner": "test"})
        for i in range(10):
            handle.add_entry(payload(i))
        # another actor rewrites the metadata (still OPEN): the writer's cached version is now stale
        zk = cluster4.zk_client()
        md, stat = zk_ledgers.read_ledger_metadata(zk, handle.ledger_id, root=cluster4.root)
        zk_ledgers.write_ledger_metadata(
            zk,
            handle.ledger_id,
            md.evolve(custom_metadata={"owner": b"admin"}),
            expected_version=stat.version,
            root=cluster4.root,
        )
        victim = md.segments[0].ensemble[1]  # in the write sets of entries 10 (1, 2) and 11 (2, 0)...
        cluster4.stop_bookie(victim)
        try:
            for i in range(10, 20):
                assert handle.add_entry(payload(i)) == i
            final = handle.close()
        finally:
            cluster4.start_bookie(victim)
        assert final.custom_metadata == {"owner": b"admin"}  # the retried change kept the other update
        assert len(final.segments) == 2 and victim not in final.segments[1].ensemble
        assert final.segments[1].first_entry_id == 10
        assert bk.open_ledger(handle.ledger_id).read_entry(19).payload == payload(19)


def test_ensemble_change_finding_the_ledger_in_recovery_fences_the_writer(cluster4) -> None:
    with connect(cluster4) as bk:
        handle = bk.create_ledger(3, 2, 2)
        for i in range(5):
            handle.add_entry(payload(i))
        zk = cluster4.zk_client()
        md, stat = zk_ledgers.read_ledger_metadata(zk, handle.ledger_id, root=cluster4.root)
        zk_ledgers.write_ledger_metadata(
            zk,
            handle.ledger_id,
            md.evolve(state=LedgerState.IN_RECOVERY),
            expected_version=stat.version,
            root=cluster4.root,
        )
        victim = md.segments[0].ensemble[2]  # write set of entry 5 is (2, 0)
        cluster4.stop_bookie(victim)
        try:
            with pytest.raises(FencedError) as err:
                handle.add_entry(payload(5))
            assert err.value.ledger_id == handle.ledger_id and err.value.entry_id == 5
            assert bk.ledger_metadata(handle.ledger_id).segments == md.segments  # no change was written
        finally:
            cluster4.start_bookie(victim)
        r = bk.open_ledger(handle.ledger_id)  # recovery completes what the marker started
        assert r.metadata.is_closed and r.metadata.last_entry_id >= 4


def test_silent_bookie_is_replaced_after_the_add_timeout(cluster4) -> None:
    """SIGSTOP keeps the connection open but unanswered: only the add timeout can detect it."""
    settings = ClientSettings(add_timeout_s=1.5, read_timeout_s=1.5)
    with BookKeeper.connect(cluster4.zk_settings(), settings=settings) as bk:
        handle = bk.create_ledger(3, 2, 2)
        for i in range(5):
            handle.add_entry(payload(i))
        victim = handle.metadata.segments[0].ensemble[2]  # write set of entry 5 is (2, 0)
        cluster4.pause_bookie(victim)
        try:
            started = time.monotonic()
            assert handle.add_entry(payload(5)) == 5
            assert 1.0 < time.monotonic() - started < 5
            md = handle.close()
        finally:
            cluster4.resume_bookie(victim)
        assert [s.first_entry_id for s in md.segments] == [0, 5]
        assert victim not in md.segments[1].ensemble
        assert bk.open_ledger(handle.ledger_id).read_entry(5).payload == payload(5)
