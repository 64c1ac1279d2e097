"""How `make test` spreads test files over its xdist workers.

`--dist loadfile` keeps each file on one worker (its module fixtures, often a whole cluster, stay whole), but
xdist hands files out largest-test-count first, so the suite's longest files (one end-to-end test each) start
last and one worker finishes minutes after the other. This scheduler hands out the file that took longest in
the last measured run first (longest-processing-time-first), from `tests/durations.json`; files it has no
time for go last, in collection order. Files that share an expensive session fixture form one unit, so the
fixture is built once, not once per worker.

Refresh the times after a full run: `make test PYTEST_ARGS=--junitxml=/tmp/junit.xml` then
`python -m tests.scheduling /tmp/junit.xml`.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadFileScheduling

DURATIONS = Path(__file__).with_name("durations.json")

# files whose tests use one session fixture that takes a minute to build (tests/security/conftest.py)
SHARED_FIXTURE_UNITS = {
    "tests/security/test_no_secret_leaks.py": "tests/security[secure_run]",
    "tests/security/test_secured_run.py": "tests/security[secure_run]",
    "tests/security/test_zk_acls.py": "tests/security[secure_run]",
}


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    """Seconds per test file; empty when the file is missing or unreadable (the order is then xdist's)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)}


def unit_of(path: str) -> str:
    return SHARED_FIXTURE_UNITS.get(path, path)


def unit_costs(durations: dict[str, float]) -> dict[str, float]:
    costs: dict[str, float] = {}
    for path, seconds in durations.items():
        unit = unit_of(path)
        costs[unit] = costs.get(unit, 0.0) + seconds
    return costs


class LongestFirstScheduling(LoadFileScheduling):  # type: ignore[misc]
    """`loadfile`, with shared-fixture files grouped and the longest unit handed out first."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self.costs = unit_costs(load_durations())

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(super()._split_scope(nodeid))

    def _assign_work_unit(self, node: Any) -> None:
        # max() keeps the first of equals: units without a time stay in collection order, after the rest
        longest = max(self.workqueue, key=lambda unit: self.costs.get(unit, 0.0))
        self.workqueue.move_to_end(longest, last=False)
        super()._assign_work_unit(node)


def durations_from_junit(junit: Path, root: Path) -> dict[str, float]:
    """Per test file, the seconds its test cases took (junit's time includes setup and teardown)."""
    out: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        for n in range(len(parts), 0, -1):  # tests.zk.test_x.TestClass -> tests/zk/test_x.py
            candidate = "/".join(parts[:n]) + ".py"
            if (root / candidate).is_file():
                out[candidate] = out.get(candidate, 0.0) + float(case.get("time") or 0.0)
                break
    return {k: round(v, 1) for k, v in sorted(out.items())}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.scheduling JUNIT_XML")
    times = durations_from_junit(Path(sys.argv[1]), Path(__file__).resolve().parent.parent)
    DURATIONS.write_text(json.dumps(times, indent=1) + "\n", encoding="utf-8")
    print(f"{len(times)} files, {sum(times.values()):.0f} s in all -> {DURATIONS}")
