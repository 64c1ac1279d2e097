"""The snapshot job end to end: hand-crafted znodes in a real ZooKeeper → Delta tables → Spark reads.

Ground truth is what each test wrote into ZooKeeper (BookKeeper's bytes via `serialize` and kazoo), never
what the job itself computes. One cluster is built per module (a non-default root in a hierarchical
cluster) and snapshotted once; the other tests re-run, break or vary that setup.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bkaudit.formats.ledger_metadata import serialize
from bkaudit.formats.records import (
    BookieRackInfo,
    Cookie,
    bookie_service_info_for,
    encode_bookie_service_info,
    encode_rack_config,
)
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.zk import paths, registry, underreplication
from bkaudit.zk.ledgers import init_cluster
from tests.helpers import unique_path

pytestmark = [pytest.mark.slow]

B1, B2, B3, B4, GONE = "10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181", "10.0.0.4:3181", "10.9.9.9:3181"
LONG_ID = 2**31 + 7  # >= Integer.MAX_VALUE: the long path in a hierarchical cluster
MARK_MS = 1_795_000_000_000
CORRUPT = b"BookieMetadataFormatVersion\t3\n\x05garbage-that-is-not-protobuf"


def _md(
    state: LedgerState,
    segments: list[tuple[int, tuple[str, ...]]],
    *,
    last: int = -1,
    length: int = 0,
    e: int = 3,
    wq: int = 2,
    aq: int = 2,
    ctime: int | None = None,
    custom: dict[str, bytes] | None = None,
    digest: DigestType = DigestType.CRC32C,
) -> LedgerMetadata:
    return LedgerMetadata(
        e,
        wq,
        aq,
        state,
        last,
        length,
        digest,
        b"secret",
        tuple(Segment(f, ens) for f, ens in segments),
        ctime=ctime,
        custom_metadata=custom or {},
    )


# id -> (metadata, format version) of the parseable ledgers the cluster holds
LEDGERS: dict[int, tuple[LedgerMetadata, int]] = {
    1: (
        _md(
            LedgerState.CLOSED,
            [(0, (B1, B2, B3)), (10, (B1, B2, B4))],
            last=19,
            length=2048,
            ctime=MARK_MS,
            custom={
                "application": b"pulsar",
                "component": b"managed-ledger",
                "pulsar/managed-ledger": b"public/default/persistent/orders",
            },
        ),
        3,
    ),
    2: (_md(LedgerState.OPEN, [(0, (B1, B2, GONE))], custom={"blob": b"\xff\x00\xfe"}), 3),
    3: (_md(LedgerState.IN_RECOVERY, [(0, (B1, B2, B3))], e=3, wq=3, aq=2), 3),
    4: (
        _md(
            LedgerState.CLOSED,
            [(0, (B1, B2)), (5, (B1, B3))],
            last=4,
            length=100,
            e=2,
            wq=2,
            aq=1,
            digest=DigestType.CRC32,
        ),
        2,
    ),  # v2 text format; the last segment is empty (last < first)
    LONG_ID: (_md(LedgerState.CLOSED, [(0, (B2, B3, B4))], last=-1, length=0), 3),
}
CORRUPT_ID = 9
DELETED_ID = 11  # created and deleted before the snapshot: must be absent


@pytest.fixture(scope="module")
def cluster(zk_server: Any) -> Iterator[dict[str, Any]]:
    """A hierarchical cluster under a non-default root, with everything the snapshot must capture."""
    from bkaudit.zk.client import close, connect

    root = unique_path("t", "/pulsar/ledgers")
    zk = connect(zk_server.connect_string)
    try:
        init_cluster(zk, root=root)
        stats = {}
        for ledger_id, (md, version) in LEDGERS.items():
            path = paths.ledger_path(ledger_id, root=root)
            zk.create(path, serialize(md, version=version), makepath=True)
            stats[ledger_id] = zk.exists(path)
        corrupt_path = paths.ledger_path(CORRUPT_ID, root=root)
        zk.create(corrupt_path, CORRUPT, makepath=True)
        stats[CORRUPT_ID] = zk.exists(corrupt_path)
        zk.create(paths.ledger_path(DELETED_ID, root=root), serialize(LEDGERS[3][0]), makepath=True)
        zk.delete(paths.ledger_path(DELETED_ID, root=root))
        # bookies: writable (registration data), read-only (legacy empty data), cookie-only, unknown (GONE)
        registry.register(
            zk,
            B1,
            encode_bookie_service_info(
                bookie_service_info_for(B1, "10.0.0.1", 3181, properties={"zone": "a"})
            ),
            root=root,
        )
        registry.register(zk, B2, b"", readonly=True, root=root)
        for bookie in (B1, B2, B3):
            registry.create_cookie(zk, Cookie(bookie, ("/j",), ("/l",), None), root=root)
        registry.register(zk, B4, b"", root=root)  # writable without a cookie
        # under-replication: 1 locked by a worker, 3 unlocked, 4 locked anonymously
        underreplication.mark_underreplicated(zk, 1, [B3], root=root, now_ms=MARK_MS)
        underreplication.mark_underreplicated(zk, 3, [B2, B3], root=root, now_ms=MARK_MS + 1)
        underreplication.mark_underreplicated(zk, 4, [B2], root=root, now_ms=MARK_MS + 2)
        assert underreplication.acquire_lock(zk, 1, root=root, holder="worker-1") is not None
        assert underreplication.acquire_lock(zk, 4, root=root, holder=None) is not None
        # racks (Pulsar's /bookies, at the ZooKeeper root: removed again at the end)
        racks = {
            "default": {
                B1: BookieRackInfo("/region-a/rack-1", "bk1.example.com"),
                B2: BookieRackInfo("/rack-2"),
            }
        }
        zk.create(paths.RACKS_PATH, encode_rack_config(racks), makepath=True)
        yield {"zk": zk, "root": root, "connect": zk_server.connect_string, "stats": stats}
    finally:
        try:
            zk.delete(paths.RACKS_PATH)
        except Exception:
            pass
        close(zk)


def settings_for(connect: str, root: str, warehouse: Path, **snapshot: Any) -> Any:
    from bkaudit import config

    overrides = {
        "zk.connect": connect,
        "zk.root": root,
        "snapshot.warehouse": str(warehouse),
        "snapshot.max_zk_sessions": 2,
    }
    overrides.update({f"snapshot.{k}": v for k, v in snapshot.items()})
    return config.load(environ={}, overrides=overrides)


@pytest.fixture(scope="module")
def snapshot(spark: Any, cluster: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from bkaudit.spark.snapshot import run_snapshot

    warehouse = tmp_path_factory.mktemp("warehouse")
    result = run_snapshot(
        spark, settings_for(cluster["connect"], cluster["root"], warehouse), snapshot_id="snap-1"
    )
    return {"warehouse": warehouse, "result": result, **cluster}


def _rows(warehouse: Path, table: str, snapshot_id: str = "snap-1") -> list[dict[str, Any]]:
    from bkaudit import tables

    if not tables.table_exists(str(warehouse), table):
        return []
    return tables.read_arrow(str(warehouse), table, snapshot_id=snapshot_id).to_pylist()


def _micros(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def test_ledgers_table_equals_what_was_written(snapshot: dict[str, Any]) -> None:
    rows = {r["ledger_id"]: r for r in _rows(snapshot["warehouse"], "ledgers")}
    assert set(rows) == {*LEDGERS, CORRUPT_ID}  # DELETED_ID absent
    for ledger_id, (md, _) in LEDGERS.items():
        row, stat = rows[ledger_id], snapshot["stats"][ledger_id]
        expected_custom = [
            (k, v.decode() if k != "blob" else "base64:" + base64.b64encode(v).decode())
            for k, v in md.custom_metadata.items()
        ]
        assert row == {
            "snapshot_id": "snap-1",
            "snapshot_date": snapshot["result"].snapshot_date,
            "ledger_id": ledger_id,
            "state": md.state.name,
            "ensemble_size": md.ensemble_size,
            "write_quorum": md.write_quorum,
            "ack_quorum": md.ack_quorum,
            "last_entry_id": md.last_entry_id if md.is_closed else -1,
            "length": md.length if md.is_closed else 0,
            "digest_type": md.digest_type.name,
            "ctime": _micros(md.ctime if md.ctime is not None else stat.ctime),
            "custom_metadata": expected_custom or [],
            "managed_ledger": md.custom_metadata.get("pulsar/managed-ledger", b"").decode() or None,
            "segment_count": len(md.segments),
            "znode_version": stat.version,
            "znode_mzxid": stat.mzxid,
            "znode_ctime": _micros(stat.ctime),
            "parse_error": None,
            "raw_metadata": None,
        }, ledger_id


def test_corrupt_znode_is_a_row_with_its_raw_bytes(snapshot: dict[str, Any]) -> None:
    row = next(r for r in _rows(snapshot["warehouse"], "ledgers") if r["ledger_id"] == CORRUPT_ID)
    assert row["parse_error"] and row["parse_error"].startswith("FormatError")
    assert base64.b64decode(row["raw_metadata"]) == CORRUPT
    assert row["state"] is None and row["segment_count"] is None and row["custom_metadata"] is None
    assert row["znode_version"] == snapshot["stats"][CORRUPT_ID].version
    assert snapshot["result"].unparseable == 1


def test_segments_table(snapshot: dict[str, Any]) -> None:
    got = sorted(
        (r["ledger_id"], r["segment_index"], r["first_entry_id"], r["last_entry_id"], tuple(r["ensemble"]))
        for r in _rows(snapshot["warehouse"], "ledger_segments")
    )
    expected = []
    for ledger_id, (md, _) in LEDGERS.items():
        for i, seg in enumerate(md.segments):
            if i + 1 < len(md.segments):
                last = md.segments[i + 1].first_entry_id - 1
            else:
                last = md.last_entry_id if md.is_closed else None
            expected.append((ledger_id, i, seg.first_entry_id, last, seg.ensemble))
    assert got == sorted(expected)
    assert (4, 1, 5, 4, (B1, B3)) in got  # closed ledger's empty last segment keeps last < first


def test_data_source_reads_what_was_written(spark: Any, cluster: dict[str, Any]) -> None:
    """`spark.read.format("bookkeeper")` (docs/config.md): the job stages through the same reader without
    Spark's rows, so the public data source is tested on its own, against what the cluster holds."""
    rows = {
        r["ledger_id"]: r
        for r in spark.read.format("bookkeeper")
        .option("zk", cluster["connect"])
        .option("root", cluster["root"])
        .option("max_zk_sessions", "2")
        .load()
        .collect()
    }
    assert set(rows) == {*LEDGERS, CORRUPT_ID}  # DELETED_ID absent
    for ledger_id, (md, _) in LEDGERS.items():
        row, stat = rows[ledger_id], cluster["stats"][ledger_id]
        assert (row["state"], row["ensemble_size"], row["write_quorum"], row["ack_quorum"]) == (
            md.state.name,
            md.ensemble_size,
            md.write_quorum,
            md.ack_quorum,
        ), ledger_id
        assert (row["znode_version"], row["znode_mzxid"]) == (stat.version, stat.mzxid)
        assert [(s["first_entry_id"], tuple(s["ensemble"])) for s in row["segments"]] == [
            (seg.first_entry_id, seg.ensemble) for seg in md.segments
        ]
    assert rows[CORRUPT_ID]["parse_error"] and base64.b64decode(rows[CORRUPT_ID]["raw_metadata"]) == CORRUPT


