"""`bkaudit underreplicated list` reads a queue written the way BookKeeper writes it.

The markers and the lock are written here with plain kazoo in BookKeeper's layout and text format
(ZkLedgerUnderreplicationManager: `{root}/underreplication/ledgers/%04x/%04x/%04x/%04x/urL%010d` holding
an UnderreplicatedLedgerFormat, `{root}/underreplication/locks/urL%010d` holding a LockDataFormat, from
DataFormats.proto), not with bkaudit's writer, so the command is checked against BookKeeper's bytes.
"""

from __future__ import annotations

import json

from click.testing import CliRunner
from kazoo.client import KazooClient

from bkaudit.cli import cli

# ledger -> missing replicas (ground truth of the assertions)
QUEUE = {5: ["b1:3181"], 9: ["b2:3181", "b1:3181"], 0x1_0000_0007: ["b2:3181"]}


def _marker_path(root: str, ledger_id: int) -> str:
    parts = [(ledger_id >> shift) & 0xFFFF for shift in (48, 32, 16, 0)]
    return f"{root}/underreplication/ledgers/" + "/".join(f"{p:04x}" for p in parts) + f"/urL{ledger_id:010d}"


def _write_bookkeeper_queue(zk: KazooClient, root: str) -> None:
    for ledger_id, replicas in QUEUE.items():
        text = "".join(f'replica: "{r}"\n' for r in replicas) + "ctime: 1700000000000\n"
        zk.create(_marker_path(root, ledger_id), text.encode(), makepath=True)
    zk.create(f"{root}/underreplication/locks/urL{9:010d}", b'bookieId: "worker-a:3181"\n', makepath=True,
              ephemeral=True)


def _run(zk_server, root: str, *args: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    argv = ["underreplicated", "list", "--zk", zk_server.connect_string, "--root", root, *args]
    result = CliRunner().invoke(cli, argv)
    return result.exit_code, result.stdout, result.stderr


def test_lists_filters_and_prints_like_listunderreplicated(zk_server, zk, zk_root) -> None:  # type: ignore[no-untyped-def]
    _write_bookkeeper_queue(zk, zk_root)

    code, out, _ = _run(zk_server, zk_root, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["count"] == len(QUEUE) and [r["ledger_id"] for r in data["ledgers"]] == sorted(QUEUE)
    by_id = {r["ledger_id"]: r for r in data["ledgers"]}
    assert {k: v["missing_replicas"] for k, v in by_id.items()} == QUEUE
    assert by_id[9]["worker"] == "worker-a:3181" and by_id[5]["worker"] is None
    assert by_id[5]["marked_at"] == "2023-11-14T22:13:20+00:00"

    code, out, _ = _run(zk_server, zk_root, "-mr", "b1:3181")
    assert code == 0 and out.splitlines()[:-1] == ["5", "9"]
    code, out, _ = _run(zk_server, zk_root, "--excludingmissingreplica", "b1:3181", "-pmr", "-prw")
    assert code == 0 and out.splitlines()[:3] == [str(0x1_0000_0007), "\tMissingReplica : b2:3181",
                                                  "\tMarkedAt : 2023-11-14T22:13:20+00:00"]
    code, out, _ = _run(zk_server, zk_root, "-c")
    assert code == 0 and out.strip() == f"{len(QUEUE)} under-replicated ledger(s)"


def test_empty_queue_and_dead_zookeeper(zk_server, zk_root) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = _run(zk_server, zk_root, "--json")
    assert code == 0 and json.loads(out) == {"count": 0, "ledgers": []}
    dead = CliRunner().invoke(cli, ["underreplicated", "list", "--zk", "127.0.0.1:1"])
    assert dead.exit_code == 1 and "not reachable" in dead.stderr
