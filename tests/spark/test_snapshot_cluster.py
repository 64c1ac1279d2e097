"""Snapshot of a real local cluster: ledgers written by the ledger client, bookies registered by themselves.

Complements test_snapshot.py (hand-crafted znodes): here the metadata, registrations, cookies and Pulsar rack
JSON are whatever bkaudit's client and bookie processes wrote, and the cluster lives under a ZooKeeper chroot.
Ground truth is the client's own view of each ledger (`BookKeeper.ledger_metadata`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow]


def test_snapshot_of_client_written_ledgers(spark: Any, cluster3: Any, tmp_path: Path) -> None:
    from bkaudit import config, tables
    from bkaudit.client import BookKeeper
    from bkaudit.spark.snapshot import run_snapshot

    with BookKeeper.connect(cluster3.zk_settings()) as bk:
        closed = bk.create_ledger(3, 2, 2, custom_metadata={"pulsar/managed-ledger": "public/default/t1"})
        for i in range(5):
            closed.add_entry(f"entry-{i}".encode())
        closed.close()
        still_open = bk.create_ledger(2, 2, 1)
        still_open.add_entry(b"x")
        empty = bk.create_ledger(3, 3, 2)
        empty.close()
        ids = [closed.ledger_id, still_open.ledger_id, empty.ledger_id]
        truth = {i: bk.ledger_metadata(i) for i in ids}
        settings = config.load(
            environ={},
            overrides={
                "zk.connect": cluster3.zk,
                "zk.root": cluster3.root,
                "snapshot.warehouse": str(tmp_path),
            },
        )
        result = run_snapshot(spark, settings, snapshot_id="cluster-1")
        still_open.close()

    assert (result.ledgers, result.unparseable, result.bookies) == (3, 0, 3)
    ledgers = {r.ledger_id: r for r in tables.load(spark, str(tmp_path), "ledgers").collect()}
    assert set(ledgers) == set(ids)
    for ledger_id, md in truth.items():
        row = ledgers[ledger_id]
        assert (
            row.state,
            row.ensemble_size,
            row.write_quorum,
            row.ack_quorum,
            row.last_entry_id,
            row.length,
            row.segment_count,
        ) == (
            md.state.name,
            md.ensemble_size,
            md.write_quorum,
            md.ack_quorum,
            md.last_entry_id,
            md.length,
            len(md.segments),
        )
    assert ledgers[closed.ledger_id].managed_ledger == "public/default/t1"
    assert ledgers[closed.ledger_id].last_entry_id == 4

    segments = tables.load(spark, str(tmp_path), "ledger_segments").collect()
    assert sorted((s.ledger_id, s.segment_index, tuple(s.ensemble)) for s in segments) == sorted(
        (i, k, seg.ensemble) for i, md in truth.items() for k, seg in enumerate(md.segments)
    )

    bookies = {r.bookie_id: r for r in tables.load(spark, str(tmp_path), "bookies").collect()}
    assert {b.id: (b.rack, b.port) for b in cluster3.bookies} == {
        b: (r.location, r.endpoints[0].port) for b, r in bookies.items()
    }
    assert all(r.state == "writable" and r.has_cookie for r in bookies.values())
