"""Regressions found by `bkaudit chaos`, named after the seed that found them, replayed as fixed scenarios.

Ground truth is what the test acknowledged and which bookie it wiped.
"""

from __future__ import annotations

import pytest

from bkaudit.client import BookKeeper
from bkaudit.model.quorum import write_set

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.mark.xfail(
    strict=True,
    reason="product gap found by chaos seed 7 (docs/reliability.md): a bookie wiped, formatted and restarted "
    "answers NoSuchLedger for ledgers it held, and recovery counts that as 'absent' (WQ-AQ+1 = 1 answer when "
    "WQ = AQ, as BookKeeper's own recovery does), so it closes the ledger before acknowledged entries. "
    "BookKeeper guards this with the bookie's data-integrity check (ledgers in 'limbo' answer EUNKNOWN).",
)
def test_chaos_seed_7_recovery_after_a_wiped_bookie_keeps_acknowledged_entries(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(bookies=3, racks=3)
    with BookKeeper.connect(zk=cluster.zk, root=cluster.root) as bk:
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
        cluster.start_bookie(wiped)
        # the wiped bookie answers first (in the chaos runs the order was chance): the other one is only slow
        cluster.pause_bookie(healthy)
        try:
            recovered = bk.open_ledger(writer.ledger_id, recover=True)
        finally:
            cluster.resume_bookie(healthy)
        assert recovered.metadata.last_entry_id >= acked[-1]
        assert [e.payload for e in recovered.read_entries(0, acked[-1])] == [b"entry-%d" % i for i in acked]
