"""The `bkaudit` command.

click (not typer): it is already a transitive dependency of the stack, its lazy command groups keep start-up
fast (importing pyspark or grpc for `bkaudit decode` would cost seconds), and typer adds nothing we use.
Each command lives in the module of the subsystem it drives; this file only maps names to them.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from bkaudit import __version__

# command name -> "module:attribute"; modules are imported only when their command runs
COMMANDS: dict[str, str] = {
    "zk": "bkaudit.zk.commands:zk",
    "decode": "bkaudit.formats.commands:decode",
    "cluster": "bkaudit.cluster.commands:cluster",
    "bookie": "bkaudit.bookie.commands:bookie",
    "ledger": "bkaudit.client.commands:ledger",
    "snapshot": "bkaudit.spark.commands:snapshot",
    "check": "bkaudit.spark.commands:check",
    "violations": "bkaudit.tables.commands:violations",
    "tables": "bkaudit.tables.commands:tables_group",
    "autorecovery": "bkaudit.autorecovery.commands:autorecovery",
    "report": "bkaudit.report.commands:report",
    "demo": "bkaudit.cluster.demo:demo",
    "decommission-audit": "bkaudit.spark.decommission:decommission_audit",
    "lifecycle": "bkaudit.lifecycle.commands:lifecycle",
    "admin": "bkaudit.admin.commands:admin",
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


def _unavailable(name: str, why: str) -> click.Command:
    @click.command(name=name, help=f"(unavailable: {why})")
    def unavailable() -> None:
        raise click.ClickException(why)

    return unavailable


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="bkaudit")
def cli() -> None:
    """Audit Apache BookKeeper / Pulsar clusters: snapshot, check, publish, recover, report."""


def main(argv: list[str] | None = None) -> Any:
    return cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="bkaudit")


if __name__ == "__main__":
    main()
