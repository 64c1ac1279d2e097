"""store.bind: a ZkStore on a caller's session takes root, state root, ACL and layout from `[zk]`, as
store.connect does. No session is opened: binding does no I/O, so a placeholder client is enough."""

from __future__ import annotations

from typing import Any

from bkaudit.store import bind
from bkaudit.zk.client import acls
from bkaudit.zk.settings import ZkSettings

CLIENT: Any = object()


def test_bind_takes_every_store_key_from_the_settings() -> None:
    settings = ZkSettings(connect="127.0.0.1:1", root="/bk/ledgers", state_root="/ops/bkaudit",
                          layout="longhierarchical", auth_digest="bkaudit:secret")
    store = bind(CLIENT, settings, max_in_flight=7)
    assert (store.client, store.root, store.state_root, store.max_in_flight) == (
        CLIENT, "/bk/ledgers", "/ops/bkaudit", 7)
    assert store.acl == acls(settings) and store.acl  # a digest ACL, as BookKeeper's zkEnableSecurity
    assert store.ledgers.layout == "longhierarchical"


def test_an_empty_state_root_is_the_default_one_and_a_read_layout_wins() -> None:
    settings = ZkSettings(connect="127.0.0.1:1", state_root="")
    store = bind(CLIENT, settings, layout="legacyhierarchical")
    assert store.state_root is None and store.acl == acls(settings)  # open to all without credentials
    assert store.ledgers.layout == "legacyhierarchical"
