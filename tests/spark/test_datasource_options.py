"""The "bookkeeper" data source's options are the [zk] and [snapshot] settings: their defaults and checks."""

from __future__ import annotations

import pytest

from bkaudit.config import ZkSettings
from bkaudit.spark.settings import SnapshotSettings

datasource = pytest.importorskip("bkaudit.spark.datasource")


def test_options_are_the_settings_with_their_defaults() -> None:
    opts = datasource.ReadOptions.parse({"zk": "zk1:2181", "max_zk_sessions": "2", "multi_read": "0",
                                         "reads_per_second_per_task": "0", "auth_digest_secret": "u:pw-1"})
    assert opts.zk == ZkSettings(connect="zk1:2181", auth_digest="u:pw-1")
    assert opts.snapshot == SnapshotSettings(max_zk_sessions=2, multi_read=False, reads_per_second_per_task=0)
    assert opts.task_count == 2 and opts.root == "/ledgers" and opts.multi_read is False
    assert datasource.ReadOptions.parse({"zk": "h:1"}).snapshot == SnapshotSettings()


@pytest.mark.parametrize(("options", "words"), [
    ({}, 'needs .option("zk"'),
    ({"zk": "h:1", "warehouse": "/w"}, "unknown bookkeeper data source option(s) ['warehouse']"),
    ({"zk": "h:1", "max_zk_sessions": "2", "partitions": "3"}, "option partitions: must be between 0"),
    ({"zk": "h:1", "batch_size": "0"}, "option batch_size: must be >= 1"),
    ({"zk": "h:1", "reads_per_second_per_task": "-1"}, "option reads_per_second_per_task: must be >= 0"),
    ({"zk": "h:1", "attempts": "many"}, "option attempts:"),
    ({"zk": "h:1", "root": "no-slash"}, "option root:"),
    ({"zk": "h:1", "auth_digest_secret": "no-colon"}, "option auth_digest_secret: must be 'user:password'"),
])
def test_a_bad_option_is_named_with_the_settings_reason(options: dict[str, str], words: str) -> None:
    with pytest.raises(ValueError) as err:
        datasource.ReadOptions.parse(options)
    assert words in str(err.value)
