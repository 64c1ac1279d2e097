"""The spark-submit entry points (jobs/*.py) fail as the CLI does: one `error:` line, docs/cli.md's exit code
(2 for settings and usage, 1 when the work could not run), through one wrapper (cli_common.run_job).

No Spark session starts here: every case fails before one would.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

# each job with the arguments it requires
JOBS = {
    "snapshot_metadata": [],
    "validate_snapshot": [],
    "publish_underreplicated": ["--run-id", "r1"],
    "decommission_audit": ["--bookies", "127.0.0.1:3181"],
    "report": ["--out", "OUT"],
}
NEED_ZK = ("snapshot_metadata", "publish_underreplicated", "decommission_audit")


@pytest.fixture(autouse=True)
def _no_ambient_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("BKAUDIT_ZK", "BKAUDIT_ZK__CONNECT", "BKAUDIT_CONF"):
        monkeypatch.delenv(var, raising=False)


def _run(job: str, *args: str, tmp_path: Path) -> int:
    main = importlib.import_module(f"jobs.{job}").main
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in [*JOBS[job], *args]]
    return int(main(argv))


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize("job", sorted(JOBS))
def test_an_invalid_setting_is_one_line_and_exit_2(job: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[zk]\nconnect = "127.0.0.1:1"\nsession_timeout_s = -1\n')
    assert _run(job, "--config", str(bad), "--warehouse", str(tmp_path / "wh"), tmp_path=tmp_path) == 2
    errors = _errors(capsys.readouterr().err)
    assert len(errors) == 1 and "zk.session_timeout_s" in errors[0], errors


@pytest.mark.parametrize("job", NEED_ZK)
def test_no_zookeeper_named_is_a_usage_error(job: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    # the shipped conf/bkaudit.toml names 127.0.0.1:2181 as a template, not as the operator's choice
    assert _run(job, "--warehouse", str(tmp_path / "wh"), tmp_path=tmp_path) == 2
    errors = _errors(capsys.readouterr().err)
    assert len(errors) == 1 and "no ZooKeeper given" in errors[0], errors


@pytest.mark.parametrize("job", NEED_ZK)
def test_a_dead_zookeeper_is_one_line_and_exit_1(job: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    metrics = tmp_path / "snapshot.prom"
    conf = tmp_path / "bkaudit.toml"
    conf.write_text(f'[snapshot]\nmetrics_file = "{metrics}"\n')
    code = _run(job, "--config", str(conf), "--zk", "127.0.0.1:1", "--warehouse", str(tmp_path / "wh"),
                tmp_path=tmp_path)
    assert code == 1
    errors = _errors(capsys.readouterr().err)
    assert len(errors) == 1 and "127.0.0.1:1" in errors[0], errors
    if job == "snapshot_metadata":  # the failed run is on record for alerting, as `bkaudit snapshot` has it
        assert "bkaudit_snapshot_last_run_success 0" in metrics.read_text()
    else:
        assert not metrics.exists()


def test_the_cli_snapshot_records_a_dead_zookeeper_as_the_job_does(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from bkaudit.cli import cli

    metrics = tmp_path / "snapshot.prom"
    conf = tmp_path / "bkaudit.toml"
    conf.write_text(f'[snapshot]\nmetrics_file = "{metrics}"\n')
    result = CliRunner().invoke(cli, ["snapshot", "--config", str(conf), "--zk", "127.0.0.1:1",
                                       "--warehouse", str(tmp_path / "wh")])
    assert result.exit_code == 1, result.output
    assert "bkaudit_snapshot_last_run_success 0" in metrics.read_text()


@pytest.mark.parametrize("entry", ["job", "cli"])
def test_an_invalid_snapshot_id_is_a_usage_error_with_no_run_on_record(
        entry: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Both entry points share bkaudit.spark.commands.snapshot_job: the id is checked before ZooKeeper or a
    JVM is touched (ZooKeeper here is dead: a later check would exit 1), and no failed run is exported."""
    from click.testing import CliRunner

    from bkaudit.cli import cli

    metrics = tmp_path / "snapshot.prom"
    conf = tmp_path / "bkaudit.toml"
    conf.write_text(f'[snapshot]\nmetrics_file = "{metrics}"\n')
    args = ["--config", str(conf), "--zk", "127.0.0.1:1", "--warehouse", str(tmp_path / "wh"),
            "--snapshot-id", "not/an id"]
    if entry == "job":
        assert _run("snapshot_metadata", *args, tmp_path=tmp_path) == 2
        errors = _errors(capsys.readouterr().err)
    else:
        result = CliRunner().invoke(cli, ["snapshot", *args])
        assert result.exit_code == 2, result.output
        errors = [line for line in result.output.splitlines() if "snapshot" in line.lower()]
    assert len(errors) == 1 and "snapshot" in errors[0].lower(), errors
    assert not metrics.exists()
