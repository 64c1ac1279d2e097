"""Where docs/cli.md promises one line, there is one line, with its exit code (issue 32 item 7), as processes:

- a ZooKeeper whose znodes carry ACLs, asked without the credentials (NoAuth): `bookie list`,
  `autorecovery status`, `lifecycle state`, `ledger list`, `underreplicated list` (exit 1);
- a corrupt Delta log under `violations` / `report` (exit 1; tests/report/test_report_could_not_read.py covers
  every kind of breakage in-process);
- an `--out` that cannot be written (exit 2 when it is not a directory, 1 when creating it fails);
- arguments that are not UTF-8, given as raw bytes on the command line (exit 2);
- `lifecycle state ../../x` as `lifecycle drain ..` (exit 2).

The ZooKeeper is the session's real server (tests/fixtures/zookeeper.py); the secured tree is created here
with the digest identity, as `cluster init --config` with `enable_security` does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from bkaudit.config import ZkSettings
from bkaudit.zk import client as zkclient
from bkaudit.zk import paths
from bkaudit.zk.server import ZooKeeperServer
from tests.cli.warehouse import RUN_ID, make_warehouse
from tests.helpers import unique_path

BOOKIE = "bk-secured:3181"


def bkaudit(*args: str | bytes, env: dict[str, str] | None = None) -> CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("BKAUDIT_")}
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "bkaudit.cli", *args], capture_output=True, timeout=120,
                          env=full_env)
    return CompletedProcess(proc.args, proc.returncode, proc.stdout.decode("utf-8", "replace"),
                            proc.stderr.decode("utf-8", "replace"))


def one_error_line(proc: CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def secured_root(zk_server: ZooKeeperServer) -> str:
    """A ledgers root whose znodes carry CREATOR_ALL_ACL for u:secret, with a bookie's cookie and its
    Draining state."""
    root = unique_path("sec", "/ledgers")
    settings = ZkSettings(connect=zk_server.connect_string, root=root, auth_digest="u:secret",
                          enable_security=True)
    zk = zkclient.connect(settings)
    try:
        acl = zkclient.acls(settings)
        for path in (paths.available_root(root=root), paths.ur_ledgers_root(root=root)):
            zk.ensure_path(path, acl=acl)
        zk.ensure_path(paths.cookie_path(BOOKIE, root=root), acl=acl)
        zk.create(paths.lifecycle_state_path(BOOKIE, root=root),
                  b'{"state": "Draining", "by": "test", "at": "2026-11-28T00:00:00Z", "reason": ""}', acl=acl)
    finally:
        zkclient.close(zk)
    return root


NOAUTH_COMMANDS = [("bookie", "list"), ("autorecovery", "status"), ("lifecycle", "state", BOOKIE),
                   ("ledger", "list"), ("underreplicated", "list")]


@pytest.mark.parametrize("args", NOAUTH_COMMANDS, ids=" ".join)
def test_noauth_is_one_line_naming_the_credentials(zk_server: ZooKeeperServer, secured_root: str,
                                                   args: tuple[str, ...]) -> None:
    proc = bkaudit(*args, "--zk", zk_server.connect_string, "--root", secured_root)
    assert proc.returncode == 1, proc.stderr
    line = one_error_line(proc)
    assert "NoAuth" in line and "auth_digest" in line, line
    # with the credentials the same command works: the refusal was the ACL, nothing else
    ok = bkaudit(*args, "--zk", zk_server.connect_string, "--root", secured_root,
                 env={"BKAUDIT_ZK__AUTH_DIGEST": "u:secret"})
    assert ok.returncode == 0, ok.stderr


def test_a_corrupt_delta_log_is_one_line(tmp_path: Path) -> None:
    wh = Path(make_warehouse(tmp_path / "wh"))
    last = sorted((wh / "violations" / "_delta_log").glob("*.json"))[-1]
    last.write_text("{not json")
    for args in (("violations", "--warehouse", str(wh)),
                 ("report", "--warehouse", str(wh), "--run-id", RUN_ID, "--out", str(tmp_path / "out"))):
        proc = bkaudit(*args)
        assert proc.returncode == 1, proc.stderr
        assert "could not read" in one_error_line(proc)


def test_an_unwritable_out_is_one_line(tmp_path: Path) -> None:
    wh = make_warehouse(tmp_path / "wh")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    proc = bkaudit("report", "--warehouse", wh, "--out", str(a_file / "reports"))
    assert proc.returncode == 2, proc.stderr
    assert "not a directory" in one_error_line(proc)
    proc = bkaudit("report", "--warehouse", wh, "--out", "/proc/bkaudit-reports")  # mkdir fails, even as root
    assert proc.returncode == 1, proc.stderr
    assert "cannot write the report into /proc/bkaudit-reports" in one_error_line(proc)


@pytest.mark.parametrize("args", [(b"violations", b"--warehouse", b"/tmp/l\xe9dgers"),
                                  (b"lifecycle", b"state", b"bk\xff:3181", b"--zk", b"127.0.0.1:1"),
                                  (b"ledger", b"list", b"--zk", b"127.0.0.1:1", b"--root", b"/l\xe9dgers"),
                                  (b"bookie", b"list", b"--zk", b"127.0.0.1:\xff")], ids=repr)
def test_arguments_that_are_not_utf8_are_one_line(args: tuple[bytes, ...]) -> None:
    proc = bkaudit(*args)
    assert proc.returncode == 2, proc.stderr
    assert "not valid UTF-8" in one_error_line(proc)


@pytest.mark.parametrize("command", ["state", "history", "drain", "remove"])
def test_path_like_bookie_ids_are_usage_errors_for_every_lifecycle_command(command: str) -> None:
    for bookie in ("../../x", ".."):
        proc = bkaudit("lifecycle", command, bookie, "--zk", "127.0.0.1:1")
        assert proc.returncode == 2, proc.stderr
        assert "BOOKIE" in one_error_line(proc)
