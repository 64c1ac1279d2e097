"""A re-run's commit while another writer compacts the table: the old rows go, the new ones land once.

The concurrent writer is delta-rs's own OPTIMIZE (compaction), run exactly between the moment bkaudit's commit
read the table and the moment it commits: the window where delta-rs, left to rebase, let the removal of an
already compacted file pass as a no-op (the re-run's rows then appeared twice). Delta's Spark OPTIMIZE in the
same window: tests/spark/test_delta_spark_engine.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import bkaudit.tables.checker_schemas as cs
from bkaudit.tables import store
from bkaudit.tables.read import read_arrow
from bkaudit.tables.store import CommitError

START = datetime(2026, 11, 20, tzinfo=UTC)


def rows(run_id: str, ledgers: range) -> pa.Table:
    keys = {"run_id": run_id, "snapshot_id": f"snap-{run_id}", "run_date": "2026-11-20", "detected_at": START}
    return pa.Table.from_pylist(
        [{**keys, "ledger_id": i, "category": "placement_fail", "severity": "warning", "detail": "{}"}
         for i in ledgers], schema=cs.VIOLATIONS.schema)


def commit_run(warehouse: str, data: pa.Table, run_id: str) -> store.Commit:
    staged = store.stage_table(warehouse, "violations", data, snapshot_id=f"snap-{run_id}",
                               snapshot_date="2026-11-20")
    return store.commit(warehouse, "violations", staged, replace={"run_id": run_id})


def with_compaction_in_the_window(monkeypatch: pytest.MonkeyPatch, uri: str, times: int) -> list[int]:
    """`times` commits by a concurrent OPTIMIZE, each right after bkaudit read the table."""
    real = store._replacements
    done: list[int] = []

    def racing(dt: Any, *args: Any) -> Any:
        out = real(dt, *args)
        if len(done) < times:
            DeltaTable(uri).optimize.compact()
            done.append(DeltaTable(uri).version())
        return out

    monkeypatch.setattr(store, "_replacements", racing)
    return done


def test_a_rerun_replaces_its_rows_once_while_the_table_is_compacted(tmp_path, monkeypatch) -> None:
    wh = str(tmp_path)
    for run, ledgers in (("r1", range(0, 5)), ("r2", range(5, 10)), ("r1", range(10, 12))):
        commit_run(wh, rows(run, ledgers), run)  # r1's re-run replaced its first rows
    commit_run(wh, rows("r3", range(20, 23)), "r3")
    assert len(DeltaTable(store.table_uri(wh, "violations")).file_uris()) == 3  # r1', r2, r3: small files
    compactions = with_compaction_in_the_window(monkeypatch, store.table_uri(wh, "violations"), times=2)

    done = commit_run(wh, rows("r1", range(30, 34)), "r1")  # the re-run, racing two compactions

    table = read_arrow(wh, "violations")
    by_run = {run: sorted(i for r, i in zip(table.column("run_id").to_pylist(),
                                            table.column("ledger_id").to_pylist(), strict=True) if r == run)
              for run in ("r1", "r2", "r3")}
    assert by_run == {"r1": [30, 31, 32, 33], "r2": list(range(5, 10)), "r3": [20, 21, 22]}
    assert len(compactions) == 2  # the window was hit on the first two attempts; the third committed
    assert done.version == compactions[-1] + 1


def test_a_writer_that_always_loses_the_race_fails_cleanly(tmp_path, monkeypatch) -> None:
    wh = str(tmp_path)
    commit_run(wh, rows("r1", range(0, 3)), "r1")
    commit_run(wh, rows("r2", range(3, 6)), "r2")
    monkeypatch.setattr(store, "COMMIT_ATTEMPTS", 3)
    uri = store.table_uri(wh, "violations")
    real = store._replacements

    def always(dt: Any, *args: Any) -> Any:
        out = real(dt, *args)
        write_deltalake(uri, rows("other", range(100, 101)), mode="append")  # a concurrent commit, each time
        return out

    monkeypatch.setattr(store, "_replacements", always)
    before = read_arrow(wh, "violations").num_rows
    with pytest.raises(CommitError, match="another writer committed first 3 times"):
        commit_run(wh, rows("r1", range(50, 52)), "r1")
    monkeypatch.setattr(store, "_replacements", real)
    after = read_arrow(wh, "violations")
    assert after.num_rows == before + 3  # only the three concurrent appends: nothing of the failed re-run
    assert sorted(after.column("ledger_id").to_pylist())[:3] == [0, 1, 2]  # r1's old rows are still there
