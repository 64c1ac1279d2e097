"""Settings, backoff, data-loss records, exit codes and metric names of AutoRecovery (no servers)."""

from __future__ import annotations

import pytest

from bkaudit import config
from bkaudit.autorecovery import metrics as m
from bkaudit.autorecovery.settings import AutoRecoverySettings
from bkaudit.autorecovery.summary import (
    EXIT_DATA_LOST,
    EXIT_DRAINED,
    EXIT_TIMED_OUT,
    LeftLedger,
    drain_summary,
    exit_code,
)
from bkaudit.errors import ConfigError, FormatError
from bkaudit.model.dataloss import DataLossRecord, merge_ranges
from bkaudit.model.dataloss import encode as encode_data_loss
from bkaudit.model.dataloss import parse as parse_data_loss
from tests.promtext import types, value


def test_defaults_are_bookkeepers() -> None:
    s = AutoRecoverySettings()
    assert s.lost_bookie_recovery_delay_s == 0  # lostBookieRecoveryDelay
    assert s.open_ledger_rereplication_grace == 30.0  # openLedgerRereplicationGracePeriod 30000 ms
    assert s.lock_release_of_failed_ledger_grace_s == 300.0  # lockReleaseOfFailedLedgerGracePeriod
    assert s.rw_rereplicate_backoff_s == 5.0  # rwRereplicateBackoffMs
    assert s.zk_replication_task_rate_limit == 0  # zkReplicationTaskRateLimit
    assert s.replication_rate_by_bytes == -1  # replicationRateByBytes


def test_failed_ledger_backoff_doubles_from_grace_over_32_up_to_grace() -> None:
    s = AutoRecoverySettings()
    assert [s.failed_ledger_backoff_s(n) for n in range(1, 8)] == [
        9.375,
        18.75,
        37.5,
        75.0,
        150.0,
        300.0,
        300.0,
    ]
    assert AutoRecoverySettings(lock_release_of_failed_ledger_grace_s=3.2).failed_ledger_backoff_s(1) == 0.1


def test_settings_from_environment_and_validation() -> None:
    settings = config.load(
        environ={
            "BKAUDIT_AUTORECOVERY__OPEN_LEDGER_REREPLICATION_GRACE": "1.5",
            "BKAUDIT_AUTORECOVERY__WORKERS": "2",
        }
    )
    s = settings.get(AutoRecoverySettings)
    assert s.open_ledger_rereplication_grace == 1.5 and s.workers == 2
    with pytest.raises(ConfigError):
        AutoRecoverySettings(workers=0)
    with pytest.raises(ConfigError):
        AutoRecoverySettings(replication_rate_by_bytes=0)


def test_conf_file_section_loads() -> None:
    s = config.load(environ={}).get(AutoRecoverySettings)
    assert s == AutoRecoverySettings()  # conf/bkaudit.toml documents the defaults, it does not change them


def test_data_loss_record_round_trip_and_ranges() -> None:
    record = DataLossRecord(
        7,
        merge_ranges([5, 3, 4, 9, 10, 20]),
        "2026-01-01T00:00:00Z",
        ("b1:3181", "b2:3181"),
        attempts=3,
        detector="w",
    )
    assert record.lost_entry_ranges == ((3, 5), (9, 10), (20, 20))
    assert record.lost_entries == 6
    doc = record.to_json()
    assert doc["ledger_id"] == 7 and doc["lost_entry_ranges"] == [[3, 5], [9, 10], [20, 20]]
    assert {"ledger_id", "lost_entry_ranges", "detected_at", "bookies"} <= set(doc)
    assert parse_data_loss(encode_data_loss(record)) == record
    with pytest.raises(FormatError):
        parse_data_loss(b"{not json")


def test_exit_codes() -> None:
    assert exit_code([], timed_out=False) == EXIT_DRAINED
    assert exit_code([LeftLedger(1, "data_lost")], timed_out=False) == EXIT_DATA_LOST
    assert exit_code([LeftLedger(1, "data_lost")], timed_out=True) == EXIT_DATA_LOST
    assert exit_code([LeftLedger(1, "locked_elsewhere")], timed_out=True) == EXIT_TIMED_OUT


def test_summary_names_what_is_left_and_why() -> None:
    metrics = m.AutoRecoveryMetrics()
    metrics.inc(m.NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED, 3)
    metrics.inc(m.NUM_ENTRIES_WRITTEN, 300)
    left = [LeftLedger(4, "failing", "NotEnoughBookies"), LeftLedger(5, "locked_elsewhere", "host:1")]
    summary = drain_summary("n", left, [], metrics, timed_out=True, elapsed_s=2.0, auditor=True, audits=1)
    assert summary.exit_code == EXIT_TIMED_OUT
    assert summary.data["replicated"] == 3 and summary.data["entries_written"] == 300
    assert [x["reason"] for x in summary.data["left"]] == ["failing", "locked_elsewhere"]
    text = summary.human()
    assert "ledger 4: failing" in text and "timed out" in text


def test_metrics_use_bookkeeper_names_and_scopes() -> None:
    metrics = m.AutoRecoveryMetrics()
    metrics.inc(m.NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED)
    metrics.inc(m.ELECTION_ATTEMPTS)
    metrics.observe_ms(m.REREPLICATE_OP, 12.5)
    metrics.inc(m.LEDGERS_DATA_LOST)
    text = metrics.render()
    assert value(text, "replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED") == 1
    assert value(text, "auditor_election_attempts") == 1
    assert value(text, "replication_worker_rereplicate_sum") == 12.5  # milliseconds, as BookKeeper
    assert types(text)["replication_worker_rereplicate"] == "summary"
    assert value(text, "bkaudit_autorecovery_ledgers_data_lost_total") == 1
    assert types(text)["bkaudit_autorecovery_ledgers_data_lost"] == "counter"
    assert value(text, "bkaudit_autorecovery_entries_per_s") is not None
    embedded = m.AutoRecoveryMetrics(embedded=True)
    embedded.inc(m.NUM_ENTRIES_READ)
    assert value(embedded.render(), "replication_replication_worker_NUM_ENTRIES_READ") == 1
    for name in (
        "NUM_ENTRIES_UNABLE_TO_READ_FOR_REPLICATION",
        "NUM_BYTES_READ",
        "NUM_BYTES_WRITTEN",
        "NUM_DEFER_LEDGER_LOCK_RELEASE_OF_FAILED_LEDGER",
        "election_attempts",
    ):
        assert name in m.names()
