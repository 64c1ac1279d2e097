"""Helpers for the AutoRecovery integration tests: real `bkaudit autorecovery run` processes, ground truth.

Ground truth is what a test injected: the payload of every acknowledged entry (`write_ledgers`), the
bookies it killed or wiped. Durability is verified without bkaudit's own fragment logic: per ledger, per
segment, per bookie index, GetListOfEntries must list every entry of that index's striping, and every
acknowledged entry must read back with its payload.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from bkaudit.autorecovery.events import read_events
from bkaudit.formats import availability
from bkaudit.model.quorum import entries_of_bookie
from bkaudit.zk import registry
from bkaudit.zk import underreplication as ur
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]

FAST = {
    "BKAUDIT_ZK__SESSION_TIMEOUT_S": "4",
    "BKAUDIT_AUTORECOVERY__IDLE_POLL_S": "0.2",
    "BKAUDIT_AUTORECOVERY__RW_REREPLICATE_BACKOFF_S": "0.5",
    "BKAUDIT_AUTORECOVERY__LOCK_RELEASE_OF_FAILED_LEDGER_GRACE_S": "1.6",
    "BKAUDIT_AUTORECOVERY__OPEN_LEDGER_REREPLICATION_GRACE": "2",
    "BKAUDIT_RPC__REQUEST_TIMEOUT_S": "5",
    "BKAUDIT_CLIENT__READ_TIMEOUT_S": "5",
}


def payload(ledger_index: int, entry_id: int) -> bytes:
    return b"L%d-E%d-" % (ledger_index, entry_id) + bytes(range(entry_id % 200))


def env(**overrides: str) -> dict[str, str]:
    out = dict(os.environ)
    out.update(FAST)
    out.update({k: str(v) for k, v in overrides.items()})
    out.setdefault("BKAUDIT_LOG_LEVEL", "INFO")
    return out


def ar_command(cluster: Any, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bkaudit.cli",
        "autorecovery",
        *args,
        "--zk",
        cluster.zk,
        "--root",
        cluster.root,
    ]


def start_run(cluster: Any, tmp: Path, name: str, *args: str, **overrides: str) -> subprocess.Popen[bytes]:
    """A long-running `autorecovery run` process; stderr/stdout in tmp/<name>.log, events in <name>.events."""
    log = (tmp / f"{name}.log").open("ab")
    return subprocess.Popen(
        ar_command(cluster, "run", "--id", name, "--events", str(tmp / f"{name}.events"), *args),
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env(**overrides),
        cwd=ROOT,
    )


def run_once(
    cluster: Any, tmp: Path, name: str, *args: str, timeout: float = 120, **overrides: str
) -> tuple[int, dict[str, Any]]:
    """`autorecovery run --once --json`; (exit code, summary)."""
    proc = subprocess.run(
        ar_command(
            cluster, "run", "--once", "--json", "--id", name, "--events", str(tmp / f"{name}.events"), *args
        ),
        capture_output=True,
        env=env(**overrides),
        cwd=ROOT,
        timeout=timeout,
    )
    (tmp / f"{name}.log").write_bytes(proc.stderr)
    try:
        summary = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise AssertionError(
            f"no JSON summary (exit {proc.returncode}):\n{proc.stdout.decode()}\n"
            f"{proc.stderr.decode()[-4000:]}"
        ) from None
    return proc.returncode, summary


def start_once(cluster: Any, tmp: Path, name: str, *args: str, **overrides: str) -> subprocess.Popen[bytes]:
    """`autorecovery run --once --json` in the background (stdout = the summary, in tmp/<name>.out)."""
    out = (tmp / f"{name}.out").open("wb")
    log = (tmp / f"{name}.log").open("ab")
    return subprocess.Popen(
        ar_command(
            cluster, "run", "--once", "--json", "--id", name, "--events", str(tmp / f"{name}.events"), *args
        ),
        stdout=out,
        stderr=log,
        env=env(**overrides),
        cwd=ROOT,
    )


def summary_of(tmp: Path, name: str) -> dict[str, Any]:
    return json.loads((tmp / f"{name}.out").read_text().strip().splitlines()[-1])


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 30) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    return proc.wait(timeout)


def events(tmp: Path, name: str) -> list[dict[str, Any]]:
    path = tmp / f"{name}.events"
    return read_events(path) if path.exists() else []




def wait_absent(cluster: Any, bookie: str, timeout: float = 30) -> None:
    zk = cluster.zk_client()
    wait_for(
        lambda: registry.bookie_state(zk, bookie, cluster.root) == "absent",
        timeout,
        f"{bookie} to deregister",
    )


def write_ledgers(
    bk: Any, count: int, entries: int, *, ensemble: int = 3, wq: int = 2, aq: int = 2
) -> dict[int, list[bytes]]:
    """Closed ledgers; ledger id -> the payloads acknowledged (entry i = list[i])."""
    truth: dict[int, list[bytes]] = {}
    for n in range(count):
        with bk.create_ledger(ensemble, wq, aq) as handle:
            futures = [handle.add_entry_async(payload(n, e)) for e in range(entries)]
            assert [f.result(60) for f in futures] == list(range(entries))
        truth[handle.ledger_id] = [payload(n, e) for e in range(entries)]
    return truth


def queue(cluster: Any) -> list[int]:
    return list(ur.list_underreplicated(cluster.zk_client(), root=cluster.root))


def durability_violations(
    cluster: Any, bk: Any, ledger_ids: list[int], *, lost: set[str] = frozenset()
) -> list[str]:
    """Per ledger / segment / bookie index: the bookie is not lost and lists its whole striping."""
    pool = cluster.client_pool()
    problems = []
    for ledger_id in ledger_ids:
        metadata = bk.ledger_metadata(ledger_id)
        for i, segment, last in metadata.segment_ranges():
            if last is None:
                problems.append(f"ledger {ledger_id} is not closed")
                continue
            for b, bookie in enumerate(segment.ensemble):
                if bookie in lost:
                    problems.append(f"ledger {ledger_id} segment {i} still names lost bookie {bookie}")
                    continue
                want = entries_of_bookie(
                    b, segment.first_entry_id, last, metadata.ensemble_size, metadata.write_quorum
                )
                if want.count() == 0:
                    continue
                try:
                    held = availability.decode(pool.get(bookie).get_list_of_entries(ledger_id).result(10))
                except Exception as exc:
                    problems.append(f"ledger {ledger_id} segment {i} index {b} ({bookie}): {exc}")
                    continue
                gaps = held.missing(want.first, want.last, want)
                if gaps:
                    problems.append(f"ledger {ledger_id} segment {i} index {b} ({bookie}) lacks {gaps[:5]}")
    return problems


def assert_readable(bk: Any, truth: dict[int, list[bytes]]) -> None:
    """Every acknowledged entry reads back with its payload (reads go to the metadata's current replicas)."""
    for ledger_id, payloads in truth.items():
        reader = bk.open_ledger(ledger_id, recover=False)
        got = [e.payload for e in reader.read_entries(0, len(payloads) - 1)] if payloads else []
        assert got == payloads, f"ledger {ledger_id}: payloads differ"


def lock_intervals(tmp: Path, names: list[str]) -> dict[int, list[tuple[float, float, str]]]:
    """ledger -> [(locked_at, unlocking_at, worker)] from the event files of worker processes."""
    out: dict[int, list[tuple[float, float, str]]] = {}
    for name in names:
        open_at: dict[int, float] = {}
        for ev in events(tmp, name):
            ledger = ev.get("ledger")
            if ev["event"] == "locked":
                open_at[ledger] = ev["t"]
            elif ev["event"] == "unlocking" and ledger in open_at:
                out.setdefault(ledger, []).append((open_at.pop(ledger), ev["t"], name))
        for ledger, start in open_at.items():  # still held when the process ended (killed)
            out.setdefault(ledger, []).append((start, float("inf"), name))
    return out


def assert_no_overlap(intervals: dict[int, list[tuple[float, float, str]]]) -> None:
    for ledger, spans in intervals.items():
        spans = sorted(spans)
        for (_, e1, w1), (s2, _, w2) in itertools.pairwise(spans):
            assert e1 <= s2, f"ledger {ledger}: {w1} held it until {e1}, {w2} took it at {s2}"


# BookKeeper's nuke rule from its Java source (AbstractZkLedgerManagerFactory.validateAndNukeExistingCluster):
# every child of the ledgers root must be a special znode (AbstractZkLedgerManager.isSpecialZnode: available,
# cookies, LAYOUT, INSTANCEID, underreplication, idgen, idgen-long, ID-*) or a ledger parent node
# (HierarchicalLedgerManager: `\d{2,3}`). Written out here, not taken from bkaudit.zk.paths.
BOOKKEEPER_SPECIAL_ZNODES = {"available", "cookies", "LAYOUT", "INSTANCEID", "underreplication", "idgen",
                             "idgen-long"}


def children_blocking_nuke(zk: Any, root: str) -> list[str]:
    """Children of `root` that make `bookkeeper shell nukeexistingcluster` refuse to run."""
    import re

    return sorted(
        c for c in zk.get_children(root)
        if c not in BOOKKEEPER_SPECIAL_ZNODES and not c.startswith("ID-") and not re.fullmatch(r"\d{2,3}", c)
    )
