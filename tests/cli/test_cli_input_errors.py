"""Malformed command-line input is a usage error: one line `error: ...`, exit 2, before anything connects
(issue 32 items 6, 7 and 8). Run in-process through `bkaudit.cli.run`, the console entry's code path; the
ZooKeeper given is a port nobody listens on, so any attempt to go further would fail differently (exit 1).

- bookie ids BookKeeper would refuse (BookieId.validateBookieId): NUL and other control characters, `/`,
  `..`, "readonly", spaces;
- ledger ids outside a Java long (2^63), durations that are nan, inf or beyond 2^31-1 seconds;
- arguments that are not UTF-8 (their bytes arrive as lone surrogates);
- a ledgers root like `/a/../b`, nan/inf settings and non-UTF-8 settings files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bkaudit.cli import run

DEAD_ZK = "127.0.0.1:1"
BAD_IDS = ["bk\x00one:3181", "a\x01:1", "../../x", "..", ".", "a/b:1", "readonly", "bk one:3181", "bk\n:1"]


def usage_error(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    code = run(args)
    captured = capsys.readouterr()
    assert code == 2, (args, captured.err)
    assert "Traceback" not in captured.err
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return lines[0]


@pytest.mark.parametrize("bookie", BAD_IDS, ids=repr)
@pytest.mark.parametrize("command", ["state", "history", "drain", "mark-drained", "remove"])
def test_invalid_bookie_ids_are_usage_errors_for_lifecycle(
    capsys: pytest.CaptureFixture[str], command: str, bookie: str
) -> None:
    line = usage_error(capsys, ["lifecycle", command, bookie, "--zk", DEAD_ZK])
    assert "BOOKIE" in line and "\x00" not in line and "\n" not in line.strip()


@pytest.mark.parametrize("bookie", ["bk\x00one:3181", "../x", "readonly"], ids=repr)
def test_invalid_bookie_ids_are_usage_errors_elsewhere(capsys: pytest.CaptureFixture[str],
                                                       bookie: str) -> None:
    usage_error(capsys, ["bookie", "format", "--bookie", bookie, "--zk", DEAD_ZK])
    usage_error(capsys, ["bookie", "run", "--port", "0", "--data-dir", "/nonexistent", "--bookie-id", bookie,
                         "--zk", DEAD_ZK])
    usage_error(capsys, ["bookie", "stop", "--bookie", bookie, "--dir", "/nonexistent"])


@pytest.mark.parametrize("ledger", [str(2**63), str(2**64 + 5), "-1", "1e3"])
def test_out_of_range_ledger_ids_are_usage_errors(capsys: pytest.CaptureFixture[str], ledger: str) -> None:
    for args in (["ledger", "metadata", ledger], ["ledger", "read", ledger], ["ledger", "delete", ledger],
                 ["autorecovery", "clear-data-loss", "--ledger", ledger]):
        usage_error(capsys, [*args, "--zk", DEAD_ZK] if args[0] == "autorecovery" else
                    [args[0], args[1], "--zk", DEAD_ZK, "--", *args[2:]])


@pytest.mark.parametrize("seconds", ["nan", "inf", "-inf", "1e300", "-1"])
def test_durations_that_are_not_finite_are_usage_errors(capsys: pytest.CaptureFixture[str],
                                                        seconds: str) -> None:
    usage_error(capsys, ["autorecovery", "run", "--once", "--timeout", seconds, "--zk", DEAD_ZK])
    usage_error(capsys, ["zk", "stop", "--timeout", seconds, "--data-dir", "/nonexistent"])


def test_arguments_that_are_not_utf8_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    latin1 = b"/tmp/l\xe9dgers".decode("utf-8", "surrogateescape")  # what Python makes of such argv bytes
    line = usage_error(capsys, ["lifecycle", "state", latin1, "--zk", DEAD_ZK])
    assert "not valid UTF-8" in line and "\\xe9" in line
    usage_error(capsys, ["violations", "--warehouse", latin1])
    usage_error(capsys, ["ledger", "list", "--zk", DEAD_ZK, "--root", latin1])


def test_bad_roots_and_settings_are_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert "'zk.root'" in usage_error(capsys, ["ledger", "list", "--zk", DEAD_ZK, "--root", "/a/../b"])
    assert "'zk.root'" in usage_error(capsys, ["bookie", "list", "--zk", DEAD_ZK, "--root", "/a/../b"])
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(b'[zk]\nroot = "/l\xe9dgers"\n')
    assert "not UTF-8" in usage_error(capsys, ["ledger", "list", "--zk", DEAD_ZK, "--config", str(latin1)])
    yes = tmp_path / "yes.toml"
    yes.write_text('[zk]\nenable_security = "yes"\n')
    assert "'zk.enable_security'" in usage_error(capsys, ["bookie", "list", "--zk", DEAD_ZK, "--config",
                                                          str(yes)])
    monkeypatch.setenv("BKAUDIT_ZK__SESSION_TIMEOUT_S", "nan")
    assert "'zk.session_timeout_s'" in usage_error(capsys, ["bookie", "list", "--zk", DEAD_ZK])


def test_unreadable_tls_files_are_configuration_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Not `UNAVAILABLE` from every bookie: the key and the file, exit 2, before ZooKeeper is asked."""
    import bkaudit.cli_common as cli_common

    monkeypatch.setattr(cli_common, "require_zk", lambda settings: None)  # the client builds TLS first
    monkeypatch.setenv("BKAUDIT_RPC__TLS_CA", str(tmp_path / "missing-ca.pem"))
    line = usage_error(capsys, ["ledger", "read", "1", "--zk", DEAD_ZK])
    assert "'rpc.tls_ca'" in line and "missing-ca.pem" in line
