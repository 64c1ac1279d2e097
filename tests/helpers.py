"""Small helpers every kind of test shares: polling for an event, and ZooKeeper paths no other test uses."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

# The JVMs the tests start (Spark's drivers and executors, the standalone Spark daemons, Apache BookKeeper's
# bookies, client, shell and AutoRecovery) live seconds to minutes on a 2-core machine shared by the test
# workers: C1 alone and the serial collector spend less CPU than C2 compiler threads and parallel GC threads
# would (tests/conftest.py applies it). Tests only: bench/ runs defaults. Measure CPU, not one file's wall
# time alone: alone, the idle second core hides the compiler threads' cost.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def wait_for(
    predicate: Callable[[], T], timeout_s: float = 60.0, what: str = "condition", interval_s: float = 0.05
) -> T:
    """Poll `predicate` until it returns something truthy and return that; AssertionError naming `what`
    after `timeout_s` (generous defaults: the suite runs on a loaded 2-core machine)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


def unique_path(prefix: str = "t", tail: str = "") -> str:
    """`/<prefix><12 hex><tail>`: a ZooKeeper path (a ledgers root, a chroot) no other test uses; its parent
    does not exist yet, e.g. unique_path("t", "/ledgers") -> "/t1a2b3c4d5e6f/ledgers"."""
    return f"/{prefix}{uuid.uuid4().hex[:12]}{tail}"


def load_duckdb_delta(con: Any) -> None:
    """DuckDB's `delta` extension: installed already, else the signed binary the `duckdb-ext-delta` wheel
    ships for this DuckDB version (offline), else DuckDB's own download (online)."""
    import importlib.util

    import duckdb

    try:
        con.execute("LOAD delta")
        return
    except Exception:
        pass
    found = importlib.util.find_spec("duckdb_ext")
    for base in (found.submodule_search_locations or []) if found else []:
        for path in Path(base).glob(f"extensions/v{duckdb.__version__}/*/delta.duckdb_extension"):
            con.execute(f"LOAD '{path}'")
            return
    try:
        con.execute("INSTALL delta")
        con.execute("LOAD delta")
    except Exception as exc:
        pytest.skip(f"DuckDB's delta extension is neither packaged nor downloadable here: {str(exc)[:120]}")
