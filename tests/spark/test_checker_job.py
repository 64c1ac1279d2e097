"""The checker job on Spark, no bookie processes: tables, atomicity, idempotency, exit codes, CLI, metrics.

Ledger metadata is written straight into a real ZooKeeper (BookKeeper bytes) and snapshotted by the real
snapshot job. Nothing here needs a bookie to answer: the ledgers are empty, open with one segment, or on
bookie ids nothing listens on and nothing registers: lost bookies, whose copies count missing (as
BookKeeper's Auditor marks a lost bookie's ledgers), and whose open ledger's LAC cannot be read (that segment
is `ledger_unverifiable`, never silence). Ground truth is the metadata each test wrote.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from typing import Any

import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

from bkaudit import config
from bkaudit.formats import records
from bkaudit.model.ledger import DigestType, LedgerMetadata, LedgerState, Segment
from bkaudit.tables.read import read_arrow
from bkaudit.zk import paths
from bkaudit.zk.client import close, connect
from bkaudit.zk.ledgers import create_ledger_metadata, init_cluster
from bkaudit.zk.underreplication import get_marker, mark_underreplicated
from tests.helpers import unique_path
from tests.promtext import value

pytestmark = [pytest.mark.slow]

# nothing listens on these ports: calls fail fast with connection refused. One host each: racks are per host
A, B, C = "127.0.0.2:9", "127.0.0.3:11", "127.0.0.4:13"
LOCATIONS = {A: "/r1", B: "/r1", C: "/r2"}
ONE_RACK, CORRUPT, STALE, UNREACHABLE, EMPTY_OK, OPEN_ONE_SEGMENT = 1, 2, 3, 4, 5, 6


def _md(
    ensemble: tuple[str, ...],
    *,
    state: LedgerState = LedgerState.CLOSED,
    last: int = -1,
    wq: int = 2,
    aq: int = 2,
) -> LedgerMetadata:
    return LedgerMetadata(
        len(ensemble),
        wq,
        aq,
        state,
        last,
        max(last + 1, 0) * 8,
        DigestType.CRC32C,
        b"",
        (Segment(0, ensemble),),
        ctime=1_700_000_000_000,
    )


@pytest.fixture(scope="module")
def world(zk_server, tmp_path_factory) -> dict[str, Any]:
    """A cluster root in ZooKeeper with one ledger per case, snapshotted once."""
    root = unique_path("t", "/ledgers")
    zk = connect(zk_server.connect_string)
    init_cluster(zk, root=root)
    create_ledger_metadata(zk, ONE_RACK, _md((A, B)), root=root)  # both on /r1: placement_fail
    zk.create(paths.ledger_path(CORRUPT, root=root), b"\x08\xff not metadata", makepath=True)
    create_ledger_metadata(zk, STALE, _md((A, C)), root=root)
    mark_underreplicated(zk, STALE, [A], root=root, now_ms=int(time.time() * 1000) - 10 * 3600 * 1000)
    create_ledger_metadata(zk, UNREACHABLE, _md((A, C), last=4), root=root)  # entries on dead bookies
    create_ledger_metadata(zk, EMPTY_OK, _md((A, C)), root=root)
    create_ledger_metadata(zk, OPEN_ONE_SEGMENT, _md((A, C), state=LedgerState.OPEN), root=root)
    close(zk)
    warehouse = str(tmp_path_factory.mktemp("wh"))
    return {"zk": zk_server.connect_string, "root": root, "warehouse": warehouse}


def settings(world: dict[str, Any], **extra: Any) -> config.Settings:
    overrides = {
        "zk.connect": world["zk"],
        "zk.root": world["root"],
        "snapshot.warehouse": world["warehouse"],
        "snapshot.validate": False,
        "checker.retry_delay_s": 0.2,
        "checker.call_timeout_s": 2.0,
        "placement.locations": LOCATIONS,
        **extra,
    }
    return config.load(environ={}, overrides=overrides)


@pytest.fixture(scope="module")
def snapshot_id(spark, world) -> str:
    from bkaudit.spark.snapshot import run_snapshot

    return str(run_snapshot(spark, settings(world), warehouse=world["warehouse"]).snapshot_id)


def check(spark, world, snapshot_id, **opts: Any):
    from bkaudit.spark.checker import CheckOptions, run_check

    extra = opts.pop("settings", {})
    return run_check(
        spark,
        settings(world, **extra),
        CheckOptions(warehouse=world["warehouse"], snapshot_id=snapshot_id, **opts),
    )


def by_category(rows) -> dict[str, set[Any]]:
    out: dict[str, set[Any]] = {}
    for r in rows:
        out.setdefault(r.finding.category.value, set()).add(r.finding.ledger_id)
    return out


def run_rows(warehouse: str, table: str, run_id: str) -> list[dict[str, Any]]:
    data = read_arrow(warehouse, table)
    return data.filter(pc.equal(data.column("run_id"), run_id)).to_pylist()


def test_findings_match_what_was_written(spark, world, snapshot_id):
    result = check(spark, world, snapshot_id)
    assert result.status == "succeeded"
    assert by_category(result.violations) == {
        "placement_fail": {ONE_RACK},
        "metadata_unparseable": {CORRUPT},
        "underreplicated_too_long": {STALE},
        "no_replica": {UNREACHABLE},
        "ledger_unverifiable": {OPEN_ONE_SEGMENT},
    }
    # unreachable AND unregistered through the re-check: lost, as the Auditor sees them; their copies are
    # not copies (no bookie row: the Auditor already knows they are gone)
    lost = next(r for r in result.violations if r.finding.category.value == "no_replica")
    assert lost.finding.detail["cause"] == "lost_bookie" and lost.finding.detail["lost_bookies"] == [A, C]
    assert lost.finding.detail["entries_without_replica"] == 5 and lost.finding.detail["partial"] is False
    # the open ledger's LAC cannot be read from lost bookies: its last segment is unverifiable, not silent
    unverifiable = next(r for r in result.violations if r.finding.category.value == "ledger_unverifiable")
    detail = unverifiable.finding.detail
    assert detail["reason_code"] == "open_segment_unknown" and detail["open_segment"]["first_entry"] == 0
    assert {b["bookie"] for b in detail["bookies"]} == {A, C}
    assert result.counts["bookie_unreachable_but_registered"] == 0
    assert result.ledgers_checked == 6 and result.ledgers_durability_checked == 1
    assert result.exit_code == 3  # metadata_unparseable is critical
    # BookKeeper counts only writable bookies and none is registered: every closed ledger FAILs there
    (placement,) = [r for r in result.violations if r.finding.category.value == "placement_fail"]
    assert placement.bookkeeper_verdict == "FAIL"
    assert result.bookkeeper_placement_only == 3  # STALE, UNREACHABLE, EMPTY_OK (OPEN_ONE_SEGMENT: open)
    stats = {b.bookie_id: b for b in result.bookies}
    assert set(stats) == {A, C} and all(not b.reachable for b in stats.values())
    assert all(b.attempts == 2 for b in stats.values())  # asked again after the delay


def test_tables_written_and_rerun_replaces(spark, world, snapshot_id):
    first = check(spark, world, snapshot_id, run_id="rerun-1")
    again = check(spark, world, snapshot_id, run_id="rerun-1")
    wh = world["warehouse"]
    rows = run_rows(wh, "violations", "rerun-1")
    assert len(rows) == len(again.violations) == len(first.violations) == 5
    assert {r["severity"] for r in rows} == {"critical", "warning"}
    assert all(r["snapshot_id"] == snapshot_id and r["run_date"] == again.run_date for r in rows)
    # quorum columns: what _md wrote (ensemble of 2, WQ 2, AQ 2); none for the unparseable znode
    quorums = {r["ledger_id"]: (r["ensemble_size"], r["write_quorum"], r["ack_quorum"]) for r in rows}
    assert quorums == {
        lid: (None, None, None) if lid == CORRUPT else (2, 2, 2) for lid in {r["ledger_id"] for r in rows}
    }
    runs = run_rows(wh, "audit_runs", "rerun-1")
    assert len(runs) == 1 and runs[0]["status"] == "succeeded"
    assert dict(runs[0]["counts"]) == again.counts
    assert json.loads(runs[0]["config"])["checker"]["retry_delay_s"] == 0.2
    bookies = run_rows(wh, "bookie_checks", "rerun-1")
    assert {b["bookie_id"] for b in bookies} == {A, C}
    assert all(b["errors"] >= 1 and b["calls"] >= 1 and b["latency_ms_p99"] is not None for b in bookies)


def test_failed_run_leaves_no_violations(spark, world, snapshot_id, monkeypatch):
    from bkaudit.spark.checker import CheckFailed
    from bkaudit.tables import store

    real = store.commit

    def flaky(warehouse, table, files, **kw):
        if table == "bookie_checks":
            raise store.CommitError("disk full (injected)")
        return real(warehouse, table, files, **kw)

    monkeypatch.setattr(store, "commit", flaky)
    with pytest.raises(CheckFailed, match="injected"):
        check(spark, world, snapshot_id, run_id="doomed")
    monkeypatch.setattr(store, "commit", real)
    wh = world["warehouse"]
    assert run_rows(wh, "violations", "doomed") == []  # committed, then reverted
    runs = run_rows(wh, "audit_runs", "doomed")
    assert [r["status"] for r in runs] == ["failed"] and "injected" in runs[0]["error"]

    # a failed re-run of a run id that succeeded before leaves that run's rows visible
    check(spark, world, snapshot_id, run_id="kept")
    before = sorted((r["category"], r["ledger_id"]) for r in run_rows(wh, "violations", "kept"))
    monkeypatch.setattr(store, "commit", flaky)
    with pytest.raises(CheckFailed):
        check(spark, world, snapshot_id, run_id="kept")
    monkeypatch.setattr(store, "commit", real)
    assert sorted((r["category"], r["ledger_id"]) for r in run_rows(wh, "violations", "kept")) == before
    assert sorted(r["status"] for r in run_rows(wh, "audit_runs", "kept")) == ["failed", "succeeded"]
    from bkaudit.tables.read import select_run

    assert select_run(wh, "kept")["status"] == "succeeded"


def test_spark_input_path_gives_the_same_findings(spark, world, snapshot_id, monkeypatch):
    from bkaudit.spark import checker_inputs as checker

    arrow = check(spark, world, snapshot_id)
    monkeypatch.setattr(checker, "DRIVER_INPUT_MAX_LEDGERS", 0)  # join ledgers and segments on Spark
    joined = check(spark, world, snapshot_id)

    def key(result):
        rows = [r for r in result.violations
                if r.finding.category.value != "underreplicated_too_long"]  # its age moves
        return sorted((r.finding.category.value, r.finding.ledger_id, r.finding.bookie_id, r.row()["detail"])
                      for r in rows)

    assert key(joined) == key(arrow) and joined.counts == arrow.counts
    assert (joined.ledgers_checked, joined.entries_checked) == (arrow.ledgers_checked, arrow.entries_checked)


def test_progress_disabled_with_zero_grace(spark, world, snapshot_id):
    result = check(spark, world, snapshot_id, settings={"checker.grace_period_s": 0})
    assert "underreplicated_too_long" not in by_category(result.violations)


def test_cli_exit_codes_json_and_violations(spark, world, snapshot_id, tmp_path):
    from bkaudit.cli import cli

    runner = CliRunner()
    base = [
        "check",
        "--zk",
        world["zk"],
        "--root",
        world["root"],
        "--warehouse",
        world["warehouse"],
        "--snapshot-id",
        snapshot_id,
        "--json",
    ]
    env = {
        "BKAUDIT_CHECKER__RETRY_DELAY_S": "0.1",
        "BKAUDIT_CHECKER__CALL_TIMEOUT_S": "2",
        "BKAUDIT_SNAPSHOT__VALIDATE": "false",
    }
    conf = tmp_path / "conf.toml"
    conf.write_text(
        '[placement]\nlocations = { "127.0.0.2:9" = "/r1", "127.0.0.3:11" = "/r1", "127.0.0.4:13" = "/r2" }\n'
    )
    res = runner.invoke(cli, [*base, "--config", str(conf)], env=env)
    assert res.exit_code == 3, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert list(out) == ["run_id", "snapshot_id", "ledgers_checked", "counts", "seconds"]
    assert out["snapshot_id"] == snapshot_id and out["counts"]["metadata_unparseable"] == 1
    assert runner.invoke(cli, [*base, "--config", str(conf), "--fail-on", "never"], env=env).exit_code == 0
    assert runner.invoke(cli, [*base, "--config", str(conf), "--fail-on", "warning"], env=env).exit_code == 3
    # could not run: a snapshot that does not exist
    bad = runner.invoke(cli, [*base[:-3], "--snapshot-id", "nope", "--json", "--config", str(conf)], env=env)
    assert bad.exit_code == 1

    shown = runner.invoke(
        cli,
        [
            "violations",
            "--warehouse",
            world["warehouse"],
            "--run-id",
            out["run_id"],
            "--category",
            "placement_fail",
            "--json",
        ],
    )
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["run_id"] == out["run_id"] and [v["ledger_id"] for v in data["violations"]] == [ONE_RACK]
    human = runner.invoke(cli, ["violations", "--warehouse", world["warehouse"], "--run-id", out["run_id"]])
    assert human.exit_code == 0 and "metadata_unparseable" in human.stdout and "critical" in human.stdout


class _Gateway(http.server.BaseHTTPRequestHandler):
    bodies: list[tuple[str, bytes]] = []

    def do_PUT(self):
        self.bodies.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(202)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_metrics_file_and_push_gateway(spark, world, snapshot_id, tmp_path):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        path = tmp_path / "m" / "checker.prom"
        result = check(
            spark,
            world,
            snapshot_id,
            metrics_file=str(path),
            pushgateway_url=f"http://127.0.0.1:{server.server_address[1]}",
        )
    finally:
        server.shutdown()
    text = path.read_text()
    assert result.counts["placement_fail"] == 1
    assert value(text, "auditor_NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY") == 1
    assert value(text, "auditor_NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD") == 1
    unparseable = {"category": "metadata_unparseable", "severity": "critical"}
    assert value(text, "bkaudit_checker_violations", **unparseable) == 1
    assert value(text, "bkaudit_checker_last_run_success") == 1  # no run_id label: bounded cardinality
    assert result.run_id not in text
    ((where, body),) = _Gateway.bodies
    assert where == "/metrics/job/bkaudit_checker" and body.decode() == text


def test_job_entry_point(spark, world, snapshot_id, capsys, tmp_path):
    from jobs.metadata_checker import main

    conf = tmp_path / "conf.toml"
    conf.write_text(
        '[placement]\nlocations = { "127.0.0.2:9" = "/r1", "127.0.0.3:11" = "/r1", '
        '"127.0.0.4:13" = "/r2" }\n[checker]\nretry_delay_s = 0.1\ncall_timeout_s = 2.0\n'
    )
    code = main(
        [
            "--zk",
            world["zk"],
            "--root",
            world["root"],
            "--warehouse",
            world["warehouse"],
            "--snapshot-id",
            snapshot_id,
            "--fail-on",
            "never",
            "--config",
            str(conf),
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["counts"]["placement_fail"] == 1


def test_publish_placement_marks_with_no_replicas(spark, world, snapshot_id):
    # last in the module: the marker it writes makes later runs report ONE_RACK as under repair
    result = check(spark, world, snapshot_id, publish_underreplicated=True, publish_placement=True)
    zk = connect(world["zk"])
    try:
        marker, _ = get_marker(zk, ONE_RACK, root=world["root"])
        data, _ = zk.get(paths.underreplicated_ledger_path(ONE_RACK, root=world["root"]))
    finally:
        close(zk)
    assert marker.replicas == () and records.parse_underreplicated_marker(data).ctime is not None
    row = next(r for r in result.violations if r.finding.category.value == "placement_fail")
    assert row.published is True
    # the lost bookies' ledger is marked with them as replicas, as the Auditor's bookie check marks it
    assert {(r.finding.category.value, r.finding.ledger_id) for r in result.violations if r.published} == {
        ("placement_fail", ONE_RACK), ("no_replica", UNREACHABLE)}
    zk = connect(world["zk"])
    try:
        lost, _ = get_marker(zk, UNREACHABLE, root=world["root"])
    finally:
        close(zk)
    assert set(lost.replicas) == {A, C}


def test_partition_keys_land_in_distinct_spark_partitions(spark):
    from pyspark.sql import functions as F

    from bkaudit.spark.checker_stages import partition_keys

    for p in (2, 3, 9):
        keys = partition_keys(p)
        df = spark.createDataFrame([(k,) for k in keys], "k int").repartition(p, "k")
        placed = {r.k: r.pid for r in df.select("k", F.spark_partition_id().alias("pid")).collect()}
        assert [placed[k] for k in keys] == list(range(p))  # key k goes to partition k


def test_cluster_without_entries_to_verify(spark, zk_server, tmp_path):
    """No (ledger, bookie) has anything to hold: no listing or read request at all, a complete run. The open
    ledger's LAC is asked of its bookies, as checkAllLedgers opens it; nothing answers, so its last segment
    is the one row."""
    from bkaudit.spark.snapshot import run_snapshot

    root = unique_path("t", "/ledgers")
    zk = connect(zk_server.connect_string)
    init_cluster(zk, root=root)
    create_ledger_metadata(zk, 1, _md((A, C)), root=root)  # closed and empty
    create_ledger_metadata(zk, 2, _md((A, C), state=LedgerState.OPEN), root=root)  # one open segment
    close(zk)
    empty = {"zk": zk_server.connect_string, "root": root, "warehouse": str(tmp_path / "wh")}
    sid = str(run_snapshot(spark, settings(empty), warehouse=empty["warehouse"]).snapshot_id)
    result = check(spark, empty, sid)
    assert result.status == "succeeded" and result.bookies == []
    assert [(v.finding.category.value, v.finding.ledger_id, v.finding.detail["reason_code"])
            for v in result.violations] == [
        ("ledger_unverifiable", 2, "open_segment_unknown")]
    assert result.ledgers_checked == 2 and result.ledgers_durability_checked == 0 and result.exit_code == 0


def _proto_int64_field1(data: bytes) -> int:
    """DataFormats' Check*Format{int64 *CTime = 1} decoded by hand (tag 0x08, then a varint)."""
    assert data[0] == 0x08
    value, shift = 0, 0
    for byte in data[1:]:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value
    raise AssertionError("truncated varint")


