"""An AutoRecovery process stands in the auditor election only under a BookKeeper BookieId.

BookKeeper parses the elected auditor's vote with BookieId.parse (ZkLedgerAuditorManager.getCurrentAuditor,
behind `bookkeeper shell whoisauditor`, BookKeeperAdmin.getCurrentAuditor and the HTTP who_is_auditor):
`[a-zA-Z0-9:-_.\\-]+`, never "readonly". Any other id would break those tools while the process is auditor.
"""

from __future__ import annotations

import pytest

from bkaudit import config
from bkaudit.autorecovery.service import AutoRecoveryService, default_node_id
from bkaudit.errors import ConfigError


def settings() -> config.Settings:
    return config.load(environ={}, overrides={"zk.connect": "127.0.0.1:1"})


@pytest.mark.parametrize("bad", ["ar 1", "readonly", "ReadOnly", "ar/1", "ünï", ""])
def test_an_id_bookkeeper_cannot_parse_may_not_stand_for_auditor(bad: str) -> None:
    if bad == "":  # empty means "the default": host:pid
        assert AutoRecoveryService(settings(), node_id=bad).node_id == default_node_id()
        return
    with pytest.raises(ConfigError, match="BookieId"):
        AutoRecoveryService(settings(), node_id=bad)


def test_valid_ids_and_workers_only_processes_are_accepted() -> None:
    for good in ("bk-ar", "127.0.1.1:3181", "host_name.example:42", default_node_id()):
        assert AutoRecoveryService(settings(), node_id=good).node_id == good
    # a worker-only process names itself only in lock data, which BookKeeper reads as plain text
    assert AutoRecoveryService(settings(), node_id="ar 1", auditor=False).node_id == "ar 1"
