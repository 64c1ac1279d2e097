"""`bkaudit chaos`: run seeded fault schedules against a fresh local cluster and check the invariants.

Exit codes (bkaudit.exitcodes): 0 every invariant held, 3 an invariant was violated (the seed and the
history excerpt are printed; `bkaudit chaos --seed S` replays the schedule), 2 bad options, 1 the run could
not happen.
"""

from __future__ import annotations

import json
import logging
import random
import signal
import sys
from pathlib import Path
from typing import Any

import click

from bkaudit.exitcodes import ExitCode


@click.command("chaos")
@click.option(
    "--seed", type=int, default=None, help="schedule seed (default: random, printed); replays a run"
)
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=1,
    help="run this many schedules, seeds SEED, SEED+1, ... (one fresh cluster each)",
)
@click.option(
    "--duration",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="seconds of faults per schedule (healing, checking and verifying come after)",
)
@click.option("--bookies", type=click.IntRange(min=3, max=20), default=5, show_default=True)
@click.option("--racks", type=click.IntRange(min=1), default=3, show_default=True)
@click.option(
    "--max-bookie-failures",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="bookie failures at once; writers use AQ > this, so the guarantee applies",
)
@click.option(
    "--faults",
    "faults",
    default="all",
    show_default=True,
    help="comma-separated fault kinds (bookie_kill, bookie_pause, ..., see docs/reliability.md)",
)
@click.option(
    "--mean-gap",
    type=click.FloatRange(min=0.1),
    default=3.0,
    show_default=True,
    help="mean seconds between faults",
)
@click.option("--writers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option(
    "--crash-probability",
    type=click.FloatRange(0, 1),
    default=0.3,
    show_default=True,
    help="chance a writer stops without closing its ledger (recovered later)",
)
@click.option(
    "--java-bookies",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="the first N bookies are Apache BookKeeper's own (sorted, interleaved, db storage in turn; "
    "`make bookkeeper` fetches them)",
)
@click.option(
    "--java-autorecovery",
    is_flag=True,
    help="add Apache BookKeeper's AutoRecoveryMain to the election (and to the AutoRecovery faults)",
)
@click.option("--no-checker", is_flag=True, help="skip the checker runs (and invariants 4-5's checks)")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    default=None,
    help="cluster data, logs and history go here (default: a new temporary directory)",
)
@click.option(
    "--history",
    "history_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="write the history (JSON lines) here (default: WORKDIR/history.jsonl)",
)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object per schedule")
def chaos(
    seed: int | None,
    runs: int,
    duration: float,
    bookies: int,
    racks: int,
    max_bookie_failures: int,
    faults: str,
    mean_gap: float,
    writers: int,
    crash_probability: float,
    java_bookies: int,
    java_autorecovery: bool,
    no_checker: bool,
    workdir: str | None,
    history_path: str | None,
    as_json: bool,
) -> None:
    """Run seeded fault schedules on a local cluster and verify BookKeeper's guarantee from the history."""
    from bkaudit.chaos.runner import ChaosSettings, run
    from bkaudit.chaos.schedule import parse_kinds

    signal.signal(signal.SIGTERM, _terminate)  # unwind: the run's `finally` stops every process it started
    if logging.getLogger("bkaudit").getEffectiveLevel() > logging.INFO:
        logging.getLogger("bkaudit.client").setLevel(logging.ERROR)  # not -v: ensemble changes are expected
    try:
        kinds = parse_kinds(faults)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--faults") from None
    if java_bookies > bookies:
        raise click.BadParameter(f"at most --bookies ({bookies})", param_hint="--java-bookies")
    if java_bookies or java_autorecovery:
        from bkaudit.cluster.java import JavaBookKeeper
        from bkaudit.errors import ClusterError

        try:
            JavaBookKeeper.locate()
        except ClusterError as exc:
            raise click.UsageError(str(exc)) from None
    if max_bookie_failures >= bookies - 1:
        raise click.BadParameter("must leave at least two bookies up", param_hint="--max-bookie-failures")
    if runs > 1 and history_path:
        raise click.BadParameter(
            "one history file cannot hold several runs; use --workdir", param_hint="--history"
        )
    first = seed if seed is not None else random.SystemRandom().randrange(1, 1 << 31)
    worst = int(ExitCode.OK)
    totals: dict[str, Any] = {
        "schedules": 0,
        "faults_injected": {},
        "entries_acknowledged": 0,
        "violations": 0,
    }
    for n in range(runs):
        s = first + n
        if not as_json:
            mixed = f" ({java_bookies} Java)" if java_bookies else ""
            mixed += ", Java AutoRecovery" if java_autorecovery else ""
            click.echo(f"chaos: seed {s}, {duration:g}s of faults, {bookies} bookies{mixed}", err=True)
        settings = ChaosSettings(
            seed=s,
            duration_s=duration,
            bookies=bookies,
            racks=racks,
            max_bookie_failures=max_bookie_failures,
            kinds=kinds,
            writers=writers,
            crash_probability=crash_probability,
            java_bookies=java_bookies,
            java_autorecovery=java_autorecovery,
            checker=not no_checker,
            mean_gap_s=mean_gap,
            workdir=Path(workdir) / f"seed-{s}" if workdir else None,
            history=Path(history_path) if history_path else None,
        )
        result = run(settings)
        doc = result.as_dict()
        totals["schedules"] += 1
        totals["entries_acknowledged"] += result.acknowledged
        totals["violations"] += len(result.violations)
        for kind, count in result.injected.items():
            totals["faults_injected"][kind] = totals["faults_injected"].get(kind, 0) + count
        worst = max(worst, result.exit_code)
        if as_json:
            click.echo(json.dumps(doc, default=str))
        else:
            click.echo(_human(doc))
    if runs > 1 and not as_json:
        click.echo(f"total: {json.dumps(totals)}")
    sys.exit(worst)


def _terminate(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM (`timeout`) must not cut the cleanup
    raise KeyboardInterrupt  # `bkaudit` turns it into exit code 130 after the cleanup ran


def _human(doc: dict[str, Any]) -> str:
    lines = [
        f"seed {doc['seed']}: {doc['entries_acknowledged']} entries acknowledged "
        f"on {doc['ledgers']} ledgers, "
        f"faults {json.dumps(doc['faults_injected'], sort_keys=True)}, {doc['seconds']}s",
        *(
            f"  check {c['n']}: exit {c['exit_code']}, {c['findings']} findings {c['counts']}"
            + (f" error: {c['error'][-300:]}" if c["error"] else "")
            for c in doc["checks"]
        ),
        f"  history: {doc['history']}",
    ]
    if not doc["violations"]:
        lines.append("  invariants: all held")
        return "\n".join(lines)
    lines.append(f"  INVARIANT VIOLATIONS ({len(doc['violations'])}); replay: {doc['replay']}")
    lines += [f"  - {v['invariant']} ledger {v['ledger']}: {v['detail']}" for v in doc["violations"]]
    lines.append("  history excerpt:")
    lines += [f"    {json.dumps(e, default=str)}" for e in doc["excerpt"]]
    return "\n".join(lines)
