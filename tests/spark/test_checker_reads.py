"""Evidence from reads against a real cluster where some bookies never answer listing (DbLedgerStorage-like).

Four bookie processes: two started with `--no-listing` (they drop GET_LIST_OF_ENTRIES_OF_LEDGER(S) unanswered,
as a Java bookie on DbLedgerStorage does), two normal. Ledgers are crafted (metadata written to ZooKeeper,
entries added to the write sets with the bookie client), so each scenario controls which bookie holds what.
Damage is injected in the bookies' storage while they are stopped: entries deleted, a payload byte flipped, a
bookie wiped. Ground truth is a naive per-entry model of that damage, restricted for sampled runs to what
BookKeeper's LedgerChecker reads at 0%: the first and last entry each bookie index stores in each segment
(computed here from the write-set rule, not by the code under test).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from bkaudit import config
from bkaudit.bookie.ledgerdb import connect_db, current_dir
from bkaudit.bookie.storage import Storage
from bkaudit.cluster.local import LocalCluster
from bkaudit.formats.entry import DigestManager
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.model.quorum import write_set
from bkaudit.zk import ledgers as zk_ledgers
from tests.fixtures.cluster import running_cluster

pytestmark = [pytest.mark.slow]

ENTRIES = 30
DURABILITY = ("no_replica", "below_ack_quorum", "below_write_quorum")


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory) -> Iterator[LocalCluster]:
    with running_cluster(zk_server, tmp_path_factory, bookies=4, racks=3, no_listing=(0, 1)) as c:
        yield c


def settings_for(cluster: LocalCluster, warehouse: str, **checker: Any) -> config.Settings:
    overrides = {
        "zk.connect": cluster.zk,
        "zk.root": cluster.root,
        "snapshot.warehouse": warehouse,
        "snapshot.validate": False,
        "checker.retry_delay_s": 0.5,
        "checker.call_timeout_s": 5.0,
        "checker.listing_probe_timeout_s": 2.0,
        "checker.grace_period_s": 3600,
        **{f"checker.{k}": v for k, v in checker.items()},
    }
    return config.load(environ={}, overrides=overrides)


def run(spark, cluster, warehouse: str, *, before_check=None, **checker: Any):
    from bkaudit.spark.checker import CheckOptions, run_check
    from bkaudit.spark.snapshot import run_snapshot

    settings = settings_for(cluster, warehouse, **checker)
    snap = run_snapshot(spark, settings, warehouse=warehouse)
    if before_check is not None:
        before_check()
    return run_check(spark, settings, CheckOptions(warehouse=warehouse, snapshot_id=snap.snapshot_id))


# -- crafted ledgers and injected damage ---------------------------------------------------------------------


@dataclass
class Ledger:
    ledger_id: int
    ensemble: tuple[str, ...]
    wq: int
    aq: int

    def holders(self, entry: int) -> list[str]:
        return [self.ensemble[i] for i in write_set(entry, len(self.ensemble), self.wq)]

    def stored(self, bookie: str) -> list[int]:
        return [e for e in range(ENTRIES) if bookie in self.holders(e)]


@dataclass
class Damage:
    lost: dict[str, set[tuple[int, int]]] = field(default_factory=dict)  # bookie -> (ledger, entry)
    corrupt: dict[str, set[tuple[int, int]]] = field(default_factory=dict)
    wiped: set[str] = field(default_factory=set)

    def bad(self, bookie: str, ledger_id: int, entry: int) -> bool:
        pair = (ledger_id, entry)
        return (
            bookie in self.wiped
            or pair in self.lost.get(bookie, set())
            or pair in self.corrupt.get(bookie, set())
        )


def write_ledger(cluster: LocalCluster, ensemble: tuple[str, ...], wq: int, aq: int) -> Ledger:
    zk = cluster.zk_client()
    lid = zk_ledgers.generate_ledger_id(zk, root=cluster.root)
    md = LedgerMetadata(
        ensemble_size=len(ensemble),
        write_quorum=wq,
        ack_quorum=aq,
        state=LedgerState.CLOSED,
        last_entry_id=ENTRIES - 1,
        length=ENTRIES * 16,
        digest_type=DigestType.CRC32C,
        password=b"pw",
        segments=(Segment(0, ensemble),),
        ctime=int(time.time() * 1000),
    )
    zk_ledgers.create_ledger_metadata(zk, lid, md, root=cluster.root)
    led = Ledger(lid, ensemble, wq, aq)
    dm = DigestManager(lid, b"pw", DigestType.CRC32C)
    pool = cluster.client_pool()
    futures = []
    for e in range(ENTRIES):
        body = dm.package(e, e - 1, (e + 1) * 16, b"payload-%04d----" % e)
        for bookie in led.holders(e):
            futures.append(pool.get(bookie).add_entry(lid, e, dm.master_key, body))
    for f in futures:
        f.result(timeout=60)
    return led


def flip_payload_byte(data_dir: str, ledger_id: int, entry: int) -> None:
    """Corrupt one stored entry in place (the bookie is stopped): its last payload byte inverted."""
    conn = connect_db(current_dir(data_dir) / "ledgers.db")
    try:
        (body,) = conn.execute(
            "SELECT body FROM entries WHERE ledger_id = ? AND entry_id = ?", (ledger_id, entry)
        ).fetchone()
        body = bytearray(body)
        body[-1] ^= 0xFF
        conn.execute(
            "UPDATE entries SET body = ? WHERE ledger_id = ? AND entry_id = ?",
            (bytes(body), ledger_id, entry),
        )
    finally:
        conn.close()


def inject(cluster: LocalCluster, bookie: str, damage: Damage, *, delete=(), corrupt=()) -> None:
    cluster.stop_bookie(bookie)
    data_dir = cluster.bookie(bookie).data_dir
    with Storage(data_dir) as storage:
        for lid, entry in delete:
            assert storage.delete_entries(lid, [entry]) == 1
            damage.lost.setdefault(bookie, set()).add((lid, entry))
    for lid, entry in corrupt:
        flip_payload_byte(data_dir, lid, entry)
        damage.corrupt.setdefault(bookie, set()).add((lid, entry))
    cluster.start_bookie(bookie)


def wipe(cluster: LocalCluster, bookie: str, damage: Damage) -> None:
    cluster.stop_bookie(bookie)
    cluster.wipe_bookie(bookie)
    cluster.format_bookie(bookie)
    cluster.start_bookie(bookie)
    damage.wiped.add(bookie)


# -- ground truth --------------------------------------------------------------------------------------------


def visible(led: Ledger, bookie: str, entry: int, *, sampled: bool, readers: set[str]) -> bool:
    """Whether a check can see damage of `entry` on `bookie`: listing sees all; reads at 100% see all; reads
    at 0% see the first and last entry the bookie stores in the segment (or everything, once ENOLEDGER)."""
    if bookie not in readers or not sampled:
        return True
    mine = led.stored(bookie)
    return entry in (mine[0], mine[-1])


def truth(ledgers: list[Ledger], damage: Damage, *, sampled: bool, readers: set[str]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {c: set() for c in (*DURABILITY, "corrupt_entries")}
    for led in ledgers:
        least = led.wq
        for e in range(ENTRIES):
            copies = 0
            for b in led.holders(e):
                seen = b in damage.wiped or visible(led, b, e, sampled=sampled, readers=readers)
                if not (damage.bad(b, led.ledger_id, e) and seen):
                    copies += 1
            least = min(least, copies)
        for b, pairs in damage.corrupt.items():
            if any(lid == led.ledger_id and visible(led, b, e, sampled=sampled, readers=readers)
                   for lid, e in pairs):
                out["corrupt_entries"].add(led.ledger_id)
        if least == 0:
            out["no_replica"].add(led.ledger_id)
        elif least < led.aq:
            out["below_ack_quorum"].add(led.ledger_id)
        elif least < led.wq:
            out["below_write_quorum"].add(led.ledger_id)
    return out


def found(result, ledgers: list[Ledger]) -> dict[str, set[int]]:
    ids = {led.ledger_id for led in ledgers}
    out: dict[str, set[int]] = {c: set() for c in (*DURABILITY, "corrupt_entries")}
    for r in result.violations:
        if r.finding.category.value in out and r.finding.ledger_id in ids:
            out[r.finding.category.value].add(r.finding.ledger_id)
    return out


def middle(led: Ledger, bookie: str) -> int:
    mine = led.stored(bookie)
    return mine[len(mine) // 2]


@pytest.fixture(scope="module")
def world(cluster) -> dict[str, Any]:
    nl0, nl1, l2, l3 = cluster.ids()  # bookies 0 and 1 never answer listing
    assert not cluster.bookie(nl0).listing and not cluster.bookie(nl1).listing
    damage = Damage()
    base = (nl0, l2, l3)
    hole_mid = write_ledger(cluster, base, 2, 2)  # a middle entry deleted on nl0: seen only at 100%
    hole_first = write_ledger(cluster, base, 2, 1)  # nl0's first entry deleted: seen at 0% too
    both = write_ledger(cluster, base, 2, 2)  # a middle entry deleted on nl0 and on its other holder
    corrupt = write_ledger(cluster, base, 3, 2)  # nl0's last entry corrupted: seen at 0% too
    healthy = write_ledger(cluster, base, 2, 2)
    # nl1 loses its disk: ENOLEDGER for every read, and for every listing too (a Java bookie on
    # DbLedgerStorage answers the listing of a ledger it does not hold ENOLEDGER): the probe cannot tell its
    # mode and keeps the listing, whose answers are as exact as reads' would be
    wiped = write_ledger(cluster, (nl1, l2, l3), 2, 2)
    e_both = middle(both, nl0)
    other = next(b for b in both.holders(e_both) if b != nl0)
    inject(
        cluster,
        nl0,
        damage,
        delete=[
            (hole_mid.ledger_id, middle(hole_mid, nl0)),
            (hole_first.ledger_id, hole_first.stored(nl0)[0]),
            (both.ledger_id, e_both),
        ],
        corrupt=[(corrupt.ledger_id, corrupt.stored(nl0)[-1])],
    )
    inject(cluster, other, damage, delete=[(both.ledger_id, e_both)])
    wipe(cluster, nl1, damage)
    ledgers = [hole_mid, hole_first, both, corrupt, healthy, wiped]
    return {
        "ledgers": ledgers,
        "damage": damage,
        "readers": {nl0, nl1},
        "probed_readers": {nl0},  # nl1, wiped, answers every listing ENOLEDGER: it stays on listing
        "listers": {l2, l3},
        "corrupt": corrupt,
        "corrupt_entry": corrupt.stored(nl0)[-1],
        "hole_mid": hole_mid,
    }


def check_evidence(result, world, *, fraction_full: bool) -> None:
    by_id = {led.ledger_id: led for led in world["ledgers"]}
    categories = (*DURABILITY, "corrupt_entries")
    rows = [r for r in result.violations
            if r.finding.ledger_id in by_id and r.finding.category.value in categories]
    assert rows
    wiped = world["damage"].wiped
    for r in rows:
        on = [b for b in by_id[r.finding.ledger_id].ensemble if b in world["readers"]]
        if all(b in wiped for b in on):  # listed ENOLEDGER by the wiped no-listing bookie: exact
            assert r.evidence == "listing", r
            continue
        assert r.evidence == "reads", r
        # ENOLEDGER proves every entry missing: a wiped reader counts as fully read
        all_proven = all(b in wiped for b in by_id[r.finding.ledger_id].ensemble if b in world["readers"])
        if fraction_full or all_proven:
            assert r.sampled_fraction == 1.0, r
        else:
            assert 0 < r.sampled_fraction < 1, r
    evidence = {b.bookie_id: (b.evidence, b.evidence_reason or "") for b in result.bookies}
    for b in world["readers"]:
        if b in wiped:
            assert evidence[b][0] == "listing" and "ENOLEDGER" in evidence[b][1], evidence[b]
        else:
            assert evidence[b][0] == "reads", evidence[b]
    for b in world["listers"]:
        assert evidence[b][0] == "listing"


def test_full_reads_find_every_injected_hole(spark, cluster, world, tmp_path):
    result = run(spark, cluster, str(tmp_path), verification_percentage=100)
    expected = truth(world["ledgers"], world["damage"], sampled=False, readers=world["readers"])
    assert found(result, world["ledgers"]) == expected
    check_evidence(result, world, fraction_full=True)
    # the sampled-read finding carries exactly the entries proven bad
    hole = world["hole_mid"]
    (row,) = [
        r for r in result.violations
        if r.finding.ledger_id == hole.ledger_id and r.finding.category.value in DURABILITY
    ]
    lost = sorted(e for lid, e in world["damage"].lost[hole.ensemble[0]] if lid == hole.ledger_id)
    assert list(row.finding.missing_entries or ()) == [(e, e) for e in lost]
    # the corrupt copy is its own finding, naming the bookie and the entry
    (c,) = [r for r in result.violations if r.finding.category.value == "corrupt_entries"]
    assert c.finding.bookie_id == world["corrupt"].ensemble[0]
    assert c.finding.missing_entries == ((world["corrupt_entry"], world["corrupt_entry"]),)
    assert result.status == "succeeded"


def test_sampled_reads_find_only_what_ledger_checker_reads(spark, cluster, world, tmp_path):
    result = run(spark, cluster, str(tmp_path), verification_percentage=0)
    expected = truth(world["ledgers"], world["damage"], sampled=True, readers=world["readers"])
    full = truth(world["ledgers"], world["damage"], sampled=False, readers=world["readers"])
    assert expected != full, "the scenario must tell 0% from 100% apart"
    assert found(result, world["ledgers"]) == expected
    check_evidence(result, world, fraction_full=False)


def test_configured_listing_unsupported_is_read_without_probe(spark, cluster, world, tmp_path):
    lister = sorted(world["listers"])[0]
    result = run(spark, cluster, str(tmp_path), verification_percentage=100, listing_unsupported=[lister])
    readers = world["readers"] | {lister}
    expected = truth(world["ledgers"], world["damage"], sampled=False, readers=readers)
    assert found(result, world["ledgers"]) == expected
    by_id = {b.bookie_id: b for b in result.bookies}
    assert by_id[lister].evidence == "reads"
    assert "listing_unsupported" in by_id[lister].evidence_reason


def test_decommission_audit_uses_read_evidence(spark, cluster, world, tmp_path):
    """Removing a listing bookie: the what-if counts the copies the no-listing bookies proved by reads."""
    from bkaudit.spark.decommission import run_audit

    removing = sorted(world["listers"])[0]
    settings = settings_for(cluster, str(tmp_path), verification_percentage=100)
    summary = run_audit(spark, settings, warehouse=str(tmp_path), bookies=[removing])
    damage = world["damage"]
    blocked = set()
    for led in world["ledgers"]:
        if removing not in led.ensemble:
            continue
        for e in range(ENTRIES):
            left = [b for b in led.holders(e) if b != removing and not damage.bad(b, led.ledger_id, e)]
            if not left:
                blocked.add(led.ledger_id)
    assert blocked, "the scenario must block the removal"
    (answer,) = summary["bookies"]
    assert {x["ledger_id"] for x in answer["blocking"]} == blocked
    assert not summary["safe"]
    assert summary["evidence"]["verified_by_reads"] == sorted(world["probed_readers"])
    assert summary["evidence"]["exact"] is True
    # each blocking ledger's recorded detail says where its evidence came from: reads of nl0, the listing
    # (ENOLEDGER) of the wiped nl1
    from bkaudit.tables.read import read_arrow

    wiped_ledgers = {led.ledger_id for led in world["ledgers"] if set(led.ensemble) & damage.wiped}
    table = read_arrow(str(tmp_path), "decommission_audits").to_pylist()
    details = [(b["ledger_id"], json.loads(b["detail"])) for r in table for b in r["blocking"] or []]
    assert details and all(
        d.get("evidence", "listing") == ("listing" if lid in wiped_ledgers else "reads") for lid, d in details
    ), details


def test_metadata_changed_after_the_snapshot_is_re_read_by_reads(spark, cluster, world, tmp_path):
    """The driver's re-evaluation (metadata moved between snapshot and check) verifies by reads too."""
    hole = world["hole_mid"]

    def touch() -> None:  # a new znode version with the same metadata: the ledger must be re-evaluated
        zk = cluster.zk_client()
        md, stat = zk_ledgers.read_ledger_metadata(zk, hole.ledger_id, root=cluster.root)
        zk_ledgers.write_ledger_metadata(
            zk, hole.ledger_id, md, expected_version=stat.version, root=cluster.root
        )

    result = run(spark, cluster, str(tmp_path), before_check=touch, verification_percentage=100)
    expected = truth([hole], world["damage"], sampled=False, readers=world["readers"])
    assert found(result, [hole]) == expected
    (row,) = [
        r for r in result.violations
        if r.finding.ledger_id == hole.ledger_id and r.finding.category.value in DURABILITY
    ]
    assert row.finding.detail.get("reevaluated") is True
    assert row.evidence == "reads" and row.sampled_fraction == 1.0
    assert result.reevaluated >= 1


def test_only_listing_bookies_advertise_the_batch_listing(cluster):
    """A DbLedgerStorage-like bookie must not invite op 1000: clients send it only where advertised."""
    from bkaudit.formats import records
    from bkaudit.zk import paths

    zk = cluster.zk_client()
    advertised = {}
    for b in cluster.bookies:
        data, _ = zk.get(paths.available_path(b.id, root=cluster.root))
        props = records.parse_bookie_service_info(data, b.id).properties_dict()
        advertised[b.id] = props.get("bkaudit.listing.batch") == "true"
    assert advertised == {b.id: b.listing for b in cluster.bookies}
    assert sorted(advertised.values()) == [False, False, True, True]  # two started with --no-listing
