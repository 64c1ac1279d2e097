"""`bkaudit ledger` against in-memory bookies (the BookKeeper factory is swapped for a fake cluster)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bkaudit.cli import cli
from bkaudit.client.commands import entry_payload
from tests.client.test_client_fakes import FakeCluster


@pytest.fixture
def fake(monkeypatch):
    cluster = FakeCluster(n=4)
    from bkaudit.client import bookkeeper

    monkeypatch.setattr(
        bookkeeper.BookKeeper, "from_settings", classmethod(lambda cls, s, **kw: cluster.client())
    )
    monkeypatch.setenv("BKAUDIT_ZK", "127.0.0.1:2181")
    # the fake replaces ZooKeeper too: skip the CLI's reachability probe of that (unused) address
    monkeypatch.setattr("bkaudit.cli_common.require_zk", lambda settings: None)
    yield cluster
    cluster.close()


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["ledger", *args])
    return result.exit_code, result.stdout, result.stderr


def test_write_read_metadata_list(fake: FakeCluster) -> None:
    code, out, _ = invoke("write", "-n", "4", "--entry-size", "20", "--custom-metadata", "a=b", "--json")
    assert code == 0
    written = json.loads(out)
    assert written == {"ledger_id": 0, "last_add_confirmed": 3, "state": "CLOSED", "length": 80}
    code, out, _ = invoke("read", "0", "--json")
    entries = json.loads(out)["entries"]
    assert [e["entry_id"] for e in entries] == [0, 1, 2, 3]
    assert entries[2]["text"] == entry_payload(2, 20).decode()
    code, out, _ = invoke("metadata", "0", "--json")
    md = json.loads(out)
    assert md["state"] == "CLOSED" and md["custom_metadata"] == {"a": "b"} and md["last_entry_id"] == 3
    code, out, _ = invoke("list", "--json")
    assert json.loads(out) == {"ledgers": [0], "count": 1}
    code, out, _ = invoke("metadata", "0")
    assert code == 0 and out.startswith("ledger 0 CLOSED E3 WQ2 AQ2")


def test_recover_an_open_ledger(fake: FakeCluster) -> None:
    w = fake.client().create_ledger(3, 2, 2)
    for i in range(6):
        w.add_entry(entry_payload(i, 8))
    w.abandon()
    code, out, _ = invoke("recover", str(w.ledger_id), "--json")
    assert code == 0
    assert json.loads(out) == {
        "ledger_id": w.ledger_id,
        "state": "CLOSED",
        "last_entry_id": 5,
        "length": 48,
        "segments": 1,
    }


def test_delete(fake: FakeCluster) -> None:
    invoke("write", "-n", "1")
    code, out, _ = invoke("delete", "0", "--json")
    assert code == 0 and json.loads(out)["deleted"] is True
    code, _, err = invoke("metadata", "0")
    assert code == 1 and "NoSuchLedger" in err and "ledger 0" in err


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("write", "-e", "2", "-w", "3"), "QuorumError"),
        (("write", "--custom-metadata", "x"), "KEY=VALUE"),
        (("write", "-e", "9"), "NotEnoughBookies"),
        (("read", "42"), "ledger 42"),
        (("read", "-1"), "-1"),
        (("write", "--digest", "md5"), "md5"),
    ],
)
def test_errors_are_one_line_without_traceback(fake: FakeCluster, args: tuple[str, ...], text: str) -> None:
    code, _out, err = invoke(*args)
    assert code != 0
    assert text in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.lower().startswith("error")]) == 1


def test_entry_payload_is_deterministic_and_sized() -> None:
    assert entry_payload(7, 3) == b"ent"
    assert entry_payload(7, 100).startswith(b"entry-7 ") and len(entry_payload(7, 100)) == 100
    assert entry_payload(7, 100) == entry_payload(7, 100) != entry_payload(8, 100)
