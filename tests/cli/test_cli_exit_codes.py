"""Exit codes of every `bkaudit` command (docs/cli.md): 0 clean, 1 error, 2 usage/config, 3 findings.

Each case runs the real console entry (`python -m bkaudit.cli`, which ends in bkaudit.shutdown.exit_process),
so the code is the process's, as a scheduler sees it. Failures are provoked by what the test sets up: a
malformed settings file, a port nobody listens on, a warehouse written here with known violations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from bkaudit.cli import COMMANDS
from tests.cli.warehouse import RUN_ID, VIOLATIONS, make_warehouse

DEAD_ZK = "127.0.0.1:1"  # nothing listens on port 1 (tcpmux): connection refused at once


def bkaudit(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> CompletedProcess[str]:
    """The command as a process, without the caller's BKAUDIT_* settings (only `env`'s)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("BKAUDIT_")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "bkaudit.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def one_error_line(proc: CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_warehouse(tmp_path_factory.mktemp("warehouse"))


@pytest.fixture(scope="module")
def bad_toml(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("conf") / "bad.toml"
    path.write_text("[zk\nconnect = 1\n")
    return str(path)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_unknown_option_is_a_usage_error_for_every_command(command: str) -> None:
    proc = bkaudit(command, "--no-such-option")
    assert proc.returncode == 2, proc.stderr
    assert "No such option" in proc.stderr


def test_unknown_command_is_a_usage_error() -> None:
    assert bkaudit("no-such-command").returncode == 2


# every command that reads a settings file, with otherwise valid arguments
CONFIG_COMMANDS = [
    ("snapshot", "--zk", DEAD_ZK, "--warehouse", "/tmp"),
    ("check", "--zk", DEAD_ZK, "--warehouse", "/tmp"),
    ("decommission-audit", "--zk", DEAD_ZK, "--warehouse", "/tmp", "--bookie", "a:1"),
    ("violations", "--warehouse", "/tmp"),
    ("report", "--warehouse", "/tmp", "--out", "/tmp/unused"),
    ("ledger", "list", "--zk", DEAD_ZK),
    ("bookie", "list", "--zk", DEAD_ZK),
    ("cluster", "init", "--zk", DEAD_ZK),
    ("autorecovery", "status", "--zk", DEAD_ZK),
    ("autorecovery", "run", "--once", "--zk", DEAD_ZK),
]


@pytest.mark.parametrize("args", CONFIG_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_malformed_settings_file_exits_2_in_one_line(args: tuple[str, ...], bad_toml: str) -> None:
    proc = bkaudit(*args, "--config", bad_toml)
    assert proc.returncode == 2, proc.stderr
    assert "not valid TOML" in one_error_line(proc)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"BKAUDIT_CHECKER__CALL_TIMEOUT_S": "abc"}, "'checker.call_timeout_s'"),
        ({"BKAUDIT_CHECKER__CALL_TIMEOUT": "5"}, "did you mean 'call_timeout_s'"),
        ({"BKAUDIT_CHECKR__FAIL_ON": "never"}, "did you mean [checker]"),
        ({"BKAUDIT_PLACEMENT__MIN_ZONES": "0"}, "'placement.min_zones': must be >= 1"),
    ],
)
def test_invalid_settings_exit_2_at_start_up(env: dict[str, str], says: str, warehouse: str) -> None:
    # `violations` never reads [checker] or [placement]: the error comes from start-up validation
    proc = bkaudit("violations", "--warehouse", warehouse, env=env)
    assert proc.returncode == 2, proc.stderr
    assert says in one_error_line(proc)


@pytest.mark.parametrize("args", CONFIG_COMMANDS[:3] + CONFIG_COMMANDS[5:9], ids=lambda a: " ".join(a[:2]))
def test_unreachable_zookeeper_exits_1_fast_in_one_line(args: tuple[str, ...]) -> None:
    started = time.monotonic()
    proc = bkaudit(*args)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr
    assert f"ZooKeeper is not reachable at {DEAD_ZK}" in one_error_line(proc)
    assert elapsed < 12, f"took {elapsed:.1f}s: was a JVM or a kazoo retry loop started?"


@pytest.mark.parametrize("command", ["check", "report"])
def test_bogus_fail_on_is_a_usage_error_not_a_finding(command: str, warehouse: str) -> None:
    args = ["--warehouse", warehouse, "--fail-on", "bogus"] + (["--out", "/tmp/unused"] if command == "report"
                                                              else ["--zk", DEAD_ZK])
    proc = bkaudit(command, *args)
    assert proc.returncode == 2, proc.stderr


def test_findings_at_or_above_fail_on_exit_3(warehouse: str, tmp_path: Path) -> None:
    out = tmp_path / "report"
    severities = {sev for _lid, _cat, sev in VIOLATIONS}
    assert severities == {"critical", "warning"}
    for fail_on, expected in (("never", 0), ("warning", 3), ("critical", 3)):
        proc = bkaudit("report", "--warehouse", warehouse, "--out", str(out), "--fail-on", fail_on, "--json")
        assert proc.returncode == expected, (fail_on, proc.stderr)
        assert json.loads(proc.stdout)["run_id"] == RUN_ID  # the report is written either way


def test_violations_json_is_clean_and_iso_8601(warehouse: str) -> None:
    from datetime import datetime

    proc = bkaudit("violations", "--warehouse", warehouse, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["violations"]
    assert sorted(r["ledger_id"] for r in rows) == sorted(lid for lid, _c, _s in VIOLATIONS)
    for row in rows:
        assert "T" in row["detected_at"]
        assert datetime.fromisoformat(row["detected_at"]).utcoffset() is not None


@pytest.mark.parametrize("command", ["violations", "report"])
def test_missing_warehouse_directory_is_named(command: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    out = ["--out", str(tmp_path)] if command == "report" else []
    proc = bkaudit(command, "--warehouse", str(missing), *out)
    assert proc.returncode == 2, proc.stderr
    assert f"warehouse {missing} does not exist" in one_error_line(proc)


def test_unknown_run_is_an_error(warehouse: str, tmp_path: Path) -> None:
    proc = bkaudit("report", "--warehouse", warehouse, "--run-id", "nope", "--out", str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert "nope" in one_error_line(proc)


def test_decode_garbage_is_an_error(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\xff\x00 not ledger metadata")
    proc = bkaudit("decode", "metadata", str(garbage))
    assert proc.returncode == 1, proc.stderr
    one_error_line(proc)


def test_zk_stop_without_a_server_is_clean(tmp_path: Path) -> None:
    proc = bkaudit("zk", "stop", "--data-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
