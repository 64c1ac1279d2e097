"""The Java harness's pure parts: BookKeeper's metadata URI for a bkaudit address, and the generated conf."""

from __future__ import annotations

from pathlib import Path

import pytest

from bkaudit.cluster import java
from bkaudit.errors import ClusterError


@pytest.mark.parametrize(("connect", "root", "layout", "uri"), [
    ("127.0.0.1:2181", "/ledgers", "hierarchical", "zk+hierarchical://127.0.0.1:2181/ledgers"),
    # a chroot has no place in BookKeeper's URI: it becomes part of the ledgers path (the same znodes)
    ("127.0.0.1:2181/c1", "/ledgers", "hierarchical", "zk+hierarchical://127.0.0.1:2181/c1/ledgers"),
    ("127.0.0.1:2181/c1/", "/pulsar/ledgers", "longhierarchical",
     "zk+longhierarchical://127.0.0.1:2181/c1/pulsar/ledgers"),
    # BookKeeper separates servers with ';' in the URI's authority
    ("h1:2181,h2:2181", "/ledgers", "hierarchical", "zk+hierarchical://h1:2181;h2:2181/ledgers"),
])
def test_metadata_service_uri(connect: str, root: str, layout: str, uri: str) -> None:
    assert java.metadata_service_uri(connect, root, layout) == uri


def test_unknown_layout_and_storage_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="layout"):
        java.metadata_service_uri("h:1", "/ledgers", "flat")
    with pytest.raises(ClusterError, match="ledger storage 'rocks'"):
        java.server_conf(zk_connect="h:1", root="/ledgers", host="127.0.0.2", port=1, data_dir=tmp_path,
                         storage="rocks")


def test_server_conf_keeps_bookkeeper_defaults_but_for_what_it_names(tmp_path: Path) -> None:
    conf = java.server_conf(zk_connect="h:1/c", root="/ledgers", host="127.0.0.3", port=3181,
                            data_dir=tmp_path, storage="db", http_port=8000,
                            extra={"journalSyncData": False, "gcWaitTime": 1000})
    assert conf["ledgerStorageClass"] == "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"
    assert (conf["advertisedAddress"], conf["bookiePort"]) == ("127.0.0.3", "3181")
    assert conf["allowLoopback"] == "true"
    assert conf["metadataServiceUri"] == "zk+hierarchical://h:1/c/ledgers"
    assert (conf["httpServerEnabled"], conf["httpServerPort"]) == ("true", "8000")
    assert conf["journalSyncData"] == "false" and conf["gcWaitTime"] == "1000"
    plain = java.server_conf(zk_connect="h:1", root="/ledgers", host="127.0.0.3", port=1, data_dir=tmp_path)
    assert plain["ledgerStorageClass"] == "org.apache.bookkeeper.bookie.SortedLedgerStorage"
    assert plain["httpServerEnabled"] == "false" and "httpServerPort" not in plain
    written = java.write_conf(tmp_path / "x" / "bk_server.conf", plain).read_text().splitlines()
    assert dict(line.split("=", 1) for line in written) == plain


def test_locate_says_how_to_fetch_the_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BKAUDIT_BOOKKEEPER_HOME", str(tmp_path))
    with pytest.raises(ClusterError, match="make bookkeeper"):
        java.JavaBookKeeper.locate()
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "bookkeeper-server-4.17.3.jar").write_bytes(b"")
    found = java.JavaBookKeeper.locate()
    assert found.version == "4.17.3"
    with pytest.raises(ClusterError, match="driver is not compiled"):
        found.command(java.DRIVER_MAIN)
    cmd = found.command(java.BOOKIE_MAIN, "--conf", "x", heap_mb=300)
    assert cmd[0] == "java" and "-Xmx300m" in cmd and cmd[-3:] == [java.BOOKIE_MAIN, "--conf", "x"]
