"""Options and helpers shared by CLI commands (JSON output, --zk/--dir resolution, errors as exit codes)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from bkaudit.errors import BkAuditError

F = TypeVar("F", bound=Callable[..., Any])


def zk_options(func: F) -> F:
    """--zk HOST:PORT, or --dir D (reads D/cluster.json), or $BKAUDIT_ZK; plus --root and --config."""
    func = click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                        help="settings file (default conf/bkaudit.toml or $BKAUDIT_CONF)")(func)
    func = click.option("--root", default=None, help="ledgers root znode (default /ledgers)")(func)
    func = click.option("--dir", "cluster_dir", type=click.Path(file_okay=False), default=None,
                        help="local cluster directory (reads its cluster.json)")(func)
    func = click.option("--zk", default=None,
                        help="ZooKeeper connect string HOST:PORT[,HOST:PORT] ($BKAUDIT_ZK)")(func)
    return func


def resolve_zk(zk: str | None, cluster_dir: str | None) -> str:
    """The connect string from --zk, else --dir's cluster.json, else $BKAUDIT_ZK; a clear error otherwise."""
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
    env = os.environ.get("BKAUDIT_ZK")
    if env:
        return env
    raise click.UsageError("no ZooKeeper given: use --zk HOST:PORT, --dir CLUSTER_DIR or set BKAUDIT_ZK")


def load_settings(zk: str | None, cluster_dir: str | None, root: str | None, config_path: str | None,
                  *, need_zk: bool = True, **overrides: Any) -> Any:
    """Settings with CLI flags applied on top of file and environment."""
    from bkaudit import config

    ov: dict[str, Any] = dict(overrides)
    if need_zk:
        ov["zk.connect"] = resolve_zk(zk, cluster_dir)
    if root:
        ov["zk.root"] = root
    try:
        settings = config.load(path=config_path, overrides=ov)
        from bkaudit.tables import location

        location.configure_from(settings)  # [tables] storage options for every warehouse URI
        return settings
    except BkAuditError as exc:
        raise click.UsageError(str(exc)) from None


def emit(data: Any, as_json: bool, human: Callable[[Any], str] | None = None) -> None:
    """Print `data` as one JSON document, or as human text."""
    if as_json:
        click.echo(json.dumps(data, sort_keys=False, default=str))
    else:
        click.echo(human(data) if human else json.dumps(data, indent=2, default=str))


def fail(message: str, code: int = 1) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)
