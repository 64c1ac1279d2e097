"""The HTML audit report: sections present, self-contained, every number equal to the tables' own counts.

Two sources: a real checker run (a local cluster with a wiped bookie, checked by the Spark job) whose
numbers are compared with Spark counts of `violations`; and tables written through the real store for the
parts a small cluster does not produce (Pulsar topics, several runs for the trend, under-repair rows).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import bkaudit.tables.checker_schemas as cs
from bkaudit.report.builder import SECTIONS, write_report
from bkaudit.tables.read import read_arrow
from bkaudit.tables.store import open_delta, write_table

TOPIC = "public/default/persistent/orders"


class ReportParser(HTMLParser):
    """Sections, cards and tables of a report page: tables[id][row key][column] = data-value or text."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.cards: dict[str, str] = {}
        self.tables: dict[str, dict[str, dict[str, str]]] = {}
        self.tags: Counter[str] = Counter()
        self.refs: list[str] = []
        self._table: str | None = None
        self._row: str | None = None
        self._cell: tuple[str, str | None] | None = None
        self._text: list[str] = []
        self._card: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags[tag] += 1
        self.refs += [v for k, v in attrs if k in ("src", "href", "xlink:href") and v]
        if tag == "section" and a.get("id"):
            self.sections.append(str(a["id"]))
        elif tag == "table" and a.get("id"):
            self._table = str(a["id"])
            self.tables[self._table] = {}
        elif tag == "tr" and self._table and "data-key" in a:
            self._row = str(a["data-key"])
            self.tables[self._table][self._row] = {}
        elif tag == "td" and self._row is not None and a.get("data-col"):
            self._cell = (str(a["data-col"]), a.get("data-value"))
            self._text = []
        elif tag == "div" and a.get("class") == "card":
            self._card = a.get("data-key")
        elif tag == "div" and a.get("class") == "value" and self._card:
            self.cards[self._card] = a.get("data-value") or ""

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._table and self._row is not None:
            col, value = self._cell
            self.tables[self._table][self._row][col] = value if value is not None else "".join(self._text)
            self._cell = None
        elif tag == "tr":
            self._row = None
        elif tag == "table":
            self._table = None


def parse(path: Path) -> ReportParser:
    text = path.read_text(encoding="utf-8")
    parser = ReportParser()
    parser.feed(text)
    assert "<script" not in text and "<link" not in text and "@import" not in text
    assert re.findall(r"url\((?!#)", text) == []  # only in-page references (SVG clip paths)
    assert all(ref.startswith("#") for ref in parser.refs), [r for r in parser.refs if not r.startswith("#")]
    assert parser.tags["svg"] >= 1  # the category chart, inline
    assert parser.sections == [sid for sid, _ in SECTIONS]
    return parser


def num(value: str) -> int:
    return int(value) if value not in ("", None) else 0


def assert_matches_rows(page: ReportParser, rows: list[dict[str, Any]]) -> None:
    """Per category, severity and bookie numbers against the violation rows of the run."""
    by_cat = Counter(r["category"] for r in rows)
    new = Counter(r["category"] for r in rows if not r["under_repair"])
    ledgers: dict[str, set[int]] = defaultdict(set)
    for r in rows:
        if r["ledger_id"] is not None:
            ledgers[r["category"]].add(r["ledger_id"])
    table = page.tables["by-category"]
    for category, cells in table.items():
        assert num(cells["rows"]) == by_cat.get(category, 0), category
        assert num(cells["new"]) == new.get(category, 0), category
        assert num(cells["ledgers"]) == len(ledgers[category]), category
    assert set(by_cat) <= set(table)
    sev = Counter(r["severity"] for r in rows)
    assert {k: num(v["rows"]) for k, v in page.tables["by-severity"].items() if num(v["rows"])} == dict(sev)
    assert num(page.cards["violations"]) == len(rows)
    named = Counter(r["bookie_id"] for r in rows if r["bookie_id"])
    missing: dict[str, set[int]] = defaultdict(set)
    for r in rows:
        if r["category"] in ("no_replica", "below_ack_quorum", "below_write_quorum"):
            for b in json.loads(r["detail"] or "{}").get("bookies_missing_entries") or ():
                missing[b].add(r["ledger_id"])
    for bookie, cells in page.tables["by-bookie"].items():
        assert num(cells["violations"]) == named.get(bookie, 0), bookie
        assert num(cells["ledgers_missing_entries"]) == len(missing.get(bookie, ())), bookie
    assert set(named) | set(missing) <= set(page.tables["by-bookie"])


