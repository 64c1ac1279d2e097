"""The suite's xdist scheduler: longest file first, shared-fixture files as one unit."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests import scheduling


class FakeNode:
    """What the scheduler sees of a worker: the test indexes it is told to run."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[list[int]] = []
        self.shutting_down = False

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append(list(indexes))

    def shutdown(self) -> None:
        self.shutting_down = True


def _config() -> Any:
    values = {"tx": ["2*popen"], "dist": "loadfile"}
    return SimpleNamespace(getvalue=values.get, option=SimpleNamespace(loadscopereorder=True, numprocesses=2))


def test_units_are_handed_out_longest_first_and_shared_fixture_files_stay_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    collection = [
        "tests/model/test_a.py::test_1",
        "tests/model/test_a.py::test_2",
        "tests/model/test_a.py::test_3",  # most tests, least time: xdist alone would start it first
        "tests/security/test_zk_acls.py::test_acl",
        "tests/cluster/test_demo.py::test_demo",
        "tests/security/test_secured_run.py::test_run",
        "tests/model/test_new.py::test_x",  # no recorded time
        "tests/chaos/test_chaos_mixed.py::test_mixed",
    ]
    durations = {
        "tests/model/test_a.py": 1.0,
        "tests/cluster/test_demo.py": 230.0,
        "tests/chaos/test_chaos_mixed.py": 160.0,
        "tests/security/test_zk_acls.py": 100.0,
        "tests/security/test_secured_run.py": 90.0,  # with test_zk_acls: 190 s, second longest
    }
    monkeypatch.setattr(scheduling, "load_durations", lambda: durations)
    sched = scheduling.LongestFirstScheduling(_config())
    one, two = FakeNode("gw0"), FakeNode("gw1")
    for node in (one, two):
        sched.add_node(node)
        sched.add_node_collection(node, collection)
    sched.schedule()
    units = {
        node.name: [
            sorted({nodeid.split("::")[0] for nodeid in (collection[i] for i in batch)})
            for batch in node.sent
        ]
        for node in (one, two)
    }
    # each worker starts with one of the two longest units, and is given the next longest as its second
    assert units == {
        "gw0": [["tests/cluster/test_demo.py"], ["tests/chaos/test_chaos_mixed.py"]],
        "gw1": [
            ["tests/security/test_secured_run.py", "tests/security/test_zk_acls.py"],
            ["tests/model/test_a.py"],
        ],
    }
    assert list(sched.workqueue) == ["tests/model/test_new.py"]  # no recorded time: last


def test_durations_come_from_junit_per_file(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="tests.project.test_scheduling" name="a" time="1.25"/>'
        '<testcase classname="tests.project.test_scheduling" name="b" time="2.5"/>'
        '<testcase classname="tests.project.test_scheduling.SomeClass" name="c" time="0.25"/>'
        '<testcase classname="tests.nowhere.test_gone" name="d" time="9"/>'
        "</testsuite></testsuites>"
    )
    root = Path(__file__).resolve().parents[2]
    assert scheduling.durations_from_junit(junit, root) == {"tests/project/test_scheduling.py": 4.0}


def test_a_missing_or_broken_durations_file_means_xdist_order(tmp_path: Path) -> None:
    assert scheduling.load_durations(tmp_path / "absent.json") == {}
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert scheduling.load_durations(broken) == {}
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"tests/x.py": 3, "tests/y.py": "slow"}))
    assert scheduling.load_durations(good) == {"tests/x.py": 3.0}
