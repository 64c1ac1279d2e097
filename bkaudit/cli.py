"""The `bkaudit` command.

click (not typer): it is already a transitive dependency of the stack, its lazy command groups keep start-up
fast (importing pyspark or grpc for `bkaudit decode` would cost seconds), and typer adds nothing we use.
Each command lives in the module of the subsystem it drives; this file only maps names to them.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from typing import Any, NoReturn

import click

from bkaudit import __version__
from bkaudit.exitcodes import ExitCode

# command name -> "module:attribute"; modules are imported only when their command runs
COMMANDS: dict[str, str] = {
    "zk": "bkaudit.zk.commands:zk",
    "decode": "bkaudit.formats.commands:decode",
    "cluster": "bkaudit.cluster.commands:cluster",
    "bookie": "bkaudit.cluster.commands:bookie_group",  # + stop/kill/start of a local cluster
    "ledger": "bkaudit.client.commands:ledger",
    "snapshot": "bkaudit.spark.commands:snapshot",
    "check": "bkaudit.spark.checker_commands:check",
    "violations": "bkaudit.tables.commands:violations",
    "tables": "bkaudit.tables.commands:tables_group",
    "autorecovery": "bkaudit.autorecovery.commands:autorecovery",
    "report": "bkaudit.report.commands:report",
    "demo": "bkaudit.demo.commands:demo",
    "decommission-audit": "bkaudit.spark.decommission:decommission_audit",
    "lifecycle": "bkaudit.lifecycle.commands:lifecycle",
    "admin": "bkaudit.admin.commands:admin",
    "underreplicated": "bkaudit.autorecovery.underreplicated:underreplicated",
    "chaos": "bkaudit.chaos.commands:chaos",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                return _unavailable(cmd_name, f"{module_name} is not built yet")
            raise
        command: click.Command = getattr(module, attr)
        return command

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            raise _one_line(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        """bkaudit's own errors escaping a command become one line and the exit code of bkaudit.exitcodes;
        so do usage errors (exit 2) and ZooKeeper's refusals (kazoo's errors: NoAuth, ..., exit 1)."""
        from bkaudit.cli_common import command_error, zookeeper_error
        from bkaudit.errors import BkAuditError

        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _one_line(exc) from None
        except Exception as exc:
            error = command_error(exc) if isinstance(exc, BkAuditError) else zookeeper_error(exc)
            if error is None:
                raise
            raise error from None


def _one_line(exc: click.UsageError) -> click.ClickException:
    """A usage error as `error: ...` and exit 2 (docs/cli.md), with where to find help; a group called without
    its subcommand still prints its help."""
    from bkaudit.cli_common import CommandError

    if isinstance(exc, click.exceptions.NoArgsIsHelpError):
        return exc
    where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
    return CommandError(exc.format_message() + where, ExitCode.USAGE)


def non_utf8_argument(argv: list[str]) -> str | None:
    """The first argument that is not valid UTF-8 (Python keeps its bytes as lone surrogates), its bytes
    escaped (`'/tmp/\\xff'`)."""
    import os

    for arg in argv:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return repr(os.fsencode(arg))[1:]
    return None


def _unavailable(name: str, why: str) -> click.Command:
    @click.command(name=name, help=f"(unavailable: {why})")
    def unavailable() -> None:
        raise click.ClickException(why)

    return unavailable


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="bkaudit")
@click.option("-v", "--verbose", count=True,
              help="more log output: -v library warnings and bkaudit info, -vv debug (default: quiet)")
def cli(verbose: int) -> None:
    """Audit Apache BookKeeper / Pulsar clusters: snapshot, check, publish, recover, report.

    Exit codes (docs/cli.md): 0 clean, 1 error, 2 usage or configuration, 3 findings at or above fail_on.
    """
    from bkaudit.logs import configure

    configure(verbose)


def run(argv: list[str] | None = None) -> int:
    """Run one command and return its exit code (docs/cli.md); a bug still prints its traceback (exit 1)."""
    args = argv if argv is not None else sys.argv[1:]
    bad = non_utf8_argument(args)
    if bad is not None:  # every id, path and setting bkaudit takes is text: ZooKeeper and Delta need UTF-8
        print(f"error: argument {bad} is not valid UTF-8", file=sys.stderr)
        return int(ExitCode.USAGE)
    try:
        cli.main(args=args, prog_name="bkaudit")
    except SystemExit as exc:
        return _code(exc.code)
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)
    except Exception:
        traceback.print_exc()
        return int(ExitCode.ERROR)
    return int(ExitCode.OK)


def _code(code: object) -> int:
    if code is None:
        return int(ExitCode.OK)
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message"), as Python itself prints it
    return int(ExitCode.ERROR)


def main(argv: list[str] | None = None) -> NoReturn:
    """The console script: run the command, then end the process without interpreter teardown.

    See bkaudit.shutdown for why (native Arrow/delta-rs threads abort a normal exit about 1 time in 20).
    """
    from bkaudit.shutdown import exit_process

    exit_process(run(argv))


if __name__ == "__main__":
    main()
