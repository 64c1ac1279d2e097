"""bkaudit's snapshot of ledgers the real Java client wrote equals what BookKeeper's own shell prints.

Ground truth is the Java side twice over: Apache BookKeeper's client (4.17, Maven Central's jars) writes the
ledgers on Java bookies, and `bookkeeper shell ledgermetadata` (LedgerMetaDataCommand, which prints
LedgerMetadataImpl.toString) says what they are. The snapshot's `ledgers` and `ledger_segments` rows must
match it field for field: every digest type, custom metadata (Pulsar's `pulsar/managed-ledger` among it),
password presence, open, in-recovery and closed ledgers, and several segments.
"""

from __future__ import annotations

import base64
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from bkaudit.cluster.local import LocalCluster
from tests.fixtures.cluster import running_cluster
from tests.helpers import wait_for

pytestmark = [pytest.mark.slow]

DIGESTS = ("CRC32", "MAC", "CRC32C", "DUMMY")


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory, java_bookkeeper) -> Iterator[LocalCluster]:
    with running_cluster(zk_server, tmp_path_factory, bookies=4, racks=2,
                         java={0: "sorted", 1: "interleaved", 2: "db", 3: "sorted"}) as c:
        yield c


def parse_shell_metadata(text: str) -> dict[str, Any]:
    """`ledgermetadata`'s answer: `ledgerID: N` then LedgerMetadataImpl.toString (Guava's ToStringHelper)."""
    m = re.search(r"LedgerMetadata\{(.*)\}\s*$", text.strip(), re.S)
    assert m, text
    body = m.group(1)
    fields: dict[str, Any] = {}
    ensembles = re.search(r"ensembles=\{(.*?)\}, customMetadata=", body, re.S)
    assert ensembles, body
    fields["ensembles"] = {int(first): tuple(s.strip() for s in members.split(","))
                           for first, members in re.findall(r"(\d+)=\[([^\]]*)\]", ensembles.group(1))}
    custom = re.search(r"customMetadata=\{(.*)\}$", body, re.S)
    assert custom is not None
    fields["custom"] = {k: base64.b64decode(v) for k, v in re.findall(r"([^,={}\s][^=]*)=base64:([^,}]*)",
                                                                        custom.group(1))}
    head = body[: ensembles.start()]
    for key, value in re.findall(r"(\w+)=([^,]*)", head):
        fields[key] = value
    return fields


def shell_metadata(cluster: LocalCluster, ledger_id: int) -> dict[str, Any]:
    return parse_shell_metadata(cluster.java_shell("ledgermetadata", "-ledgerid", str(ledger_id)).stdout)


@pytest.fixture(scope="module")
def written(cluster: LocalCluster) -> dict[str, int]:
    client = cluster.java_client()
    out: dict[str, int] = {}
    for digest in DIGESTS:
        answer = client.call("create", ensemble=3, wq=2, aq=2, digest=digest, password=f"pw-{digest}",
                             entries=10, size=100,
                             metadata={"pulsar/managed-ledger": f"public/default/persistent/{digest.lower()}",
                                       "application": "bkaudit-interop", "component": "ünïcode ✓"})
        out[digest] = int(answer["ledger"])  # type: ignore[arg-type]
    out["empty"] = int(client.call("create", ensemble=3, wq=3, aq=2, entries=0)["ledger"])  # type: ignore[arg-type]
    out["open"] = int(client.call("create", ensemble=2, wq=2, aq=1, entries=5, close=False)["ledger"])  # type: ignore[arg-type]

    # several segments: the Java client replaces a bookie that went away under an open ledger
    multi = client.call("create", ensemble=3, wq=2, aq=2, entries=10, size=64, close=False)
    victim = multi["ensembles"]["0"][1]  # type: ignore[index]
    cluster.stop_bookie(victim)
    client.call("add", ledger=multi["ledger"], entries=10, size=64)
    client.call("close", ledger=multi["ledger"])
    cluster.start_bookie(victim)
    out["multi"] = int(multi["ledger"])  # type: ignore[arg-type]

    # in recovery: a recovery open whose fencing reads cannot reach the ensemble leaves IN_RECOVERY behind
    stuck = client.call("create", ensemble=2, wq=2, aq=2, entries=3, close=False)
    ensemble = stuck["ensembles"]["0"]  # type: ignore[index]
    for b in ensemble:
        cluster.stop_bookie(b)
    recoverer = cluster.java_client({"readEntryTimeout": 2, "zkTimeout": 10000})
    failed: dict[str, object] = {}
    t = threading.Thread(target=lambda: failed.update(recoverer.call("read", ledger=stuck["ledger"],
                                                                   recovery=True, check=False)))
    t.start()
    t.join(120)
    assert failed and not failed.get("ok"), failed
    for b in ensemble:
        cluster.start_bookie(b)
    out["in_recovery"] = int(stuck["ledger"])  # type: ignore[arg-type]
    wait_for(lambda: shell_metadata(cluster, out["in_recovery"])["state"] == "IN_RECOVERY",
             timeout_s=30, what="IN_RECOVERY in the shell's view")
    return out


