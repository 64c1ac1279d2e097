"""Before a snapshot or a check stages anything: the root holds a BookKeeper cluster, and every table the run
commits to can take a commit (issue 32, item 4 and the corrupt-log half of item 7).

A wrong or uninitialised `--root` used to be a clean audit of nothing ("0 ledgers checked", exit 0); a check
into a warehouse whose `violations` log was corrupt committed its snapshot tables and then failed to record
the run, leaving orphan rows. Ground truth is what the test set up: the znodes it created (or not) and the
Delta log it broke.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bkaudit import config
from bkaudit.errors import ZooKeeperError
from bkaudit.zk.ledgers import init_cluster, require_cluster
from tests.helpers import unique_path

pytestmark = [pytest.mark.slow]


def settings_for(zk_server: Any, root: str, warehouse: Path) -> config.Settings:
    return config.load(environ={}, overrides={
        "zk.connect": zk_server.connect_string, "zk.root": root, "snapshot.warehouse": str(warehouse),
        "snapshot.validate": False, "checker.write_check_ctimes": False})


def test_require_cluster(zk) -> None:
    missing = unique_path("t", "/ledgers")
    with pytest.raises(ZooKeeperError, match="does not exist"):
        require_cluster(zk, root=missing)
    bare = unique_path("t", "/ledgers")
    zk.ensure_path(bare + "/00")  # ledger-ish children, but no BookKeeper cluster was ever initialised here
    with pytest.raises(ZooKeeperError, match="neither LAYOUT nor INSTANCEID"):
        require_cluster(zk, root=bare)
    real = unique_path("t", "/ledgers")
    init_cluster(zk, root=real)
    require_cluster(zk, root=real)
    zk.delete(real + "/LAYOUT")  # a cluster whose clients never wrote LAYOUT still has its INSTANCEID
    require_cluster(zk, root=real)


@pytest.mark.parametrize("how", ["missing", "uninitialised"])
def test_a_wrong_root_fails_the_fresh_check_and_commits_nothing(spark, zk, zk_server, tmp_path,
                                                                how: str) -> None:
    from bkaudit.job.result import CheckFailed
    from bkaudit.spark.checker import CheckOptions, run_check

    root = unique_path("t", "/ledgers")
    if how == "uninitialised":
        zk.ensure_path(root)
    settings = settings_for(zk_server, root, tmp_path)
    with pytest.raises(CheckFailed, match="no BookKeeper cluster at"):
        run_check(spark, settings, CheckOptions(warehouse=str(tmp_path), fresh=True))
    from bkaudit.tables.read import read_arrow

    assert not (tmp_path / "ledgers").exists()  # nothing staged, nothing committed
    # what is recorded is the failure itself, with the reason
    for table in ("snapshots", "audit_runs"):
        rows = read_arrow(str(tmp_path), table).to_pylist()
        assert [r["status"] for r in rows] == ["failed"]
        assert "no BookKeeper cluster at" in rows[0]["error"]


def test_a_corrupt_table_fails_the_check_before_the_snapshot_commits(spark, zk, zk_server, tmp_path) -> None:
    from bkaudit.job.result import CheckFailed
    from bkaudit.spark.checker import CheckOptions, run_check
    from bkaudit.tables.read import read_arrow

    root = unique_path("t", "/ledgers")
    init_cluster(zk, root=root)
    settings = settings_for(zk_server, root, tmp_path)
    first = run_check(spark, settings, CheckOptions(warehouse=str(tmp_path), fresh=True))
    assert first.status == "succeeded"
    snapshots_before = read_arrow(str(tmp_path), "snapshots").num_rows
    ledgers_log = sorted((tmp_path / "ledgers" / "_delta_log").glob("*.json"))
    commit = next(iter(sorted((tmp_path / "violations" / "_delta_log").glob("*.json"))))
    commit.write_text("{ not json", encoding="utf-8")  # the violations table's log is corrupt

    with pytest.raises(CheckFailed, match="could not read table 'violations'"):
        run_check(spark, settings, CheckOptions(warehouse=str(tmp_path), fresh=True))
    assert read_arrow(str(tmp_path), "snapshots").num_rows == snapshots_before
    assert sorted((tmp_path / "ledgers" / "_delta_log").glob("*.json")) == ledgers_log
