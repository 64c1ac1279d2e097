"""cli_common.run_job, the one wrapper of every entry point that runs a job (the CLI's `snapshot`, `check`,
`decommission-audit`, `report` and jobs/*.py): settings, `check`, the ZooKeeper probe, the Spark session, the
run's metrics, and every failure as one `error:` line with docs/cli.md's exit code.

The jobs here are made up for the test: what they raise, and when, is the input; the wrapper's exit code,
stderr and the metrics calls it makes are what is checked. No Spark session starts (JobRun.session is
checked against a stand-in get_session); no ZooKeeper is needed (the probe is a stand-in, or a dead port).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from kazoo.exceptions import NoAuthError

from bkaudit.cli_common import (
    CommandError,
    Job,
    JobRun,
    ZkTarget,
    exit_code_for,
    print_json,
    run_job,
    values_are_usage,
)
from bkaudit.errors import BkAuditError, ConfigError, FormatError, ZooKeeperError
from bkaudit.exitcodes import ExitCode

DEAD_ZK = "127.0.0.1:1"  # nothing listens on port 1: refused at once


@pytest.fixture(autouse=True)
def _no_ambient_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("BKAUDIT_ZK", "BKAUDIT_ZK__CONNECT", "BKAUDIT_CONF", "BKAUDIT_SNAPSHOT__WAREHOUSE",
                "BKAUDIT_SNAPSHOT__MASTER"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def zk_up(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """ZooKeeper answers the probe; the connect strings probed, in order."""
    import bkaudit.zk.client as zk_client

    probed: list[str] = []
    monkeypatch.setattr(zk_client, "require_reachable", lambda connect, **kw: probed.append(connect))
    return probed


@pytest.fixture
def target(tmp_path: Path) -> ZkTarget:
    conf = tmp_path / "bkaudit.toml"
    conf.write_text(f'[snapshot]\nwarehouse = "{tmp_path / "wh"}"\n')
    return ZkTarget(zk="127.0.0.1:2181", config_path=str(conf))


class Recorder:
    """The job's metrics hook: every call, as (result or None)."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def __call__(self, settings: Any, result: Any) -> None:
        assert settings.get  # the run's settings
        self.calls.append(result)


def raising(exc: BaseException) -> Callable[..., Any]:
    def fail(*_args: Any) -> Any:
        raise exc

    return fail


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


# -- the exit code of each kind of failure ---------------------------------------------------------------
FAILURES: list[tuple[str, BaseException, int, int]] = [
    # (id, raised by the work, code with exit_code_for, code with values_are_usage)
    ("ConfigError", ConfigError("snapshot.x", "bad"), 2, 2),
    ("BkAuditError", BkAuditError("the warehouse is unreadable"), 1, 1),
    ("ZooKeeperError", ZooKeeperError("session expired"), 1, 1),
    ("ValueError", ValueError("a value let through"), 1, 2),
    ("FormatError", FormatError("corrupt znode", field="ensemble"), 1, 1),  # bkaudit's, and a ValueError
    ("CommandError(3)", CommandError("findings", ExitCode.FINDINGS), 3, 3),
    ("UsageError", click.UsageError("no ZooKeeper given"), 2, 2),
    ("NoAuthError", NoAuthError(), 1, 1),
]


@pytest.mark.parametrize(("exc", "default", "values"), [f[1:] for f in FAILURES],
                         ids=[f[0] for f in FAILURES])
