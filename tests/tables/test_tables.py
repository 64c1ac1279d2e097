"""The table layer: staged writes + one commit, replace by snapshot_id, revert, Spark reads, row builders.

Most tests here need only delta-rs and pyarrow; the ones that read through Spark are marked `spark`.
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bkaudit.formats.ledger_metadata import serialize
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.tables import read, store
from bkaudit.tables.catalog import spec
from bkaudit.tables.rows import LedgerBatchBuilder, explode_segments, metadata_text
from bkaudit.tables.schemas import LEDGERS, SOURCE_SCHEMA, conform

DATE = "2026-11-22"


def _bookies(*ids: str, state: str = "writable") -> pa.Table:
    return pa.table({"bookie_id": list(ids), "state": [state] * len(ids)})


def _ids(warehouse: Path, table: str, snapshot_id: str | None = None) -> list[tuple[str, str]]:
    rows = read.read_arrow(str(warehouse), table, snapshot_id=snapshot_id).to_pylist()
    return sorted((r["snapshot_id"], r["bookie_id"]) for r in rows)


# -- store ---------------------------------------------------------------------------------------------------
def test_staged_files_are_invisible_until_committed(tmp_path: Path) -> None:
    files = store.stage_table(
        str(tmp_path), "bookies", _bookies("a:1", "b:1"), snapshot_id="s1", snapshot_date=DATE
    )
    assert len(files) == 1 and (tmp_path / "bookies" / files[0].path).exists()
    assert not read.table_exists(str(tmp_path), "bookies")
    done = store.commit(str(tmp_path), "bookies", files, replace={"snapshot_id": "s1"})
    assert _ids(tmp_path, "bookies") == [("s1", "a:1"), ("s1", "b:1")]
    assert files[0].path.startswith(f"snapshot_date={DATE}/") and done.version == 1
    stats = json.loads(files[0].stats)
    assert stats["numRecords"] == 2 and stats["minValues"]["snapshot_id"] == "s1"
    assert stats["minValues"]["bookie_id"] == "a:1" and stats["maxValues"]["bookie_id"] == "b:1"


def test_replace_by_snapshot_id_in_one_commit(tmp_path: Path) -> None:
    wh = str(tmp_path)
    store.write_table(wh, "bookies", _bookies("a:1"), snapshot_id="s1", snapshot_date=DATE)
    store.write_table(wh, "bookies", _bookies("x:1"), snapshot_id="s2", snapshot_date=DATE)
    done = store.write_table(
        wh, "bookies", _bookies("b:1", "c:1"), snapshot_id="s1", snapshot_date="2026-11-23"
    )
    assert _ids(tmp_path, "bookies") == [("s1", "b:1"), ("s1", "c:1"), ("s2", "x:1")]
    # the replacement was a single commit: the version before it still shows the old rows
    old = read.read_arrow(wh, "bookies", version=done.version - 1)
    assert sorted(old.column("bookie_id").to_pylist()) == ["a:1", "x:1"]


def test_replace_rewrites_a_file_that_mixes_snapshots(tmp_path: Path) -> None:
    """After an OPTIMIZE-like compaction one file holds two snapshots: only the replaced rows go."""
    wh = str(tmp_path)
    mixed = pa.table({"snapshot_id": ["s1", "s2"], "bookie_id": ["a:1", "x:1"], "state": ["writable"] * 2})
    writer = store.StagingWriter(wh, "bookies", snapshot_id="s1", snapshot_date=DATE)
    writer.write(mixed)
    store.commit(wh, "bookies", writer.close())
    store.write_table(wh, "bookies", _bookies("b:1"), snapshot_id="s1", snapshot_date=DATE)
    assert _ids(tmp_path, "bookies") == [("s1", "b:1"), ("s2", "x:1")]


def test_revert_undoes_a_commit(tmp_path: Path) -> None:
    wh = str(tmp_path)
    store.write_table(wh, "bookies", _bookies("a:1"), snapshot_id="s1", snapshot_date=DATE)
    done = store.write_table(wh, "bookies", _bookies("b:1"), snapshot_id="s1", snapshot_date=DATE)
    store.revert(done)
    assert _ids(tmp_path, "bookies") == [("s1", "a:1")]


def test_conform_casts_and_fills_missing_columns() -> None:
    data = pa.table({"ledger_id": pa.array([1], pa.int32()), "snapshot_id": ["s"], "extra": [1]})
    table = conform(data, LEDGERS.file_schema)
    assert table.schema == LEDGERS.file_schema
    assert table.column("ledger_id").type == pa.int64() and table.column("state").null_count == 1


def test_invalid_snapshot_ids_are_rejected() -> None:
    for bad in ("", "a b", "../x", "x;drop", "-lead"):
        with pytest.raises(ValueError):
            store.validate_snapshot_id(bad)
    assert store.validate_snapshot_id("20261122T051500Z-1a2b3c") == "20261122T051500Z-1a2b3c"


def test_latest_snapshot_ignores_failed_runs(tmp_path: Path) -> None:
    wh = str(tmp_path)
    schema = pa.schema(
        [f for f in spec("snapshots").schema if f.name not in ("snapshot_id", "snapshot_date")]
    )

    def run(sid: str, status: str, finished: int) -> None:
        row = {"status": status, "started_at": finished - 1, "finished_at": finished}
        store.write_table(
            wh, "snapshots", pa.Table.from_pylist([row], schema=schema), snapshot_id=sid, snapshot_date=DATE
        )

    assert read.latest_snapshot_id(wh) is None
    run("a", "succeeded", 1_000)
    run("b", "failed", 2_000)
    assert read.latest_snapshot_id(wh) == "a"
    run("c", "succeeded", 3_000)
    assert read.latest_snapshot_id(wh) == "c"


# -- Spark reads ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_load_latest_snapshot_version_and_errors(spark: Any, tmp_path: Path) -> None:
    wh = str(tmp_path)
    with pytest.raises(read.TableNotFound):
        read.load(spark, wh, "bookies", snapshot_id="s1")
    with pytest.raises(read.NoSnapshot):
        read.load(spark, wh, "bookies")
    first = store.write_table(wh, "bookies", _bookies("a:1", "b:1"), snapshot_id="s1", snapshot_date=DATE)
    store.write_table(wh, "bookies", _bookies("c:1"), snapshot_id="s2", snapshot_date=DATE)
    store.write_table(
        wh,
        "snapshots",
        pa.table({"status": ["succeeded"], "finished_at": pa.array([1], pa.timestamp("us", tz="UTC"))}),
        snapshot_id="s1",
        snapshot_date=DATE,
    )

    latest = read.load(spark, wh, "bookies", native=False)
    assert sorted(r.bookie_id for r in latest.collect()) == ["a:1", "b:1"]  # s2 has no 'succeeded' row
    assert latest.columns == spec("bookies").schema.names
    assert latest.where("snapshot_date = '2026-11-22'").count() == 2  # partition column read as a string
    assert read.load(spark, wh, "bookies", snapshot_id="s2").count() == 1
    assert read.load(spark, wh, "bookies", latest=False).count() == 3
    assert read.load(spark, wh, "bookies", version=first.version).count() == 2  # time travel
    assert not read.native_delta_available(spark)


# -- row builders (pure) -------------------------------------------------------------------------------------
def _ledger(**kw: Any) -> LedgerMetadata:
    base: dict[str, Any] = dict(
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        state=LedgerState.CLOSED,
        last_entry_id=7,
        length=80,
        digest_type=DigestType.CRC32C,
        password=b"",
        segments=(Segment(0, ("a:1", "b:1", "c:1")), Segment(4, ("a:1", "b:1", "d:1"))),
    )
    base.update(kw)
    return LedgerMetadata(**base)


def test_builder_columns_and_segments() -> None:
    builder = LedgerBatchBuilder()
    builder.add(7, serialize(_ledger(ctime=5_000)), version=3, mzxid=99, ctime_ms=1_000)
    builder.add(8, serialize(_ledger(state=LedgerState.OPEN, last_entry_id=-1, length=0)), 0, 100, 2_000)
    builder.add(9, b"\x00junk", 1, 101, 3_000)
    batch = builder.flush()
    assert batch.schema == SOURCE_SCHEMA and len(builder) == 0 and builder.unparseable == 1
    rows = batch.to_pylist()
    assert [r["ctime"].timestamp() for r in rows[:2]] == [5.0, 2.0]  # metadata ctime, else the znode's
    assert rows[0]["segments"] == [
        {"segment_index": 0, "first_entry_id": 0, "last_entry_id": 3, "ensemble": ["a:1", "b:1", "c:1"]},
        {"segment_index": 1, "first_entry_id": 4, "last_entry_id": 7, "ensemble": ["a:1", "b:1", "d:1"]},
    ]
    assert rows[1]["segments"][1]["last_entry_id"] is None  # open ledger: last segment is open
    bad = rows[2]
    assert bad["segments"] is None and bad["custom_metadata"] is None and bad["state"] is None
    assert base64.b64decode(bad["raw_metadata"]) == b"\x00junk" and bad["parse_error"].startswith(
        "FormatError"
    )
    exploded = explode_segments(batch)
    assert exploded.num_rows == 4 and exploded.column("ledger_id").to_pylist() == [7, 7, 8, 8]


def test_custom_metadata_text_and_binary() -> None:
    assert metadata_text(b"public/default/t") == "public/default/t"
    assert metadata_text(b"\xff\x00") == "base64:" + base64.b64encode(b"\xff\x00").decode()
    builder = LedgerBatchBuilder()
    custom = {"pulsar/managed-ledger": b"tenant/ns/persistent/t", "bin": b"\xfe"}
    builder.add(1, serialize(_ledger(custom_metadata=custom)), 0, 1, 1)
    row = builder.flush().to_pylist()[0]
    assert row["managed_ledger"] == "tenant/ns/persistent/t"
    assert row["custom_metadata"] == [
        ("pulsar/managed-ledger", "tenant/ns/persistent/t"),
        ("bin", "base64:/g=="),
    ]


# -- ZooKeeper scan planning and listing (pure parts) --------------------------------------------------------
def test_fast_listing_parse_agrees_with_zk_paths() -> None:
    """iter_ledgers assembles ids from dir names; it must accept exactly what parse_ledger_path accepts."""
    from bkaudit.store.zkscan import LONG_WIDTHS, SHORT_WIDTHS, _is_dir_name
    from bkaudit.zk import paths

    rng = random.Random(7)
    for _ in range(2000):
        ledger_id = rng.choice([rng.randrange(0, 2**31), rng.randrange(2**31, 2**63)])
        for layout in ("hierarchical", "longhierarchical"):
            path = paths.ledger_path(ledger_id, root="/r", layout=layout)
            parts = path.split("/")[2:]
            widths = SHORT_WIDTHS if len(parts) == 3 else LONG_WIDTHS
            assert [len(p) for p in parts[:-1]] == list(widths)
            assert all(_is_dir_name("/".join(parts[:i]), parts[i]) for i in range(1, len(parts) - 1))
            assert int("".join(parts[:-1]) + parts[-1][1:]) == paths.parse_ledger_path(path, root="/r")
    assert not _is_dir_name("00", "123") and not _is_dir_name("000", "12a4")


def test_pack_balances_and_caps_partitions() -> None:
    from bkaudit.store.zkscan import Unit, pack

    units = [Unit(f"00/{i:04d}", 10_000) for i in range(10)] + [Unit("000", 5)]
    groups = pack(units, 3)
    assert len(groups) == 3 and sorted(p for g in groups for p in g) == sorted(u.path for u in units)
    loads = [sum(10_000 if "/" in p else 5 for p in g) for g in groups]
    assert max(loads) - min(loads) <= 10_000
    assert pack([Unit("00")], 4) == [["00"]]


def test_multiread_request_bytes() -> None:
    from bkaudit.zk.multiread import MultiRead

    raw = MultiRead(["/a", "/bc"]).serialize()
    # MultiHeader(getData=4, done=false, err=-1) + path + watch=false, twice, then the end marker
    one = b"\x00\x00\x00\x04\x00\xff\xff\xff\xff"
    assert raw == (
        one
        + b"\x00\x00\x00\x02/a\x00"
        + one
        + b"\x00\x00\x00\x03/bc\x00"
        + b"\xff\xff\xff\xff\x01\xff\xff\xff\xff"
    )


def test_read_batched_matches_single_reads_and_falls_back(zk: Any, zk_root: str, monkeypatch: Any) -> None:
    from kazoo.exceptions import UnimplementedError

    from bkaudit.zk import multiread

    zk.ensure_path(zk_root)
    znodes = [f"{zk_root}/n{i:03d}" for i in range(250)]
    for i, path in enumerate(znodes):
        zk.create(path, str(i).encode())
    wanted = [*znodes[:120], f"{zk_root}/missing", *znodes[120:]]
    got = [
        (p, d, s.version if s else None) for p, d, s in multiread.read_batched(zk, wanted, max_in_flight=300)
    ]
    expected = [
        (p, str(int(p[-3:])).encode(), 0) if not p.endswith("missing") else (p, None, None) for p in wanted
    ]
    assert got == expected

    def unsupported(client: Any, chunk: list[str]) -> Any:  # a ZooKeeper without multiRead (< 3.6)
        result = client.handler.async_result()
        result.set_exception(UnimplementedError())
        return result

    monkeypatch.setattr(multiread, "_submit", unsupported)
    fallback = [
        (p, d, s.version if s else None) for p, d, s in multiread.read_batched(zk, wanted, max_in_flight=300)
    ]
    assert fallback == expected


def test_multiread_answers_are_decoded_column_wise() -> None:
    """A MultiResponse laid out as ZooKeeper's jute writes it (kazoo's structs, not ours): getData results,
    a null data field, a NoNode op and a NoAuth op, then the closing header."""
    from kazoo.exceptions import NoAuthError
    from kazoo.protocol.serialization import int_struct, multiheader_struct, stat_struct

    from bkaudit.zk.multiread import MultiRead, _checked

    stat = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
    ok, null = multiheader_struct.pack(4, False, 0), int_struct.pack(-1)
    buf = (
        b"xx"  # the reply header's place: deserialize starts at an offset
        + ok + int_struct.pack(3) + b"abc" + stat_struct.pack(*stat)
        + ok + null + stat_struct.pack(*stat)
        + multiheader_struct.pack(-1, False, -101) + int_struct.pack(-101)
        + multiheader_struct.pack(-1, False, -102) + int_struct.pack(-102)
        + multiheader_struct.pack(-1, True, -1)
    )  # fmt: skip
    answers = MultiRead.deserialize(buf, 2)
    assert answers.data[:2] == [b"abc", b""] and answers.stats[:2] == [stat, stat]
    assert answers.stats[2:] == [None, None] and answers.failed == 2
    with pytest.raises(NoAuthError):
        _checked(["/a", "/b", "/c", "/d"], answers)
    trimmed = MultiRead.deserialize(buf[: buf.index(multiheader_struct.pack(-1, False, -102))], 2)
    checked = _checked(["/a", "/b", "/c"], trimmed)  # NoNode: the znode is gone, not an error
    assert checked.data == [b"abc", b"", None] and checked.stats == [stat, stat, None] and checked.gone == 1
    with pytest.raises(ValueError, match="answered 3 results for 4 reads"):
        _checked(["/a", "/b", "/c", "/d"], trimmed)


def test_read_chunks_keeps_chunks_tags_and_order(zk: Any, zk_root: str, monkeypatch: Any) -> None:
    from kazoo.exceptions import UnimplementedError

    from bkaudit.zk import multiread

    zk.ensure_path(zk_root)
    znodes = [f"{zk_root}/n{i:03d}" for i in range(40)]
    for i, path in enumerate(znodes):
        zk.create(path, str(i).encode())
    zk.delete(znodes[7])  # listed, then gone
    chunks = [(f"t{at}", znodes[at : at + 3]) for at in range(0, 40, 3)]

    def read(max_in_flight: int) -> list[tuple[str, list[str], list[Any], list[Any]]]:
        return [
            (tag, paths, a.data, [s[4] if s else None for s in a.stats])
            for tag, paths, a in multiread.read_chunks(zk, iter(chunks), max_in_flight=max_in_flight)
        ]

    expected = [
        (tag, paths, [None if p == znodes[7] else str(int(p[-3:])).encode() for p in paths],
         [None if p == znodes[7] else 0 for p in paths])
        for tag, paths in chunks
    ]  # fmt: skip
    assert read(1) == expected  # one chunk in flight at a time, even though a chunk holds 3 reads
    assert read(7) == expected

    def unsupported(client: Any, chunk: list[str]) -> Any:  # a ZooKeeper without multiRead (< 3.6)
        result = client.handler.async_result()
        result.set_exception(UnimplementedError())
        return result

    monkeypatch.setattr(multiread, "_submit", unsupported)
    assert read(7) == expected


def test_listing_by_directory_takes_exactly_the_ledger_names(zk: Any, zk_root: str, zk_settings: Any) -> None:
    """iter_ledger_dirs: every ledger of both hierarchies once, ids ascending per directory, nothing that is
    not a ledger name (short names, letters, non-ASCII digits), nothing beyond Long.MAX_VALUE."""
    from bkaudit.store.zkscan import plan_units
    from bkaudit.zk import paths
    from bkaudit.zk.ledgers import iter_ledger_dirs, iter_ledgers

    ids = [0, 9, 10_000, 123_456, 2**31 + 5, 2**40, paths.LONG_MAX - 3, paths.LONG_MAX]
    created = []
    for ledger_id in ids:
        created.append(paths.ledger_path(ledger_id, root=zk_root))
        zk.create(created[-1], b"x", makepath=True)
    long_last = paths.ledger_path(paths.LONG_MAX, root=zk_root).rsplit("/", 1)[0]
    for junk in (f"{long_last}/L5808", f"{zk_root}/00/0000/L12", f"{zk_root}/00/0000/Labcd",
                 f"{zk_root}/00/0000/L\uff10\uff11\uff12\uff13", f"{zk_root}/00/0000/ledger"):  # fmt: skip
        zk.create(junk, b"x", makepath=True)
    units = [u.path for u in plan_units(zk_settings, 3)]
    dirs = list(iter_ledger_dirs(zk, zk_root, units))
    assert all(d[0] == sorted(d[0]) and len(d[0]) == len(d[1]) for d in dirs)
    listed = [(i, p) for d in dirs for i, p in zip(*d, strict=True)]
    assert sorted(listed) == sorted(zip(ids, created, strict=True))
    assert all(paths.parse_ledger_path(p, root=zk_root) == i for i, p in listed)
    assert list(iter_ledgers(zk, zk_root, units)) == listed


def test_scan_respects_session_cap_and_read_rate(zk: Any, zk_root: str, zk_server: Any) -> None:
    """At most max_zk_sessions partitions; a task reads no faster than reads_per_second_per_task."""
    import time

    from bkaudit.config import ZkSettings
    from bkaudit.spark.datasource import BookKeeperReader, ReadOptions, read_units
    from bkaudit.spark.settings import SnapshotSettings
    from bkaudit.zk import paths
    from bkaudit.zk.ledgers import init_cluster

    init_cluster(zk, root=zk_root)
    data = serialize(_ledger())
    ids = [*range(0, 3000, 10), 2**31 + 1, 2**40]  # spread over short dirs and both long trees
    for ledger_id in ids:
        zk.create(paths.ledger_path(ledger_id, root=zk_root), data, makepath=True)
    opts = ReadOptions(
        ZkSettings(connect=zk_server.connect_string, root=zk_root),
        SnapshotSettings(max_zk_sessions=3, reads_per_second_per_task=200),
    )
    parts = BookKeeperReader(opts).partitions()
    assert 1 <= len(parts) <= 3
    assert sorted(u for p in parts for u in p.units) == sorted({u for p in parts for u in p.units})

    got = [i for p in parts for b in read_units(opts, p.units) for i in b.column("ledger_id").to_pylist()]
    assert sorted(got) == sorted(ids)
    slow = ReadOptions(
        ZkSettings(connect=zk_server.connect_string, root=zk_root),
        SnapshotSettings(max_zk_sessions=1, reads_per_second_per_task=100),
    )
    t0 = time.monotonic()
    assert sum(b.num_rows for b in read_units(slow, [u for p in parts for u in p.units])) == len(ids)
    assert time.monotonic() - t0 >= (len(ids) - 100) / 100 * 0.9  # 302 reads at 100/s, burst 100: ~2 s
