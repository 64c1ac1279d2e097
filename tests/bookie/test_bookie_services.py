"""A bookie process runs AutoRecovery and the data-integrity check only when its composer hands them in
(bkaudit.bookie.server.Services; `bkaudit bookie run` does): the bookie layer never imports the layer above.
Asked for one it was not given, it refuses before it touches its data directory or ZooKeeper."""

from __future__ import annotations

from pathlib import Path

import pytest

from bkaudit import config
from bkaudit.bookie.server import BookieOptions, BookieServer
from bkaudit.errors import ClusterError


@pytest.mark.parametrize(("option", "env", "named"), [
    (True, {}, "--autorecovery"),
    (False, {"BKAUDIT_BOOKIE__DATA_INTEGRITY_CHECKING": "true"}, "data_integrity_checking"),
])
def test_a_service_not_handed_in_is_refused_before_anything_starts(
        tmp_path: Path, option: bool, env: dict[str, str], named: str) -> None:
    settings = config.load(environ={"BKAUDIT_ZK__CONNECT": "127.0.0.1:1", **env})
    data = tmp_path / "bookie"
    server = BookieServer(settings, BookieOptions(data_dir=str(data), port=1, autorecovery=option))
    with pytest.raises(ClusterError, match=named) as raised:
        server.start()
    assert "bkaudit bookie run" in str(raised.value)
    assert not data.exists()  # refused before the data directory (and ZooKeeper, which is dead here)
