"""Read-only bookies (forced, disk threshold, switching back) and overload (ETOOMANYREQUESTS)."""

from __future__ import annotations

import uuid
from concurrent.futures import wait
from pathlib import Path

from bkaudit import config
from bkaudit.bookie.server import BookieOptions, BookieServer
from bkaudit.formats.entry import DigestManager, master_key
from bkaudit.model.ledger import DigestType
from bkaudit.rpc.client import BookieClient
from bkaudit.zk import registry
from bkaudit.zk.ledgers import init_cluster
from bkaudit.zk.server import free_port
from tests.helpers import unique_path, wait_for

KEY = master_key(b"pwd")


def entry(ledger_id: int, entry_id: int) -> bytes:
    return DigestManager(ledger_id, b"pwd", DigestType.CRC32C).package(entry_id, entry_id - 1, 0, b"data")


def status_of(fut) -> str:  # type: ignore[no-untyped-def]
    exc = fut.exception(timeout=10)
    return "EOK" if exc is None else exc.status


def conf_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / f"bookie-{uuid.uuid4().hex[:6]}.toml"
    path.write_text(text)
    return str(path)




def test_forced_readonly_bookie(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(bookies=1, racks=1, bookie_args=["--readonly"])
    b = cluster.bookies[0]
    zk = cluster.zk_client()
    assert registry.list_readonly(zk, cluster.root) == [b.id]
    assert registry.list_writable(zk, cluster.root) == []
    with BookieClient(b.id, b.id) as c:
        assert status_of(c.add_entry(1, 0, KEY, entry(1, 0))) == "EREADONLY"
        assert status_of(c.add_entry(1, 0, KEY, entry(1, 0), recovery=True)) == "EREADONLY"
        assert status_of(c.write_lac(1, 0, KEY, b"x" * 20)) == "EREADONLY"
        assert status_of(c.read_entry(1, -1, fence=True, master_key=KEY)) == "ENOENTRY"  # fencing still works
        assert c.get_bookie_info().result(10).free_disk > 0


def test_disk_threshold_makes_bookie_readonly(cluster_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = conf_file(tmp_path, "[bookie]\nmin_free_bytes = 1000000000000000000\n")
    cluster = cluster_factory(bookies=1, racks=1, bookie_args=["--config", path])
    b = cluster.bookies[0]
    assert registry.bookie_state(cluster.zk_client(), b.id, cluster.root) == "readonly"
    with BookieClient(b.id, b.id) as c:
        assert status_of(c.add_entry(2, 0, KEY, entry(2, 0))) == "EREADONLY"
        # high-priority (recovery) writes still land while only the threshold is crossed, as in BookKeeper
        assert status_of(c.add_entry(2, 0, KEY, entry(2, 0), recovery=True)) == "EOK"
        assert c.read_entry(2, 0).result(10) == entry(2, 0)


def test_disk_space_recovery_switches_back_to_writable(zk, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """In-process bookie with a controllable disk: low -> read-only in ZooKeeper, recovered -> writable."""
    root = unique_path("d", "/ledgers")
    init_cluster(zk, root=root)
    host, port = zk.hosts[0]
    settings = config.load(path=conf_file(tmp_path, "[bookie]\ndisk_check_interval_s = 0.1\n"),
                           overrides={"zk.connect": f"{host}:{port}", "zk.root": root})
    free = {"bytes": 10}
    server = BookieServer(settings, BookieOptions(data_dir=str(tmp_path / "b"), port=free_port()),
                          disk_usage=lambda: (1000, free["bytes"])).start()
    try:
        bid = server.bookie_id
        assert registry.bookie_state(zk, bid, root) == "readonly"
        with BookieClient(bid, bid) as c:
            assert status_of(c.add_entry(3, 0, KEY, entry(3, 0))) == "EREADONLY"
            free["bytes"] = 900
            wait_for(lambda: registry.bookie_state(zk, bid, root) == "writable")
            assert status_of(c.add_entry(3, 0, KEY, entry(3, 0))) == "EOK"
            free["bytes"] = 49  # below 5 % of 1000
            wait_for(lambda: registry.bookie_state(zk, bid, root) == "readonly")
            assert status_of(c.add_entry(3, 1, KEY, entry(3, 1))) == "EREADONLY"
    finally:
        server.stop()
    assert registry.bookie_state(zk, bid, root) == "absent"


def test_overload_answers_etoomanyrequests(cluster_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = conf_file(tmp_path, "[bookie]\nmax_pending_requests = 2\n")
    cluster = cluster_factory(bookies=1, racks=1, bookie_args=["--config", path])
    b = cluster.bookies[0]
    with BookieClient(b.id, b.id) as c:
        c.get_bookie_info().result(10)  # stream established: the burst below leaves in few messages
        futures = [c.add_entry(4, e, KEY, entry(4, e)) for e in range(500)]
        wait(futures, timeout=30)
        statuses = {status_of(f) for f in futures}
        assert "ETOOMANYREQUESTS" in statuses
        assert statuses <= {"EOK", "ETOOMANYREQUESTS"}
        assert status_of(c.add_entry(5, 0, KEY, entry(5, 0))) == "EOK"  # still serving
