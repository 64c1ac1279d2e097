"""The bookie's data-integrity check on real bookie processes: a bookie wiped, formatted and restarted under
its old id recovers the OPEN ledgers naming it (limbo), copies its entries back from the other replicas, and
then answers reads, LAC reads and listings again like a bookie that never lost anything.

Ground truth: the entries the test acknowledged, the bookie it wiped, and the ledgers' write sets.
"""

from __future__ import annotations

from typing import Any

import pytest

from bkaudit.client import BookKeeper
from bkaudit.errors import BookieError
from bkaudit.formats import availability
from bkaudit.model.quorum import write_set
from tests.helpers import wait_for

pytestmark = [pytest.mark.slow]


def _stored(md: Any, bookie: str, last: int) -> list[int]:
    """Entry ids up to `last` whose write set holds `bookie` (E3 WQ2, one segment)."""
    index = md.segments[0].ensemble.index(bookie)
    return [e for e in range(last + 1) if index in write_set(e, md.ensemble_size, md.write_quorum)]


def _reads_back(client: Any, ledger_id: int, ids: list[int], payloads: dict[int, bytes], digest: Any) -> bool:
    try:
        bodies = {e: client.read_entry(ledger_id, e).result(30) for e in ids}
    except BookieError:  # EUNKNOWNLEDGERSTATE / ENOENTRY until copied back
        return False
    return all(digest.verify(body, entry_id=e).payload == payloads[e] for e, body in bodies.items())


def _wait_copied_back(client: Any, victim: str, ledger_id: int, ids: list[int], payloads: dict[int, bytes],
                      digest: Any) -> None:
    wait_for(lambda: _reads_back(client, ledger_id, ids, payloads, digest), timeout_s=120,
             what=f"bookie {victim} to hold its entries of ledger {ledger_id} again")


def test_wiped_bookie_recovers_its_limbo_ledgers_and_copies_its_entries_back(
        cluster_factory, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from bkaudit.client.context import digest_for

    monkeypatch.setenv("BKAUDIT_BOOKIE__DATA_INTEGRITY_CHECKING", "true")
    cluster = cluster_factory(bookies=3, racks=3)
    with BookKeeper.connect(cluster.zk_settings()) as bk:
        closed = bk.create_ledger(3, 2, 2)
        closed_payloads = {closed.add_entry(b"closed-%d" % i): b"closed-%d" % i for i in range(30)}
        closed.close()
        crashed = bk.create_ledger(3, 2, 2)
        open_payloads = {crashed.add_entry(b"open-%d" % i): b"open-%d" % i for i in range(25)}
        crashed.abandon()  # OPEN: the wiped bookie must not let recovery truncate it
        victim = bk.ledger_metadata(crashed.ledger_id).segments[0].ensemble[0]
        cluster.kill_bookie(victim)
        cluster.wipe_bookie(victim)
        cluster.format_bookie(victim)
        cluster.start_bookie(victim)

        client = bk.pool.get(victim)
        for ledger_id, payloads in ((closed.ledger_id, closed_payloads), (crashed.ledger_id, open_payloads)):
            md = bk.ledger_metadata(ledger_id)
            digest = digest_for(ledger_id, md.password, md.digest_type)
            ids = _stored(md, victim, max(payloads))
            # every entry the victim should hold comes back, byte for byte (copied from the other replica)
            _wait_copied_back(client, victim, ledger_id, ids, payloads, digest)
            # limbo is cleared: negative answers are final again, the listing is EOK and complete
            others = [e for e in range(max(payloads) + 1) if e not in ids]
            with pytest.raises(BookieError) as missing:
                client.read_entry(ledger_id, others[0]).result(30)
            assert missing.value.status == "ENOENTRY"
            listed = availability.decode(client.get_list_of_entries(ledger_id).result(30))
            assert set(ids) <= set(listed)

        # the OPEN ledger was recovered by the check, keeping every acknowledged entry
        md = wait_for(lambda: (m := bk.ledger_metadata(crashed.ledger_id)).is_closed and m, timeout_s=60,
                      what="the crashed writer's ledger to be closed by recovery")
        assert md.last_entry_id >= max(open_payloads)
        handle = bk.open_ledger(crashed.ledger_id, recover=False)
        got = {e.entry_id: e.payload for e in handle.read_entries(0, max(open_payloads))}
        assert got == open_payloads
        lac = client.read_lac(crashed.ledger_id).result(30)  # the victim answers ReadLAC again
        assert lac.last_entry_body is not None or lac.lac_body is not None


def test_wiped_bookie_with_stamp_missing_cookies_heals_instead_of_refusing(
        cluster_factory, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """BookKeeper's covered case: the ZooKeeper cookie is still there, the directory's is gone (a replaced
    disk). With dataIntegrityStampMissingCookies the bookie runs the check, re-stamps and copies back."""
    from bkaudit.bookie.registration import read_local_cookie
    from bkaudit.client.context import digest_for
    from bkaudit.zk import registry

    monkeypatch.setenv("BKAUDIT_BOOKIE__DATA_INTEGRITY_CHECKING", "true")
    cluster = cluster_factory(bookies=3, racks=3)
    with BookKeeper.connect(cluster.zk_settings()) as bk:
        ledger = bk.create_ledger(3, 2, 2)
        payloads = {ledger.add_entry(b"e-%d" % i): b"e-%d" % i for i in range(20)}
        ledger.close()
        md = bk.ledger_metadata(ledger.ledger_id)
        victim = md.segments[0].ensemble[1]
        cluster.kill_bookie(victim)
        cluster.wipe_bookie(victim)  # not formatted: ZooKeeper still has its cookie
        monkeypatch.setenv("BKAUDIT_BOOKIE__DATA_INTEGRITY_STAMP_MISSING_COOKIES", "true")
        cluster.start_bookie(victim)
        remote = registry.read_cookie(cluster.zk_client(), victim, cluster.root)
        assert remote is not None and read_local_cookie(cluster.bookie(victim).data_dir) == remote[0]
        digest = digest_for(ledger.ledger_id, md.password, md.digest_type)
        _wait_copied_back(bk.pool.get(victim), victim, ledger.ledger_id, _stored(md, victim, max(payloads)),
                          payloads, digest)
