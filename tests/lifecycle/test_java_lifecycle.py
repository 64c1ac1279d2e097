"""`bkaudit lifecycle drain` of Apache BookKeeper's own bookie (issue 29, section 3, "Lifecycle on a Java
bookie").

A Java bookie does not watch bkaudit's lifecycle state znode, so the Auditor's drain pass makes it read-only
the way BookKeeper can: `PUT /api/v1/bookie/state/readonly` (`BookieStateReadOnlyService`) on the `http`
endpoint of its registration (`HttpService.publishInfo`); bkaudit.lifecycle.serving, docs/lifecycle.md.

Ground truth is the Java side: the Java client (4.17, Maven Central's jars) writes the ledgers and reads every
entry back with digest verification; the bookie's own HTTP API says whether it is read-only, BookKeeper's
shell (`listbookies`, `listledgers -m`) lists the read-only bookies and every ledger's ensembles, and the
Java bookie itself refuses to start without its cookie after `lifecycle remove`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bkaudit.cluster.bookies import LOG_FILE, BookieInfo
from bkaudit.cluster.java import JavaClient
from bkaudit.cluster.local import LocalCluster
from bkaudit.errors import ClusterError
from bkaudit.lifecycle import service
from bkaudit.lifecycle.drain import Drainer
from bkaudit.lifecycle.settings import LifecycleSettings
from bkaudit.model import lifecycle as lc
from bkaudit.store import ZkStore
from bkaudit.zk import lifecycle as store
from bkaudit.zk import registry
from tests.autorecovery.support import events, run_once
from tests.fixtures.cluster import running_cluster

pytestmark = [pytest.mark.slow]

S = lc.LifecycleState
ROOT = Path(__file__).resolve().parents[2]
STORAGES = {0: "db", 1: "sorted"}  # Java bookies 0 and 1 (with their HTTP admin API); 2 and 3 are bkaudit's
ENTRIES, PASSWORD = 20, "pw"
DIGESTS = ("CRC32C", "MAC", "CRC32")
READONLY_API = "/api/v1/bookie/state/readonly"  # HttpRouter.BOOKIE_STATE_READONLY


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory, java_bookkeeper) -> Iterator[LocalCluster]:
    with running_cluster(zk_server, tmp_path_factory, bookies=4, racks=2, java=STORAGES) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> JavaClient:
    return cluster.java_client()


def lifecycle_cli(cluster: LocalCluster, *args: str) -> tuple[int, str, str]:
    """`bkaudit lifecycle ...` as an operator runs it: (exit code, stdout, stderr)."""
    proc = subprocess.run([sys.executable, "-m", "bkaudit.cli", "lifecycle", *args, "--zk", cluster.zk,
                           "--root", cluster.root], capture_output=True, text=True, cwd=ROOT, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def java_says_read_only(b: BookieInfo) -> bool:
    """GET on the Java bookie's own HTTP API (BookieStateReadOnlyService: `StateManager.isReadOnly`)."""
    with urllib.request.urlopen(f"http://{b.host}:{b.http_port}{READONLY_API}", timeout=30) as answer:
        body = json.loads(answer.read())
    assert isinstance(body.get("readOnly"), bool), body
    return bool(body["readOnly"])


def shell_bookies(cluster: LocalCluster, flag: str) -> set[str]:
    """`bookkeeper shell listbookies -rw|-ro`: the bookie ids BookKeeper lists."""
    out = cluster.java_shell("listbookies", flag).stdout
    return set(re.findall(r"BookieID:([^,\s]+)", out))


def shell_ensembles(cluster: LocalCluster) -> dict[int, str]:
    """`bookkeeper shell listledgers -m`: ledger id -> its metadata text (LedgerMetadataImpl.toString)."""
    out = cluster.java_shell("listledgers", "-m").stdout
    blocks = re.split(r"^ledgerID: ", out, flags=re.M)[1:]
    return {int(b.split(None, 1)[0]): b for b in blocks}


