"""`ZkTarget.store()`: the one route from a command to its cluster store, and the exit codes of its failures
(no session: exit_code_for the error, or the command's own code; an error while working: exit_code_for)."""

from __future__ import annotations

from typing import Any

import pytest

from bkaudit.cli_common import ZkTarget
from bkaudit.config import ZkSettings
from bkaudit.errors import ClusterError, ConfigError
from bkaudit.store import zookeeper

NO_SESSION = "error: no ZooKeeper at 127.0.0.1:1\n"


class _Settings:
    def get(self, cls: type[Any]) -> Any:
        assert cls is ZkSettings
        return ZkSettings(connect="127.0.0.1:1")


def _exit(capsys: pytest.CaptureFixture[str], error: Exception | None = None,
          **kwargs: Any) -> tuple[int, str]:
    """The exit code and stderr of a command whose work raises `error` (None: it never gets to work)."""
    with pytest.raises(SystemExit) as exited, ZkTarget().store(_Settings(), **kwargs):
        assert error is not None, "connected"
        raise error
    return int(exited.value.code or 0), capsys.readouterr().err


@pytest.fixture
def closed(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    closed: list[object] = []
    monkeypatch.setattr(zookeeper, "close", closed.append)
    return closed


def test_no_session_exits_with_the_errors_code_or_the_commands(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, closed: list[object]
) -> None:
    def refuse(_settings: ZkSettings) -> Any:
        raise ClusterError("no ZooKeeper at 127.0.0.1:1")

    monkeypatch.setattr(zookeeper, "connect", refuse)
    assert _exit(capsys) == (1, NO_SESSION)
    assert _exit(capsys, connect_failure_code=2) == (2, NO_SESSION)  # bkaudit lifecycle's
    assert closed == []


def test_an_error_while_working_keeps_its_code_and_closes_the_session(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, closed: list[object]
) -> None:
    session = object()
    monkeypatch.setattr(zookeeper, "connect", lambda _settings: session)
    assert _exit(capsys, ClusterError("lost"), connect_failure_code=2) == (1, "error: lost\n")
    assert _exit(capsys, ConfigError("zk.root", "bad"))[0] == 2
    assert closed == [session, session]
