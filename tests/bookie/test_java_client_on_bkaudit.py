"""Apache BookKeeper's Java client and shell on a cluster of bkaudit bookies.

The far end is the real thing: BookKeeper 4.17's client (Maven Central's jars, driven by tests/java's
BkDriver) writes, reads with digest verification, fences and recovers ledgers on bkaudit bookies, over the v3
protocol and over v2 (`useV2WireProtocol=true`, Pulsar brokers' default); BookKeeper's shell runs
`simpletest`, `readledger` (through one bookie, with BookieClientImpl) and `bookieinfo` against them. Ground
truth is the Java side: the payload rule both ends share, the Java client's own view of LAC and state, its
BKException codes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from bkaudit.cluster.local import LocalCluster
from tests.fixtures.cluster import running_cluster

pytestmark = [pytest.mark.slow]

DIGESTS = ("CRC32", "MAC", "CRC32C", "DUMMY")
FENCED = -101  # BKException.Code.LedgerFencedException


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory, java_bookkeeper) -> Iterator[LocalCluster]:
    with running_cluster(zk_server, tmp_path_factory, bookies=4, racks=2) as c:
        yield c


@pytest.fixture(scope="module", params=["v3", "v2"])
def protocol(request) -> str:
    return str(request.param)


def settings_of(protocol: str) -> dict[str, object]:
    return {"useV2WireProtocol": protocol == "v2"}


@pytest.mark.parametrize("digest", DIGESTS)
def test_write_and_read_back(cluster: LocalCluster, protocol: str, digest: str) -> None:
    client = cluster.java_client(settings_of(protocol))
    written = client.call("create", ensemble=3, wq=2, aq=2, digest=digest, password="secret", entries=200,
                          size=1024, metadata={"pulsar/managed-ledger": "public/default/persistent/t"})
    assert (written["lac"], written["closed"]) == (199, True)
    assert set(written["ensembles"]["0"]) <= set(cluster.ids())  # type: ignore[index]
    back = client.call("read", ledger=written["ledger"], digest=digest, password="secret")
    assert (back["read"], back["bad"], back["lac"], back["length"]) == (200, [], 199, 200 * 1024)


def test_fencing_and_recovery(cluster: LocalCluster, protocol: str) -> None:
    """A second client's recovery open fences the writer's ledger on bkaudit bookies, closes it at the last
    entry the writer got acknowledged, and the writer's next add fails as fenced."""
    writer = cluster.java_client(settings_of(protocol))
    reader = cluster.java_client(settings_of(protocol))
    ledger = writer.call("create", ensemble=3, wq=3, aq=2, password="pw", entries=50, size=256, close=False)
    recovered = reader.call("read", ledger=ledger["ledger"], password="pw", recovery=True)
    assert recovered["closed"] is True
    assert (recovered["lac"], recovered["read"], recovered["bad"]) == (49, 50, [])
    failed = writer.call("add", ledger=ledger["ledger"], entries=1, check=False)
    assert failed["ok"] is False and failed["code"] == FENCED, failed


def test_tailing_reader_sees_the_lac(cluster: LocalCluster, protocol: str) -> None:
    """A no-recovery reader (a Pulsar tailing consumer) learns the LAC from the bookies while the ledger stays
    open: v3 asks READ_LAC (PendingReadLacOp), v2 reads entry -1 (ReadLastConfirmedOp); both take the LAC the
    writer piggybacked on the last entry. A lone add after every earlier one was acknowledged carries exactly
    the writer's LAC at that moment."""
    writer = cluster.java_client(settings_of(protocol))
    reader = cluster.java_client(settings_of(protocol))
    ledger = writer.call("create", ensemble=3, wq=2, aq=2, password="pw", entries=20, size=64, close=False)
    writer.call("add", ledger=ledger["ledger"], entries=1, size=64)  # entry 20, carrying LAC 19
    seen = reader.call("lac", ledger=ledger["ledger"], password="pw")
    assert (seen["closed"], seen["read_lac"]) == (False, 19)
    writer.call("add", ledger=ledger["ledger"], entries=1, size=64)  # entry 21, carrying LAC 20
    assert reader.call("lac", ledger=ledger["ledger"], password="pw")["read_lac"] == 20


def test_shell_simpletest(cluster: LocalCluster) -> None:
    out = cluster.java_shell("simpletest", "-ensemble", "3", "-writeQuorum", "2", "-ackQuorum", "2",
                             "-numEntries", "100").stdout
    assert re.search(r"100 entries written to ledger \d+\. Last entry Id 99", out), out


def test_shell_readledger_through_one_bookie(cluster: LocalCluster) -> None:
    client = cluster.java_client()
    written = client.call("create", ensemble=3, wq=3, aq=3, password="", entries=12, size=32)
    bookie = written["ensembles"]["0"][0]  # type: ignore[index]
    out = cluster.java_shell("readledger", "-ledgerid", str(written["ledger"]), "-firstentryid", "0",
                             "-lastentryid", "11", "-bookie", bookie).stdout
    got = [int(e) for e in re.findall(r"Lid=\d+, Eid=(\d+)", out)]
    assert got and got == list(range(len(got))) and len(got) >= 11, out  # ReadLedgerCommand stops before last


def test_shell_bookieinfo(cluster: LocalCluster) -> None:
    out = cluster.java_shell("bookieinfo").stdout
    for bookie in cluster.ids():
        m = re.search(r"BookieID:" + re.escape(bookie) + r",[^\n]*Free: (\d+)\(.*?\)\s*Total: (\d+)", out)
        assert m, out
        free, total = int(m.group(1)), int(m.group(2))
        assert 0 < free <= total
