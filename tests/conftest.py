"""Shared fixtures live in tests/fixtures/ (one module per real component), loaded as plugins here.

`make test` runs the suite on pytest-xdist workers (four). A worker's `__main__` (execnet's) has neither
`__spec__` nor `__file__`, which pyspark.sql.connect takes for a doctest run and answers with sys.exit(0) when
great-expectations imports it: the worker's `__main__` gets a file name, as any script has. Which worker runs
which file is decided in tests/scheduling.py.

Every JVM the tests start gets tests.helpers.QUICK_JVM unless the variable is already set: Apache BookKeeper's
through its own `BOOKIE_EXTRA_OPTS` (bin/bookkeeper), Spark's drivers (the fixture's session, the CLI's and
jobs' sessions, every spark-submit) through Spark's `SPARK_SUBMIT_OPTS` (bin/spark-class). The suite is CPU
bound (two cores busy from its first minute to its last), and a local Spark session starting and running a
small query spends 12.5 CPU-seconds so, 21 with the default JIT and collector (3 runs each, 2026-11-29).

The `cluster`, `spark` and `java` markers follow from the fixtures a test uses (MARKER_OF_FIXTURE), directly
or through another fixture, so a test cannot start ZooKeeper and miss its marker. A test that starts the same
things another way (a subprocess, a fixture of its own) still carries the marker by hand.
"""

import os
from typing import Any

import pytest

import __main__
from tests.helpers import QUICK_JVM

os.environ.setdefault("BOOKIE_EXTRA_OPTS", QUICK_JVM)
os.environ.setdefault("SPARK_SUBMIT_OPTS", QUICK_JVM)

if not hasattr(__main__, "__file__") and getattr(__main__, "__spec__", None) is None:
    __main__.__file__ = "pytest-xdist-worker"

pytest_plugins = [
    "tests.fixtures.zookeeper",
    "tests.fixtures.cluster",
    "tests.fixtures.spark",
    "tests.fixtures.java",
    "tests.fixtures.prometheus",
]

# the fixture that starts the thing, and the marker that says so (pyproject.toml describes the markers)
MARKER_OF_FIXTURE = {
    "zk_server": "cluster",  # a real ZooKeeper; the cluster fixtures (tests/fixtures/cluster.py) build on it
    "spark": "spark",
    "java_bookkeeper": "java",
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for fixture, marker in MARKER_OF_FIXTURE.items():
            if fixture in used:
                item.add_marker(marker)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadfile":
        return None
    from tests.scheduling import LongestFirstScheduling

    return LongestFirstScheduling(config, log)