def test_bookies_table(snapshot: dict[str, Any]) -> None:
    rows = {r["bookie_id"]: r for r in _rows(snapshot["warehouse"], "bookies")}
    assert {b: (r["state"], r["has_cookie"]) for b, r in rows.items()} == {
        B1: ("writable", True),
        B2: ("readonly", True),
        B3: ("unavailable", True),
        B4: ("writable", False),
        GONE: ("unknown", False),
    }
    b1 = rows[B1]
    assert (b1["location"], b1["rack"], b1["region"], b1["zone"], b1["hostname"]) == (
        "/region-a/rack-1",
        "rack-1",
        "region-a",
        "region-a",
        "bk1.example.com",
    )
    assert b1["endpoints"] == [
        {
            "id": "bookie",
            "host": "10.0.0.1",
            "port": 3181,
            "protocol": "bookie-rpc",
            "auth": [],
            "extensions": [],
        }
    ]
    assert b1["properties"] == [("zone", "a")]
    b2 = rows[B2]
    assert (b2["location"], b2["rack"], b2["region"], b2["zone"]) == ("/rack-2", "rack-2", None, None)
    assert b2["endpoints"][0]["host"] == "10.0.0.2"  # legacy empty registration: endpoint from the id
    assert rows[B3]["location"] is None and rows[B3]["endpoints"] is None


