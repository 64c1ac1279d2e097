"""Shared fixtures live in tests/fixtures/ (one module per real component), loaded as plugins here.

`make test` runs the suite on pytest-xdist workers (four). A worker's `__main__` (execnet's) has neither
`__spec__` nor `__file__`, which pyspark.sql.connect takes for a doctest run and answers with sys.exit(0) when
great-expectations imports it: the worker's `__main__` gets a file name, as any script has. Which worker runs
which file is decided in tests/scheduling.py.
"""

from typing import Any

import pytest

import __main__

if not hasattr(__main__, "__file__") and getattr(__main__, "__spec__", None) is None:
    __main__.__file__ = "pytest-xdist-worker"

pytest_plugins = [
    "tests.fixtures.zookeeper",
    "tests.fixtures.cluster",
    "tests.fixtures.spark",
    "tests.fixtures.java",
    "tests.fixtures.prometheus",
]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadfile":
        return None
    from tests.scheduling import LongestFirstScheduling

    return LongestFirstScheduling(config, log)
