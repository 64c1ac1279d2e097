"""Bookie identity and presence in ZooKeeper: registration bytes, racks, cookies, graceful stop, expiry."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from kazoo.protocol.states import EventType

from bkaudit.bookie.commands import bookie as bookie_cli
from bkaudit.bookie.registration import read_local_cookie
from bkaudit.cluster.local import LOG_FILE
from bkaudit.errors import BookieError, ClusterError
from bkaudit.formats import records
from bkaudit.formats.entry import DigestManager, master_key
from bkaudit.model.ledger import DigestType
from bkaudit.rpc.client import BookieClient
from bkaudit.zk import paths, registry
from tests.helpers import unique_path, wait_for


def test_registration_cookie_and_racks(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(bookies=5, racks=3)  # five bookies start concurrently
    zk = cluster.zk_client()
    ids = sorted(cluster.ids())
    assert registry.list_writable(zk, cluster.root) == ids
    assert registry.list_readonly(zk, cluster.root) == []
    assert registry.list_cookies(zk, cluster.root) == ids
    instance = zk.get(paths.instanceid_path(root=cluster.root))[0].decode()
    racks = registry.read_racks(zk)["default"]
    for b in cluster.bookies:
        data, stat = zk.get(paths.available_path(b.id, root=cluster.root))
        assert stat.ephemeralOwner != 0
        info = records.parse_bookie_service_info(data, b.id)
        assert records.encode_bookie_service_info(info) == data  # byte-exact round trip
        endpoint = info.endpoint()
        assert endpoint is not None
        assert (endpoint.id, endpoint.protocol, endpoint.host, endpoint.port) == (
            "bookie", "bookie-rpc", b.host, b.port)
        assert info.properties_dict()["bkaudit.transport"] == "native"
        assert info.properties_dict()["bkaudit.listing.batch"] == "true"  # advertised: op 1000 may be sent
        cookie_bytes, _ = zk.get(paths.cookie_path(b.id, root=cluster.root))
        cookie = records.parse_cookie(cookie_bytes)
        assert (cookie.bookie_host, cookie.instance_id) == (b.id, instance)
        assert read_local_cookie(b.data_dir) == cookie
        assert racks[b.id] == records.BookieRackInfo(b.rack, b.host)
    assert sorted(b.rack for b in cluster.bookies) == ["/rack-1", "/rack-1", "/rack-2", "/rack-2", "/rack-3"]
    # one loopback address per bookie (BookKeeper's racks are per host): 127.0.0.2, 127.0.0.3, ...
    assert [b.host for b in cluster.bookies] == [f"127.0.0.{i + 2}" for i in range(len(cluster.bookies))]
    assert all(b.id == f"{b.host}:{b.port}" for b in cluster.bookies)
    with cluster.client_pool() as pool:
        assert pool.resolve(ids[0]) == ids[0]
        assert pool.get(ids[0]).get_bookie_info().result(10).total_disk > 0
    added = cluster.add_bookie(rack="/rack-9")
    assert registry.bookie_state(zk, added.id, cluster.root) == "writable"
    assert registry.read_racks(zk)["default"][added.id].rack == "/rack-9"
    assert len(registry.read_racks(zk)["default"]) == 6


def test_set_rack_concurrent_read_modify_write_loses_nothing(zk) -> None:  # type: ignore[no-untyped-def]
    chroot_zk = zk
    base = unique_path("r")
    chroot_zk.ensure_path(base)
    from bkaudit.zk.client import close, connect

    clients = [connect(zk.hosts[0][0] + f":{zk.hosts[0][1]}{base}") for _ in range(4)]
    try:
        def worker(i: int) -> None:
            for j in range(10):
                registry.set_rack(clients[i], f"10.0.{i}.{j}:3181", f"/rack-{j % 3}")

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        racks = registry.read_racks(clients[0])["default"]
        assert len(racks) == 40
        assert racks["10.0.2.4:3181"].rack == "/rack-1"
    finally:
        for c in clients:
            close(c)


def test_set_rack_on_a_pulsar_document_changes_only_its_entry(zk) -> None:  # type: ignore[no-untyped-def]
    """Pulsar wrote /bookies (sorted groups, raw "r3", " /" default rack): set_rack keeps all of that."""
    import json

    from bkaudit.zk.client import close, connect

    base = unique_path("p")
    zk.ensure_path(base)
    doc = {"analytics": {"10.0.0.9:3181": {"rack": "r9", "hostname": "bk9"}},
           "default": {"10.0.0.1:3181": {"rack": " /"}, "10.0.0.3:3181": {"rack": "r3"}}}
    client = connect(zk.hosts[0][0] + f":{zk.hosts[0][1]}{base}")
    try:
        client.create("/bookies", json.dumps(doc).encode())
        registry.set_rack(client, "10.0.0.3:3181", "/r7", "bk3")
        registry.set_rack(client, "10.0.0.4:3181", "/r4", group="batch")
        after = json.loads(client.get("/bookies")[0])
    finally:
        close(client)
    assert list(after) == ["analytics", "batch", "default"]
    assert after["default"]["10.0.0.3:3181"] == {"rack": "/r7", "hostname": "bk3"}
    assert after["batch"] == {"10.0.0.4:3181": {"rack": "/r4"}}
    after["default"]["10.0.0.3:3181"] = doc["default"]["10.0.0.3:3181"]
    del after["batch"]
    assert after == doc
    assert list(after["default"]) == list(doc["default"])


def test_graceful_stop_goes_readonly_then_deregisters(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(bookies=1, racks=1)
    b = cluster.bookies[0]
    zk = cluster.zk_client()
    events = []
    zk.exists(paths.readonly_path(b.id, root=cluster.root), watch=events.append)
    proc = cluster._procs[b.id]
    cluster.stop_bookie(b.id)
    assert proc.returncode == 0
    wait_for(lambda: bool(events))
    assert events[0].type == EventType.CREATED  # it was registered read-only on its way out
    assert registry.bookie_state(zk, b.id, cluster.root) == "absent"
    assert registry.list_cookies(zk, cluster.root) == [b.id]  # still a known bookie
    log = (cluster.directory / "bookie-1" / "bookie.log").read_text()
    assert log.index(f"registered {b.id} as read-only") < log.index("drained") < log.rindex("deregistered")


def test_wiped_bookie_refuses_to_start_until_formatted(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(bookies=1, racks=1)
    b = cluster.bookies[0]
    key = master_key(b"p")
    body = DigestManager(5, b"p", DigestType.CRC32C).package(0, -1, 1, b"x")
    with BookieClient(b.id, b.id) as c:
        c.add_entry(5, 0, key, body).result(10)
    cluster.kill_bookie(b.id)
    cluster.wipe_bookie(b.id)
    with pytest.raises(ClusterError, match="wiped or lost"):
        cluster.start_bookie(b.id)
    refused = CliRunner().invoke(bookie_cli, ["format", "--zk", cluster.zk, "--bookie", b.id])
    assert refused.exit_code != 0 or "deleted" in refused.output  # registration may linger until expiry
    if refused.exit_code != 0:
        assert "running" in refused.output
        forced = CliRunner().invoke(bookie_cli, ["format", "--zk", cluster.zk, "--bookie", b.id, "--force"])
        assert forced.exit_code == 0, forced.output
    cluster.start_bookie(b.id)
    with BookieClient(b.id, b.id) as c, pytest.raises(BookieError, match="ENOLEDGER"):
        c.read_entry(5, 0).result(10)  # a new, empty bookie


def test_cookie_mismatch_and_missing_zk_cookie_refuse(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(bookies=1, racks=1)
    b = cluster.bookies[0]
    zk = cluster.zk_client()
    cluster.stop_bookie(b.id)
    path = paths.cookie_path(b.id, root=cluster.root)
    original, _ = zk.get(path)
    cookie = records.parse_cookie(original)
    other = records.Cookie(cookie.bookie_host, cookie.journal_dirs, cookie.ledger_dirs, str(uuid.uuid4()))
    zk.set(path, records.encode_cookie(other))
    with pytest.raises(ClusterError, match="differs"):
        cluster.start_bookie(b.id)
    cluster.format_bookie(b.id)  # the data is still there: ZooKeeper forgot the bookie
    with pytest.raises(ClusterError, match="ZooKeeper has none"):
        cluster.start_bookie(b.id)
    zk.create(path, original)
    cluster.start_bookie(b.id)
    assert registry.bookie_state(zk, b.id, cluster.root) == "writable"


def test_reregisters_after_session_expiry(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(bookies=1, racks=1)
    b = cluster.bookies[0]
    zk = cluster.zk_client()
    path = paths.available_path(b.id, root=cluster.root)
    owner = zk.exists(path).ephemeralOwner
    cluster.pause_bookie(b.id)  # frozen: its session expires (6 s) and ZooKeeper drops the node
    try:
        wait_for(lambda: zk.exists(path) is None, timeout_s=30)
    finally:
        cluster.resume_bookie(b.id)
    try:  # the helper's default: once a CI run's loaded machine took longer than 30 s here
        wait_for(lambda: zk.exists(path) is not None, timeout_s=60, what="the bookie to register again")
    except AssertionError as exc:
        log = (Path(b.data_dir) / LOG_FILE).read_text(errors="replace")
        raise AssertionError(f"{exc}; the bookie's log ends:\n{log[-4000:]}") from None
    assert zk.exists(path).ephemeralOwner != owner  # a new session registered it again
    with BookieClient(b.id, b.id) as c:
        assert c.get_bookie_info().result(10).total_disk > 0


def _run_bookie(zk_server, tmp_path, *extra: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    from bkaudit.zk.server import free_port

    cmd = [sys.executable, "-m", "bkaudit.cli", "bookie", "run", "--zk", zk_server.connect_string,
           "--root", unique_path("u", "/ledgers"), "--port", str(free_port()),
           "--data-dir", str(tmp_path), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_bookie_refuses_uninitialised_cluster(zk_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    done = _run_bookie(zk_server, tmp_path)
    assert done.returncode == 1
    assert "bkaudit cluster init" in done.stderr


def test_autorecovery_runs_inside_the_bookie(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(bookies=1, racks=1, bookie_args=["--autorecovery"])
    b = cluster.bookies[0]
    zk = cluster.zk_client()
    election = paths.election_root(root=cluster.root)
    wait_for(lambda: bool(zk.exists(election) and zk.get_children(election)))  # it joined the election
    proc = cluster._procs[b.id]
    cluster.stop_bookie(b.id)
    assert proc.returncode == 0


def test_a_registration_of_another_live_session_is_waited_out_not_replaced(zk_server) -> None:  # type: ignore[no-untyped-def]
    """BookKeeper's checkRegNodeAndWaitExpired: wait for the old session's node to go, never delete it."""
    from bkaudit.errors import ZooKeeperError
    from bkaudit.zk.client import close, connect

    root = unique_path("w", "/ledgers")
    old, new = connect(zk_server.connect_string), connect(zk_server.connect_string)
    expiry: threading.Thread | None = None
    try:
        new.ensure_path(paths.available_root(root=root))
        path = paths.available_path("10.0.0.7:3181", root=root)
        old.create(path, b"", ephemeral=True)  # a killed bookie whose session is still alive
        with pytest.raises(ZooKeeperError, match="another session"):
            registry.register(new, "10.0.0.7:3181", b"", root=root, stale_wait_s=0.5)
        assert new.exists(path).ephemeralOwner == old.client_id[0]  # left alone, as BookKeeper does

        closed_at: list[float] = []

        def expire_old() -> None:
            time.sleep(1.0)  # the old session ends a little later (the injected event)
            closed_at.append(time.monotonic())
            close(old)

        expiry = threading.Thread(target=expire_old)
        expiry.start()
        registry.register(new, "10.0.0.7:3181", b"", root=root, stale_wait_s=30)
        registered_at = time.monotonic()
        assert closed_at and registered_at >= closed_at[0]  # registered only once the old node was gone
        assert new.exists(path).ephemeralOwner == new.client_id[0]
    finally:
        close(new)
        if expiry is not None:  # its close of `old` may still be under way: two closes at once race in kazoo
            expiry.join()
        close(old)