def test_underreplicated_table(snapshot: dict[str, Any]) -> None:
    rows = {r["ledger_id"]: r for r in _rows(snapshot["warehouse"], "underreplicated_ledgers")}
    assert {
        i: (r["missing_replicas"], r["marked_at"], r["locked_by"], r["parse_error"]) for i, r in rows.items()
    } == {
        1: ([B3], _micros(MARK_MS), "worker-1", None),
        3: ([B2, B3], _micros(MARK_MS + 1), None, None),
        4: ([B2], _micros(MARK_MS + 2), "", None),
    }


def test_snapshots_row_and_json_summary(snapshot: dict[str, Any]) -> None:
    result = snapshot["result"]
    assert result.summary() == {
        "snapshot_id": "snap-1",
        "ledgers": len(LEDGERS) + 1,
        "unparseable": 1,
        "bookies": 5,
        "underreplicated": 3,
        "seconds": round(result.seconds, 3),
    }
    (row,) = _rows(snapshot["warehouse"], "snapshots")
    assert (row["status"], row["error"], row["root"], row["zk"]) == (
        "succeeded",
        None,
        snapshot["root"],
        snapshot["connect"],
    )
    assert (row["ledgers"], row["unparseable"], row["segments"], row["bookies"], row["underreplicated"]) == (
        6,
        1,
        7,
        5,
        3,
    )
    assert dict(row["table_versions"]).keys() == {
        "ledgers",
        "ledger_segments",
        "bookies",
        "underreplicated_ledgers",
        "validation_results",
    }
    assert row["started_at"] <= row["finished_at"]


