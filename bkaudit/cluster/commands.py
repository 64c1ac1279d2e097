"""`bkaudit cluster ...`: initialise a cluster's metadata; run a local cluster (up / status / down).

Also `bkaudit bookie stop|kill|start`: they drive a local cluster's bookie processes, so they live here and
`bookie_group` is the bookie package's own group plus them (the bookie package does not import `cluster`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import click

from bkaudit.cli_common import BOOKIE_ID, ZkTarget, emit, exit_code_for, fail, zk_target
from bkaudit.errors import BkAuditError


@click.group()
def cluster() -> None:
    """BookKeeper cluster metadata and local clusters (ZooKeeper + bookie processes on loopback)."""


@cluster.command()
@zk_target
def init(target: ZkTarget) -> None:
    """Create a new cluster's metadata (BookKeeper's initNewCluster); bookies refuse to start without it."""
    from bkaudit.config import ZkSettings

    settings = target.settings()
    zk_settings = settings.get(ZkSettings)
    with target.store(settings) as store:
        created = store.init_cluster(layout=zk_settings.layout)
    click.echo(f"{'initialised' if created else 'already initialised:'} cluster at {zk_settings.root} "
               f"on {zk_settings.connect}")


@cluster.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False), required=True)
@click.option("--bookies", type=click.IntRange(0, 64), default=3, show_default=True)
@click.option("--racks", type=click.IntRange(1, 64), default=3, show_default=True)
@click.option("--zk-port", type=click.IntRange(1, 65535), default=None, help="ZooKeeper port (default: free)")
@click.option("--json", "as_json", is_flag=True)
def up(directory: str, bookies: int, racks: int, zk_port: int | None, as_json: bool) -> None:
    """Start ZooKeeper and N bookies in the background; returns once all are registered."""
    from bkaudit.cluster.local import LocalCluster

    try:
        local = LocalCluster.up(directory, bookies=bookies, racks=racks, zk_port=zk_port, detach=True)
    except BkAuditError as exc:
        fail(str(exc), exit_code_for(exc))
    info = local.status()
    _close(local)
    emit(info, as_json, _human_status)


@cluster.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False), required=True)
@click.option("--json", "as_json", is_flag=True)
def status(directory: str, as_json: bool) -> None:
    """Each bookie: registered writable / readonly / absent, and whether its process is alive."""
    from bkaudit.cluster.local import LocalCluster

    try:
        local = LocalCluster.load(directory)
        info = local.status()
    except BkAuditError as exc:
        fail(str(exc), exit_code_for(exc))
    _close(local)
    emit(info, as_json, _human_status)


@cluster.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False), required=True)
@click.option("--purge", is_flag=True, help="also delete the directory (data, logs, cluster.json)")
def down(directory: str, purge: bool) -> None:
    """Stop every bookie gracefully and the cluster's ZooKeeper."""
    from bkaudit.cluster.local import LocalCluster

    try:
        LocalCluster.load(directory).down()
    except BkAuditError as exc:
        fail(str(exc), exit_code_for(exc))
    if purge:
        shutil.rmtree(Path(directory))
    click.echo(f"cluster in {directory} {'stopped and purged' if purge else 'stopped'}")


def _close(local: Any) -> None:
    for client in local._clients:
        client.stop()
        client.close()
    local._clients.clear()


def _human_status(info: dict[str, Any]) -> str:
    lines = [f"ZooKeeper {info['zk']} root {info['root']}"]
    for b in info["bookies"]:
        alive = "up" if b["alive"] else "down"
        lines.append(f"  {b['id']:22} {b['state']:9} {alive:5} rack {b['rack'] or '-':8} {b['data_dir']}")
    return "\n".join(lines)


# -- bkaudit bookie stop|kill|start: a local cluster's bookie processes ----------------------------------
def _cluster_op(cluster_dir: str, bookie_id: str, op: str) -> None:
    from bkaudit.cluster.local import LocalCluster

    try:
        cluster = LocalCluster.load(cluster_dir)
        getattr(cluster, op)(bookie_id)
    except BkAuditError as exc:
        fail(str(exc), exit_code_for(exc))


def _local_options(func: Any) -> Any:
    func = click.option("--bookie", "bookie_id", type=BOOKIE_ID, required=True,
                        help="bookie id (see cluster status)")(func)
    return click.option("--dir", "cluster_dir", type=click.Path(file_okay=False), required=True,
                        help="local cluster directory")(func)


@click.command()
@_local_options
def stop(cluster_dir: str, bookie_id: str) -> None:
    """Stop a local cluster's bookie gracefully (SIGTERM)."""
    _cluster_op(cluster_dir, bookie_id, "stop_bookie")
    click.echo(f"stopped {bookie_id}")


@click.command()
@_local_options
def kill(cluster_dir: str, bookie_id: str) -> None:
    """Kill a local cluster's bookie (SIGKILL: no deregistration, session expiry removes it)."""
    _cluster_op(cluster_dir, bookie_id, "kill_bookie")
    click.echo(f"killed {bookie_id}")


@click.command()
@_local_options
def start(cluster_dir: str, bookie_id: str) -> None:
    """(Re)start a local cluster's bookie with its id, port, data directory and rack."""
    _cluster_op(cluster_dir, bookie_id, "start_bookie")
    click.echo(f"started {bookie_id}")


def _bookie_group() -> click.Group:
    from bkaudit.bookie.commands import bookie

    return click.Group(
        bookie.name, commands=[*bookie.commands.values(), stop, kill, start], help=bookie.help
    )


bookie_group = _bookie_group()