@pytest.mark.parametrize("mapping", ["exit_code_for", "values_are_usage"])
def test_each_failure_of_the_work_is_one_line_with_its_code(
        exc: BaseException, default: int, values: int, mapping: str, target: ZkTarget, zk_up: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    metrics = Recorder()
    job: Job[int] = Job("t", raising(exc), need_zk=True, metrics=metrics)
    code = run_job(job, target, print_json,
                   exit_code=exit_code_for if mapping == "exit_code_for" else values_are_usage)
    assert code == (default if mapping == "exit_code_for" else values)
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = errors(err)
    assert line.startswith("error: ") and "Traceback" not in err
    if isinstance(exc, NoAuthError):
        assert "NoAuth" in line and "auth_digest" in line
    assert metrics.calls == [None]  # the run started (its check passed): a failed run is on record


def test_a_bug_keeps_its_traceback_after_the_failed_runs_metrics(target: ZkTarget, zk_up: list[str],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    metrics = Recorder()
    job: Job[int] = Job("t", raising(KeyError("bug")), need_zk=True, metrics=metrics)
    with pytest.raises(KeyError, match="bug"):
        run_job(job, target, print_json)
    assert metrics.calls == [None]
    assert capsys.readouterr().err == ""  # no `error:` line: the traceback is the report


def test_the_error_line_is_one_line_whatever_the_message(target: ZkTarget, zk_up: list[str],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    job: Job[int] = Job("t", raising(BkAuditError("could not read\n  table 'x'\tat /wh")))
    assert run_job(job, target, print_json) == 1
    assert capsys.readouterr().err == "error: could not read table 'x' at /wh\n"


# -- the order: settings, check, probe, work; and what each failure leaves on record -------------------------
def test_invalid_settings_are_exit_2_before_check_or_work(tmp_path: Path, zk_up: list[str],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[zk]\nsession_timeout_s = -1\n")
    metrics, checked = Recorder(), []
    job: Job[int] = Job("t", raising(AssertionError("work ran")), need_zk=True, check=checked.append,
                        metrics=metrics)
    assert run_job(job, ZkTarget(zk=DEAD_ZK, config_path=str(bad)), print_json) == 2
    (line,) = errors(capsys.readouterr().err)
    assert "zk.session_timeout_s" in line
    assert checked == [] and metrics.calls == [] and zk_up == []


def test_no_zookeeper_named_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    job: Job[int] = Job("t", raising(AssertionError("work ran")), need_zk=True)
    assert run_job(job, ZkTarget(), print_json) == 2
    assert "no ZooKeeper given" in errors(capsys.readouterr().err)[0]


@pytest.mark.parametrize("refusal", [ValueError("bad id"), ConfigError("--fresh", "not both"),
                                     BkAuditError("no warehouse"),
                                     click.BadParameter("bad", param_hint="--x")],
                         ids=lambda exc: type(exc).__name__)
def test_what_check_refuses_is_exit_2_with_nothing_on_record(
        refusal: BaseException, target: ZkTarget, capsys: pytest.CaptureFixture[str]) -> None:
    """The check runs before the probe: here ZooKeeper is dead too, and the usage error is what is said."""
    metrics = Recorder()
    job: Job[int] = Job("t", raising(AssertionError("work ran")), need_zk=True, check=raising(refusal),
                        metrics=metrics)
    assert run_job(job, ZkTarget(zk=DEAD_ZK, config_path=target.config_path), print_json) == 2
    (line,) = errors(capsys.readouterr().err)
    assert line.startswith("error: ") and "ZooKeeper" not in line
    assert metrics.calls == []


def test_check_keeps_the_code_of_a_command_error(target: ZkTarget, zk_up: list[str]) -> None:
    job: Job[int] = Job("t", raising(AssertionError("work ran")),
                        check=raising(CommandError("cannot list the warehouse", ExitCode.ERROR)))
    assert run_job(job, target, print_json) == 1


def test_a_dead_zookeeper_is_exit_1_after_check_and_a_failed_run(target: ZkTarget,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    metrics, checked = Recorder(), []
    job: Job[int] = Job("t", raising(AssertionError("work ran")), need_zk=True, check=checked.append,
                        metrics=metrics)
    assert run_job(job, ZkTarget(zk=DEAD_ZK, config_path=target.config_path), print_json) == 1
    (line,) = errors(capsys.readouterr().err)
    assert f"ZooKeeper is not reachable at {DEAD_ZK}" in line
    assert len(checked) == 1 and metrics.calls == [None]


def test_no_probe_without_need_zk(target: ZkTarget, zk_up: list[str]) -> None:
    assert run_job(Job("t", lambda run: {"ok": True}), target, print_json) == 0
    assert zk_up == []


# -- success: metrics, show, exit code ----------------------------------------------------------------------
def test_success_exports_the_result_then_show_says_the_code(target: ZkTarget, zk_up: list[str],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    metrics, order = Recorder(), []

    def work(run: JobRun) -> dict[str, Any]:
        order.append("work")
        assert str(run.warehouse) == str(Path(target.config_path or "").parent / "wh")
        return {"findings": 2}

    def show(result: dict[str, Any]) -> int:
        order.append("show")
        assert metrics.calls == [result]  # exported before it is shown
        return print_json(result, int(ExitCode.FINDINGS))

    job = Job("t", work, need_zk=True, check=lambda settings: order.append("check"), metrics=metrics)
    assert run_job(job, target, show) == 3
    assert order == ["check", "work", "show"] and zk_up == ["127.0.0.1:2181"]
    out, err = capsys.readouterr()
    assert out == '{"findings": 2}\n' and err == ""


def test_a_result_that_is_a_failure_is_shown_then_one_line(target: ZkTarget,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The report of unreadable tables: its summary printed, then its error; the run's metrics say it ran."""
    metrics = Recorder()

    def show(result: dict[str, Any]) -> int:
        print_json(result)
        raise CommandError("could not read table 'violations'", ExitCode.ERROR)

    assert run_job(Job("t", lambda run: {"page": "r.html"}, metrics=metrics), target, show) == 1
    out, err = capsys.readouterr()
    assert out == '{"page": "r.html"}\n' and errors(err) == ["error: could not read table 'violations'"]
    assert metrics.calls == [{"page": "r.html"}]


def test_overrides_are_the_runs_flags(target: ZkTarget) -> None:
    seen: list[Any] = []
    job = Job("t", lambda run: seen.append(run.settings["checker"].fail_on),
              overrides={"checker.fail_on": "never", "snapshot.warehouse": None})
    assert run_job(job, target, lambda _: 0) == 0
    assert seen == ["never"]


# -- the Spark session --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("master", "submitted", "conf", "expected"), [
    (None, True, "local[3]", None),  # spark-submit's own session: its master wins
    ("local[1]", True, "local[3]", None),
    ("local[1]", False, "local[3]", "local[1]"),  # --master
    (None, False, "local[3]", "local[3]"),  # [snapshot] master
])
def test_the_session_is_spark_submits_or_the_masters(master: str | None, submitted: bool, conf: str,
                                                     expected: str | None, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import bkaudit.spark.session as session

    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(
        session, "get_session",
        lambda m, *, app_name, warehouse: calls.append((m, app_name, str(warehouse))) or "spark")
    path = tmp_path / "bkaudit.toml"
    path.write_text(f'[snapshot]\nwarehouse = "{tmp_path}"\nmaster = "{conf}"\n')
    job = Job("bkaudit-t", lambda run: run.session())
    got: list[Any] = []
    assert run_job(job, ZkTarget(config_path=str(path)), lambda spark: got.append(spark) or 0, master=master,
                   submitted=submitted) == 0
    assert got == ["spark"] and calls == [(expected, "bkaudit-t", str(tmp_path))]
