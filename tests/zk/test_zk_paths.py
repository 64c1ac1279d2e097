"""bkaudit.zk.paths against BookKeeper's vectors, round trips and boundary ids."""

from __future__ import annotations

import pytest

from bkaudit.audit import coverage
from bkaudit.zk import paths
from tests import shared_vectors

VECTORS = shared_vectors.load("zk_paths_and_texts.json")

BOUNDARY_IDS = [0, 1, 9999, 10000, 2147483646, 2147483647, 2147483648, 2**32, 0x7AFEBEEF0000FEED, 2**63 - 1]


@pytest.mark.parametrize("vec", VECTORS["ledger_paths"], ids=lambda v: f"{v['manager']}-{v['ledger_id']}")
def test_ledger_path_vectors(vec: dict) -> None:
    assert paths.ledger_path(vec["ledger_id"], layout=vec["manager"]) == vec["path"]
    assert paths.parse_ledger_path(vec["path"]) == vec["ledger_id"]


@pytest.mark.parametrize("vec", VECTORS["underreplicated_paths"], ids=lambda v: str(v["ledger_id"]))
def test_underreplicated_path_vectors(vec: dict) -> None:
    assert paths.underreplicated_ledger_path(vec["ledger_id"]) == vec["path"]
    assert paths.parse_underreplicated_path(vec["path"]) == vec["ledger_id"]


def test_hierarchical_switches_to_long_path_at_int_max() -> None:
    assert paths.ledger_path(2147483646) == "/ledgers/21/4748/L3646"
    assert paths.ledger_path(2147483647) == "/ledgers/000/0000/0021/4748/L3647"
    assert paths.ledger_path(2**63 - 1) == "/ledgers/922/3372/0368/5477/L5807"
    assert paths.ledger_path(0) == "/ledgers/00/0000/L0000"


def test_longhierarchical_always_long_and_legacy_always_short() -> None:
    assert paths.ledger_path(5, layout="longhierarchical") == "/ledgers/000/0000/0000/0000/L0005"
    assert paths.ledger_path(2147483646, layout="legacyhierarchical") == "/ledgers/21/4748/L3646"
    with pytest.raises(ValueError, match="legacyhierarchical"):
        paths.ledger_path(2147483647, layout="legacyhierarchical")


@pytest.mark.parametrize("ledger_id", BOUNDARY_IDS)
@pytest.mark.parametrize("layout", ["hierarchical", "longhierarchical", "legacyhierarchical"])
def test_ledger_path_round_trip(ledger_id: int, layout: str) -> None:
    if layout == "legacyhierarchical" and ledger_id >= paths.INT_MAX:
        pytest.skip("not representable in the legacy layout")
    for root in ("/ledgers", "/pulsar/bk/ledgers"):
        path = paths.ledger_path(ledger_id, root=root, layout=layout)
        assert path.startswith(root + "/")
        assert paths.parse_ledger_path(path, root=root) == ledger_id


@pytest.mark.parametrize("ledger_id", BOUNDARY_IDS)
def test_underreplicated_round_trip(ledger_id: int) -> None:
    path = paths.underreplicated_ledger_path(ledger_id, root="/a/b")
    assert path.startswith("/a/b/underreplication/ledgers/")
    assert path.endswith(f"/urL{ledger_id:010d}")
    assert paths.parse_underreplicated_path(path, root="/a/b") == ledger_id
    dl = paths.data_loss_path(ledger_id, root="/a/b")
    assert dl.startswith("/bkaudit/a/b/dataloss/")
    assert paths.parse_data_loss_path(dl, root="/a/b") == ledger_id
    legacy = paths.legacy_data_loss_path(ledger_id, root="/a/b")
    assert legacy.startswith("/a/b/bkaudit/dataloss/")
    assert paths.parse_legacy_data_loss_path(legacy, root="/a/b") == ledger_id


def test_underreplicated_hex_groups_are_lowercase() -> None:
    path = paths.underreplicated_ledger_path(0x7AFEBEEF0000FEED)
    assert path == f"/ledgers/underreplication/ledgers/7afe/beef/0000/feed/urL{0x7AFEBEEF0000FEED:010d}"


