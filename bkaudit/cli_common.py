"""Options and helpers shared by CLI commands (JSON output, --zk/--dir resolution, errors as exit codes), and
`run_job`, the one wrapper of every entry point that runs a job (its CLI command and its jobs/*.py script).

Exit codes are bkaudit.exitcodes' table (docs/cli.md): 0 clean, 1 error, 2 usage/config, 3 findings.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar

import click

from bkaudit.errors import BkAuditError, ConfigError
from bkaudit.exitcodes import ExitCode

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from bkaudit.config import Settings
    from bkaudit.store.zookeeper import ZkStore
    from bkaudit.tables.location import Warehouse

F = TypeVar("F", bound=Callable[..., Any])


class CommandError(click.ClickException):
    """A failed command: one line on stderr (`error: ...`) and its exit code from bkaudit.exitcodes."""

    def __init__(self, message: str, code: int = ExitCode.ERROR) -> None:
        super().__init__(" ".join(message.split()))
        self.exit_code = int(code)  # type: ignore[misc]  # click declares it per class; ours is per error

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def exit_code_for(exc: BaseException) -> int:
    """2 for an invalid setting (the operator's input), 1 for anything that stopped the work itself."""
    return int(ExitCode.USAGE if isinstance(exc, ConfigError) else ExitCode.ERROR)


def values_are_usage(exc: BaseException) -> int:
    """exit_code_for, except that a ValueError bkaudit did not raise itself is the operator's input (2).

    `bkaudit snapshot`'s mapping, kept as it was when its try/except moved into run_job: its spark-submit twin
    (jobs/snapshot_metadata.py) has always said 1 for the same ValueError (tests/cli/test_job_entry.py)."""
    if isinstance(exc, ValueError) and not isinstance(exc, BkAuditError):
        return int(ExitCode.USAGE)
    return exit_code_for(exc)


def command_error(exc: BaseException,
                  exit_code: Callable[[BaseException], int] = exit_code_for) -> CommandError | None:
    """`exc` as one `error:` line with docs/cli.md's exit code: a click error keeps its own code, bkaudit's
    errors and ValueError get `exit_code`'s, ZooKeeper's refusals 1 (zookeeper_error). None for anything else:
    a bug, whose traceback stays."""
    if isinstance(exc, CommandError):
        return exc
    if isinstance(exc, click.ClickException):  # load_settings' usage errors, BadParameter of --dir
        return CommandError(exc.format_message(), exc.exit_code)
    if isinstance(exc, BkAuditError | ValueError):
        return CommandError(str(exc), exit_code(exc))
    return zookeeper_error(exc)


def zookeeper_error(exc: BaseException) -> CommandError | None:
    """A kazoo error that escaped a command, as one line (exit 1); None for anything else.

    NoAuth is what a ZooKeeper whose znodes carry ACLs answers a session without their credentials (an
    existing node; a missing one answers nothing): the line says which setting is missing.
    """
    if not type(exc).__module__.startswith("kazoo"):
        return None
    from kazoo.exceptions import AuthFailedError, KazooException, NoAuthError

    if not isinstance(exc, KazooException):
        return None
    if isinstance(exc, NoAuthError):
        return CommandError("ZooKeeper refused the request (NoAuth): the znodes are ACL-protected and this "
                            "session lacks their credentials; set [zk] auth_digest (BKAUDIT_ZK__AUTH_DIGEST) "
                            "to the cluster's user:password")
    if isinstance(exc, AuthFailedError):
        return CommandError("ZooKeeper rejected the credentials of [zk] auth_digest (AuthFailed)")
    detail = str(exc).strip()
    return CommandError(f"ZooKeeper request failed: {type(exc).__name__}{': ' + detail if detail else ''}")


# -- argument types: out-of-range or malformed input is a usage error (exit 2), never a traceback ----------
LONG_MAX = 2**63 - 1
"""Java's Long.MAX_VALUE: the largest ledger and entry id BookKeeper has."""
MAX_SECONDS = 2**31 - 1
"""The longest duration bkaudit accepts (68 years; BookKeeper's int seconds, as lostBookieRecoveryDelay)."""

LEDGER_ID = click.IntRange(0, LONG_MAX)
"""A BookKeeper ledger id: a non-negative Java long."""
ENTRY_ID = click.IntRange(0, LONG_MAX)


class Seconds(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on
    """A finite, non-negative number of seconds, at most MAX_SECONDS (nan, inf and 1e300 are refused)."""

    name = "SECONDS"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        import math

        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or not 0 <= seconds <= MAX_SECONDS:
            self.fail(f"{value!r} is not a number of seconds in [0, {MAX_SECONDS}]", param, ctx)
        return seconds


SECONDS = Seconds()


def bookie_id_problem(value: object) -> str | None:
    """Why `value` cannot be a bookie id (BookKeeper's BookieId rule, and a znode name), or None."""
    from bkaudit.formats.bookie_id import invalid_bookie_id_reason

    if isinstance(value, str) and value in (".", ".."):
        return f"{value!r} is not a bookie id (host:port, or a BookieId)"
    if invalid_bookie_id_reason(value) is None:
        return None
    shown = ascii(value) if isinstance(value, str) else repr(value)  # NUL and control characters escaped
    return f"{shown} is not a bookie id: BookKeeper's BookieId is [a-zA-Z0-9:-_.\\-]+ and not 'readonly'"


class BookieIdType(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on
    """A bookie id BookKeeper accepts (BookieId.validateBookieId): anything else is a usage error."""

    name = "BOOKIE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        reason = bookie_id_problem(value)
        if reason is not None:
            self.fail(reason, param, ctx)
        return str(value)


BOOKIE_ID = BookieIdType()


def _zk_flags(func: F) -> F:
    """--zk HOST:PORT, or --dir D (reads D/cluster.json), or $BKAUDIT_ZK; plus --root and --config."""
    func = click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                        help="settings file (default conf/bkaudit.toml or $BKAUDIT_CONF)")(func)
    func = click.option("--root", default=None, help="ledgers root znode (default /ledgers)")(func)
    func = click.option("--dir", "cluster_dir", type=click.Path(file_okay=False), default=None,
                        help="local cluster directory (reads its cluster.json)")(func)
    func = click.option("--zk", default=None,
                        help="ZooKeeper connect string HOST:PORT[,HOST:PORT] ($BKAUDIT_ZK)")(func)
    return func


@dataclass(frozen=True)
class ZkTarget:
    """The cluster a command acts on, as its flags name it (--zk, --dir, --root, --config): what
    `zk_target` hands a command instead of four loose values."""

    zk: str | None = None
    cluster_dir: str | None = None
    root: str | None = None
    config_path: str | None = None

    def settings(self, *, need_zk: bool = True, probe_zk: bool = True, **overrides: Any) -> Any:
        """The command's settings (load_settings: the flags over file and environment, validated)."""
        return load_settings(self, need_zk=need_zk, probe_zk=probe_zk, **overrides)

    @contextlib.contextmanager
    def store(self, settings: Any = None, *, connect_failure_code: int | None = None) -> Iterator[ZkStore]:
        """A cluster store on a session of its own, closed after; a store error ends the command with its
        exit code (one line on stderr). `connect_failure_code` is the exit code when no session can be had,
        for commands that call that a usage error whatever the cause (`bkaudit lifecycle`: 2)."""
        from bkaudit.config import ZkSettings
        from bkaudit.store.zookeeper import close, connect

        zk_settings = (settings if settings is not None else self.settings()).get(ZkSettings)
        try:
            try:
                store = connect(zk_settings)
            except BkAuditError as exc:
                if connect_failure_code is None:
                    raise
                fail(str(exc), connect_failure_code)
            try:
                yield store
            finally:
                close(store)
        except BkAuditError as exc:
            fail(str(exc), exit_code_for(exc))


def zk_target(func: F) -> F:
    """--zk HOST:PORT, or --dir D (reads D/cluster.json), or $BKAUDIT_ZK; plus --root and --config: handed to
    the command as one `target: ZkTarget`."""

    @functools.wraps(func)
    def command(*args: Any, **kwargs: Any) -> Any:
        target = ZkTarget(*(kwargs.pop(name) for name in ("zk", "cluster_dir", "root", "config_path")))
        return func(*args, target=target, **kwargs)

    return _zk_flags(command)  # type: ignore[return-value]


def resolve_zk(zk: str | None, cluster_dir: str | None) -> str | None:
    """The connect string from --zk, else --dir's cluster.json; None leaves it to the settings
    ($BKAUDIT_ZK, then `[zk] connect` of the settings file: bkaudit.config.load)."""
    if zk:
        return zk
    if cluster_dir:
        path = Path(cluster_dir) / "cluster.json"
        try:
            return str(json.loads(path.read_text())["zk"])
        except FileNotFoundError:
            raise click.BadParameter(f"{path} does not exist (is a cluster up in that directory?)",
                                     param_hint="--dir") from None
        except (ValueError, KeyError) as exc:
            raise click.BadParameter(f"{path} is not a valid cluster.json: {exc}",
                                     param_hint="--dir") from None
    return None


def _zk_named(settings: Any) -> bool:
    """ZooKeeper named by a flag, the environment or a settings file the user chose (--config, $BKAUDIT_CONF).

    The shipped conf/bkaudit.toml, read when none is chosen, is a template: its `connect` is not a choice,
    and a command must not quietly audit whatever listens on 127.0.0.1:2181."""
    return settings.origin("zk", "connect") in ("flag", "environment", "file")


def load_settings(target: ZkTarget, *, need_zk: bool = True, probe_zk: bool = True, **overrides: Any) -> Any:
    """Settings with CLI flags applied on top of file and environment, all validated (exit 2 if not).

    With `need_zk`, a command fails in seconds when no ZooKeeper server accepts a connection (exit 1)
    instead of retrying for the whole connect timeout; services that should wait for it pass probe_zk=False.
    """
    from bkaudit import config

    ov: dict[str, Any] = dict(overrides)
    if need_zk:
        ov["zk.connect"] = resolve_zk(target.zk, target.cluster_dir)
    if target.root:
        ov["zk.root"] = target.root
    try:
        settings = config.load(path=target.config_path, overrides=ov)
    except BkAuditError as exc:
        raise CommandError(str(exc), ExitCode.USAGE) from None
    if need_zk and not _zk_named(settings):
        raise click.UsageError("no ZooKeeper given: use --zk HOST:PORT, --dir CLUSTER_DIR, set BKAUDIT_ZK, "
                               "or [zk] connect in the --config file")
    if need_zk and probe_zk:
        require_zk(settings)
    return settings


def require_zk(settings: Any) -> None:
    """Fail in seconds, before a JVM or job starts, when no ZooKeeper server of the settings answers."""
    from bkaudit.config import ZkSettings
    from bkaudit.errors import ZooKeeperError
    from bkaudit.zk.client import require_reachable

    zk = settings.get(ZkSettings)
    try:
        require_reachable(zk.connect, timeout_s=min(2.0, zk.connect_timeout_s))
    except ZooKeeperError as exc:
        raise CommandError(str(exc), ExitCode.ERROR) from None


def warehouse_of(settings: Any, *, must_exist: bool = True) -> str:
    """The warehouse the command works on (bkaudit.config.warehouse), as a usage error when none is given;
    with `must_exist`, a local warehouse that does not exist is one too (require_warehouse)."""
    from bkaudit import config

    try:
        wh = config.warehouse(settings)
    except ConfigError as exc:
        raise CommandError(exc.reason, ExitCode.USAGE) from None
    if must_exist:
        require_warehouse(wh)
    return wh


def require_warehouse(warehouse: str) -> None:
    """A local warehouse that does not exist is named as such (not "no checker run in ...")."""
    from bkaudit.tables import location

    if not location.is_local(warehouse):
        return  # object stores: the readers say what is missing
    path = Path(location.normalize(warehouse))
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise CommandError(f"warehouse {warehouse} {what} (check --warehouse / [snapshot] warehouse)",
                           ExitCode.USAGE)


def emit(data: Any, as_json: bool, human: Callable[[Any], str] | None = None) -> None:
    """Print `data` as one JSON document, or as human text."""
    if as_json:
        click.echo(json.dumps(data, sort_keys=False, default=json_default))
    else:
        click.echo(human(data) if human else json.dumps(data, indent=2, default=json_default))


def json_default(value: Any) -> Any:
    """JSON for what the json module does not know: ISO-8601 times (2026-11-24T10:00:42+00:00), else text."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def fail(message: str, code: int = ExitCode.ERROR) -> NoReturn:
    """Print `error: message` (one line) and exit with `code` (ExitCode.USAGE for bad input)."""
    CommandError(message, code).show()
    sys.exit(int(code))


# -- one wrapper for every entry point that runs a job: its CLI command and its jobs/*.py script -----------
R = TypeVar("R")


@dataclass(frozen=True)
class JobRun:
    """A run as a job's `work` sees it: its settings, and its Spark session on demand."""

    settings: Settings
    app_name: str
    master: str | None = None
    """--master of a CLI command (None: `[snapshot] master`); ignored when `submitted`."""
    submitted: bool = False
    """Running under spark-submit, whose session (master, executors, conf) is the job's."""

    @property
    def warehouse(self) -> Warehouse:
        """The run's warehouse with its `[tables]` storage options (bkaudit.tables.settings)."""
        from bkaudit.tables.settings import resolve_warehouse

        return resolve_warehouse(self.settings)

    def session(self) -> SparkSession:
        """spark-submit's session when submitted, else a local one on --master or `[snapshot] master`; with
        what the warehouse needs (bkaudit.spark.session.get_session)."""
        from bkaudit.spark.session import get_session
        from bkaudit.spark.settings import SnapshotSettings

        master = None if self.submitted else self.master or self.settings.get(SnapshotSettings).master
        return get_session(master, app_name=self.app_name, warehouse=self.warehouse)


@dataclass(frozen=True)
class Job(Generic[R]):
    """What is particular to a job, shared by its CLI command and its spark-submit script; `run_job` does
    the rest.

    - `name`: its Spark application name;
    - `work(run)`: the job itself, on the run's settings and session; returns its result;
    - `overrides`: the run's flags as settings, {"section.key": value} (None: the setting);
    - `need_zk`: a ZooKeeper the user named (--zk, --dir, $BKAUDIT_ZK, a chosen --config), probed before
      `work` (a dead one fails in seconds, before a JVM starts);
    - `check(settings)`: the operator's input, before anything connects or starts: whatever it refuses
      (ValueError, bkaudit's errors, a click usage error) is exit 2, and no run is on record;
    - `metrics(settings, result)`: exports the run's metrics, `result` None when the run failed after `check`
      (a dead ZooKeeper included); never raises (metrics never fail a run).
    """

    name: str
    work: Callable[[JobRun], R]
    overrides: Mapping[str, Any] = field(default_factory=dict)
    need_zk: bool = False
    check: Callable[[Settings], object] | None = None  # what it returns is not used
    metrics: Callable[[Settings, R | None], None] | None = None


def run_job(job: Job[R], target: ZkTarget, show: Callable[[R], int], *, master: str | None = None,
            submitted: bool = False, exit_code: Callable[[BaseException], int] = exit_code_for) -> int:
    """Run `job` for one entry point; returns docs/cli.md's exit code, which the caller exits with.

    In order: the settings (as every command resolves them: file < environment < flags, validated), the
    job's `check`, the ZooKeeper probe, `work` (the Spark session from `master` or spark-submit), the run's
    metrics (on success and on failure), then `show(result)`: the entry point prints the result and says
    its exit code (0, or 3 for findings). A failure anywhere is one `error: ...` line on stderr and its code
    (command_error): 2 for settings, usage and whatever `check` refuses; else `exit_code(exc)`, which is
    exit_code_for (2 for ConfigError, 1 otherwise) except for `bkaudit snapshot` (values_are_usage). An
    exception that is none of bkaudit's (a bug) keeps its traceback, after the failed run's metrics.
    """
    settings: Settings | None = None  # set once `check` passed: from then on a failure is a failed run
    ran = False  # `work` returned: its metrics are exported, and what follows is no failed run
    try:
        loaded = load_settings(target, need_zk=job.need_zk, probe_zk=False, **job.overrides)
        if job.check is not None:
            try:
                job.check(loaded)
            except (BkAuditError, ValueError) as exc:
                raise CommandError(str(exc), ExitCode.USAGE) from None
        settings = loaded
        if job.need_zk:
            require_zk(settings)
        result = job.work(JobRun(settings, job.name, master=master, submitted=submitted))
        ran = True
        if job.metrics is not None:
            job.metrics(settings, result)
        return int(show(result))  # show may raise too: a result that is a failure (unreadable tables)
    except Exception as exc:
        if settings is not None and not ran and job.metrics is not None:
            job.metrics(settings, None)
        error = command_error(exc, exit_code)
        if error is None:
            raise
        error.show()
        return int(error.exit_code)


def print_json(data: Any, code: int = 0) -> int:
    """A job's result on stdout as one JSON document (what a scheduler reads of a spark-submit job); returns
    `code`, so that `run_job(..., show=print_json)` ends a job that is done with exit 0."""
    emit(data, as_json=True)
    return code
