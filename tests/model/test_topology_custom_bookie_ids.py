"""Racks for custom BookieIds, resolved as Pulsar resolves them (issue 30, item 7), on a real ZooKeeper.

Pulsar's `BookieRackAffinityMapping.updateRacksWithHost` resolves every `/bookies` key (a BookieId) through
the bookie's registration (`DefaultBookieAddressResolver`: the `bookie-rpc` endpoint of its BookieServiceInfo;
empty data = the legacy endpoint of a `host:port` id) and files the rack under that endpoint's host; a key
that resolves to nothing is skipped. BookKeeper asks the mapping about the host it finds the same way
(`TopologyAwareEnsemblePlacementPolicy.resolveNetworkLocation` → `NetUtils.resolveNetworkLocation`). So two
custom ids on one host are one rack, a bookie without an entry takes its host's, and a key written by address
for a bookie that registered under another id covers nobody.

The far end is BookKeeper's and Pulsar's: registrations are the bytes `ZKRegistrationManager` writes
(tests/bookkeeper_znodes.py) and `/bookies` is Pulsar's JSON, written by the test. The expected racks are
worked out from those two rules by hand, never by bkaudit's resolver.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from bkaudit import config
from bkaudit.autorecovery.view import BookieView
from bkaudit.client.directory import ZkBookieDirectory
from bkaudit.model.placement import Adherence, RackAwarePolicy
from bkaudit.model.topology import Topology
from bkaudit.store import ZkStore
from tests.bookkeeper_znodes import register, service_info
from tests.model.test_topology_precedence import racks_znode, write_racks

__all__ = ["racks_znode"]  # the fixture, shared with the precedence tests

DEFAULT_RACK = "/default-rack"  # rack-aware's unknown location (docs/placement.md)
RACKS = {  # Pulsar's /bookies, members in document order
    "default": {
        "bookie-a": {"rack": "/r1"},
        "bookie-b": {"rack": "/r2"},  # same host as bookie-a, read later: the host's rack is /r2
        "bookie-c": {"rack": "/r3"},
        "127.0.0.5:3181": {"rack": "/r5"},  # bookie-e's address, not its id: resolves to no registration
        "127.0.0.6:3181": {"rack": "/r6"},  # a legacy bookie (empty registration data)
    }
}
EXPECTED = {
    "bookie-a": "/r2",  # host 127.0.0.2: bookie-a's entry, then bookie-b's replaces it
    "bookie-b": "/r2",
    "bookie-c": "/r3",
    "bookie-d": "/r3",  # no entry of its own; its endpoint's host 127.0.0.3 has bookie-c's
    "bookie-e": DEFAULT_RACK,  # the key "127.0.0.5:3181" is no registered BookieId: Pulsar skips it
    "127.0.0.6:3181": "/r6",
}


def registrations(zk: Any, root: str) -> None:
    register(zk, root, "bookie-a", service_info("127.0.0.2", 3181))
    register(zk, root, "bookie-b", service_info("127.0.0.2", 3182), readonly=True)
    register(zk, root, "bookie-c", service_info("127.0.0.3", 3181))
    register(zk, root, "bookie-d", service_info("127.0.0.3", 3182))
    register(zk, root, "bookie-e", service_info("127.0.0.5", 3181))
    register(zk, root, "127.0.0.6:3181", b"")  # a bookie from before BookieServiceInfo (BookKeeper < 4.11)


def settings(tmp_path: Path) -> config.Settings:
    conf = tmp_path / "bkaudit.toml"
    conf.write_text('[placement]\npolicy = "rackaware"\n', encoding="utf-8")
    return config.load(path=conf, environ={})


def locations(topology: Topology) -> dict[str, str]:
    return {b: topology.location(b) for b in EXPECTED}


@pytest.mark.usefixtures("racks_znode")
def test_client_worker_and_checker_resolve_bookies_keys_through_registrations(zk, zk_root, tmp_path) -> None:
    registrations(zk, zk_root)
    write_racks(zk, RACKS)
    conf = settings(tmp_path)
    client = ZkBookieDirectory(ZkStore(zk, root=zk_root), settings=conf).topology()
    assert locations(client) == EXPECTED

    view = BookieView(ZkStore(zk, root=zk_root).registry, settings=conf).start()
    deadline = time.monotonic() + 30
    while locations(view.topology()) != EXPECTED and time.monotonic() < deadline:
        time.sleep(0.05)  # the view learns /bookies and the registrations through watches
    assert locations(view.topology()) == EXPECTED

    # the checker's placement and the snapshot's bookies table resolve the same way
    from bkaudit.job.cluster_state import read_cluster_state
    from bkaudit.job.cluster_view import read_placement_inputs

    assert locations(read_placement_inputs(ZkStore(zk, root=zk_root), conf).topology) == EXPECTED
    state = read_cluster_state(ZkStore(zk, root=zk_root))
    assert state.topology is not None
    assert locations(state.topology) == EXPECTED

    # what it means for placement: two custom ids on one host are one rack, as for BookKeeper
    assert RackAwarePolicy().adherence(["bookie-a", "bookie-b"], 2, 2, client) is Adherence.FAIL
    assert RackAwarePolicy().adherence(["bookie-a", "bookie-c"], 2, 2, client) is Adherence.MEETS_STRICT
