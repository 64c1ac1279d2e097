"""Data loss is terminal and visible: entries wiped from every replica end in a data-loss record after a
bounded number of attempts, the BookKeeper marker stays, and later runs leave the ledger alone. A deleted
ledger's marker is simply removed."""

from __future__ import annotations

import pytest

from bkaudit.bookie.storage import Storage
from bkaudit.client import BookKeeper
from bkaudit.model.quorum import write_set
from bkaudit.zk import dataloss, paths
from bkaudit.zk import underreplication as ur
from tests.autorecovery.support import (
    assert_readable,
    children_blocking_nuke,
    durability_violations,
    events,
    queue,
    run_once,
    write_ledgers,
)
from tests.promtext import value

pytestmark = [pytest.mark.slow]

LOST = (10, 20, 21)  # entries the test wipes from both of their replicas
FAST_FAIL = {
    "BKAUDIT_AUTORECOVERY__DATA_LOSS_MAX_ATTEMPTS": "3",
    "BKAUDIT_AUTORECOVERY__LOCK_RELEASE_OF_FAILED_LEDGER_GRACE_S": "0.64",  # holds 0.02 s, 0.04 s, ...
}


def test_wiped_entries_end_in_a_terminal_record_not_a_retry_loop(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(bookies=4, racks=4)
    zk = cluster.zk_client()
    with BookKeeper.connect(cluster.zk_settings()) as bk:
        truth = write_ledgers(bk, 3, 40)
        damaged, deleted, healthy = sorted(truth)
        metadata = bk.ledger_metadata(damaged)
        ensemble = metadata.segments[0].ensemble

        # wipe every replica of LOST (bookies stopped, storage edited, restarted: the disks lost them)
        wipe: dict[str, list[int]] = {}
        for entry_id in LOST:
            for index in write_set(entry_id, metadata.ensemble_size, metadata.write_quorum):
                wipe.setdefault(ensemble[index], []).append(entry_id)
        for bookie, ids in wipe.items():
            cluster.stop_bookie(bookie)
            with Storage(cluster.bookie(bookie).data_dir) as storage:
                assert storage.delete_entries(damaged, ids) == len(ids)
            cluster.start_bookie(bookie)
        ur.mark_underreplicated(zk, damaged, sorted(wipe), root=cluster.root)  # as the checker would

        ur.mark_underreplicated(zk, deleted, [ensemble[0]], root=cluster.root)
        bk.delete_ledger(deleted)

        metrics_file = tmp_path / "metrics" / "autorecovery.prom"
        code, summary = run_once(
            cluster,
            tmp_path,
            "ar",
            "--no-auditor",
            "--timeout",
            "60",
            **FAST_FAIL,
            BKAUDIT_AUTORECOVERY__METRICS_FILE=str(metrics_file),
        )
        assert code == 3, summary  # nothing left to do, but data is lost
        prom = metrics_file.read_text()  # written at exit, BookKeeper's names with their scope
        assert value(prom, "bkaudit_autorecovery_ledgers_data_lost_total") == 1
        # each lost entry is wanted by the refills of both its replicas: 3 entries x 2 x 3 passes
        assert value(prom, "replication_worker_NUM_ENTRIES_UNABLE_TO_READ_FOR_REPLICATION") == 18
        assert value(prom, "replication_worker_NUM_DEFER_LEDGER_LOCK_RELEASE_OF_FAILED_LEDGER") == 2
        assert [x["ledger_id"] for x in summary["left"]] == [damaged]
        assert summary["left"][0]["reason"] == "data_lost"
        (record,) = summary["data_lost"]
        assert record["ledger_id"] == damaged
        assert record["lost_entry_ranges"] == [[10, 10], [20, 21]]
        assert set(record["bookies"]) == set(wipe)

        mine = [e for e in events(tmp_path, "ar") if e.get("ledger") == damaged]
        assert [e["event"] for e in mine].count("entries_unreadable") == 3  # bounded: exactly max attempts
        assert [e["event"] for e in mine].count("data_lost") == 1
        assert [e["event"] for e in mine][-1] == "unlocking"

        stored = dataloss.read(zk, damaged, root=cluster.root)
        assert stored is not None and stored.lost_entry_ranges == ((10, 10), (20, 21))
        assert zk.exists(paths.data_loss_path(damaged, root=cluster.root)) is not None
        assert ur.get_marker(zk, damaged, root=cluster.root) is not None  # BookKeeper's marker stays
        assert "deleted" in [e["event"] for e in events(tmp_path, "ar") if e.get("ledger") == deleted]
        assert queue(cluster) == [damaged]
        assert children_blocking_nuke(zk, cluster.root) == []  # the record lives outside the ledgers root

        # a later run skips it without touching it (no hammering), and says so
        code, again = run_once(cluster, tmp_path, "again", "--no-auditor", "--timeout", "30", **FAST_FAIL)
        assert code == 3 and again["data_lost"][0]["ledger_id"] == damaged
        assert not [e for e in events(tmp_path, "again") if e.get("ledger") == damaged]

        # every entry that survived somewhere is whole again: the refills happened around the hole
        survivors = {lid: p for lid, p in truth.items() if lid != deleted}
        problems = durability_violations(cluster, bk, [healthy, damaged])
        assert all(f"ledger {damaged}" in p for p in problems)
        assert_readable(bk, {healthy: survivors[healthy]})
        reader = bk.open_ledger(damaged, recover=False)
        for entry_id, expected in enumerate(survivors[damaged]):
            if entry_id not in LOST:
                assert reader.read_entry(entry_id).payload == expected
