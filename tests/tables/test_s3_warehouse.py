"""The warehouse on S3: a real S3-compatible server (moto's server mode, from PyPI) on loopback.

Runs are written through bkaudit's store to `s3a://` (mapped to `s3://`), re-run (replace commit), read back
with filters through delta-rs, DuckDB and the CLI (`violations`, `report`, `tables vacuum`, `tables files`),
with the storage options coming from a `[tables]` settings file as a user would configure them. Concurrent
commits from several writers must all land (delta-rs commits with conditional puts; the server answers
412/409 to the losers, which retry). Ground truth is what the test wrote.

Spark over `s3a://` (Hadoop's S3A, hadoop-aws from `make s3a`), on local[2] and on a standalone cluster:
tests/spark/test_standalone_cluster.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

import bkaudit.tables.checker_schemas as cs
from bkaudit.tables import location
from bkaudit.tables.location import Warehouse
from bkaudit.tables.read import current_files, read_arrow
from bkaudit.tables.store import StagingWriter, commit, open_delta, revert, write_table
from tests.fixtures.s3 import moto_s3

pytest.importorskip("moto", reason="moto[server] (a dev dependency) provides the local S3 server")

BUCKET = "bkaudit-warehouse"
T0 = datetime(2026, 11, 24, 6, 0, 0, 250_001, tzinfo=UTC)
TOPIC = "persistent://public/default/topic-name-well-beyond-thirty-two-characters"


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    with moto_s3(BUCKET) as server:
        yield server.options


def _rows(run_id: str, n: int) -> list[dict[str, Any]]:
    return [
        {
            "run_id": run_id, "snapshot_id": f"snap-{run_id}", "run_date": "2026-11-24", "ledger_id": i,
            "category": "no_replica" if i % 2 else "placement_fail",
            "severity": "critical" if i % 2 else "warning", "managed_ledger": TOPIC if i % 3 == 0 else None,
            "published": i % 2 == 1, "detected_at": T0 + timedelta(seconds=i, microseconds=i),
            "ensemble_size": 3, "write_quorum": 2, "ack_quorum": 2, "detail": "{}",
        }
        for i in range(n)
    ]


def _write_run(wh: Warehouse, run_id: str, n: int, minute: int = 0) -> None:
    """A checker-shaped run: violations staged in several files, one commit, then the audit_runs row."""
    writer = StagingWriter(wh, "violations", snapshot_id=f"snap-{run_id}", snapshot_date="2026-11-24",
                           max_rows_per_file=5)
    writer.write(pa.Table.from_pylist(_rows(run_id, n), schema=cs.VIOLATIONS.schema))
    commit(wh, "violations", writer.close(), replace={"run_id": run_id}, info={"run_id": run_id})
    # a succeeded checker run always commits bookie_checks too (here: no bookie worth a row)
    write_table(wh, "bookie_checks", cs.BOOKIE_CHECKS.schema.empty_table(), snapshot_id=f"snap-{run_id}",
                snapshot_date="2026-11-24", replace={"run_id": run_id})
    start = T0 + timedelta(minutes=minute)
    run = {"run_id": run_id, "snapshot_id": f"snap-{run_id}", "run_date": "2026-11-24", "status": "succeeded",
           "started_at": start, "finished_at": start + timedelta(minutes=1)}
    write_table(wh, "audit_runs", pa.Table.from_pylist([run], schema=cs.AUDIT_RUNS.schema),
                snapshot_id=f"snap-{run_id}", snapshot_date="2026-11-24", replace={"run_id": run_id})


def test_s3a_run_rerun_and_filtered_reads(s3: dict[str, str]) -> None:
    wh = Warehouse(f"s3a://{BUCKET}/rerun", s3)
    _write_run(wh, "r1", 12)
    _write_run(wh, "r1", 20)  # re-run: replaces r1's rows
    uri = f"s3://{BUCKET}/rerun/violations"
    assert location.normalize(wh.uri + "/violations") == uri
    data = read_arrow(wh, "violations")
    assert sorted(data.column("ledger_id").to_pylist()) == list(range(20))
    dt = open_delta(uri, options=s3)
    truth = [r for r in _rows("r1", 20) if r["published"]]
    got = dt.to_pyarrow_dataset().to_table(filter=ds.field("published") == True)  # noqa: E712
    assert sorted(got.column("ledger_id").to_pylist()) == sorted(r["ledger_id"] for r in truth)
    cut = T0 + timedelta(seconds=10, microseconds=5)
    later = dt.to_pyarrow_table(filters=[("detected_at", ">", cut)])
    assert sorted(later.column("ledger_id").to_pylist()) == list(range(10, 20))
    topic = dt.to_pyarrow_dataset().to_table(filter=ds.field("managed_ledger") == TOPIC)
    assert sorted(topic.column("ledger_id").to_pylist()) == [i for i in range(20) if i % 3 == 0]
    files = current_files(wh, "violations")
    assert files and all(f.startswith(f"s3a://{BUCKET}/rerun/violations/") for f in files)
    history = dt.history(1)[0]
    assert history["operationParameters"]["predicate"] == "run_id = 'r1'"
    assert history["isBlindAppend"] is False
    duckdb = pytest.importorskip("duckdb")
    violations = dt.to_pyarrow_dataset()  # noqa: F841 - scanned by name
    assert duckdb.connect().execute(
        "SELECT count(*) FROM violations WHERE published AND run_id = 'r1'"
    ).fetchone() == (len(truth),)


def test_revert_on_s3(s3: dict[str, str]) -> None:
    wh = Warehouse(f"s3://{BUCKET}/revert", s3)
    _write_run(wh, "r1", 6)
    writer = StagingWriter(wh, "violations", snapshot_id="snap-r1", snapshot_date="2026-11-24")
    writer.write(pa.Table.from_pylist(_rows("r1", 3), schema=cs.VIOLATIONS.schema))
    done = commit(wh, "violations", writer.close(), replace={"run_id": "r1"})
    assert read_arrow(wh, "violations").num_rows == 3
    revert(done)  # a failed run's commit undone: the earlier rows are back, with usable stats
    dt = open_delta(f"{wh}/violations", options=s3)
    back = dt.to_pyarrow_dataset().to_table(filter=ds.field("published") == True)  # noqa: E712
    assert sorted(back.column("ledger_id").to_pylist()) == [1, 3, 5]


def test_concurrent_commits_all_land(s3: dict[str, str]) -> None:
    wh = Warehouse(f"s3://{BUCKET}/concurrent", s3)
    empty = cs.VIOLATIONS.schema.empty_table()
    write_table(wh, "violations", empty, snapshot_id="s", snapshot_date="2026-11-24")

    def one(i: int) -> int:
        t = pa.Table.from_pylist(_rows(f"c{i}", 3), schema=cs.VIOLATIONS.schema)
        return write_table(wh, "violations", t, snapshot_id=f"snap-c{i}", snapshot_date="2026-11-24",
                           replace={"run_id": f"c{i}"}).version

    with ThreadPoolExecutor(6) as pool:
        versions = list(pool.map(one, range(6)))
    assert sorted(versions) == list(range(1, 7))  # each writer got its own version, none overwritten
    data = read_arrow(wh, "violations")
    assert sorted(set(data.column("run_id").to_pylist())) == [f"c{i}" for i in range(6)]
    assert data.num_rows == 18


def test_cli_against_s3(s3: dict[str, str], tmp_path: Path) -> None:
    """The commands a user runs, configured by a settings file only (fresh processes, nothing inherited)."""
    wh = f"s3a://{BUCKET}/cli"
    _write_run(Warehouse(wh, s3), "old", 4, minute=0)
    _write_run(Warehouse(wh, s3), "new", 9, minute=10)
    _write_run(Warehouse(wh, s3), "new", 7, minute=20)  # re-run
    options = ", ".join(f'{k} = "{v}"' for k, v in s3.items())
    conf = tmp_path / "bkaudit.toml"
    conf.write_text(f'[snapshot]\nwarehouse = "{wh}"\n\n[tables]\nstorage_options = {{ {options} }}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "BKAUDIT_"))}

    def bkaudit(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "bkaudit.cli", *args, "--config", str(conf)],
                              capture_output=True, text=True, env=env, timeout=300)

    shown = bkaudit("violations", "--json", "--category", "no_replica")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["run_id"] == "new"
    assert sorted(r["ledger_id"] for r in data["violations"]) == [1, 3, 5]
    report = bkaudit("report", "--out", str(tmp_path / "report"), "--json")
    assert report.returncode == 0, report.stderr
    assert any(p.suffix == ".html" for p in (tmp_path / "report").iterdir())
    listed = bkaudit("tables", "files", "violations")
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.split()) == 1 + 2  # files of 5 rows: "old" (4 rows), the re-run of "new" (7)
    dry = bkaudit("tables", "vacuum", "--retention-hours", "0", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = {t["table"]: t for t in json.loads(dry.stdout)["tables"]}
    assert plan["violations"]["vacuum_files"] == 2  # the replaced first run of "new" (9 rows)
    assert plan["audit_runs"]["vacuum_files"] == 1
    done = bkaudit("tables", "vacuum", "--retention-hours", "0", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    again = json.loads(bkaudit("tables", "vacuum", "--retention-hours", "0", "--json").stdout)
    assert all(t["vacuum_files"] == 0 for t in again["tables"]), again["tables"]
    assert json.loads(bkaudit("violations", "--json").stdout)["violations"]  # still readable
