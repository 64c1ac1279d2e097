"""Java bookies with TLS (BookKeeper's TLSContextFactory, PEM material): bkaudit's checker and replication
worker reach them through START_TLS.

A Java bookie with TLS still serves plaintext clients under the default auth provider, so a scenario that only
succeeds could be plaintext in disguise. Each one is paired with its negative: the same bkaudit run trusting
another CA must fail to verify the bookies, which only happens when bkaudit really does the TLS handshake.
Ground truth is the Java side: the Java client (also over TLS) writes the ledgers and reads every entry back
with digest verification after bkaudit's worker repaired them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bkaudit import config
from bkaudit.cluster.local import LocalCluster
from tests.autorecovery import support as ar
from tests.fixtures.cluster import running_cluster
from tests.pki import make_pki

pytestmark = [pytest.mark.slow]

DURABILITY = ("no_replica", "below_ack_quorum", "below_write_quorum")


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, str]:
    return make_pki(tmp_path_factory.mktemp("pki"))


def java_tls(pki: dict[str, str]) -> dict[str, object]:
    """ServerConfiguration/ClientConfiguration keys for PEM TLS (TLSContextFactory)."""
    return {"tlsProviderFactoryClass": "org.apache.bookkeeper.tls.TLSContextFactory",
            "tlsKeyStoreType": "PEM", "tlsKeyStore": pki["server_key"],
            "tlsCertificatePath": pki["server_cert"],
            "tlsTrustStoreType": "PEM", "tlsTrustStore": pki["ca"]}


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory, java_bookkeeper, pki) -> Iterator[LocalCluster]:
    with running_cluster(zk_server, tmp_path_factory, bookies=4, racks=2,
                         java={i: "sorted" for i in range(4)}, java_settings=java_tls(pki)) as c:
        yield c


@pytest.fixture(scope="module")
def ledgers(cluster: LocalCluster, pki) -> dict[int, int]:
    client = cluster.java_client({"tlsProviderFactoryClass": "org.apache.bookkeeper.tls.TLSContextFactory",
                                  "tlsTrustStoreType": "PEM", "tlsTrustStore": pki["ca"]})
    out: dict[int, int] = {}
    named: set[str] = set()
    # E=3 of 4 bookies: write until the Java client's own ensembles name every bookie (4 ledgers alone miss
    # one about 1.6 % of the time), so "every bookie answered a listing" is a claim about every bookie
    while len(out) < 4 or named != set(cluster.ids()):
        assert len(out) < 32, f"32 ledgers never named {set(cluster.ids()) - named}"
        answer = client.call("create", ensemble=3, wq=2, aq=2, password="pw", entries=40, size=512)
        out[int(answer["ledger"])] = 40  # type: ignore[arg-type]
        named.update(b for ids in answer["ensembles"].values() for b in ids)  # type: ignore[attr-defined]
    return out


def settings_for(cluster: LocalCluster, warehouse: str, ca: str) -> config.Settings:
    return config.load(environ={}, overrides={
        "zk.connect": cluster.zk, "zk.root": cluster.root, "rpc.tls_ca": ca,
        "snapshot.warehouse": warehouse, "snapshot.validate": False,
        "checker.retry_delay_s": 0.5, "checker.call_timeout_s": 5.0, "checker.listing_probe_timeout_s": 3.0,
        "checker.write_check_ctimes": False})


def check(spark: Any, cluster: LocalCluster, warehouse: Path, ca: str) -> Any:
    from bkaudit.spark.checker import CheckOptions, run_check
    from bkaudit.spark.snapshot import run_snapshot

    settings = settings_for(cluster, str(warehouse), ca)
    snap = run_snapshot(spark, settings, warehouse=str(warehouse))
    return run_check(spark, settings, CheckOptions(warehouse=str(warehouse), snapshot_id=snap.snapshot_id))


def test_checker_lists_entries_over_start_tls(spark, cluster, ledgers, pki, tmp_path) -> None:
    result = check(spark, cluster, tmp_path / "good", pki["ca"])
    assert result.status == "succeeded"
    # placement is not this test's business: the Java client does not read the racks bkaudit's cluster set
    assert not [v for v in result.violations if v.finding.ledger_id in ledgers
                and (v.finding.category.value in DURABILITY
                     or v.finding.category.value == "ledger_unverifiable")], result.violations
    assert {b.bookie_id: (b.reachable, b.evidence) for b in result.bookies} == {
        b: (True, "listing") for b in cluster.ids()}

    # the negative: trusting another CA, no bookie can be verified
    wrong = check(spark, cluster, tmp_path / "wrong", pki["other_ca"])
    assert {b.bookie_id for b in wrong.bookies if b.reachable} == set()
    unverifiable = {v.finding.ledger_id for v in wrong.violations
                    if v.finding.category.value == "ledger_unverifiable"}
    assert set(ledgers) <= unverifiable


def test_worker_repairs_a_lost_java_bookie_over_start_tls(cluster, ledgers, pki, tmp_path) -> None:
    lost = cluster.ids()[0]
    cluster.kill_bookie(lost)
    ar.wait_absent(cluster, lost, timeout=60)
    tls = {"BKAUDIT_RPC__TLS_CA": pki["ca"], "BKAUDIT_AUTORECOVERY__LOST_BOOKIE_RECOVERY_DELAY_S": "0"}

    # the negative first: trusting another CA, the worker can neither read nor write a copy
    code, summary = ar.run_once(cluster, tmp_path, "wrong-ca", "--timeout", "20", timeout=120,
                                **{**tls, "BKAUDIT_RPC__TLS_CA": pki["other_ca"]})
    assert (code, summary.get("replicated")) == (1, 0), summary  # 1: gave up with work left

    code, summary = ar.run_once(cluster, tmp_path, "right-ca", timeout=300, **tls)
    assert code == 0, summary
    client = cluster.java_client({"tlsProviderFactoryClass": "org.apache.bookkeeper.tls.TLSContextFactory",
                                  "tlsTrustStoreType": "PEM", "tlsTrustStore": pki["ca"]})
    for ledger_id, entries in ledgers.items():
        back = client.call("read", ledger=ledger_id, password="pw")
        assert (back["read"], back["bad"]) == (entries, []), back
        assert all(lost not in ens for ens in back["ensembles"].values()), back  # type: ignore[union-attr]
