"""What a `--once` run reports, and the exit codes batch pipelines branch on.

Exit codes of `bkaudit autorecovery run --once`:
- 0 `EXIT_DRAINED`: the queue is empty;
- 1 `EXIT_TIMED_OUT`: `--timeout` passed with work left (each left ledger is listed with its reason:
  `locked_elsewhere`, `failing`, `deferred_open`, `pending`, `disabled`, `data_lost`);
- 1 `EXIT_ERROR` too: ZooKeeper unreachable (bad configuration exits 2, as every command: bkaudit.exitcodes);
- 3 `EXIT_DATA_LOST`: nothing left to do, but some ledgers are recorded as data-lost (terminal: their markers
  stay; see `autorecovery status`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bkaudit.autorecovery import metrics as m

EXIT_DRAINED = 0
EXIT_TIMED_OUT = 1
EXIT_ERROR = 1  # ZooKeeper unreachable or the service failed; configuration errors exit 2 (bkaudit.exitcodes)
EXIT_DATA_LOST = 3


@dataclass(frozen=True)
class LeftLedger:
    ledger_id: int
    reason: str
    detail: str = ""


@dataclass(frozen=True)
class DrainSummary:
    data: dict[str, Any]

    @property
    def exit_code(self) -> int:
        return int(self.data["exit_code"])

    def human(self) -> str:
        d = self.data
        rates = d["rates"]
        lines = [
            f"autorecovery {d['node']}: {'timed out' if d['timed_out'] else 'drained'} after "
            f"{d['elapsed_s']:.1f}s (exit {d['exit_code']})",
            f"  replicated {d['replicated']} ledgers, {d['entries_written']} entries, "
            f"{d['bytes_written']} bytes "
            f"({rates['entries_per_s']:.0f} entries/s, {rates['bytes_per_s'] / 1e6:.2f} MB/s, "
            f"{rates['ledgers_per_min']:.0f} ledgers/min)",
        ]
        if d["auditor"]["elected"]:
            lines.append(f"  auditor: elected, {d['auditor']['audits']} audits")
        for item in d["left"]:
            lines.append(f"  left: ledger {item['ledger_id']}: {item['reason']} ({item['detail']})")
        for record in d["data_lost"]:
            ranges = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in record["lost_entry_ranges"])
            lines.append(
                f"  DATA LOST: ledger {record['ledger_id']}: entries {ranges} "
                f"(bookies {', '.join(record['bookies'])}; detected {record['detected_at']})"
            )
        return "\n".join(lines)


def exit_code(left: list[LeftLedger], *, timed_out: bool) -> int:
    if timed_out and any(item.reason != "data_lost" for item in left):
        return EXIT_TIMED_OUT
    if left:
        return EXIT_DATA_LOST
    return EXIT_DRAINED


def drain_summary(
    node: str,
    left: list[LeftLedger],
    data_lost: list[dict[str, Any]],
    metrics: m.AutoRecoveryMetrics,
    *,
    timed_out: bool,
    elapsed_s: float,
    auditor: bool,
    audits: int,
) -> DrainSummary:
    timed_out = timed_out and any(item.reason != "data_lost" for item in left)
    return DrainSummary(
        {
            "node": node,
            "drained": not timed_out,
            "timed_out": timed_out,
            "exit_code": exit_code(left, timed_out=timed_out),
            "elapsed_s": round(elapsed_s, 3),
            "replicated": int(metrics.get(m.NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED)),
            "entries_written": int(metrics.get(m.NUM_ENTRIES_WRITTEN)),
            "bytes_written": int(metrics.get(m.NUM_BYTES_WRITTEN)),
            "auditor": {"elected": auditor, "audits": audits},
            "left": [{"ledger_id": i.ledger_id, "reason": i.reason, "detail": i.detail} for i in left],
            "data_lost": data_lost,
            "rates": metrics.rates(),
            "metrics": metrics.snapshot(),
        }
    )
