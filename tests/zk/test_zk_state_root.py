"""bkaudit's own state lives outside the ledgers root (BookKeeper's nukeexistingcluster refuses foreign
children there); records left under `<root>/bkaudit` by earlier releases are migrated at start."""

from __future__ import annotations

import pytest

from bkaudit.config import ZkSettings
from bkaudit.errors import ConfigError
from bkaudit.model.dataloss import DataLossRecord
from bkaudit.model.dataloss import encode as encode_data_loss
from bkaudit.zk import dataloss, ledgers, paths
from tests.autorecovery.support import children_blocking_nuke


def _record(ledger_id: int) -> DataLossRecord:
    return DataLossRecord(ledger_id, ((1, 2),), "2026-01-01T00:00:00Z", ("b:1",), 3, "w")


def test_records_written_by_bkaudit_never_block_nuke(zk, zk_root: str) -> None:
    ledgers.init_cluster(zk, root=zk_root)
    for lid in (3, 2**40):
        dataloss.write(zk, _record(lid), root=zk_root)
    assert children_blocking_nuke(zk, zk_root) == []
    assert list(dataloss.list_ids(zk, root=zk_root)) == [3, 2**40]
    state = f"{zk_root}-bkaudit"
    dataloss.write(zk, _record(9), root=zk_root, state_root=state)
    assert zk.exists(f"{state}/dataloss") is not None and children_blocking_nuke(zk, zk_root) == []
    assert list(dataloss.list_ids(zk, root=zk_root, state_root=state)) == [9]
    assert dataloss.delete(zk, 9, root=zk_root, state_root=state)


def test_legacy_records_under_the_root_are_migrated(zk, zk_root: str) -> None:
    ledgers.init_cluster(zk, root=zk_root)
    for lid in (5, 70000):
        legacy = paths.legacy_data_loss_path(lid, root=zk_root)
        zk.create(legacy, encode_data_loss(_record(lid)), makepath=True)
    assert children_blocking_nuke(zk, zk_root) == ["bkaudit"]  # what an earlier release left behind

    assert dataloss.migrate_legacy(zk, root=zk_root) == [5, 70000]
    assert children_blocking_nuke(zk, zk_root) == []
    assert list(dataloss.list_ids(zk, root=zk_root)) == [5, 70000]
    assert dataloss.read(zk, 70000, root=zk_root) == _record(70000)
    assert dataloss.migrate_legacy(zk, root=zk_root) == []  # idempotent


def test_open_legacy_records_migrated_by_a_secured_session_get_its_acl(zk, zk_server, zk_root: str) -> None:
    """A record written before [zk] enable_security was turned on does not stay world-open after the move."""
    from kazoo.security import ACL, Id

    from bkaudit.zk import client as zkclient
    from tests.security.flow import digest_id

    ledgers.init_cluster(zk, root=zk_root)
    zk.create(paths.legacy_data_loss_path(5, root=zk_root), encode_data_loss(_record(5)), makepath=True)
    secured = zkclient.connect(ZkSettings(connect=zk_server.connect_string, root=zk_root,
                                          auth_digest="bkaudit:migrate-pw", enable_security=True))
    try:
        assert dataloss.migrate_legacy(secured, root=zk_root) == [5]
        acl, _ = secured.get_acls(paths.data_loss_path(5, root=zk_root))
        assert acl == [ACL(31, Id("digest", digest_id("bkaudit", "migrate-pw")))]
    finally:
        zkclient.close(secured)


def test_foreign_data_next_to_legacy_records_is_left_for_the_operator(zk, zk_root: str) -> None:
    ledgers.init_cluster(zk, root=zk_root)
    zk.create(paths.legacy_data_loss_path(5, root=zk_root), encode_data_loss(_record(5)), makepath=True)
    zk.create(f"{paths.legacy_bkaudit_root(root=zk_root)}/someone-elses", b"x")
    assert dataloss.migrate_legacy(zk, root=zk_root) == [5]
    assert zk.exists(f"{paths.legacy_bkaudit_root(root=zk_root)}/someone-elses") is not None


@pytest.mark.parametrize("inside", ["/ledgers", "/ledgers/bkaudit"])
def test_a_state_root_inside_the_ledgers_root_is_a_config_error(inside: str) -> None:
    with pytest.raises(ConfigError, match="state_root"):
        ZkSettings(root="/ledgers", state_root=inside)