# -- a real run ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_report_of_a_real_checker_run(spark: Any, cluster_factory: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    from bkaudit import config, tables
    from bkaudit.client import BookKeeper
    from bkaudit.spark.checker import CheckOptions, run_check
    from bkaudit.spark.snapshot import run_snapshot

    cluster = cluster_factory(bookies=4, racks=2)
    in_ensembles: set[str] = set()  # ground truth for bookies_checked: every bookie a ledger names
    with BookKeeper.connect(cluster.zk_settings()) as bk:
        for i in range(12):
            custom = {"pulsar/managed-ledger": TOPIC} if i % 2 else None
            handle = bk.create_ledger(3, 2, 2, custom_metadata=custom)
            for _ in range(5 + i):
                handle.add_entry(b"entry")
            handle.close()
            in_ensembles.update(b for seg in handle.metadata.segments for b in seg.ensemble)
    victim = cluster.ids()[0]
    cluster.stop_bookie(victim)
    cluster.wipe_bookie(victim)
    cluster.format_bookie(victim)
    cluster.start_bookie(victim)

    warehouse = str(tmp_path / "warehouse")
    settings = config.load(overrides={"zk.connect": cluster.zk, "snapshot.warehouse": warehouse,
                                      "checker.retry_delay_s": 0.2})
    snap = run_snapshot(spark, settings, warehouse=warehouse, snapshot_id="report-test")
    result = run_check(spark, settings, CheckOptions(warehouse=warehouse, snapshot_id=snap.snapshot_id,
                                                     run_id="report-run", fail_on="never"))
    assert sum(result.counts.values()) > 0  # the wiped bookie left ledgers below their write quorum
    run_row = read_arrow(warehouse, "audit_runs").to_pylist()
    assert [r["bookies_checked"] for r in run_row] == [len(in_ensembles)] and len(in_ensembles) >= 3

    path = write_report(warehouse, tmp_path / "report")
    page = parse(path)
    df = tables.load(spark, warehouse, "violations", latest=False).where(F.col("run_id") == "report-run")
    spark_counts = {r["category"]: r["count"] for r in df.groupBy("category").count().collect()}
    page_counts = {k: num(v["rows"]) for k, v in page.tables["by-category"].items() if num(v["rows"])}
    assert page_counts == spark_counts
    rows = df.toArrow().to_pylist()
    assert_matches_rows(page, rows)
    assert num(page.cards["ledgers_in_snapshot"]) == 12
    assert num(page.cards["ledgers_checked"]) == result.ledgers_checked
    assert num(page.cards["bookies_checked"]) == len(in_ensembles)
    history = page.tables["violations-history"]
    marked = [v for v, cells in history.items() if cells["this"] == "this run"]
    assert marked == [str(open_delta(f"{warehouse}/violations").version())]  # nothing committed after
    worst = page.tables["worst"]
    with_ranges = {r["ledger_id"]: r for r in rows if r["missing_entries"]}
    assert worst and set(map(int, worst)) <= set(with_ranges)
    for key, cells in worst.items():
        ranges = with_ranges[int(key)]["missing_entries"]
        assert num(cells["missing_entries"]) == sum(x["last"] - x["first"] + 1 for x in ranges)
    topic_rows = [r for r in rows if r["managed_ledger"] == TOPIC]
    if topic_rows:
        assert num(page.tables["by-managed-ledger"][TOPIC]["rows"]) == len(topic_rows)


