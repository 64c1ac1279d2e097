"""A real bookie process follows its lifecycle state and the read-only switch, across a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from bkaudit.cluster.local import LOG_FILE
from bkaudit.lifecycle import service
from bkaudit.model import lifecycle as lc
from bkaudit.store import ZkStore
from bkaudit.zk import lifecycle as store
from bkaudit.zk import registry
from tests.helpers import wait_for


def wait_registered(cluster, bookie: str, state: str) -> None:  # type: ignore[no-untyped-def]
    """Wait (the helper's 60 s) for the bookie to be registered `state`; on failure, show the bookie's log:
    a CI run on a loaded machine once waited in vain for a read-only registration, with nothing to go on."""
    zk = cluster.zk_client()
    try:
        wait_for(lambda: registry.bookie_state(zk, bookie, cluster.root) == state, what=f"{bookie} {state}")
    except AssertionError as exc:
        log = (Path(cluster.bookie(bookie).data_dir) / LOG_FILE).read_text(errors="replace")
        raise AssertionError(f"{exc}; the bookie's log ends:\n{log[-4000:]}") from None


def test_draining_bookie_serves_reads_only_after_restart(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(bookies=2, racks=1)
    zk = cluster.zk_client()
    b = cluster.bookies[0].id
    assert registry.bookie_state(zk, b, cluster.root) == "writable"
    service.transition(ZkStore(zk, root=cluster.root), b, lc.LifecycleState.DRAINING, actor=lc.Actor.OPERATOR,
                       by="test")
    wait_registered(cluster, b, "readonly")
    assert registry.bookie_state(zk, cluster.bookies[1].id, cluster.root) == "writable"
    cluster.stop_bookie(b)
    cluster.start_bookie(b)
    # registered read-only from the start: never listed as writable after the restart
    assert registry.bookie_state(zk, b, cluster.root) == "readonly"


def test_read_only_switch_follows_the_operator(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    cluster = cluster_factory(bookies=1, racks=1)
    zk = cluster.zk_client()
    b = cluster.bookies[0].id
    store.write_serving(zk, b, True, by="test", at="now", root=cluster.root)
    wait_registered(cluster, b, "readonly")
    store.write_serving(zk, b, False, by="test", at="now", root=cluster.root)
    wait_registered(cluster, b, "writable")


def test_a_removed_bookie_stays_read_only_while_it_runs(cluster_factory) -> None:  # type: ignore[no-untyped-def]
    """As a decommissioned BookKeeper bookie: removal (cookie and state gone) never opens it for writes."""
    import time

    cluster = cluster_factory(bookies=1, racks=1)
    zk = cluster.zk_client()
    b = cluster.bookies[0].id
    S, cs = lc.LifecycleState, ZkStore(zk, root=cluster.root)
    service.transition(cs, b, S.DRAINING, actor=lc.Actor.OPERATOR, by="test")
    service.transition(cs, b, S.DRAINED, actor=lc.Actor.AUDITOR, by="test")  # it holds no ledger
    wait_registered(cluster, b, "readonly")
    with pytest.raises(lc.TransitionRefused, match="still registered"):  # it runs: stop it first ...
        service.transition(cs, b, S.REMOVED, actor=lc.Actor.OPERATOR, by="test")
    service.transition(cs, b, S.REMOVED, actor=lc.Actor.OPERATOR, force=True, by="test")  # ... or force it
    assert registry.read_cookie(zk, b, cluster.root) is None
    time.sleep(2)  # the bookie saw its state znode go (a watch): it must not re-register writable
    assert registry.bookie_state(zk, b, cluster.root) == "readonly"
