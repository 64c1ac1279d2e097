"""Acknowledged means durable: kill -9 right after acks, restart, read everything back; fault injection."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, wait

import pytest
from click.testing import CliRunner

from bkaudit.bookie.commands import bookie as bookie_cli
from bkaudit.bookie.commands import parse_id_list
from bkaudit.errors import BookieError
from bkaudit.formats import availability
from bkaudit.formats.entry import DigestManager, master_key
from bkaudit.model.ledger import DigestType
from bkaudit.rpc.client import BookieClient

PWD = b"pwd"
KEY = master_key(PWD)


def entry(ledger_id: int, entry_id: int) -> bytes:
    payload = f"{ledger_id}/{entry_id}".encode() * 20
    return DigestManager(ledger_id, PWD, DigestType.CRC32C).package(entry_id, entry_id - 1, 0, payload)


def test_acknowledged_adds_and_fences_survive_kill_9(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(bookies=1, racks=1)
    b = cluster.bookies[0]
    acked: dict[int, list[int]] = {}
    lock = threading.Lock()
    stop = threading.Event()
    client = BookieClient(b.id, b.id)

    def on_done(ledger_id: int, entry_id: int, fut: Future[None]) -> None:
        if fut.exception() is None:
            with lock:
                acked.setdefault(ledger_id, []).append(entry_id)

    def writer(ledger_id: int) -> None:
        e = 0
        while not stop.is_set() and e < 20000:
            fut = client.add_entry(ledger_id, e, KEY, entry(ledger_id, e))
            fut.add_done_callback(lambda f, lid=ledger_id, eid=e: on_done(lid, eid, f))
            e += 1
            if e % 200 == 0:
                fut.exception(timeout=30)  # keep a bounded window in flight

    # a fenced ledger: its flag must survive too
    wait([client.add_entry(1, e, KEY, entry(1, e)) for e in range(3)])
    client.read_entry(1, -1, fence=True, master_key=KEY).result(10)
    threads = [threading.Thread(target=writer, args=(lid,)) for lid in (10, 11, 12)]
    for t in threads:
        t.start()
    while True:  # kill while adds are streaming, once a good number were acknowledged
        with lock:
            if sum(map(len, acked.values())) >= 3000:
                break
        threads[0].join(0.05)
    cluster.kill_bookie(b.id)
    stop.set()
    for t in threads:
        t.join()
    client.close()
    with lock:
        snapshot = {lid: sorted(ids) for lid, ids in acked.items()}
    cluster.start_bookie(b.id)
    with BookieClient(b.id, b.id) as after:
        for lid, ids in snapshot.items():
            stored = set(availability.decode(after.get_list_of_entries(lid).result(10)))
            missing = set(ids) - stored
            assert not missing, f"ledger {lid}: {len(missing)} acknowledged entries lost"
            for e in ids[:: max(1, len(ids) // 50)]:
                assert after.read_entry(lid, e).result(10) == entry(lid, e)
        with pytest.raises(BookieError, match="EFENCED"):
            after.add_entry(1, 3, KEY, entry(1, 3)).result(10)


def test_admin_delete_entries_injects_holes_only_when_stopped(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(bookies=1, racks=1)
    b = cluster.bookies[0]
    with BookieClient(b.id, b.id) as client:
        wait([client.add_entry(7, e, KEY, entry(7, e)) for e in range(12)])
    runner = CliRunner()
    args = ["admin", "delete-entries", "--data-dir", b.data_dir, "--ledger", "7", "--entries", "3,5-9"]
    refused = runner.invoke(bookie_cli, args)
    assert refused.exit_code != 0 and "in use" in refused.output
    cluster.stop_bookie(b.id)
    done = runner.invoke(bookie_cli, args)
    assert done.exit_code == 0, done.output
    assert "removed 6 of 6" in done.output
    cluster.start_bookie(b.id)
    with BookieClient(b.id, b.id) as client:
        assert list(availability.decode(client.get_list_of_entries(7).result(10))) == [0, 1, 2, 4, 10, 11]
        with pytest.raises(BookieError, match="ENOENTRY"):
            client.read_entry(7, 5).result(10)


def test_parse_id_list() -> None:
    assert parse_id_list("3,5-9") == [3, 5, 6, 7, 8, 9]
    assert parse_id_list(" 0 , 2-2 ") == [0, 2]
    for bad in ("", "x", "5-3", "-1"):
        with pytest.raises(ValueError):
            parse_id_list(bad)


def test_client_fails_pending_promptly_times_out_and_reconnects(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(bookies=1, racks=1)
    b = cluster.bookies[0]
    client = BookieClient(b.id, b.id, request_timeout_s=1.5)
    try:
        client.add_entry(20, 0, KEY, entry(20, 0)).result(10)
        cluster.pause_bookie(b.id)  # frozen: nothing answers, the stream stays open
        start = time.monotonic()
        with pytest.raises(BookieError, match="UNAVAILABLE") as err:
            client.read_entry(20, 0).result(10)
        assert "no response within" in str(err.value) and time.monotonic() - start < 5
        pending = [client.read_entry(20, 0) for _ in range(20)]
        cluster.kill_bookie(b.id)  # the stream breaks: every pending request fails now, not at its deadline
        start = time.monotonic()
        wait(pending, timeout=10)
        assert all(isinstance(f.exception(), BookieError) for f in pending)
        assert {f.exception().status for f in pending} == {"UNAVAILABLE"}  # type: ignore[union-attr]
        assert time.monotonic() - start < 1.4
        cluster.start_bookie(b.id)
        assert client.read_entry(20, 0).result(10) == entry(20, 0)  # the same client reconnects
    finally:
        client.close()
    with pytest.raises(BookieError, match="UNAVAILABLE"):
        client.get_bookie_info().result(1)  # closed clients refuse at once
