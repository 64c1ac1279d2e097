"""The cluster and bookie commands end to end: init, up, status, stop / kill / start, format, down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bkaudit.cli import cli
from bkaudit.cluster.local import LocalCluster
from bkaudit.zk import paths
from tests.helpers import unique_path

pytestmark = pytest.mark.cluster


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_cluster_init_is_idempotent(zk_server, zk) -> None:  # type: ignore[no-untyped-def]
    root = unique_path("i", "/ledgers")
    init = ("cluster", "init", "--zk", zk_server.connect_string, "--root", root)
    assert "initialised cluster" in invoke(*init)
    instance = zk.get(paths.instanceid_path(root=root))[0]
    assert zk.exists(paths.layout_path(root=root)) and zk.exists(paths.readonly_root(root=root))
    assert "already initialised" in invoke(*init)
    assert zk.get(paths.instanceid_path(root=root))[0] == instance


def test_local_cluster_lifecycle_through_the_cli(tmp_path: Path) -> None:
    d = str(tmp_path / "c")
    up = json.loads(invoke("cluster", "up", "--dir", d, "--bookies", "2", "--racks", "2", "--json"))
    try:
        state = json.loads((Path(d) / "cluster.json").read_text())
        assert set(state) >= {"zk", "root", "bookies", "zookeeper"}
        assert set(state["zookeeper"]) == {"pid", "port", "data_dir", "heap_mb"}
        keys = {"id", "rack", "port", "pid", "data_dir", "host", "listing", "readonly", "kind", "storage",
                "http_port"}
        assert all(set(b) == keys for b in state["bookies"])
        assert [b["host"] for b in state["bookies"]] == ["127.0.0.2", "127.0.0.3"]  # one address per bookie
        assert [b["state"] for b in up["bookies"]] == ["writable", "writable"]
        assert [b["rack"] for b in up["bookies"]] == ["/rack-1", "/rack-2"]
        first = state["bookies"][0]["id"]

        invoke("bookie", "stop", "--dir", d, "--bookie", first)
        status = json.loads(invoke("cluster", "status", "--dir", d, "--json"))
        assert (status["bookies"][0]["state"], status["bookies"][0]["alive"]) == ("absent", False)
        assert status["bookies"][1]["alive"] is True

        invoke("bookie", "start", "--dir", d, "--bookie", first)
        invoke("bookie", "kill", "--dir", d, "--bookie", first)
        status = json.loads(invoke("cluster", "status", "--dir", d, "--json"))
        assert status["bookies"][0]["alive"] is False  # its registration lingers until the session expires

        invoke("bookie", "start", "--dir", d, "--bookie", first)
        listed = json.loads(invoke("bookie", "list", "--dir", d, "--json"))
        assert {r["id"]: r["state"] for r in listed} == {b["id"]: "writable" for b in state["bookies"]}

        # restart_bookies (the benchmarks' cold start between runs): new processes, every one registered again
        cluster = LocalCluster.load(d)
        before = {b.id: b.pid for b in cluster.bookies}
        cluster.restart_bookies()
        after = {b["id"]: (b["pid"], b["state"], b["alive"]) for b in cluster.status()["bookies"]}
        assert set(after) == set(before)
        assert all(pid != before[i] and state == "writable" and alive
                   for i, (pid, state, alive) in after.items())

        refused = CliRunner().invoke(cli, ["bookie", "format", "--dir", d, "--bookie", first])
        assert refused.exit_code != 0 and "running" in refused.output
    finally:
        invoke("cluster", "down", "--dir", d, "--purge")
    assert not Path(d).exists()
