"""`Removed` is refused while the bookie is still registered, writable or read-only, unless forced (issue 32
item 3): as BookKeeperAdmin.decommissionBookie, which throws IllegalOpException while the bookie is in the
available or read-only list ("is not shutdown yet"). A Drained bookie that still runs is registered
read-only; one that someone made writable again is registered writable; stopped, it is not registered.

What a forced removal leaves running (a bkaudit bookie stays read-only until it stops) is
tests/bookie/test_bookie_lifecycle.py::test_a_removed_bookie_stays_read_only_while_it_runs.
Ground truth is ZooKeeper: the registration this test created, the cookie and state left or gone.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bkaudit.formats import records
from bkaudit.lifecycle import service
from bkaudit.model import lifecycle as lc
from bkaudit.store import ZkStore
from bkaudit.zk import paths, registry

S = lc.LifecycleState
OP, AUD = lc.Actor.OPERATOR, lc.Actor.AUDITOR
BOOKIE = "10.0.0.7:3181"


def drained(zk, root: str) -> None:  # type: ignore[no-untyped-def]
    registry.create_cookie(zk, records.Cookie(BOOKIE, ("/d",), ("/d",), "inst"), root=root)
    cs = ZkStore(zk, root=root)
    service.transition(cs, BOOKIE, S.DRAINING, actor=OP, by="test")
    service.transition(cs, BOOKIE, S.DRAINED, actor=AUD, by="auditor")  # it holds no ledger


def cli(zk_server, root: str, *args: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    proc = subprocess.run([sys.executable, "-m", "bkaudit.cli", "lifecycle", *args, "--zk",
                           zk_server.connect_string, "--root", root], capture_output=True, text=True,
                          timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("readonly", [True, False], ids=["registered read-only", "registered writable"])
def test_removal_of_a_registered_bookie_is_refused_unless_forced(zk, sessions, zk_root: str,  # type: ignore[no-untyped-def]
                                                                 readonly: bool) -> None:
    drained(zk, zk_root)
    zk.ensure_path(paths.available_root(root=zk_root))
    bookie_session = sessions()  # the running bookie's own session holds its ephemeral registration
    registry.register(bookie_session, BOOKIE, b"", readonly=readonly, root=zk_root)
    state = "readonly" if readonly else "writable"
    cs = ZkStore(zk, root=zk_root)
    with pytest.raises(lc.TransitionRefused, match=f"still registered \\({state}\\)") as refused:
        service.transition(cs, BOOKIE, S.REMOVED, actor=OP, by="test")
    assert refused.value.blockers == (f"registered {state}",)
    assert registry.read_cookie(zk, BOOKIE, zk_root) is not None
    assert service.current(cs, BOOKIE)[0] is S.DRAINED  # nothing changed
    record = service.transition(cs, BOOKIE, S.REMOVED, actor=OP, by="test", force=True)
    assert record.state is S.REMOVED and registry.read_cookie(zk, BOOKIE, zk_root) is None
    assert not zk.exists(paths.lifecycle_state_path(BOOKIE, root=zk_root))


def test_the_cli_refuses_a_running_bookie_then_removes_it_once_stopped_or_forced(  # type: ignore[no-untyped-def]
    zk, zk_server, sessions, zk_root: str
) -> None:
    drained(zk, zk_root)
    bookie_session = sessions()
    registry.register(bookie_session, BOOKIE, b"", readonly=True, root=zk_root)
    code, out, err = cli(zk_server, zk_root, "remove", BOOKIE, "--json")
    assert code == 1, (out, err)
    doc = json.loads(out)
    assert "still registered (readonly)" in doc["refused"] and doc["blockers"] == ["registered readonly"]
    assert registry.read_cookie(zk, BOOKIE, zk_root) is not None
    # forced: removed while it runs
    code, out, err = cli(zk_server, zk_root, "remove", BOOKIE, "--force", "--json")
    assert code == 0 and json.loads(out)["state"] == "Removed", (out, err)
    assert registry.read_cookie(zk, BOOKIE, zk_root) is None


def test_a_stopped_bookie_is_removed_without_force(zk, zk_server, sessions, zk_root: str) -> None:  # type: ignore[no-untyped-def]
    drained(zk, zk_root)
    bookie_session = sessions()
    registry.register(bookie_session, BOOKIE, b"", readonly=True, root=zk_root)
    bookie_session.stop()  # the bookie stops: its session and its ephemeral registration go
    bookie_session.close()
    assert registry.bookie_state(zk, BOOKIE, zk_root) == "absent"
    code, out, err = cli(zk_server, zk_root, "remove", BOOKIE, "--json")
    assert code == 0 and json.loads(out)["state"] == "Removed", (out, err)
