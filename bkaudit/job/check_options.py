"""A checker run's per-run choices, defined once: the `CheckOptions` fields and the flags that set them.

`CHECK_FLAGS` is the one list of the checker's flags; `click_options` makes them `bkaudit check` options and
`add_arguments` the spark-submit job's (`jobs/metadata_checker.py`) argparse arguments, and `options_from`
turns either's parsed values into `CheckOptions`. None means "take the `[checker]` setting".
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import click

from bkaudit.audit.classification import FailOn
from bkaudit.errors import ConfigError

if TYPE_CHECKING:
    from bkaudit.tables.location import Warehouse

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class CheckOptions:
    """Per-run choices (CLI flags / job arguments); None = take the `[checker]` setting."""

    warehouse: Warehouse | str  # a plain URI until the run resolves it (`spark.checker_run.RunContext`)
    snapshot_id: str | None = None
    fresh: bool = False
    run_id: str | None = None
    publish_underreplicated: bool | None = None
    publish_placement: bool | None = None
    fail_on: str | None = None
    metrics_file: str | None = None
    pushgateway_url: str | None = None
    now_ms: int | None = None
    progress: Callable[[str], None] | None = None

    def setting_overrides(self) -> dict[str, Any]:
        """The flags that set a `[checker]` key, as `config.with_overrides` takes them (None: the setting).

        An empty `fail_on` (only the Python API can pass one: both parsers offer the three choices) also means
        the setting, as it always has; an empty metrics file is a choice (no file)."""
        values = {flag.setting: getattr(self, flag.field) for flag in CHECK_FLAGS if flag.setting}
        values["checker.fail_on"] = self.fail_on or None
        return values


@dataclass(frozen=True)
class Flag:
    """One command-line flag of the checker, setting the `CheckOptions` field `field`."""

    field: str
    option: str
    help: str
    kind: Literal["text", "switch", "tristate", "choice"] = "text"
    choices: tuple[str, ...] = ()
    setting: str = ""
    """The `section.key` the flag overrides for its run ("": a choice of the run only)."""


FAIL_ON_CHOICES = tuple(f.value for f in FailOn)

CHECK_FLAGS: tuple[Flag, ...] = (
    Flag("snapshot_id", "--snapshot-id", "snapshot to check (default: the latest successful one)"),
    Flag("fresh", "--fresh", "take a fresh snapshot first and check it", "switch"),
    Flag(
        "run_id",
        "--run-id",
        "id of this run (default: UTC time + suffix); re-using one replaces that run's rows",
    ),
    Flag(
        "publish_underreplicated",
        "--publish-underreplicated",
        "mark ledgers with durability violations under-replicated in ZooKeeper ([checker] "
        "publish_underreplicated, off by default)",
        "tristate",
        setting="checker.publish_underreplicated",
    ),
    Flag(
        "publish_placement",
        "--publish-placement",
        "also mark placement_fail ledgers, with no replicas (BookKeeper's BP-54)",
        "tristate",
        setting="checker.publish_placement",
    ),
    Flag(
        "fail_on",
        "--fail-on",
        "lowest severity that makes the exit code 3 (default [checker] fail_on = critical)",
        "choice",
        FAIL_ON_CHOICES,
        setting="checker.fail_on",
    ),
    Flag("metrics_file", "--metrics-file", "write Prometheus text here ([checker] metrics_file)",
         setting="checker.metrics_file"),
    # not an override: the flag takes any address the push gateway client takes (`gw:9091` too), where the
    # [checker] key takes http(s) URLs only; export_run_metrics picks it over the key
    Flag(
        "pushgateway_url",
        "--pushgateway",
        "push metrics to this Prometheus push gateway URL ([checker] pushgateway_url)",
    ),
)
assert {f.field for f in CHECK_FLAGS} <= {f.name for f in fields(CheckOptions)}


def click_options(func: F) -> F:
    """Decorate a click command with every checker flag (parameters named like the CheckOptions fields)."""
    for flag in reversed(CHECK_FLAGS):
        if flag.kind == "switch":
            decorator = click.option(flag.option, flag.field, is_flag=True, help=flag.help)
        elif flag.kind == "tristate":
            negative = f"--no-{flag.option[2:]}"
            decorator = click.option(f"{flag.option}/{negative}", flag.field, default=None, help=flag.help)
        elif flag.kind == "choice":
            decorator = click.option(
                flag.option, flag.field, type=click.Choice(list(flag.choices)), default=None, help=flag.help
            )
        else:
            decorator = click.option(flag.option, flag.field, default=None, help=flag.help)
        func = decorator(func)
    return func


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every checker flag to an argparse parser (dest named like the CheckOptions fields)."""
    for flag in CHECK_FLAGS:
        if flag.kind == "switch":
            parser.add_argument(flag.option, dest=flag.field, action="store_true", help=flag.help)
        elif flag.kind == "tristate":
            parser.add_argument(
                flag.option,
                dest=flag.field,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=flag.help,
            )
        elif flag.kind == "choice":
            parser.add_argument(
                flag.option, dest=flag.field, choices=flag.choices, default=None, help=flag.help
            )
        else:
            parser.add_argument(flag.option, dest=flag.field, default=None, help=flag.help)


def flag_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The checker flags' values out of a command's parsed parameters (click kwargs or argparse vars)."""
    return {f.field: values.get(f.field) for f in CHECK_FLAGS}


def options_from(
    values: Mapping[str, Any], *, warehouse: Warehouse | str, progress: Callable[[str], None] | None = None
) -> CheckOptions:
    flags = flag_values(values)
    flags["fresh"] = bool(flags["fresh"])
    return CheckOptions(warehouse=warehouse, progress=progress, **flags)


def validate_options(options: CheckOptions) -> None:
    if not options.warehouse:
        raise ConfigError("--warehouse", "a warehouse (Delta tables directory) is required")
    if options.fresh and options.snapshot_id:
        raise ConfigError("--fresh", "use either --snapshot-id or --fresh, not both")
    if options.fail_on is not None:
        try:
            FailOn(options.fail_on)
        except ValueError:
            raise ConfigError("--fail-on", "must be one of never, warning, critical") from None
