"""`bkaudit demo`: a fresh working directory, one run of the demo, where everything ended up; exit status."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from bkaudit.cli_common import json_default
from bkaudit.demo.run import Demo

MARKER = ".bkaudit-demo"


def where(summary: dict[str, Any], bin_dir: str) -> str:
    """The closing text: where everything is and how to query it."""
    d, wh, cfg = summary["dir"], summary["warehouse"], summary["config"]
    run = summary.get("runs", {}).get("recovered", {}).get("run_id", "demo-3-recovered")
    bk = f"{bin_dir}/bkaudit" if bin_dir else "bkaudit"
    py = f"{bin_dir}/python" if bin_dir else "python"
    lines = [
        "",
        click.style("Everything is in " + d, bold=True),
        f"  report     {summary.get('report_index', '(not written)')}   (open in a browser; works offline)",
        f"  warehouse  {wh}   (Delta tables: ledgers, violations, audit_runs, bookie_checks, ...)",
        f"  cluster    {summary.get('cluster', {}).get('dir', d + '/cluster')}   (cluster.json, bookie logs)",
        f"  settings   {cfg}   (use with --config)",
        f"  summary    {d}/demo.json",
        "",
        click.style("Query the tables:", bold=True),
        f"  {bk} violations --config {cfg} --run-id demo-2-faults",
        *([f"  {bk} lifecycle state {summary['drain']['bookie']} --config {cfg}   "
           "(Drained: `lifecycle remove` deletes its cookie)"] if summary.get("drain") else []),
        f"  {bk} violations --config {cfg} --run-id {run} --category placement_fail --json",
        f"  {bk} report --warehouse {wh} --run-id demo-2-faults --out {d}/report",
        f"  {py} -c \"from bkaudit import tables; from bkaudit.spark.session import get_session; "
        f"tables.load(get_session(), '{wh}', 'violations', latest=False)"
        ".groupBy('run_id', 'category').count().orderBy('run_id').show(50, False)\"",
    ]
    return "\n".join(lines)


def _prepare_dir(directory: str | None) -> Path:
    """A fresh directory: ./demo-output/<UTC time> by default; an earlier demo's directory is reused."""
    if directory is None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        path = Path("demo-output") / stamp
    else:
        path = Path(directory)
    path = path.resolve()
    if path.exists() and any(path.iterdir()):
        if not (path / MARKER).exists():
            raise click.UsageError(f"{path} is not empty and was not made by `bkaudit demo`; "
                                   "choose another --dir")
        _stop_leftover(path / "cluster")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).write_text("made by bkaudit demo\n")
    return path


def _stop_leftover(cluster_dir: Path) -> None:
    """Stop a cluster an earlier `--keep` demo left running in this directory."""
    if not (cluster_dir / "cluster.json").exists():
        return
    from bkaudit.cluster.local import LocalCluster

    try:
        LocalCluster.load(cluster_dir).down()
    except Exception:
        pass


@click.command("demo")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="working directory (default ./demo-output/<UTC time>; an earlier demo's is reused)")
@click.option("--ledgers", type=click.IntRange(20, 20_000), default=300, show_default=True,
              help="ledgers to write")
@click.option("--seed", type=int, default=7, show_default=True, help="workload seed")
@click.option("--keep", is_flag=True, help="leave the cluster running at the end")
@click.option("--json", "as_json", is_flag=True, help="progress on stderr, the summary as JSON on stdout")
def demo(directory: str | None, ledgers: int, seed: int, keep: bool, as_json: bool) -> None:
    """Start a local cluster, damage it, audit it, repair it, audit again, write the report."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    out = sys.stderr if as_json else sys.stdout
    path = _prepare_dir(directory)
    click.echo(click.style(f"bkaudit demo in {path}", bold=True), file=out)
    summary = Demo(path, ledgers, keep=keep, seed=seed, out=out).run()
    if summary["interrupted"]:
        verdict = "interrupted; what it started is stopped" + (" (but the cluster: --keep)" if keep else "")
    else:
        verdict = "all expectations met" if summary["ok"] else "SOME EXPECTATIONS FAILED"
        click.echo(where(summary, str(Path(sys.executable).parent)), file=out)
    click.echo(click.style(f"\n{verdict} in {summary['seconds']:.0f}s", bold=True,
                           fg="green" if summary["ok"] else "red"), file=out)
    if as_json:
        click.echo(json.dumps(summary, default=json_default))
    sys.exit(130 if summary["interrupted"] else 0 if summary["ok"] else 1)