def write(client: JavaClient, victim: str) -> dict[int, str]:
    """Closed E3 WQ2 AQ2 ledgers of the Java client, every digest type, until at least three name `victim`
    in their ensemble; ledger id -> digest."""
    out: dict[int, str] = {}
    naming = 0
    while naming < 3 or len(out) < len(DIGESTS):
        assert len(out) < 12, f"the Java client keeps leaving {victim} out: {out}"
        digest = DIGESTS[len(out) % len(DIGESTS)]
        answer = client.call("create", ensemble=3, wq=2, aq=2, digest=digest, password=PASSWORD,
                             entries=ENTRIES, size=100)
        out[int(answer["ledger"])] = digest  # type: ignore[arg-type]
        naming += any(victim in ens for ens in answer["ensembles"].values())  # type: ignore[union-attr]
    return out


def read_back(client: JavaClient, ledgers: dict[int, str]) -> dict[int, dict[str, Any]]:
    """The Java client's no-recovery open and read of every entry, digests verified: ledger -> answer."""
    out = {}
    for ledger, digest in ledgers.items():
        answer = client.call("read", ledger=ledger, digest=digest, password=PASSWORD)
        assert (answer["read"], answer["bad"]) == (ENTRIES, []), answer
        out[ledger] = answer
    return out


def test_drain_of_a_java_bookie_ends_drained_read_only_and_referenced_by_no_ledger(
    cluster: LocalCluster, client: JavaClient, tmp_path
) -> None:
    zk = cluster.zk_client()
    victim = cluster.bookies[0]  # Apache BookKeeper's bookie on DbLedgerStorage (Pulsar's default)
    assert victim.kind == "java" and victim.http_port
    assert not java_says_read_only(victim) and victim.id in shell_bookies(cluster, "-rw")
    ledgers = write(client, victim.id)
    on_victim = sorted(lid for lid, a in read_back(client, ledgers).items()
                       if any(victim.id in ens for ens in a["ensembles"].values()))
    assert len(on_victim) >= 3

    code, out, err = lifecycle_cli(cluster, "drain", victim.id, "--reason", "scale down", "--json")
    assert code == 0 and json.loads(out)["state"] == "Draining", (out, err)
    # the endpoint bkaudit found in the bookie's registration is the one the harness configured
    assert f"PUT http://{victim.host}:{victim.http_port}{READONLY_API}" in err, err
    # the Java bookie knows nothing of the state znode: it is still writable until the Auditor's pass
    assert not java_says_read_only(victim)

    # `autorecovery run --once`: the Auditor's drain pass (read-only switch, markers), the worker copies
    # every ledger off it, and the pass after the queue empties decides
    code, summary = run_once(cluster, tmp_path, "drain", "--timeout", "200", timeout=260,
                             BKAUDIT_LIFECYCLE__DRAIN_CHECK_INTERVAL_S="2")
    assert code == 0, summary
    assert summary["replicated"] >= len(on_victim), summary

    assert service.current(ZkStore(zk, root=cluster.root), victim.id)[0] is S.DRAINED
    history = store.history(zk, victim.id, root=cluster.root)
    assert [(h.state, h.by.split(":")[0]) for h in history] == [(S.DRAINING, "cli"), (S.DRAINED, "auditor")]
    progress = store.read_progress(zk, victim.id, root=cluster.root)
    assert progress is not None and progress["ledgers_left"] == 0, progress
    made = [e for e in events(tmp_path, "drain") if e["event"] == "drain_read_only"]
    assert [(e["bookie"], e["url"]) for e in made][:1] == [
        (victim.id, f"http://{victim.host}:{victim.http_port}{READONLY_API}")], made

    # the Java side: the bookie says it is read-only, BookKeeper lists it read-only only
    assert java_says_read_only(victim)
    assert victim.id in shell_bookies(cluster, "-ro") and victim.id not in shell_bookies(cluster, "-rw")
    # no ledger's metadata names it (BookKeeper's shell over every ledger, and the Java client's handles)
    listed = shell_ensembles(cluster)
    assert set(ledgers) <= set(listed), listed.keys()
    assert [lid for lid, text in listed.items() if victim.id in text] == []
    for lid, answer in read_back(client, ledgers).items():
        assert all(victim.id not in ens for ens in answer["ensembles"].values()), (lid, answer)
    # and BookKeeper's client places no new ledger on it
    fresh = client.call("create", ensemble=3, wq=2, aq=2, digest="CRC32C", password=PASSWORD, entries=5)
    assert all(victim.id not in ens for ens in fresh["ensembles"].values()), fresh  # type: ignore[union-attr]

    # removed while it still runs (refused unless forced, as BookKeeperAdmin.decommissionBookie refuses a
    # bookie not shut down): bkaudit never makes it writable again (no {"readOnly": false})
    code, out, err = lifecycle_cli(cluster, "remove", victim.id, "--json")
    assert code == 1 and "still registered (readonly)" in json.loads(out)["refused"], (out, err)
    code, out, err = lifecycle_cli(cluster, "remove", victim.id, "--force", "--json")
    assert code == 0 and json.loads(out)["state"] == "Removed", (out, err)
    assert registry.read_cookie(zk, victim.id, cluster.root) is None
    assert java_says_read_only(victim)
    # the operator stops it, as BookKeeper's decommission expects; without its cookie it cannot rejoin
    # (LegacyCookieValidation.checkCookies: the cookie is in its directories but not in ZooKeeper)
    cluster.stop_bookie(victim.id)
    log = Path(victim.data_dir) / LOG_FILE
    before = log.stat().st_size
    with pytest.raises(ClusterError, match="exited during start-up"):
        cluster.start_bookie(victim.id)
    tail = log.read_bytes()[before:].decode("utf-8", "replace")
    assert "Cookie for this bookie is not stored in metadata store" in tail, tail[-3000:]