@pytest.mark.parametrize(
    "path",
    [
        "/ledgers",
        "/ledgers/",
        "/ledgers/00",
        "/ledgers/00/0000",
        "/ledgers/00/0000/L000",
        "/ledgers/00/0000/L00001",
        "/ledgers/00/0000/0001",
        "/ledgers/0a/0000/L0001",
        "/ledgers/000/0000/0000/L0001",
        "/ledgers/000/0000/0000/0000/0000/L0001",
        "/ledgers/INSTANCEID",
        "/ledgers/available/readonly/x",
        "/ledgers/idgen/ID-0000000001",
        "/other/00/0000/L0001",
        "/ledgersX/00/0000/L0001",
        "/ledgers/999/9999/9999/9999/L9999",  # > 2^63-1
        "",
    ],
)
def test_parse_ledger_path_rejects_non_ledgers(path: str) -> None:
    assert paths.parse_ledger_path(path) is None


@pytest.mark.parametrize(
    "path",
    [
        "/ledgers/underreplication/ledgers/0000/0000/0000/urL0000000001",
        "/ledgers/underreplication/ledgers/0000/0000/0000/0001/L0000000001",
        "/ledgers/underreplication/ledgers/0000/0000/0000/000G/urL0000000001",
        "/ledgers/underreplication/locks/urL0000000001",
        "/ledgers/underreplication/ledgers/0000/0000/0000/0001",
    ],
)
def test_parse_underreplicated_path_rejects(path: str) -> None:
    assert paths.parse_underreplicated_path(path) is None


@pytest.mark.parametrize("bad", [-1, 2**63, 1.0, "1", True, None])
def test_bad_ledger_ids_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match="ledger id"):
        paths.ledger_path(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ledger id"):
        paths.underreplicated_ledger_path(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ledger id"):
        paths.lock_path(bad)  # type: ignore[arg-type]


BAD_ROOTS = ["ledgers", "/", "/ledgers/", "//ledgers", "/a//b", "/a/./b", "/a/../b", "", None]
ROOT_FUNCS = (
    paths.layout_path, paths.available_root, paths.locks_root, paths.election_root,
    paths.bkaudit_state_root, paths.legacy_bkaudit_root,
)


@pytest.mark.parametrize("root", BAD_ROOTS)
def test_bad_roots_rejected(root: object) -> None:
    for fn in ROOT_FUNCS:
        with pytest.raises(ValueError, match="root"):
            fn(root=root)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="root"):
        paths.ledger_path(1, root=root)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="root"):
        paths.parse_ledger_path("/ledgers/00/0000/L0001", root=root)  # type: ignore[arg-type]


def test_unknown_layout_rejected() -> None:
    with pytest.raises(ValueError, match="layout"):
        paths.ledger_path(1, layout="flat")


def test_fixed_paths() -> None:
    r = "/ledgers"
    assert paths.layout_path(root=r) == "/ledgers/LAYOUT"
    assert paths.instanceid_path(root=r) == "/ledgers/INSTANCEID"
    assert paths.idgen_path(root=r) == "/ledgers/idgen"
    assert paths.idgen_long_path(root=r) == "/ledgers/idgen-long"
    assert paths.available_root(root=r) == "/ledgers/available"
    assert paths.readonly_root(root=r) == "/ledgers/available/readonly"
    assert paths.cookies_root(root=r) == "/ledgers/cookies"
    assert paths.available_path("10.0.0.1:3181", root=r) == "/ledgers/available/10.0.0.1:3181"
    assert paths.readonly_path("10.0.0.1:3181", root=r) == "/ledgers/available/readonly/10.0.0.1:3181"
    assert paths.cookie_path("10.0.0.1:3181", root=r) == "/ledgers/cookies/10.0.0.1:3181"
    assert paths.underreplication_root(root=r) == "/ledgers/underreplication"
    assert paths.ur_layout_path(root=r) == "/ledgers/underreplication/LAYOUT"
    assert paths.ur_ledgers_root(root=r) == "/ledgers/underreplication/ledgers"
    assert paths.locks_root(root=r) == "/ledgers/underreplication/locks"
    assert paths.lock_path(1, root=r) == "/ledgers/underreplication/locks/urL0000000001"
    assert paths.election_root(root=r) == "/ledgers/underreplication/auditorelection"
    assert paths.disable_path(root=r) == "/ledgers/underreplication/disable"
    delay = "/ledgers/underreplication/lostBookieRecoveryDelay"
    assert paths.lost_bookie_recovery_delay_path(root=r) == delay
    assert paths.RACKS_PATH == "/bookies"


def test_ur_ledgers_node_is_literal_under_custom_root() -> None:
    # BookKeeper appends DEFAULT_ZK_LEDGERS_ROOT_PATH ("/ledgers") to the UR base, whatever the root is
    assert paths.ur_ledgers_root(root="/pulsar") == "/pulsar/underreplication/ledgers"