def test_validation_results_report_the_unknown_bookie(snapshot: dict[str, Any]) -> None:
    rows = {r["expectation"]: r for r in _rows(snapshot["warehouse"], "validation_results")}
    assert len(rows) == 9
    assert all(r["success"] for k, r in rows.items() if r["severity"] == "critical")
    unknown = rows["ensemble_bookies_known"]
    assert (unknown["success"], unknown["severity"], unknown["partial_unexpected"]) == (
        False,
        "warning",
        [GONE],
    )


def test_spark_reads_the_tables_back(spark: Any, snapshot: dict[str, Any]) -> None:
    from pyspark.testing import assertDataFrameEqual

    from bkaudit import tables

    wh = str(snapshot["warehouse"])
    assert tables.latest_snapshot_id(wh) == "snap-1"
    for table in (
        "ledgers",
        "ledger_segments",
        "bookies",
        "underreplicated_ledgers",
        "validation_results",
        "snapshots",
    ):
        df = tables.load(spark, wh, table)  # the latest successful snapshot
        expected = spark.createDataFrame(tables.read_arrow(wh, table, snapshot_id="snap-1"))
        assertDataFrameEqual(df, expected)
    ledgers = tables.load(spark, wh, "ledgers", snapshot_id="snap-1")
    assert ledgers.where("managed_ledger = 'public/default/persistent/orders'").count() == 1
    assert ledgers.where("parse_error is not null").count() == 1


