"""A local cluster waits for a bkaudit bookie's own word that it started ("ready on port"), in the log of
this run only: a CI run paused a bookie between its registration and the end of its start-up."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from bkaudit.cluster.bookies import LOG_FILE, BookieInfo
from bkaudit.cluster.local_processes import wait_ready
from bkaudit.errors import ClusterError


def _bookie(tmp_path: Path) -> BookieInfo:
    return BookieInfo(id="127.0.0.1:3181", rack="", port=3181, pid=None, data_dir=str(tmp_path))


def test_only_this_runs_ready_line_counts(tmp_path: Path) -> None:
    b = _bookie(tmp_path)
    log = tmp_path / LOG_FILE
    log.write_bytes(b"bookie 127.0.0.1:3181 ready on port 3181\n")  # the previous run's
    start = log.stat().st_size
    with log.open("ab") as f:
        f.write(b"INFO registered 127.0.0.1:3181 as writable\n")

    def finish() -> None:
        time.sleep(0.5)
        with log.open("ab") as f:
            f.write(b"bookie 127.0.0.1:3181 ready on port 3181\n")

    writer = threading.Thread(target=finish)
    began = time.monotonic()
    writer.start()
    wait_ready(b, start, alive=lambda _b: True, deadline=time.monotonic() + 30, timeout_s=30)
    writer.join()
    assert time.monotonic() - began >= 0.5  # the old line did not end the wait


def test_a_bookie_that_dies_or_hangs_in_its_start_is_named(tmp_path: Path) -> None:
    b = _bookie(tmp_path)
    (tmp_path / LOG_FILE).write_bytes(b"")
    with pytest.raises(ClusterError, match="exited during start-up"):
        wait_ready(b, 0, alive=lambda _b: False, deadline=time.monotonic() + 30, timeout_s=30)
    with pytest.raises(ClusterError, match="did not finish starting within 1s"):
        wait_ready(b, 0, alive=lambda _b: True, deadline=time.monotonic() + 0.2, timeout_s=1)
