"""`bkaudit ledger ...` as operators run it: separate processes against a real cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from bkaudit.client.commands import entry_payload


def run(
    *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "bkaudit.cli", "ledger", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def ledger(cluster, *args: str) -> dict:
    return json.loads(run(*args, "--zk", cluster.zk, "--root", cluster.root, "--json").stdout)


def test_crashed_writer_then_recover(cluster3) -> None:
    written = ledger(cluster3, "write", "--entries", "25", "--entry-size", "100", "--no-close")
    lid = written["ledger_id"]
    assert written["last_add_confirmed"] == 24 and written["state"] == "OPEN"
    assert ledger(cluster3, "metadata", str(lid))["state"] == "OPEN"
    recovered = ledger(cluster3, "recover", str(lid))
    assert recovered == {
        "ledger_id": lid,
        "state": "CLOSED",
        "last_entry_id": 24,
        "length": 2500,
        "segments": 1,
    }
    assert ledger(cluster3, "recover", str(lid))["last_entry_id"] == 24  # idempotent once CLOSED
    read = ledger(cluster3, "read", str(lid))
    assert [e["entry_id"] for e in read["entries"]] == list(range(25))
    for e in read["entries"]:
        assert e["size"] == 100 and e["text"].startswith(f"entry-{e['entry_id']} ")
        assert e["payload_b64"] and e["length"] == 100 * (e["entry_id"] + 1)
    assert lid in ledger(cluster3, "list")["ledgers"]


def test_crashed_writer_of_an_empty_ledger(cluster3) -> None:
    lid = ledger(cluster3, "write", "--entries", "0", "--no-close")["ledger_id"]
    recovered = ledger(cluster3, "recover", str(lid))
    assert (recovered["state"], recovered["last_entry_id"], recovered["length"]) == ("CLOSED", -1, 0)
    assert ledger(cluster3, "read", str(lid))["entries"] == []


def test_concurrent_recover_processes_converge(cluster3) -> None:
    lid = ledger(cluster3, "write", "--entries", "200", "--entry-size", "64", "--no-close")["ledger_id"]
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: ledger(cluster3, "recover", str(lid)), range(3)))
    assert {r["last_entry_id"] for r in results} == {199}
    assert {r["state"] for r in results} == {"CLOSED"}


def test_write_options_end_up_in_metadata(cluster3) -> None:
    out = ledger(
        cluster3,
        "write",
        "-n",
        "3",
        "-e",
        "3",
        "-w",
        "3",
        "-a",
        "2",
        "--digest",
        "mac",
        "--password",
        "s3cret",
        "--custom-metadata",
        "app=cli",
        "--custom-metadata",
        "team=storage",
    )
    assert out["state"] == "CLOSED" and out["last_add_confirmed"] == 2
    md = ledger(cluster3, "metadata", str(out["ledger_id"]))
    assert (md["ensemble_size"], md["write_quorum"], md["ack_quorum"]) == (3, 3, 2)
    assert md["digest_type"] == "MAC" and md["password_length"] == 6
    assert md["custom_metadata"] == {"app": "cli", "team": "storage"}
    assert md["last_entry_id"] == 2 and len(md["segments"][0]["ensemble"]) == 3
    read = ledger(cluster3, "read", str(out["ledger_id"]), "--first", "1", "--last", "2")
    assert [e["entry_id"] for e in read["entries"]] == [1, 2]
    assert read["entries"][0]["payload_b64"]
    import base64

    assert base64.b64decode(read["entries"][1]["payload_b64"]) == entry_payload(2, 1024)


def _one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_errors_are_one_line(cluster3) -> None:
    zk = ("--zk", cluster3.zk, "--root", cluster3.root)
    line = _one_line_error(run("write", *zk, "-e", "2", "-w", "3", check=False))
    assert "QuorumError" in line
    line = _one_line_error(run("read", "987654321", *zk, check=False))
    assert "987654321" in line
    line = _one_line_error(run("recover", "987654321", *zk, check=False))
    assert "987654321" in line
    line = _one_line_error(run("write", *zk, "--custom-metadata", "novalue", check=False))
    assert "KEY=VALUE" in line
    line = _one_line_error(run("write", *zk, "-e", "9", check=False))  # only 3 bookies
    assert "NotEnoughBookies" in line


def test_dead_zookeeper_is_one_line() -> None:
    proc = run("list", "--zk", "127.0.0.1:1", check=False, env={"BKAUDIT_ZK__CONNECT_TIMEOUT_S": "1"})
    assert "127.0.0.1:1" in _one_line_error(proc)


def test_no_zookeeper_given_is_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if k != "BKAUDIT_ZK"}
    proc = subprocess.run(
        [sys.executable, "-m", "bkaudit.cli", "ledger", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "--zk" in proc.stderr