def test_rerun_same_snapshot_id_replaces_its_rows(spark: Any, snapshot: dict[str, Any]) -> None:
    from bkaudit import tables
    from bkaudit.spark.snapshot import run_snapshot

    wh = snapshot["warehouse"]
    settings = settings_for(snapshot["connect"], snapshot["root"], wh)
    before = {t: len(_rows(wh, t)) for t in ("ledgers", "ledger_segments", "bookies", "snapshots")}
    again = run_snapshot(spark, settings, snapshot_id="snap-1")
    assert again.ledgers == snapshot["result"].ledgers
    assert {t: len(_rows(wh, t)) for t in before} == before
    assert tables.load(spark, str(wh), "ledgers").count() == before["ledgers"]


def test_run_killed_before_commit_leaves_nothing(spark: Any, snapshot: dict[str, Any]) -> None:
    from bkaudit import tables
    from bkaudit.spark.snapshot import Hooks, SnapshotFailed, run_snapshot

    wh = snapshot["warehouse"]
    settings = settings_for(snapshot["connect"], snapshot["root"], wh)
    files_before = {p for p in wh.rglob("*.parquet")}

    def crash() -> None:
        staged = {p for p in wh.rglob("*.parquet")} - files_before
        assert staged, "the Parquet files are written before the commit"
        raise RuntimeError("killed between the Parquet writes and the commit")

    with pytest.raises(SnapshotFailed, match="killed between"):
        run_snapshot(spark, settings, snapshot_id="snap-killed", hooks=Hooks(before_commit=crash))
    for table in ("ledgers", "ledger_segments", "bookies", "underreplicated_ledgers", "validation_results"):
        assert _rows(wh, table, "snap-killed") == [], table
    (row,) = _rows(wh, "snapshots", "snap-killed")
    assert row["status"] == "failed" and "killed between" in row["error"]
    assert {p for p in wh.rglob("*.parquet")} - files_before <= {
        p for p in wh.rglob("*.parquet") if "snapshots" in p.parts
    }  # staged files were deleted
    assert tables.latest_snapshot_id(str(wh)) == "snap-1"


