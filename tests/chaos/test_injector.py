"""The injector's own bookkeeping: when a bookie fault is recorded and when its failure budget is released.

A recording stand-in replaces LocalCluster here (said so): the property under test is the order of the
injector's steps around a start that fails, which a real cluster produces only by chance (a ZooKeeper restart
racing the bookie's registration, as in seed 304).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bkaudit.chaos import faults
from bkaudit.chaos.history import History
from bkaudit.chaos.schedule import Fault, FaultKind
from bkaudit.chaos.workloads import Shared


class RecordingCluster:
    """Bookies that start and stop instantly; the first start with extra arguments fails like a start that
    lost ZooKeeper."""

    def __init__(self, history: History) -> None:
        self.history = history
        self.bookies = [SimpleNamespace(id=f"b{i}") for i in range(3)]
        self.bookie_args: list[str] = []
        self.running = {b.id for b in self.bookies}
        self.steps: list[tuple[str, str, bool]] = []  # (action, bookie, injector holds it as failed)
        self.injector: Any = None
        self.fail_next_special_start = True

    def _step(self, action: str, bookie: str) -> None:
        held = bool(self.injector._failed)
        self.steps.append((action, bookie, held))
        self.history.record("step", action=action, bookie=bookie)

    def stop_bookie(self, bookie: str) -> None:
        self._step("stop", bookie)
        self.running.discard(bookie)

    def start_bookie(self, bookie: str) -> None:
        if self.bookie_args and self.fail_next_special_start:
            self.fail_next_special_start = False
            self._step("start_failed", bookie)
            raise RuntimeError("ConnectionLoss")
        self._step("start", bookie)
        self.running.add(bookie)

    def is_running(self, bookie: str) -> bool:
        return bookie in self.running


def test_chaos_seed_304_a_half_injected_disk_full_brings_the_bookie_back_before_releasing_the_budget(
    tmp_path: Path,
) -> None:
    history = History()
    cluster = RecordingCluster(history)
    injector = faults.Injector(
        cluster=cluster,  # type: ignore[arg-type]
        autorecovery=None,  # type: ignore[arg-type]
        proxies=None,  # type: ignore[arg-type]
        shared=Shared(history),
        max_bookie_failures=1,
        workdir=tmp_path,
    )
    cluster.injector = injector
    injector._run(Fault(index=0, at_s=0.0, kind=FaultKind.DISK_FULL, target=1, hold_s=0.0))

    kinds = [(e["type"], e.get("phase") or e.get("action")) for e in history.events]
    # "start" is recorded when the bookie stops (writers lose it then), before the restart is tried
    assert kinds.index(("fault", "start")) == kinds.index(("step", "stop")) + 1
    assert ("fault", "error") in kinds
    # the bookie is running again, and it was restarted while its failure still counted against the budget
    assert cluster.is_running("b1")
    last_start = max(i for i, s in enumerate(cluster.steps) if s[0] == "start")
    assert cluster.steps[last_start][1:] == ("b1", True)
    assert injector._failed == set()  # released only afterwards
