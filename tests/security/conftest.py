"""The secured run (tests/security/flow.py), once per session for every security test that judges it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bkaudit.zk.server import ZooKeeperServer
from tests.security.flow import SecureRun, run_flow


@pytest.fixture(scope="session")
def secure_run(zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureRun]:
    run = run_flow(tmp_path_factory.mktemp("secure-run"), zk_server)
    try:
        yield run
    finally:
        run.close()
