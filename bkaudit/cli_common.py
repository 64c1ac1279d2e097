"""Options and helpers shared by CLI commands (JSON output, --zk/--dir resolution, errors as exit codes).

Exit codes are bkaudit.exitcodes' table (docs/cli.md): 0 clean, 1 error, 2 usage/config, 3 findings.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from bkaudit.errors import BkAuditError, ConfigError
from bkaudit.exitcodes import ExitCode

if TYPE_CHECKING:
    from bkaudit.store.zookeeper import ZkStore

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


def command_error(exc: BaseException) -> CommandError:
    return CommandError(str(exc), exit_code_for(exc))


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
    click.echo(f"error: {' '.join(message.split())}", err=True)
    sys.exit(int(code))


# -- the spark-submit entry points (jobs/*.py): the CLI's settings, errors and exit codes --------------
def job_settings(target: ZkTarget, *, warehouse: str | None = None, need_zk: bool = False,
                 probe_zk: bool = False, overrides: Mapping[str, Any] | None = None) -> Any:
    """A job's settings, resolved as the CLI resolves them (load_settings: file < environment < flags, the
    [tables] storage options; with `need_zk`, a ZooKeeper the user named, and with `probe_zk` one that
    answers: require_zk). `overrides`: the job's other flags, {"section.key": value} (None: the setting).
    Called inside run_job, so that a dead ZooKeeper is a failed run; the snapshot probes in
    spark.commands.snapshot_job instead, where its failure metric is exported."""
    flags = {**(overrides or {}), "snapshot.warehouse": warehouse}
    settings = load_settings(target, need_zk=need_zk, probe_zk=False, **flags)
    if probe_zk:
        require_zk(settings)
    return settings


def run_job(work: Callable[[], int], *, on_failure: Callable[[], None] | None = None) -> int:
    """A job's body; a failure is one `error:` line on stderr and docs/cli.md's exit code (2 for settings
    and usage, 1 when the work could not run). `on_failure` follows a failure of the work itself."""
    try:
        return work()
    except click.ClickException as exc:  # CommandError, and load_settings' usage errors
        message, code = exc.format_message(), int(exc.exit_code)
    except (BkAuditError, ValueError) as exc:
        message, code = str(exc), exit_code_for(exc)
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    if on_failure is not None and code != ExitCode.USAGE:
        on_failure()
    return code
