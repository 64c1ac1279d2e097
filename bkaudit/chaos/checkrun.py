"""The one adapter between chaos and the checker: `bkaudit check --fresh --json`, then `bkaudit violations`.

Chaos drives the checker exactly as an operator does (its public commands, in a subprocess), so it needs
nothing from the checker's internals; if those commands change, only this module follows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bkaudit.config import ZkSettings

CHECKER_ENV = {
    "BKAUDIT_SNAPSHOT__VALIDATE": "false",
    "BKAUDIT_CHECKER__RETRY_DELAY_S": "0.5",
    "BKAUDIT_CHECKER__CALL_TIMEOUT_S": "5",
}


@dataclass(frozen=True)
class CheckOutcome:
    exit_code: int
    run_id: str | None
    counts: dict[str, int] = field(default_factory=dict)
    findings: tuple[dict[str, Any], ...] = ()
    error: str = ""


def run_checker(
    *, zk: ZkSettings, warehouse: str, publish_underreplicated: bool, timeout_s: float = 600
) -> CheckOutcome:
    """Snapshot + check the cluster `zk` names once (its connect string and root, as the CLI's flags); the
    findings of that run (category, ledger_id, bookie_id, ...)."""
    env = {**os.environ, **CHECKER_ENV}
    publish = "--publish-underreplicated" if publish_underreplicated else "--no-publish-underreplicated"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bkaudit.cli",
            "check",
            "--zk",
            zk.connect,
            "--root",
            zk.root,
            "--warehouse",
            warehouse,
            "--fresh",
            "--json",
            "--fail-on",
            "never",
            publish,
        ],
        capture_output=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )
    summary = _last_json(proc.stdout)
    if summary is None or proc.returncode not in (0, 3):
        return CheckOutcome(proc.returncode, None, error=_tail(proc.stderr) or _tail(proc.stdout))
    run_id = str(summary.get("run_id"))
    listing = subprocess.run(
        [
            sys.executable,
            "-m",
            "bkaudit.cli",
            "violations",
            "--warehouse",
            warehouse,
            "--run-id",
            run_id,
            "--json",
        ],
        capture_output=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )
    rows = _last_json(listing.stdout)
    if rows is None or listing.returncode != 0:
        return CheckOutcome(
            listing.returncode or 1, run_id, dict(summary.get("counts", {})), error=_tail(listing.stderr)
        )
    return CheckOutcome(
        proc.returncode, run_id, dict(summary.get("counts", {})), tuple(rows.get("violations", []))
    )


def _last_json(out: bytes) -> dict[str, Any] | None:
    text = out.decode("utf-8", "replace").strip()
    for candidate in (text, *reversed(text.splitlines())):
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _tail(out: bytes, chars: int = 2000) -> str:
    return out.decode("utf-8", "replace")[-chars:]