# -- tables written through the store --------------------------------------------------------------------
def _run(warehouse: str, run_id: str, start: datetime, rows: list[dict[str, Any]],
         checks: list[dict[str, Any]] | None = None) -> None:
    date, sid = start.strftime("%Y-%m-%d"), f"snap-{run_id}"
    keys = {"run_id": run_id, "snapshot_id": sid, "run_date": date}
    v = pa.Table.from_pylist([{**keys, "detected_at": start, **r} for r in rows], schema=cs.VIOLATIONS.schema)
    same = {"snapshot_id": sid, "snapshot_date": date, "replace": {"run_id": run_id}}
    write_table(warehouse, "violations", v, **same)
    b = pa.Table.from_pylist([{**keys, **c} for c in checks or []], schema=cs.BOOKIE_CHECKS.schema)
    write_table(warehouse, "bookie_checks", b, **same)
    counts = Counter(r["category"] for r in rows if not r.get("under_repair"))
    run = {**keys, "status": "succeeded", "started_at": start, "finished_at": start + timedelta(seconds=9),
           "seconds": 9.0, "ledgers_checked": 40, "counts": list(counts.items()), "published": 0}
    a = pa.Table.from_pylist([run], schema=cs.AUDIT_RUNS.schema)
    write_table(warehouse, "audit_runs", a, **same)


def _v(ledger: int | None, category: str, severity: str, **kw: Any) -> dict[str, Any]:
    return {"ledger_id": ledger, "category": category, "severity": severity, "detail": "{}", **kw}


def test_report_from_store_written_tables(tmp_path: Path) -> None:
    wh = str(tmp_path / "wh")
    t0 = datetime(2026, 11, 20, 6, 0, tzinfo=UTC)
    _run(wh, "run-1", t0, [_v(1, "placement_fail", "warning")])
    rows = [
        _v(10, "no_replica", "critical", min_replicas=0, bookie_id="b1", managed_ledger=TOPIC,
           missing_entries=[{"first": 0, "last": 9}, {"first": 20, "last": 20}],
           detail=json.dumps({"bookies_missing_entries": ["b1"]})),
        _v(11, "below_ack_quorum", "critical", min_replicas=1, managed_ledger=TOPIC, under_repair=True,
           missing_entries=[{"first": 0, "last": 99}],
           detail=json.dumps({"bookies_missing_entries": ["b1", "b2"]})),
        _v(12, "placement_fail", "warning", managed_ledger="public/default/persistent/other"),
        _v(None, "bookie_unreachable_but_registered", "warning", bookie_id="b3"),
        _v(13, "extra_entries", "info", bookie_id="b2"),
    ]
    checks = [{"bookie_id": "b1", "reachable": True, "calls": 7, "errors": 0},
              {"bookie_id": "b3", "reachable": False, "calls": 2, "errors": 2}]
    _run(wh, "run-2", t0 + timedelta(days=1), rows, checks)
    _run(wh, "run-3", t0 + timedelta(days=2), [])  # a later clean run: the default is the latest one

    latest = parse(write_report(wh, tmp_path / "out"))
    assert latest.cards["violations"] == "0"
    assert "trend" in latest.sections and len(latest.tables["runs"]) == 3

    path = write_report(wh, tmp_path / "out", "run-2")
    assert path.name == "report-run-2.html" and (tmp_path / "out" / "index.html").is_file()
    page = parse(path)
    table = read_arrow(wh, "violations")
    run_rows = [r for r in table.to_pylist() if r["run_id"] == "run-2"]
    assert len(run_rows) == 5
    assert_matches_rows(page, run_rows)
    assert page.cards["new_critical"] == "1"  # ledger 11 is under repair: reported, not new
    topics = page.tables["by-managed-ledger"]
    assert num(topics[TOPIC]["rows"]) == 2 and num(topics[TOPIC]["critical"]) == 2
    assert topics[TOPIC]["worst_severity"] == "critical"
    worst = page.tables["worst"]
    assert list(worst) == ["10", "11"]  # no copy left beats one copy left
    assert num(worst["10"]["missing_entries"]) == 11 and worst["10"]["ranges_text"] == "0–9, 20"
    assert num(worst["11"]["missing_entries"]) == 100
    runs = page.tables["runs"]
    assert list(runs) == ["run-2", "run-1"]  # the trend stops at the reported run, newest first
    assert num(runs["run-2"]["critical"]) == 1 and num(runs["run-2"]["warning"]) == 2
    assert num(runs["run-2"]["info"]) == 1
    assert page.tables["by-bookie"]["b3"]["reachable"] == "no"
    history = page.tables["violations-history"]
    assert len(history) == 3  # create + the two runs with rows (run-3 had none)
    marked = {v: cells["run_id"] for v, cells in history.items() if cells["this"] == "this run"}
    assert marked == {"2": "run-2"}  # versions: 0 create, 1 run-1, 2 run-2