@pytest.mark.parametrize(
    ("kind", "node"),
    [
        ("checkallledgers", "checkallledgersctime"),
        ("placementpolicycheck", "placementpolicycheckctime"),
        ("replicascheck", "replicascheckctime"),
        ("replicascheckctime", "replicascheckctime"),
    ],
)
def test_check_ctime_paths(kind: str, node: str) -> None:
    assert paths.check_ctime_path(kind, root="/ledgers") == f"/ledgers/underreplication/{node}"


def test_every_check_a_run_may_stamp_has_its_znode() -> None:
    assert set(coverage.CHECK_KINDS) == set(paths.CHECK_CTIME_NODES)


def test_check_ctime_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown check ctime kind"):
        paths.check_ctime_path("bogus")


@pytest.mark.parametrize("bookie", ["", "a/b", ".", None])
def test_bad_bookie_ids(bookie: object) -> None:
    with pytest.raises(ValueError, match="bookie id"):
        paths.cookie_path(bookie)  # type: ignore[arg-type]


def test_special_znodes() -> None:
    expected = {"available", "cookies", "LAYOUT", "INSTANCEID", "underreplication", "idgen", "idgen-long"}
    assert expected == paths.SPECIAL_ZNODES
    for name in [*expected, "ID-0000000001"]:
        assert paths.is_special_znode(name)
        assert paths.is_skipped_in_listing(name)
    for name in ("00", "000", "bkaudit", "readonly"):
        assert not paths.is_special_znode(name)
    assert paths.is_skipped_in_listing("bkaudit")
    assert not paths.is_skipped_in_listing("00")


def test_ledger_parent_nodes() -> None:
    assert paths.is_ledger_parent_node("00")
    assert paths.is_ledger_parent_node("922")
    for name in ("0", "0000", "bkaudit", "a1", "idgen"):
        assert not paths.is_ledger_parent_node(name)


def test_data_loss_records_live_outside_the_ledgers_root() -> None:
    """BookKeeper's nukeexistingcluster refuses a root with foreign children: bkaudit keeps none there."""
    p = paths.data_loss_path(1)
    assert p == "/bkaudit/ledgers/dataloss/0000/0000/0000/0001/L0000000001"
    assert not p.startswith("/ledgers/")
    assert paths.data_loss_path(1, state_root="/ops/bkaudit") == (
        "/ops/bkaudit/dataloss/0000/0000/0000/0001/L0000000001"
    )
    assert paths.parse_data_loss_path(
        "/ops/bkaudit/dataloss/0000/0000/0000/0001/L0000000001", state_root="/ops/bkaudit"
    ) == 1
    assert not paths.is_ledger_parent_node(paths.BKAUDIT_NODE)


@pytest.mark.parametrize("inside", ["/ledgers", "/ledgers/bkaudit", "/ledgers/x/y"])
def test_a_state_root_inside_the_ledgers_root_is_refused(inside: str) -> None:
    with pytest.raises(ValueError, match="outside the ledgers root"):
        paths.bkaudit_state_root(root="/ledgers", state_root=inside)
    assert paths.bkaudit_state_root(root="/ledgers", state_root="/ledgers2") == "/ledgers2"


def test_lifecycle_paths() -> None:
    from bkaudit.zk import paths as p

    assert p.lifecycle_state_path("10.0.0.1:3181", root="/ledgers") == "/ledgers/cookies/10.0.0.1:3181/state"
    history = p.lifecycle_history_root("b:1", root="/pulsar/ledgers")
    assert history == "/bkaudit/pulsar/ledgers/lifecycle/history/b:1"
    assert p.drain_progress_path("b:1") == "/bkaudit/ledgers/lifecycle/progress/b:1"
    assert p.drain_failure_path("b:1", 7) == "/bkaudit/ledgers/lifecycle/failures/b:1/L0000000007"
    assert p.serving_path("b:1") == "/bkaudit/ledgers/serving/b:1"
    assert p.webhook_path("abc") == "/bkaudit/ledgers/webhooks/abc"
    assert p.webhook_path("abc", state_root="/ops/bk") == "/ops/bk/webhooks/abc"
    # only the state beside the cookie lives under the ledgers root (BookKeeper's nuke rule)
    for path in (history, p.drain_progress_path("b:1"), p.serving_path("b:1"), p.webhook_path("abc"),
                 p.webhook_deliveries_root("abc")):
        assert not path.startswith(("/ledgers/", "/pulsar/ledgers/"))
    for bad in ("", "a/b", ".."):
        with pytest.raises(ValueError):
            p.lifecycle_state_path(bad)
