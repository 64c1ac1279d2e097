"""The spark-submit entry points (jobs/*.py) fail as the CLI does: one `error:` line, docs/cli.md's exit code
(2 for settings and usage, 1 when the work could not run), through one wrapper (cli_common.run_job), which
tests/cli/test_job_wrapper.py tests on its own.

No Spark session starts here: every case fails before one would, or where one would (a stand-in session
that raises what the test injects).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from kazoo.exceptions import NoAuthError

from bkaudit.errors import BkAuditError, ConfigError

# each job with the arguments it requires
JOBS = {
    "snapshot_metadata": [],
    "metadata_checker": ["--fresh"],
    "validate_snapshot": [],
    "publish_underreplicated": ["--run-id", "r1"],
    "decommission_audit": ["--bookies", "127.0.0.1:3181"],
    "report": ["--out", "OUT"],
}
NEED_ZK = ("snapshot_metadata", "metadata_checker", "publish_underreplicated", "decommission_audit")


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


# -- the same failure at the CLI command and at its spark-submit twin ----------------------------------------
# (CLI command and its arguments, job and its arguments): each pair runs one job definition through run_job
PAIRS = {
    "snapshot": (["snapshot"], "snapshot_metadata", []),
    "check": (["check", "--fresh"], "metadata_checker", ["--fresh"]),
    "decommission": (["decommission-audit", "--bookie", "b:1"], "decommission_audit", ["--bookies", "b:1"]),
    "report": (["report", "--out", "OUT"], "report", ["--out", "OUT"]),
}
INJECTED = {
    "ValueError": ValueError("a value the settings let through"),
    "BkAuditError": BkAuditError("the warehouse is unreadable"),
    "ConfigError": ConfigError("tables.storage_options", "an abfss:// warehouse needs an account name"),
    "NoAuthError": NoAuthError(),
}
# exit codes (CLI, job) for a failure raised where the run starts its work (the Spark session; the report's
# write): the same at both entry points, except `bkaudit snapshot`, which has always said 2 for a ValueError
# where jobs/snapshot_metadata.py says 1 (run_job's exit_code parameter: cli_common.values_are_usage)
EXPECTED = {
    ("snapshot", "ValueError"): (2, 1),
    **{(pair, "ValueError"): (1, 1) for pair in ("check", "decommission", "report")},
    **{(pair, "BkAuditError"): (1, 1) for pair in PAIRS},
    **{(pair, "ConfigError"): (2, 2) for pair in PAIRS},
    **{(pair, "NoAuthError"): (1, 1) for pair in PAIRS},
}


@pytest.mark.parametrize("kind", sorted(INJECTED))
@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_the_same_failure_at_the_cli_and_at_the_job(pair: str, kind: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import bkaudit.report.outcome as outcome
    import bkaudit.spark.session as session
    import bkaudit.zk.client as zk_client
    from bkaudit.cli import run

    def boom(*_args: object, **_kwargs: object) -> None:
        raise INJECTED[kind]

    monkeypatch.setattr(zk_client, "require_reachable", lambda *a, **kw: None)  # ZooKeeper answers
    monkeypatch.setattr(session, "get_session", boom)
    monkeypatch.setattr(outcome, "write_and_judge", boom)
    metrics = tmp_path / "snapshot.prom"
    conf = tmp_path / "bkaudit.toml"
    conf.write_text(f'[snapshot]\nmetrics_file = "{metrics}"\n')
    (tmp_path / "wh").mkdir()
    common = ["--config", str(conf), "--warehouse", str(tmp_path / "wh")]
    common += [] if pair == "report" else ["--zk", "127.0.0.1:2181"]
    cli_args, job, job_args = PAIRS[pair]
    out = str(tmp_path / "out")
    got = []
    for entry in ("cli", "job"):
        if entry == "cli":
            code = run([*(out if a == "OUT" else a for a in cli_args), *common])
        else:
            code = int(importlib.import_module(f"jobs.{job}").main(
                [*(out if a == "OUT" else a for a in job_args), *common]))
        err = capsys.readouterr().err
        assert "Traceback" not in err, err
        assert len(_errors(err)) == 1, err
        got.append(code)
        if pair == "snapshot":  # the failed run is on record at both
            assert "bkaudit_snapshot_last_run_success 0" in metrics.read_text(), (entry, err)
            metrics.unlink()
    assert tuple(got) == EXPECTED[pair, kind]


def test_a_bug_keeps_its_traceback_at_the_job_after_the_snapshots_failed_metric(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bkaudit.spark.session as session
    import bkaudit.zk.client as zk_client

    def boom(*_args: object, **_kwargs: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(zk_client, "require_reachable", lambda *a, **kw: None)
    monkeypatch.setattr(session, "get_session", boom)
    metrics = tmp_path / "snapshot.prom"
    conf = tmp_path / "bkaudit.toml"
    conf.write_text(f'[snapshot]\nmetrics_file = "{metrics}"\n')
    with pytest.raises(KeyError):
        _run("snapshot_metadata", "--config", str(conf), "--zk", "127.0.0.1:2181", "--warehouse",
             str(tmp_path / "wh"), tmp_path=tmp_path)
    assert "bkaudit_snapshot_last_run_success 0" in metrics.read_text()


CLI_NEED_ZK = {"snapshot": ["snapshot"], "check": ["check", "--fresh"],
               "decommission-audit": ["decommission-audit", "--bookie", "b:1"]}


@pytest.mark.parametrize("entry", [*CLI_NEED_ZK, *NEED_ZK])
def test_a_usage_error_is_said_before_a_dead_zookeeper(entry: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """One order at every entry point (run_job): settings, the job's own checks, then the probe. No warehouse
    is the operator's to fix (exit 2) whether or not ZooKeeper answers, and no failed run is on record."""
    from bkaudit.cli import run

    metrics = tmp_path / "snapshot.prom"
    conf = tmp_path / "bkaudit.toml"
    conf.write_text(f'[snapshot]\nmetrics_file = "{metrics}"\n')
    args = ["--config", str(conf), "--zk", "127.0.0.1:1"]
    if entry in CLI_NEED_ZK:
        code = run([*CLI_NEED_ZK[entry], *args])
    else:
        code = _run(entry, *args, tmp_path=tmp_path)
    assert code == 2
    errors = _errors(capsys.readouterr().err)
    assert len(errors) == 1 and "warehouse" in errors[0] and "ZooKeeper" not in errors[0], errors
    assert not metrics.exists()