def test_a_java_bookie_without_http_endpoint_ends_draining_failed_with_the_reason(
    cluster: LocalCluster
) -> None:
    zk = cluster.zk_client()
    cluster.java_settings["httpServerEnabled"] = False  # BookKeeper's default: no HTTP server, no endpoint
    try:
        bare = cluster.add_bookie(kind="java", storage="sorted")
    finally:
        del cluster.java_settings["httpServerEnabled"]
    info = registry.read_bookie_service_info(zk, bare.id, cluster.root)
    assert info is not None and info.endpoint() is not None and info.endpoint("http") is None, info

    code, out, err = lifecycle_cli(cluster, "drain", bare.id, "--json")
    assert code == 0 and json.loads(out)["state"] == "Draining", (out, err)
    assert "no http endpoint" in err and "never Drained" in err, err

    # the Auditor's pass: nothing references it, but it stays writable and cannot be made read-only: a clear
    # DrainingFailed at once (never Drained, never a silent wait)
    Drainer(ZkStore(zk, root=cluster.root), settings=LifecycleSettings()).step()
    record, _ = store.read_state(zk, bare.id, root=cluster.root)
    assert record is not None and record.state is S.DRAINING_FAILED and record.by == "auditor", record
    assert "still registered writable" in record.reason and "no http endpoint" in record.reason, record
    progress = store.read_progress(zk, bare.id, root=cluster.root)
    assert progress is not None and progress["serving"] == "writable" and progress["ledgers_left"] == 0
    assert registry.bookie_state(zk, bare.id, cluster.root) == "writable"  # it registered itself: untouched
    code, out, _ = lifecycle_cli(cluster, "state", bare.id)
    assert code == 0 and "still writable" in out, out

    # the way out the reason names: stop it, mark it drained, remove it
    cluster.stop_bookie(bare.id)
    code, out, err = lifecycle_cli(cluster, "mark-drained", bare.id, "--reason", "stopped by hand")
    assert code == 0, (out, err)
    assert lifecycle_cli(cluster, "remove", bare.id)[0] == 0
    assert registry.read_cookie(zk, bare.id, cluster.root) is None
