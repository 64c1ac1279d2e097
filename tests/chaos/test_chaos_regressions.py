"""Regressions found by `bkaudit chaos`, named after the seed that found them, replayed as fixed scenarios.

Ground truth is what the test acknowledged and which bookie it wiped.
"""

from __future__ import annotations

import threading

import pytest

from bkaudit.client import BookKeeper
from bkaudit.errors import BookieError
from bkaudit.model.quorum import write_set

pytestmark = [pytest.mark.slow]


def test_chaos_seed_7_recovery_after_a_wiped_bookie_keeps_acknowledged_entries(
        cluster_factory, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Seed 7: a bookie wiped, formatted and restarted under its old id answered NoSuchLedger, and recovery
    (WQ = AQ: one such answer is "absent") closed the OPEN ledger before acknowledged entries. With the
    data-integrity check the bookie puts the ledger in limbo and answers EUNKNOWNLEDGERSTATE instead."""
    monkeypatch.setenv("BKAUDIT_BOOKIE__DATA_INTEGRITY_CHECKING", "true")  # inherited by the bookie processes
    cluster = cluster_factory(bookies=3, racks=3)
    with BookKeeper.connect(cluster.zk_settings()) as bk:
        writer = bk.create_ledger(2, 2, 2)
        acked = [writer.add_entry(b"entry-%d" % i) for i in range(20)]
        writer.abandon()  # the writer crashes: the ledger stays OPEN
        md = bk.ledger_metadata(writer.ledger_id)
        ensemble = md.segments[0].ensemble
        wiped, healthy = (ensemble[i] for i in write_set(0, md.ensemble_size, md.write_quorum))
        # one bookie of the write quorum loses its disk (AQ-1 = 1 failure: the guarantee still applies)
        cluster.kill_bookie(wiped)
        cluster.wipe_bookie(wiped)
        cluster.format_bookie(wiped)
        # the other one is only slow: paused before the wiped one is back, so nothing but the wiped bookie
        # can answer until it resumes (in the chaos run the order was chance)
        cluster.pause_bookie(healthy)
        try:
            cluster.start_bookie(wiped)
            # what it answers for the ledger it held: "unknown", never "no such ledger / entry"
            client = bk.pool.get(wiped)
            for answer in (client.read_entry(writer.ledger_id, 0),
                           client.read_entry(writer.ledger_id, -1, fence=True,
                                             master_key=_master_key(md), high_priority=True),
                           client.read_lac(writer.ledger_id)):
                with pytest.raises(BookieError) as unknown:
                    answer.result(30)
                assert unknown.value.status == "EUNKNOWNLEDGERSTATE"
            recovered: list[object] = []
            recovery = threading.Thread(
                target=lambda: recovered.append(_recover(bk, writer.ledger_id)), daemon=True)
            recovery.start()  # its fence and recovery reads reach the wiped bookie while the other sleeps
        finally:
            cluster.resume_bookie(healthy)
        recovery.join(120)
        assert recovered and not isinstance(recovered[0], BaseException), recovered
        handle = recovered[0]
        assert handle.metadata.last_entry_id >= acked[-1]  # type: ignore[attr-defined]
        assert [e.payload for e in handle.read_entries(0, acked[-1])] == [  # type: ignore[attr-defined]
            b"entry-%d" % i for i in acked]


def _master_key(md):  # type: ignore[no-untyped-def]
    from bkaudit.client.context import master_key_for

    return master_key_for(md.password)


def _recover(bk: BookKeeper, ledger_id: int) -> object:
    try:
        return bk.open_ledger(ledger_id, recover=True)
    except BaseException as exc:  # reported by the test thread
        return exc