@pytest.fixture(scope="module")
def snapshot(spark, cluster: LocalCluster, written,
             tmp_path_factory) -> tuple[dict[int, Any], dict[int, list]]:
    from bkaudit import config, tables
    from bkaudit.spark.snapshot import run_snapshot

    warehouse = str(tmp_path_factory.mktemp("warehouse"))
    settings = config.load(environ={}, overrides={"zk.connect": cluster.zk, "zk.root": cluster.root,
                                                  "snapshot.warehouse": warehouse})
    result = run_snapshot(spark, settings, snapshot_id="java-1")
    assert result.unparseable == 0
    ledgers = {r.ledger_id: r for r in tables.load(spark, warehouse, "ledgers").collect()}
    segments: dict[int, list] = {}
    for s in sorted(tables.load(spark, warehouse, "ledger_segments").collect(),
                    key=lambda s: (s.ledger_id, s.segment_index)):
        segments.setdefault(s.ledger_id, []).append(s)
    return ledgers, segments


@pytest.mark.parametrize("name", [*DIGESTS, "empty", "open", "multi", "in_recovery"])
def test_snapshot_row_equals_the_shells_ledgermetadata(cluster, written, snapshot, name: str) -> None:
    ledgers, segments = snapshot
    ledger_id = written[name]
    truth = shell_metadata(cluster, ledger_id)
    row = ledgers[ledger_id]
    assert row.parse_error is None
    quorums = (int(truth["ensembleSize"]), int(truth["writeQuorumSize"]), int(truth["ackQuorumSize"]))
    assert (row.state, row.ensemble_size, row.write_quorum, row.ack_quorum) == (truth["state"], *quorums)
    if truth["state"] == "CLOSED":  # toString prints length and lastEntryId only for closed ledgers
        assert (row.length, row.last_entry_id) == (int(truth["length"]), int(truth["lastEntryId"]))
    if "digestType" in truth:  # printed when the ledger has a password (every 4.x client writes one)
        assert row.digest_type == truth["digestType"]
    assert dict(row.custom_metadata or {}) == {k: v.decode() for k, v in truth["custom"].items()}
    managed = truth["custom"].get("pulsar/managed-ledger")
    assert row.managed_ledger == (managed.decode() if managed is not None else None)
    assert row.segment_count == len(truth["ensembles"])
    got = {s.first_entry_id: tuple(s.ensemble) for s in segments.get(ledger_id, [])}
    assert got == truth["ensembles"]


def test_the_shapes_the_java_client_made(written, snapshot) -> None:
    """The scenario really has what it claims: several segments, an open ledger, one left in recovery."""
    ledgers, segments = snapshot
    assert len(segments[written["multi"]]) >= 2
    assert ledgers[written["open"]].state == "OPEN"
    assert ledgers[written["in_recovery"]].state == "IN_RECOVERY"
    assert {ledgers[written[d]].digest_type for d in DIGESTS} == set(DIGESTS)


def test_parse_shell_metadata_reads_guavas_to_string() -> None:
    text = ("ledgerID: 7\nLedgerMetadata{formatVersion=3, ensembleSize=3, writeQuorumSize=2, "
            "ackQuorumSize=2, state=CLOSED, length=20, lastEntryId=9, digestType=CRC32C, "
            "password=base64:cHc=, "
            "ensembles={0=[127.0.0.2:1, 127.0.0.3:2, 127.0.0.4:3], "
            "5=[127.0.0.2:1, 127.0.0.5:4, 127.0.0.4:3]}, "
            "customMetadata={a=base64:eA==, pulsar/managed-ledger=base64:dA==}}\n")
    parsed = parse_shell_metadata(text)
    assert parsed["state"] == "CLOSED" and parsed["lastEntryId"] == "9"
    assert parsed["ensembles"][5] == ("127.0.0.2:1", "127.0.0.5:4", "127.0.0.4:3")
    assert parsed["custom"] == {"a": b"x", "pulsar/managed-ledger": b"t"}
