"""`bkaudit demo` end to end, as a newcomer runs it (a smaller workload): every expectation met, the JSON
summary consistent with what the demo did, the report written, nothing left running."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bkaudit.processes import pid_alive

DURABILITY = ("no_replica", "below_ack_quorum", "below_write_quorum")
LEDGERS = 60


class _Sections(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.category_rows: dict[str, str] = {}
        self._row: str | None = None
        self._in_cat = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and a.get("id"):
            self.sections.append(str(a["id"]))
        if tag == "table":
            self._in_cat = a.get("id") == "by-category"
        if tag == "tr" and self._in_cat and a.get("data-key"):
            self._row = a["data-key"]
        if tag == "td" and self._row and a.get("data-col") == "rows":
            self.category_rows[self._row] = a.get("data-value") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._row = None
        if tag == "table":
            self._in_cat = False




@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.spark
def test_demo_end_to_end(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    cmd = [sys.executable, "-m", "bkaudit.cli", "demo", "--dir", str(work), "--ledgers", str(LEDGERS),
           "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, check=False)
    failed = [line for line in proc.stderr.splitlines() if "FAIL" in line]
    assert proc.returncode == 0, "\n".join(failed) + "\n...\n" + proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True
    names = {e["name"]: e["ok"] for e in summary["expectations"]}
    assert all(names.values()), names
    assert {"baseline is clean", "damage detected", "auto-recovery drained the queue", "drained",
            "durability clean after recovery", "report written",
            "report shows lifecycle states"} <= set(names)
    # progress went to stderr with a step counter, stdout holds only the JSON document
    assert "[1/10 " in proc.stderr and "[10/10 " in proc.stderr
    drain = summary["drain"]
    assert drain["state"] == "Drained" and drain["ledgers_before"] > 0 and drain["bookie"] != drain["added"]
    assert drain["progress"]["ledgers_left"] == 0

    runs = summary["runs"]
    assert summary["written"]["ledgers"] == LEDGERS == runs["baseline"]["ledgers"]
    assert not any(runs["baseline"]["counts"].values())
    assert sum(runs["faults"]["counts"][c] for c in DURABILITY) > 0
    assert runs["faults"]["published"] > 0
    assert runs["recovered"]["ledgers"] == LEDGERS + 1  # plus the ledger written on one rack
    assert not any(runs["recovered"]["counts"][c] for c in DURABILITY)
    pinned = summary["faults"]["misplaced_ledger"]
    assert pinned in runs["faults"]["placement_fail_ledgers"]
    assert pinned in runs["recovered"]["placement_fail_ledgers"]  # recovery repairs durability, not placement
    assert runs["recovered"]["counts"]["placement_fail"] == len(runs["recovered"]["placement_fail_ledgers"])
    assert summary["autorecovery"]["exit_code"] == 0

    report = Path(summary["report"])
    assert report.is_file() and Path(summary["report_index"]).is_file()
    page = _Sections()
    page.feed(report.read_text(encoding="utf-8"))
    assert page.sections == ["summary", "categories", "bookies", "managed-ledgers", "trend", "worst-ledgers",
                             "validation"]
    assert page.category_rows["placement_fail"] == str(runs["recovered"]["counts"]["placement_fail"])
    assert all(page.category_rows[c] == "0" for c in DURABILITY)
    assert json.loads((work / "demo.json").read_text())["ok"] is True

    state = json.loads((work / "cluster" / "cluster.json").read_text())
    assert not any(pid_alive(b["pid"]) for b in state["bookies"])
    assert not pid_alive((state.get("zookeeper") or {}).get("pid"))
