"""deploy/monitoring: the alert rules and the Grafana dashboard refer only to metrics bkaudit exports.

The rules are checked for Prometheus's rule-file schema and their PromQL for balanced syntax and known metric
names, and by Debian's `promtool check rules` (`make prometheus` installs it). A real Prometheus server
scrapes a checker run and AutoRecovery and evaluates these rules and the dashboard's queries in
tests/metrics/test_prometheus.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bkaudit.metrics import names

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
RULES = MONITORING / "bkaudit-alerts.yml"
DASHBOARD = MONITORING / "grafana-bkaudit.json"

KEYWORDS = {"by", "without", "and", "or", "unless", "on", "ignoring", "group_left", "group_right", "bool",
            "offset", "inf", "nan"}
IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """Identifiers of an expression that are metric names (not functions, keywords, labels or durations)."""
    stripped = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    stripped = re.sub(r"\{[^}]*\}", "", stripped)  # label matchers
    stripped = re.sub(r"\[[^\]]*\]", "", stripped)  # range durations
    stripped = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", stripped)
    found = set()
    for match in IDENT.finditer(stripped):
        word = match.group(0)
        rest = stripped[match.end():].lstrip()
        if word in KEYWORDS or rest.startswith("("):  # a function or aggregation
            continue
        found.add(word)
    return found


def balanced(expr: str) -> bool:
    depth = {"(": 0, "[": 0, "{": 0}
    pairs = {")": "(", "]": "[", "}": "{"}
    for ch in re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr):
        if ch in depth:
            depth[ch] += 1
        elif ch in pairs:
            depth[pairs[ch]] -= 1
            if depth[pairs[ch]] < 0:
                return False
    return all(v == 0 for v in depth.values())


def test_metric_name_extraction() -> None:
    expr = 'sum by (category) (rate(a_total{x="y(z"}[5m])) / ignoring(k) b_count > 2 * 86400 and time() - c'
    assert metric_names(expr) == {"a_total", "b_count", "c"}
    assert balanced(expr) and not balanced("rate(a[5m]")


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    assert set(doc) == {"groups"}
    rules = []
    for group in doc["groups"]:
        assert set(group) <= {"name", "rules", "interval"} and group["name"] and group["rules"]
        rules.extend(group["rules"])
    return rules


def test_alert_rules_follow_the_rule_file_schema() -> None:
    rules = _rules()
    alerts = [r["alert"] for r in rules]
    assert len(alerts) == len(set(alerts)) >= 8
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}, rule
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", rule["alert"])
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert "summary" in rule["annotations"]
        if "for" in rule:
            assert re.fullmatch(r"\d+[smhdwy]", rule["for"])
        for text in rule["annotations"].values():
            assert text.count("{{") == text.count("}}")
        assert balanced(rule["expr"]), rule["expr"]


def test_alert_rules_use_only_exported_metrics() -> None:
    exported = names()
    for rule in _rules():
        unknown = metric_names(rule["expr"]) - exported
        assert not unknown, f"{rule['alert']}: {unknown} is not exported by bkaudit"


def test_dashboard_is_valid_and_uses_only_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    exported = names()
    used: set[str] = set()
    for panel in dashboard["panels"]:
        assert panel["type"] in {"stat", "timeseries", "gauge", "table"}
        assert panel["datasource"]["uid"] == "${datasource}"
        grid = panel["gridPos"]
        assert {"h", "w", "x", "y"} <= set(grid) and grid["x"] + grid["w"] <= 24
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs))
        for target in panel["targets"]:
            assert balanced(target["expr"]), target["expr"]
            unknown = metric_names(target["expr"]) - exported
            assert not unknown, f"panel {panel['title']!r}: {unknown} is not exported by bkaudit"
            used |= metric_names(target["expr"])
    # the headline signals are on the dashboard
    assert {"bkaudit_snapshot_last_success_timestamp_seconds", "bkaudit_autorecovery_queue_ledgers",
            "auditor_NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY"} <= used


def test_promtool_accepts_the_rules() -> None:
    if shutil.which("promtool") is None:
        pytest.fail("promtool is required (make prometheus installs Debian's prometheus package)")
    done = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