def test_cli_snapshot_json(spark: Any, snapshot: dict[str, Any], tmp_path: Path) -> None:
    from bkaudit.cli import cli

    result = CliRunner().invoke(
        cli,
        [
            "snapshot",
            "--zk",
            snapshot["connect"],
            "--root",
            snapshot["root"],
            "--warehouse",
            str(tmp_path),
            "--snapshot-id",
            "cli-1",
            "--json",
        ],
        env={"BKAUDIT_CONF": ""},
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert list(summary) == ["snapshot_id", "ledgers", "unparseable", "bookies", "underreplicated", "seconds"]
    assert (summary["snapshot_id"], summary["ledgers"], summary["unparseable"]) == ("cli-1", 6, 1)


def test_cli_bad_snapshot_id_is_one_line_and_a_usage_error(
    spark: Any, snapshot: dict[str, Any], tmp_path: Path
) -> None:
    from bkaudit.cli import cli

    result = CliRunner().invoke(
        cli,
        [
            "snapshot",
            "--zk",
            snapshot["connect"],
            "--root",
            snapshot["root"],
            "--warehouse",
            str(tmp_path),
            "--snapshot-id",
            "bad id!",
        ],
        env={"BKAUDIT_CONF": ""},
    )
    assert result.exit_code == 2  # a bad argument value: usage (docs/cli.md exit-code table)
    assert result.output.strip().count("\n") == 0 and "snapshot id" in result.output


def test_longhierarchical_layout_root(spark: Any, zk: Any, tmp_path: Path, zk_server: Any) -> None:
    from bkaudit.spark.snapshot import run_snapshot

    root = unique_path("t", "/ledgers")
    init_cluster(zk, root=root, layout="longhierarchical")
    md = LEDGERS[1][0]
    written = {5: md, 2**40 + 3: md.evolve(state=LedgerState.OPEN), 10**18: md}
    for ledger_id, meta in written.items():
        path = paths.ledger_path(ledger_id, root=root, layout="longhierarchical")
        assert path.count("/") - root.count("/") == 5
        zk.create(path, serialize(meta), makepath=True)
    result = run_snapshot(spark, settings_for(zk_server.connect_string, root, tmp_path), snapshot_id="long-1")
    rows = {r["ledger_id"]: r["state"] for r in _rows(tmp_path, "ledgers", "long-1")}
    assert rows == {i: m.state.name for i, m in written.items()}
    assert (result.ledgers, result.unparseable, result.bookies) == (3, 0, 4)  # ensemble bookies, all unknown


def test_duplicate_ledger_id_is_a_critical_breach(
    spark: Any, zk: Any, tmp_path: Path, zk_server: Any
) -> None:
    """Ledger 5 under the short and the long path: BookKeeper never writes that; validation catches it."""
    from bkaudit import tables
    from bkaudit.spark.snapshot import SnapshotFailed, run_snapshot

    root = unique_path("t", "/ledgers")
    init_cluster(zk, root=root)
    data = serialize(LEDGERS[1][0])
    zk.create(paths.ledger_path(5, root=root), data, makepath=True)
    zk.create(paths.ledger_path(5, root=root, layout="longhierarchical"), data, makepath=True)
    settings = settings_for(zk_server.connect_string, root, tmp_path)
    with pytest.raises(SnapshotFailed, match="ledger_id_unique"):
        run_snapshot(spark, settings, snapshot_id="dup-1")
    assert _rows(tmp_path, "ledgers", "dup-1") == []
    (failed,) = _rows(tmp_path, "snapshots", "dup-1")
    assert failed["status"] == "failed" and "ledger_id_unique" in failed["error"]
    results = {r["expectation"]: r for r in _rows(tmp_path, "validation_results", "dup-1")}
    assert results["ledger_id_unique"]["success"] is False
    assert results["ledger_id_unique"]["partial_unexpected"] == ["5", "5"]
    assert tables.latest_snapshot_id(str(tmp_path)) is None

    lenient = settings_for(zk_server.connect_string, root, tmp_path, fail_on_critical_validation=False)
    result = run_snapshot(spark, lenient, snapshot_id="dup-1")
    assert (result.status, result.ledgers, result.validation_failures) == ("succeeded", 2, 2)
    statuses = sorted(r["status"] for r in _rows(tmp_path, "snapshots", "dup-1"))
    assert statuses == ["succeeded"]  # the successful re-run replaced the failed row


@pytest.mark.parametrize("multi_read", [True, False])
def test_ledger_deleted_between_listing_and_reading_is_absent(
    zk: Any, zk_root: str, zk_server: Any, monkeypatch: Any, multi_read: bool
) -> None:
    """Deterministic mid-listing deletion: the listing has seen ledger 2, then it is deleted, then read."""
    from bkaudit.spark.datasource import ReadOptions, read_units
    from bkaudit.zk import ledgers

    init_cluster(zk, root=zk_root)
    data = serialize(LEDGERS[1][0])
    for ledger_id in (1, 2, 3):
        zk.create(paths.ledger_path(ledger_id, root=zk_root), data, makepath=True)
    listing = ledgers.iter_ledger_dirs  # what both read paths list with

    def listing_then_delete(client: Any, root: str, units: Any, *rest: Any) -> Iterator[Any]:
        for ids, znodes in listing(client, root, units, *rest):
            assert 2 in ids  # listed (getChildren saw it), deleted before the reader asks for it
            zk.delete(znodes[ids.index(2)])
            yield ids, znodes

    monkeypatch.setattr(ledgers, "iter_ledger_dirs", listing_then_delete)
    opts = ReadOptions.parse(
        {
            "zk": zk_server.connect_string,
            "root": zk_root,
            "reads_per_second_per_task": "0",
            "multi_read": str(multi_read).lower(),
        }
    )
    assert opts.multi_read is multi_read
    batches = list(read_units(opts, ["00"]))
    ids = [i for b in batches for i in b.column("ledger_id").to_pylist()]
    assert ids == [1, 3]
