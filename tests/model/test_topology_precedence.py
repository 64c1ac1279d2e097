"""One topology rule for client, replication worker and checker: Pulsar's /bookies wins over [placement].

Each caller reads the racks through its own path (the client's directory reads the znode when it chooses,
the worker's view keeps a watch, the checker reads it once per run) from a real ZooKeeper. The expected
locations come from the test's own inputs and the documented rule (docs/config.md: `locations` only when
the /bookies map is absent), never from bkaudit's resolver.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from bkaudit import config
from bkaudit.autorecovery.view import BookieView
from bkaudit.client.directory import ZkBookieDirectory
from bkaudit.job.cluster_view import read_placement_inputs
from bkaudit.model.topology import Topology
from bkaudit.store import ZkStore
from bkaudit.zk.paths import RACKS_PATH

BOOKIES = ("bk1:3181", "bk2:3181", "bk3:3181")
PULSAR = {"default": {"bk1:3181": {"rack": "/pulsar-a"}, "bk2:3181": {"rack": "/pulsar-b"}}}
CONFIGURED = {"bk1:3181": "/configured-x", "bk3:3181": "/configured-z"}
DEFAULT_RACK = "/default-rack"  # docs/config.md [placement] default_rack


@pytest.fixture
def racks_znode(zk: KazooClient) -> Iterator[None]:
    """/bookies is a cluster-wide znode: keep whatever was there and put it back afterwards."""
    before = zk.get(RACKS_PATH)[0] if zk.exists(RACKS_PATH) else None
    yield
    if before is None:
        if zk.exists(RACKS_PATH):
            zk.delete(RACKS_PATH)
    else:
        zk.set(RACKS_PATH, before)


def settings(tmp_path: Path) -> config.Settings:
    conf = tmp_path / "bkaudit.toml"
    lines = ['[placement]', 'policy = "rackaware"', '[placement.locations]']
    lines += [f'"{b}" = "{rack}"' for b, rack in CONFIGURED.items()]
    conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return config.load(path=conf, environ={})


def write_racks(zk: KazooClient, value: dict[str, object] | None) -> None:
    if value is None:
        if zk.exists(RACKS_PATH):
            zk.delete(RACKS_PATH)
        return
    data = json.dumps(value).encode()
    if zk.exists(RACKS_PATH):
        zk.set(RACKS_PATH, data)
    else:
        zk.create(RACKS_PATH, data)


def by_caller(zk: KazooClient, zk_root: str, tmp_path: Path, view: BookieView) -> dict[str, dict[str, str]]:
    conf = settings(tmp_path)
    topologies: dict[str, Topology] = {
        "client": ZkBookieDirectory(ZkStore(zk, root=zk_root), settings=conf).topology(),
        "worker": view.topology(),
        "checker": read_placement_inputs(ZkStore(zk, root=zk_root), conf).topology,
    }
    return {caller: {b: t.location(b) for b in BOOKIES} for caller, t in topologies.items()}


def wait_for_view(view: BookieView, bookie: str, location: str, timeout_s: float = 30.0) -> None:
    """The worker's view learns of /bookies through a watch: wait for the event, not a fixed time."""
    deadline = time.monotonic() + timeout_s
    while view.topology().location(bookie) != location:
        if time.monotonic() > deadline:
            raise AssertionError(f"view never saw {bookie} at {location}")
        time.sleep(0.05)


def test_pulsar_racks_win_over_configured_locations_for_every_caller(
    zk: KazooClient, zk_root: str, tmp_path: Path, racks_znode: None
) -> None:
    write_racks(zk, PULSAR)
    view = BookieView(ZkStore(zk, root=zk_root).registry, settings=settings(tmp_path)).start()
    wait_for_view(view, "bk2:3181", "/pulsar-b")
    expected = {"bk1:3181": "/pulsar-a", "bk2:3181": "/pulsar-b", "bk3:3181": DEFAULT_RACK}
    got = by_caller(zk, zk_root, tmp_path, view)
    assert got == {"client": expected, "worker": expected, "checker": expected}


def test_configured_locations_apply_for_every_caller_without_pulsar_racks(
    zk: KazooClient, zk_root: str, tmp_path: Path, racks_znode: None
) -> None:
    write_racks(zk, PULSAR)
    view = BookieView(ZkStore(zk, root=zk_root).registry, settings=settings(tmp_path)).start()
    wait_for_view(view, "bk1:3181", "/pulsar-a")
    write_racks(zk, None)  # the map goes away: every caller falls back to [placement] locations
    wait_for_view(view, "bk1:3181", "/configured-x")
    expected = {"bk1:3181": "/configured-x", "bk2:3181": DEFAULT_RACK, "bk3:3181": "/configured-z"}
    got = by_caller(zk, zk_root, tmp_path, view)
    assert got == {"client": expected, "worker": expected, "checker": expected}
