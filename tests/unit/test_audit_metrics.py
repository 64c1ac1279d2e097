"""Prometheus text, atomic text file and push gateway (a real local HTTP server receives the PUT)."""

from __future__ import annotations

import http.server
import threading

import pytest

from bkaudit.metrics import CheckerRunMetrics, MetricsError, Sample, push, render, sanitize, write_textfile


def test_render_groups_families_and_escapes():
    text = render(
        [
            Sample("a_metric", 1, {"k": 'x"y\\z\n'}, help="first\nline"),
            Sample("a_metric", 2.5, {"k": "b"}),
            Sample("other", float("nan"), kind="untyped"),
        ]
    )
    assert text.splitlines() == [
        "# HELP a_metric first\\nline",
        "# TYPE a_metric gauge",
        'a_metric{k="x\\"y\\\\z\\n"} 1',
        'a_metric{k="b"} 2.5',
        "# TYPE other untyped",
        "other NaN",
    ]
    assert sanitize("9bad-name") == "_9bad_name"


def test_checker_metrics_use_bookkeeper_gauge_names():
    counts = {"no_replica": 2, "below_ack_quorum": 1, "placement_fail": 4, "underreplicated_too_long": 3}
    m = CheckerRunMetrics(
        "r1",
        "s1",
        True,
        counts,
        {"no_replica": 5},
        ledgers_checked=10,
        phase_seconds={"ledger_pass_and_fanout": 1.0, "combine": 0.5, "write": 9.0},
        bookies=[{"bookie_id": "b:1", "calls": 3, "errors": 0, "reachable": True, "latency_ms_p99": 4.0}],
    )
    text = render(m.samples("auditor"))
    assert "auditor_NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY 2\n" in text
    assert "auditor_NUM_LEDGERS_HAVING_LESS_THAN_AQ_REPLICAS_OF_AN_ENTRY 1\n" in text
    assert "auditor_NUM_LEDGERS_HAVING_LESS_THAN_WQ_REPLICAS_OF_AN_ENTRY 0\n" in text
    assert "auditor_NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY 4\n" in text
    assert "auditor_NUM_LEDGERS_SOFTLY_ADHERING_TO_PLACEMENT_POLICY 0\n" in text
    assert "auditor_NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD 3\n" in text
    assert 'auditor_REPLICAS_CHECK_TIME_sum{success="true"} 1500\n' in text
    assert 'bkaudit_checker_violations{category="no_replica",severity="critical"} 2\n' in text
    assert 'bkaudit_checker_under_repair{category="no_replica"} 5\n' in text
    assert 'bkaudit_checker_bookie_calls{bookie="b:1"} 3\n' in text
    bare = render(m.samples(""))
    assert "\nNUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY 2\n" in bare


def test_write_textfile_is_atomic_and_replaces(tmp_path):
    target = tmp_path / "sub" / "bkaudit.prom"
    write_textfile(target, "a 1\n")
    write_textfile(target, "a 2\n")
    assert target.read_text() == "a 2\n"
    assert [p.name for p in target.parent.iterdir()] == ["bkaudit.prom"]


class _Gateway(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes, str]] = []
    status = 200

    def do_PUT(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append(("PUT", self.path, body, self.headers["Content-Type"]))
        self.send_response(self.status)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def gateway():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Gateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Gateway.received.clear()
    _Gateway.status = 200
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_push_puts_to_job_group(gateway):
    push(gateway + "/", "bkaudit checker", "a 1\n", grouping={"instance": "x/y"})
    ((method, path, body, ctype),) = _Gateway.received
    assert method == "PUT" and path == "/metrics/job/bkaudit%20checker/instance/x%2Fy"
    assert body == b"a 1\n" and ctype.startswith("text/plain; version=0.0.4")


def test_push_failure_is_a_metrics_error(gateway):
    _Gateway.status = 500
    with pytest.raises(MetricsError):
        push(gateway, "j", "a 1\n")
    with pytest.raises(MetricsError):
        push("http://127.0.0.1:9", "j", "a 1\n", timeout_s=2)
