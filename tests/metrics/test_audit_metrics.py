"""Metrics through prometheus_client: typed families, BookKeeper names, seconds, bounded labels; an atomic
text file and a push gateway (a real local HTTP server receives the PUT)."""

from __future__ import annotations

import base64
import http.server
import threading

import pytest

from bkaudit.metrics import BookieCalls, CheckerRunMetrics, Families, MetricsError, SnapshotRunMetrics, names
from tests.promtext import types, value


def _run(success: bool = True) -> CheckerRunMetrics:
    counts = {"no_replica": 2, "below_ack_quorum": 1, "placement_fail": 4, "underreplicated_too_long": 3}
    return CheckerRunMetrics(
        "r1",
        "s1",
        success,
        counts,
        {"no_replica": 5},
        ledgers_checked=10,
        phase_seconds={"ledger_pass_and_fanout": 1.0, "combine": 0.5, "write": 9.0},
        finished_at_s=1700000000.0,
        bookies=[BookieCalls("b:1", calls=3, errors=0, reachable=True, latency_ms_p99=4.0)],
    )


def test_checker_metrics_use_bookkeeper_gauge_names_and_types():
    text = _run().families("auditor").render()
    assert value(text, "auditor_NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY") == 2
    assert value(text, "auditor_NUM_LEDGERS_HAVING_LESS_THAN_AQ_REPLICAS_OF_AN_ENTRY") == 1
    assert value(text, "auditor_NUM_LEDGERS_HAVING_LESS_THAN_WQ_REPLICAS_OF_AN_ENTRY") == 0
    assert value(text, "auditor_NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY") == 4
    assert value(text, "auditor_NUM_LEDGERS_SOFTLY_ADHERING_TO_PLACEMENT_POLICY") == 0
    assert value(text, "auditor_NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD") == 3
    # BookKeeper's OpStats: a typed summary, in BookKeeper's unit (ms): the checking phases only
    assert types(text)["auditor_REPLICAS_CHECK_TIME"] == "summary"
    assert value(text, "auditor_REPLICAS_CHECK_TIME_sum", success="true") == 1500
    assert value(text, "auditor_REPLICAS_CHECK_TIME_count", success="true") == 1
    assert value(text, "bkaudit_checker_violations", category="no_replica", severity="critical") == 2
    assert value(text, "bkaudit_checker_under_repair", category="no_replica") == 5
    assert value(text, "bkaudit_checker_bookie_calls", bookie="b:1") == 3
    # bkaudit's own latencies in seconds
    assert value(text, "bkaudit_checker_bookie_latency_seconds", bookie="b:1", quantile="0.99") == 0.004
    assert value(text, "bkaudit_checker_phase_seconds", phase="write") == 9.0
    assert types(text)["bkaudit_checker_violations"] == "gauge"
    bare = _run().families("").render()
    assert value(bare, "NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY") == 2


def test_labels_are_bounded_no_run_id():
    text = _run().families().render()
    assert "r1" not in text and "s1" not in text
    assert value(text, "bkaudit_checker_last_run_success") == 1
    assert value(text, "bkaudit_checker_last_success_timestamp_seconds") == 1700000000.0
    failed = _run(success=False).families().render()
    assert value(failed, "bkaudit_checker_last_run_success") == 0
    assert value(failed, "bkaudit_checker_last_success_timestamp_seconds") is None  # the last success stays
    assert value(failed, "auditor_REPLICAS_CHECK_TIME_sum", success="false") == 1500


def test_snapshot_freshness_metrics():
    ok = SnapshotRunMetrics(success=True, finished_at_s=1700000000.0, seconds=12.5, ledgers=42, bookies=3)
    text = ok.families().render()
    assert value(text, "bkaudit_snapshot_last_success_timestamp_seconds") == 1700000000.0
    assert value(text, "bkaudit_snapshot_ledgers") == 42
    assert value(text, "bkaudit_snapshot_run_seconds") == 12.5
    failed = SnapshotRunMetrics(success=False, finished_at_s=1.0).families().render()
    assert value(failed, "bkaudit_snapshot_last_run_success") == 0
    assert value(failed, "bkaudit_snapshot_last_success_timestamp_seconds") is None


def test_names_cover_every_exported_sample():
    every = names()
    snapshot = SnapshotRunMetrics(success=True, finished_at_s=1).families()
    for families in (_run().families("auditor"), snapshot):
        for family in families:
            assert {s.name for s in family.samples} <= every


def test_write_textfile_is_atomic_and_replaces(tmp_path):
    target = tmp_path / "sub" / "bkaudit.prom"
    one, two = Families(), Families()
    one.gauge("a", "first", 1)
    two.gauge("a", "second", 2)
    one.write_textfile(str(target))
    two.write_textfile(str(target))
    assert value(target.read_text(), "a") == 2
    assert [p.name for p in target.parent.iterdir()] == ["bkaudit.prom"]


def test_write_textfile_failure_is_a_metrics_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    families = Families()
    families.gauge("a", "a", 1)
    with pytest.raises(MetricsError):
        families.write_textfile(str(blocker / "sub" / "x.prom"))


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
    families = Families()
    families.gauge("a", "a", 1)
    families.push(gateway, "bkaudit checker", grouping={"instance": "x/y"})
    ((method, path, body, ctype),) = _Gateway.received
    def b64(text: str) -> str:  # the push gateway's encoding of values with '/' or spaces
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    assert method == "PUT"
    assert path == f"/metrics/job@base64/{b64('bkaudit checker')}/instance@base64/{b64('x/y')}"
    assert value(body.decode(), "a") == 1 and ctype.startswith("text/plain; version=0.0.4")


def test_push_failure_is_a_metrics_error(gateway):
    families = Families()
    families.gauge("a", "a", 1)
    _Gateway.status = 500
    with pytest.raises(MetricsError):
        families.push(gateway, "j")
    with pytest.raises(MetricsError):
        families.push("http://127.0.0.1:9", "j", timeout_s=2)
