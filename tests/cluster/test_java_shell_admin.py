"""BookKeeper's own admin tooling (the shell, Apache BookKeeper 4.17.3) on clusters bkaudit made and runs.

- `initnewcluster` makes a cluster bkaudit accepts; `nukeexistingcluster` (validateAndNukeExistingCluster)
  finds nothing foreign under a ledgers root bkaudit populated: ledgers, markers, locks, votes, cookies,
  layouts. A foreign znode makes it refuse: the negative that shows the check looks.
- `recover` re-replicates a lost bkaudit bookie's ledgers (BookKeeperAdmin.recoverBookieData reads from and
  writes to bkaudit bookies).
- `decommissionbookie` (DecommissionCommand: it triggers the Auditor's audit and waits for the bookie's
  ledgers to be replicated) completes with bkaudit's AutoRecovery doing the work.

Ground truth is the Java side: its client reads every entry back (digest verified, payload rule), its
metadata names no lost bookie, the cookie it deletes is gone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bkaudit.cluster import java as java_bk
from bkaudit.cluster.local import LocalCluster
from bkaudit.config import ZkSettings
from bkaudit.zk import ledgers as zk_ledgers
from bkaudit.zk import paths, registry
from bkaudit.zk import underreplication as ur
from tests.autorecovery import support as ar
from tests.fixtures.cluster import running_cluster
from tests.helpers import unique_path, wait_for

pytestmark = [pytest.mark.slow]


def shell_for(java: java_bk.JavaBookKeeper, tmp: Path, zk: ZkSettings, *args: str, check: bool = True):
    conf = java_bk.write_conf(tmp / "shell" / java_bk.CONF_FILE, java_bk.server_conf(
        zk=zk, host="127.0.0.1", port=3181, data_dir=tmp / "shell"))
    return java_bk.run_shell(java, conf, *args, check=check)


def test_initnewcluster_makes_a_cluster_bkaudit_accepts(java_bookkeeper, zk, zk_server, tmp_path) -> None:
    root = unique_path("t", "/ledgers")
    zk.ensure_path(root.rsplit("/", 1)[0])  # BookKeeper's initNewCluster creates the root, not its parents
    shell_for(java_bookkeeper, tmp_path, ZkSettings(connect=zk_server.connect_string, root=root),
              "initnewcluster")
    zk_ledgers.require_cluster(zk, root=root)
    assert zk_ledgers.read_layout(zk, root=root) == "hierarchical"
    first = zk_ledgers.generate_ledger_id(zk, root=root)
    assert zk_ledgers.generate_ledger_id(zk, root=root) == first + 1  # BookKeeper's id generator, shared


def test_nukeexistingcluster_finds_nothing_foreign(java_bookkeeper, zk_server, tmp_path_factory,
                                                   tmp_path) -> None:
    with running_cluster(zk_server, tmp_path_factory, bookies=3, racks=3) as c:
        client = c.java_client()
        written = [int(client.call("create", ensemble=3, wq=2, aq=2, entries=10, size=64)["ledger"])
                   for _ in range(3)]
        zk = c.zk_client()
        ur.mark_underreplicated(zk, written[0], [c.ids()[0]], root=c.root)  # a bkaudit marker
        for b in c.ids():
            c.stop_bookie(b)
        instance = zk.get(paths.instanceid_path(root=c.root))[0].decode()
        # the shell's root is the one BookKeeper resolves: chroot and ledgers path together
        jroot = "/" + java_bk.metadata_service_uri(c.zk_settings()).split("/", 3)[3]
        shell_zk = ZkSettings(connect=c.zk.partition("/")[0], root=jroot)

        zk.create(c.root + "/not-bookkeeper", b"x")  # the negative: BookKeeper refuses a foreign child
        shell_for(java_bookkeeper, tmp_path, shell_zk, "nukeexistingcluster", "-zkledgersrootpath",
                  jroot, "-instanceid", instance, check=False)
        assert zk.exists(c.root) is not None and zk.exists(paths.ledger_path(written[0], root=c.root))
        zk.delete(c.root + "/not-bookkeeper")

        shell_for(java_bookkeeper, tmp_path, shell_zk, "nukeexistingcluster", "-zkledgersrootpath",
                  jroot, "-instanceid", instance, check=False)
        assert zk.exists(c.root) is None  # everything bkaudit wrote was BookKeeper's to delete


@pytest.fixture
def cluster(zk_server, tmp_path_factory, java_bookkeeper) -> Iterator[LocalCluster]:
    with running_cluster(zk_server, tmp_path_factory, bookies=4, racks=2, env=ar.FAST) as c:
        yield c


def write(cluster: LocalCluster, n: int = 4) -> dict[int, int]:
    client = cluster.java_client()
    answers = [client.call("create", ensemble=3, wq=2, aq=2, password="pw", entries=30, size=256)
               for _ in range(n)]
    return {int(a["ledger"]): 30 for a in answers}  # type: ignore[arg-type]


def most_used(cluster: LocalCluster, written: dict[int, int]) -> str:
    zk = cluster.zk_client()
    counts = {b: 0 for b in cluster.ids()}
    for lid in written:
        md, _ = zk_ledgers.read_ledger_metadata(zk, lid, root=cluster.root)
        for b in md.bookies():
            counts[b] += 1
    return max(counts, key=lambda b: counts[b])


def read_back(cluster: LocalCluster, written: dict[int, int], gone: str) -> None:
    client = cluster.java_client()
    for lid, entries in written.items():
        back = client.call("read", ledger=lid, password="pw")
        assert (back["read"], back["bad"]) == (entries, []), back
        assert all(gone not in ens for ens in back["ensembles"].values()), back  # type: ignore[union-attr]


def test_shell_recover_moves_a_lost_bkaudit_bookies_ledgers(cluster: LocalCluster) -> None:
    written = write(cluster)
    lost = most_used(cluster, written)
    cluster.kill_bookie(lost)
    ar.wait_absent(cluster, lost, timeout=60)
    out = cluster.java_shell("recover", "-f", lost, timeout_s=180)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    read_back(cluster, written, lost)


def test_shell_decommissionbookie_completes_with_bkaudit_autorecovery(cluster: LocalCluster,
                                                                       tmp_path) -> None:
    written = write(cluster)
    gone = most_used(cluster, written)
    proc = ar.start_run(cluster, tmp_path, "bk-ar")
    try:
        wait_for(lambda: any(e["event"] == "elected" for e in ar.events(tmp_path, "bk-ar")), timeout_s=60,
                 what="bkaudit's Auditor elected")
        cluster.stop_bookie(gone)  # decommissionBookie refuses a bookie still registered
        ar.wait_absent(cluster, gone, timeout=60)
        out = cluster.java_shell("decommissionbookie", "-bookieid", gone, timeout_s=240)
        assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    finally:
        ar.stop(proc)
    assert registry.read_cookie(cluster.zk_client(), gone, cluster.root) is None
    read_back(cluster, written, gone)
