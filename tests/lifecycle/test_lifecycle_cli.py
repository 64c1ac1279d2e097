"""`bkaudit lifecycle ...` against the embedded ZooKeeper, no bookie running (its host may be down)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bkaudit.model import lifecycle as lc
from bkaudit.store import ZkStore
from bkaudit.zk import lifecycle as store
from bkaudit.zk import paths, registry
from tests.admin.support import add_cookie, add_ledger

ROOT = Path(__file__).resolve().parents[2]
B = "10.0.0.9:3181"


def cli(zk_server, root: str, *args: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "bkaudit.cli", "lifecycle", *args, "--zk",
                           zk_server.connect_string, "--root", root], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def test_drain_state_refusals_and_remove(zk, zk_server, zk_root) -> None:
    add_cookie(zk, zk_root, B)
    add_ledger(zk, zk_root, 3, (B, "10.0.0.8:3181"))
    code, out, _ = cli(zk_server, zk_root, "drain", B, "--reason", "os migration", "--json")
    assert code == 0 and json.loads(out)["state"] == "Draining"
    record, _ = store.read_state(zk, B, root=zk_root)
    assert record is not None and record.reason == "os migration" and record.by.startswith("cli:")
    code, out, _ = cli(zk_server, zk_root, "drain", B, "--json")  # a retried step: already done, success
    assert code == 0 and json.loads(out)["already"] is True
    assert len(store.history(zk, B, root=zk_root)) == 1
    code, out, _ = cli(zk_server, zk_root, "state", B, "--json")
    assert code == 0 and json.loads(out)["state"] == "Draining"
    code, out, _ = cli(zk_server, zk_root, "remove", B)  # not Drained: refused, exit 1
    assert code == 1 and "refused" in out
    code, _, err = cli(zk_server, zk_root, "drain", "no/such")
    assert code == 2 and "bookie id" in err
    code, _, err = cli(zk_server, zk_root, "drain", "10.9.9.9:1")
    assert code == 2 and "no cookie" in err
    # the Auditor gives up; mark-drained is refused while ledger 3 references the bookie, and says so
    from bkaudit.lifecycle import service
    service.transition(ZkStore(zk, root=zk_root), B, lc.LifecycleState.DRAINING_FAILED,
                       actor=lc.Actor.AUDITOR, by="auditor")
    code, out, _ = cli(zk_server, zk_root, "mark-drained", B, "--json")
    assert code == 1 and json.loads(out)["blockers"] == ["ledger 3"]
    zk.delete(paths.ledger_path(3, root=zk_root))
    assert cli(zk_server, zk_root, "mark-drained", B)[0] == 0
    assert cli(zk_server, zk_root, "remove", B)[0] == 0
    assert registry.read_cookie(zk, B, zk_root) is None
    assert cli(zk_server, zk_root, "remove", B)[0] == 0  # retried: already removed
    code, out, _ = cli(zk_server, zk_root, "history", B, "--json")
    assert [h["state"] for h in json.loads(out)] == ["Draining", "DrainingFailed", "Drained", "Removed"]
