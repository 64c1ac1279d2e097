"""Decommission audit on a real cluster: the restricted checker run, the what-if against brute force from the
written metadata, the `decommission_audits` rows, the checker's own tables left alone, the CLI's replay."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from bkaudit.model.quorum import write_set


def brute_blocking(metadata: dict[int, Any], removing: set[str], empty: set[str]) -> set[int]:
    """Closed ledgers naming a removed bookie where some entry would keep no copy (`empty` hold nothing)."""
    out = set()
    for lid, md in metadata.items():
        if not any(b in removing for seg in md.segments for b in seg.ensemble):
            continue
        segs = list(md.segments)
        for i, seg in enumerate(segs):
            end = segs[i + 1].first_entry_id - 1 if i + 1 < len(segs) else md.last_entry_id
            for entry in range(seg.first_entry_id, end + 1):
                holders = [seg.ensemble[j] for j in write_set(entry, md.ensemble_size, md.write_quorum)]
                if not [b for b in holders if b not in removing and b not in empty]:
                    out.add(lid)
    return out


@pytest.mark.slow
def test_decommission_audit_on_a_cluster(spark: Any, cluster_factory: Any, tmp_path: Any) -> None:
    from bkaudit import config
    from bkaudit.cli import cli
    from bkaudit.client import BookKeeper
    from bkaudit.spark.decommission import run_audit
    from bkaudit.tables.read import read_arrow, table_exists

    cluster = cluster_factory(bookies=4, racks=3)
    metadata = {}
    with BookKeeper.connect(cluster.zk_settings()) as bk:
        for i in range(16):
            handle = bk.create_ledger(3, 2, 2)
            for _ in range(4 + i % 6):
                handle.add_entry(b"decommission")
            metadata[handle.ledger_id] = handle.close()
    ids = cluster.ids()
    warehouse = str(tmp_path / "warehouse")
    settings = config.load(overrides={"zk.connect": cluster.zk, "snapshot.warehouse": warehouse,
                                      "checker.retry_delay_s": 0.2})

    healthy = run_audit(spark, settings, warehouse=warehouse, bookies=[ids[0]], audit_id="one")
    assert healthy["safe"] is True  # WQ=2 everywhere: every entry of one bookie has a second copy
    named = sum(1 for md in metadata.values() if ids[0] in md.segments[0].ensemble)
    assert healthy["bookies"][0]["ledgers"] == named and healthy["bookies"][0]["state"] == "writable"

    wiped, leaving = ids[1], ids[2]
    cluster.stop_bookie(wiped)
    cluster.wipe_bookie(wiped)
    cluster.format_bookie(wiped)
    cluster.start_bookie(wiped)
    answer = run_audit(spark, settings, warehouse=warehouse, bookies=[leaving], audit_id="two")
    expected = brute_blocking(metadata, {leaving}, {wiped})
    assert expected, "the test needs ledgers whose write sets pair the wiped and the leaving bookie"
    got = {b["ledger_id"] for b in answer["bookies"][0]["blocking"]}
    assert answer["safe"] is False and got == expected
    assert {b["reason"] for b in answer["bookies"][0]["blocking"]} == {"would_lose_entries"}

    rows = read_arrow(warehouse, "decommission_audits").to_pylist()
    assert sorted((r["audit_id"], r["bookie_id"], r["safe"]) for r in rows) == [
        ("one", ids[0], True), ("two", leaving, False)]
    assert not table_exists(warehouse, "audit_runs")  # an ad hoc what-if is not "the latest audit"

    replay = CliRunner().invoke(cli, ["decommission-audit", "--warehouse", warehouse, "--audit-id", "two",
                                      "--json"])
    assert replay.exit_code == 0, replay.output
    assert json.loads(replay.output) == answer
