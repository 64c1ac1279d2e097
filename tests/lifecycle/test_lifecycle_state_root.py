"""With `[zk] state_root` configured, every lifecycle record bkaudit writes (history, drain progress and
failures, serving switch, webhooks) and every data-loss lookup uses that root: nothing of bkaudit's lands
under the ledgers root except `cookies/<id>/state` (the design's state znode), nor under the derived default
`/bkaudit<root>`. Embedded ZooKeeper, the admin API served on loopback, the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bkaudit.admin.server import AdminServer
from bkaudit.bookie import lifecycle as bookie_lifecycle
from bkaudit.bookie.mode import BookieMode
from bkaudit.config import ZkSettings
from bkaudit.lifecycle import service
from bkaudit.lifecycle.drain import Drainer, report_failure
from bkaudit.lifecycle.settings import LifecycleSettings
from bkaudit.model import lifecycle as lc
from bkaudit.model.dataloss import DataLossRecord
from bkaudit.store import ZkStore
from bkaudit.zk import dataloss, ledgers, paths
from tests.admin.support import ADMIN, add_cookie, add_ledger, settings
from tests.autorecovery.support import children_blocking_nuke

S = lc.LifecycleState
REPO = Path(__file__).resolve().parents[2]
A, B, C = "10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181"


def _tree(zk: Any, path: str) -> list[str]:
    out = [path]
    for child in zk.get_children(path):
        out.extend(_tree(zk, f"{path}/{child}"))
    return out


def _wait(predicate: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_lifecycle_webhook_serving_and_data_loss_records_follow_the_state_root(
    zk, zk_server, zk_root
) -> None:
    state = zk_root.rsplit("/", 1)[0] + "/ops/bk"  # outside the ledgers root, unique to this test
    # validated as configured ([zk] state_root); the services pass `state_root or None` on
    conf = ZkSettings(connect=zk_server.connect_string, root=zk_root, state_root=state)
    sr = conf.state_root or None
    ledgers.init_cluster(zk, root=zk_root)
    for b in (A, B, C):
        add_cookie(zk, zk_root, b)
    add_ledger(zk, zk_root, 1, (A, B))
    add_ledger(zk, zk_root, 2, (A, C))
    # ledger 1 lost entries: its record sits under the configured root only (the default root has none)
    dataloss.write(zk, DataLossRecord(1, ((0, 9),), "2026-01-01T00:00:00Z", (A, B), 2, "t"),
                   root=zk_root, state_root=sr)
    assert zk.exists(paths.data_loss_path(1, root=zk_root, state_root=state)) is not None

    mode = BookieMode()
    bookie_lifecycle.watch(ZkStore(zk, root=zk_root, state_root=sr), A, mode)  # what bookie/server.py starts
    server = AdminServer(ZkStore(zk, root=zk_root, state_root=sr), settings(), port=0).start()
    try:
        assert server.bound is not None
        base = f"http://127.0.0.1:{server.bound[1]}/api/v1"
        with httpx.Client(base_url=base, headers=ADMIN, timeout=30) as http:
            r = http.put("/bookie/lifecycle", params={"bookie": A}, json={"state": "Draining", "reason": "t"})
            assert r.status_code == 200, r.text
            _wait(lambda: "lifecycle" in mode.reasons)  # the state znode beside the cookie
            r = http.put("/bookie/state/readonly", params={"bookie": A}, json={"readOnly": True})
            assert r.status_code == 200, r.text
            _wait(lambda: "operator" in mode.reasons)  # the bookie reads the switch where the API wrote it
            body = {"url": "http://127.0.0.1:9/hook", "secret": "webhook-secret-42"}
            hook = http.post("/webhooks", json=body)
            assert hook.status_code == 201, hook.text
            hook_id = hook.json()["id"]

            # a worker's failed pass on ledger 2 and the Auditor's drain pass, as the services wire them
            cs = ZkStore(zk, root=zk_root, state_root=sr)
            report_failure(cs, frozenset({A}), frozenset({A, C}), 2, "boom")
            drainer = Drainer(cs, settings=LifecycleSettings(drain_max_failures=1))
            progress = drainer.step()[A]
            assert progress["data_loss_ledgers"] == [1] and progress["failed_ledgers"] == [2]
            assert service.current(cs, A)[0] is S.DRAINING_FAILED  # every ledger left is bad

            # the operator's mark-drained is refused, naming the data loss found under the configured root
            r = http.put("/bookie/lifecycle", params={"bookie": A}, json={"state": "Drained"})
            assert r.status_code == 409, r.text
            assert r.json()["blockers"] == ["ledger 1 (data loss recorded)", "ledger 2"]
            assert [d["ledger_id"] for d in http.get("/autorecovery/data_loss").json()] == [1]
            assert [h["id"] for h in http.get("/webhooks").json()] == [hook_id]
            history = http.get("/bookie/lifecycle/history", params={"bookie": A}).json()
            assert [h["state"] for h in history] == ["Draining", "DrainingFailed"]
            drain_view = http.get("/bookie/drain_progress", params={"bookie": A}).json()
            assert drain_view[0]["failures_by_ledger"]["2"]["count"] == 1
        page = httpx.get(f"http://127.0.0.1:{server.bound[1]}/dashboard", headers=ADMIN, timeout=30)
        assert page.status_code == 200 and "Data loss (1)" in page.text  # the dashboard reads them too
    finally:
        server.stop()

    # the CLI reads `[zk] state_root` from the environment and finds the same records
    env = {**os.environ, "BKAUDIT_ZK__STATE_ROOT": state}
    proc = subprocess.run(
        [sys.executable, "-m", "bkaudit.cli", "lifecycle", "history", A, "--json",
         "--zk", zk_server.connect_string, "--root", zk_root],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert [h["state"] for h in json.loads(proc.stdout)] == ["Draining", "DrainingFailed"]

    # where everything is: each record under the configured root ...
    expected = [
        paths.lifecycle_history_root(A, root=zk_root, state_root=state),
        paths.drain_progress_path(A, root=zk_root, state_root=state),
        paths.drain_failure_path(A, 2, root=zk_root, state_root=state),
        paths.serving_path(A, root=zk_root, state_root=state),
        paths.webhook_path(hook_id, root=zk_root, state_root=state),
    ]
    assert all(p.startswith(state + "/") for p in expected)
    assert [p for p in expected if zk.exists(p) is None] == []
    # ... none under the derived default, and under the ledgers root only the design's state znode
    assert zk.exists(paths.bkaudit_state_root(root=zk_root)) is None
    assert children_blocking_nuke(zk, zk_root) == []
    words = ("lifecycle", "webhook", "serving", "dataloss", "bkaudit", "progress", "failures")
    ours = [p for p in _tree(zk, zk_root) if any(w in p for w in words)]
    assert ours == []
    assert zk.exists(paths.lifecycle_state_path(A, root=zk_root)) is not None