def test_only_a_run_covering_the_auditors_checks_stamps_their_times(spark, world, snapshot_id, zk_server,
                                                                    tmp_path):
    """A Java Auditor elected later delays each check by its interval minus the time since the stamp
    (Auditor.java), a week for checkAllLedgers: a run stamps only the checks it covered (issue 30 item 4).
    Here CORRUPT does not decode (every Java task fails on it and stamps nothing): no stamp at all. Without
    it, OPEN_ONE_SEGMENT's last segment cannot be checked (its LAC is not readable) and it is unverifiable:
    not checkAllLedgers, not replicasCheck; every ledger's placement was judged: placementPolicyCheck. With
    closed ledgers only, one on lost bookies (their copies counted missing): all three."""
    from bkaudit.spark.snapshot import run_snapshot

    result = check(spark, world, snapshot_id, run_id="ctimes")
    assert result.status == "succeeded" and result.check_stamps == ()
    zk = connect(world["zk"])
    try:
        for node in ("checkallledgersctime", "placementpolicycheckctime", "replicascheckctime"):
            assert zk.exists(f"{world['root']}/underreplication/{node}") is None, node
    finally:
        close(zk)

    def fresh_root(*ledgers: tuple[int, LedgerMetadata]) -> tuple[dict[str, Any], str]:
        root = unique_path("t", "/ledgers")
        zk = connect(zk_server.connect_string)
        init_cluster(zk, root=root)
        for lid, md in ledgers:
            create_ledger_metadata(zk, lid, md, root=root)
        close(zk)
        where = {"zk": zk_server.connect_string, "root": root, "warehouse": str(tmp_path / root.strip("/"))}
        return where, str(run_snapshot(spark, settings(where), warehouse=where["warehouse"]).snapshot_id)

    for ledgers, want in (
        (((1, _md((A, C))), (2, _md((A, C), last=4)), (3, _md((A, C), state=LedgerState.OPEN))),
         ("placementpolicycheck",)),
        (((1, _md((A, C))), (2, _md((A, C), last=4))),
         ("checkallledgers", "placementpolicycheck", "replicascheck")),
    ):
        where, sid = fresh_root(*ledgers)
        before = int(time.time() * 1000)
        result = check(spark, where, sid)
        after = int(time.time() * 1000)
        assert by_category(result.violations).get("no_replica") == {2}
        assert result.check_stamps == want
        zk = connect(zk_server.connect_string)
        try:
            for node in ("checkallledgersctime", "placementpolicycheckctime", "replicascheckctime"):
                path = f"{where['root']}/underreplication/{node}"
                if node.removesuffix("ctime") in want:
                    data, _ = zk.get(path)
                    assert before <= _proto_int64_field1(data) <= after, node
                else:
                    assert zk.exists(path) is None, node
        finally:
            close(zk)
