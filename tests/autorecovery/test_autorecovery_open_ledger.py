"""The seed's open-ledger scenario: an idle writer with a lost bookie in its last ensemble.

The worker must not copy the open last fragment. After the (shortened) open-ledger grace it fences and
recovers the ledger, which closes at the last acknowledged entry, then re-replicates it as a closed ledger;
the writer, resuming, is fenced. The same holds when every bookie of the last ensemble is up but one lost its
disk: the open fragment misses copies, and after the grace BookKeeper's worker recovery-opens the ledger
("Open Fragment. Opening Ledger for Recovery", ReplicationWorker.deferLedgerLockRelease).
"""

from __future__ import annotations

import pytest

from bkaudit.client import BookKeeper
from bkaudit.errors import FencedError
from bkaudit.model.ledger import LedgerState
from bkaudit.zk import underreplication as ur
from tests.autorecovery.support import (
    assert_readable,
    durability_violations,
    events,
    payload,
    queue,
    run_once,
    wait_absent,
)

pytestmark = [pytest.mark.slow]
GRACE_S = 2.0


def assert_closed_whole_and_fenced(cluster, bk, writer, acked, *, lost=frozenset()):  # type: ignore[no-untyped-def]
    """Closed at the last acknowledged entry, queue empty, every copy in place and readable, writer fenced;
    returns the metadata."""
    metadata = bk.ledger_metadata(writer.ledger_id)
    assert metadata.state is LedgerState.CLOSED and metadata.last_entry_id == len(acked) - 1
    assert queue(cluster) == []
    assert durability_violations(cluster, bk, [writer.ledger_id], lost=set(lost)) == []
    assert_readable(bk, {writer.ledger_id: acked})
    with pytest.raises(FencedError):
        writer.add_entry(b"late", timeout=30)
    return metadata


def run_with_short_grace(cluster, tmp_path):  # type: ignore[no-untyped-def]
    """`autorecovery run --once` (events under "ar") with the open-ledger grace shortened to GRACE_S."""
    return run_once(
        cluster, tmp_path, "ar", "--timeout", "90",
        BKAUDIT_AUTORECOVERY__OPEN_LEDGER_REREPLICATION_GRACE=str(GRACE_S),
    )


def test_idle_writer_is_fenced_after_the_grace_and_its_ledger_replicated(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(bookies=4, racks=4)
    bk = BookKeeper.connect(cluster.zk_settings())
    writer = bk.create_ledger(3, 2, 2)
    try:
        acked = [payload(0, e) for e in range(60)]
        futures = [writer.add_entry_async(p) for p in acked[:50]]
        assert [f.result(60) for f in futures] == list(range(50))
        for e in range(50, 60):  # one at a time: the bookies learn the LAC (58) from the last entry
            assert writer.add_entry(acked[e]) == e
        ledger_id = writer.ledger_id
        # index 1 stores entries e % 3 in {0, 1}: recovery (reading from LAC 58 on) never writes to it, so the
        # lost bookie's data must come back through the worker's copy, not through recovery's write-back
        victim = writer.metadata.segments[-1].ensemble[1]
        assert bk.ledger_metadata(ledger_id).state is LedgerState.OPEN

        cluster.kill_bookie(victim)
        wait_absent(cluster, victim)
        code, summary = run_with_short_grace(cluster, tmp_path)
        assert code == 0, summary
        assert summary["left"] == [] and summary["replicated"] == 1

        seen = {e["event"]: e for e in events(tmp_path, "ar") if e.get("ledger") == ledger_id}
        assert {"deferred_open", "fencing", "recovered", "swapped", "replicated"} <= set(seen)
        assert seen["fencing"]["t"] - seen["deferred_open"]["t"] >= GRACE_S - 0.05  # the writer had its grace
        assert seen["recovered"]["last_entry_id"] == 59
        copies = [e for e in events(tmp_path, "ar") if e["event"] == "copy" and e["ledger"] == ledger_id]
        assert copies and all(c["t"] > seen["recovered"]["t"] for c in copies)  # nothing copied while open

        metadata = assert_closed_whole_and_fenced(cluster, bk, writer, acked, lost={victim})
        assert victim not in metadata.bookies()
    finally:
        writer.abandon()
        bk.close()


@pytest.mark.parametrize(
    "entries",
    [
        30,  # the bookies know the LAC (28): the open fragment is checked up to it
        1,  # LAC -1, below the segment's first entry: LedgerChecker's first-entry probe finds entry 0 written
    ],
)
def test_open_fragment_missing_copies_on_a_live_bookie_is_recovered_after_the_grace(
    cluster_factory, tmp_path, entries
) -> None:
    cluster = cluster_factory(bookies=4, racks=4)
    bk = BookKeeper.connect(cluster.zk_settings())
    writer = bk.create_ledger(3, 2, 2)
    try:
        acked = [payload(1, e) for e in range(entries)]
        for e, p in enumerate(acked):  # one at a time: the bookies learn the LAC (entries - 2)
            assert writer.add_entry(p) == e
        ledger_id = writer.ledger_id
        victim = writer.metadata.segments[-1].ensemble[1]
        cluster.stop_bookie(victim)
        cluster.wipe_bookie(victim)  # same id, empty disk: registered and writable, every copy gone
        cluster.format_bookie(victim)
        cluster.start_bookie(victim)
        assert ur.mark_underreplicated(cluster.zk_client(), ledger_id, [victim], root=cluster.root)

        code, summary = run_with_short_grace(cluster, tmp_path)
        assert code == 0, summary
        # recovery writes back what it reads past the LAC to each entry's write set: with 30 entries that is
        # entry 29 (indexes 2, 0), not the victim's, so the worker copies; with one entry, entry 0 (indexes
        # 0, 1) is written back to the victim by the recovery itself and nothing is left to copy
        assert summary["left"] == [] and summary["replicated"] == (1 if entries > 1 else 0), summary

        seen = {e["event"]: e for e in events(tmp_path, "ar") if e.get("ledger") == ledger_id}
        assert {"deferred_open", "fencing", "recovered", "replicated"} <= set(seen)
        assert seen["fencing"]["t"] - seen["deferred_open"]["t"] >= GRACE_S - 0.05  # the writer had its grace
        assert seen["fencing"]["reason"] == "open fragment under-replicated"
        # the wiped victim's "no such entry" is no evidence: with entries=1 it once closed the ledger at -1
        assert seen["fencing"]["lost_copies"] == [victim]
        metadata = assert_closed_whole_and_fenced(cluster, bk, writer, acked)
        assert victim in metadata.bookies()  # refilled in place: the bookie is up
    finally:
        writer.abandon()
        bk.close()
