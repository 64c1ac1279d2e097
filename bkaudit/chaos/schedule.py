"""The fault schedule: a pure function of the seed and the run's shape, so `--seed S` replays it exactly.

Only the schedule is deterministic; the cluster's timing is not (threads, a loaded machine). A replay injects
the same faults, on the same targets, at the same offsets from the start of the run.

Faults that take a bookie away from clients (kill, pause, wipe, disk full, session expiry, proxy faults) are
"bookie failures": the generator never lets more than `max_bookie_failures` overlap, because BookKeeper only
promises durability while at most AQ-1 of an entry's bookies fail. A wiped bookie stays failed until
AutoRecovery had `repair_window_s` to copy its data back.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


class FaultKind(enum.StrEnum):
    BOOKIE_KILL = "bookie_kill"  # SIGKILL, restarted after the hold
    BOOKIE_PAUSE = "bookie_pause"  # SIGSTOP, SIGCONT after the hold
    BOOKIE_RESTART = "bookie_restart"  # SIGTERM (graceful) and start again
    BOOKIE_WIPE = "bookie_wipe"  # SIGKILL, data deleted, cookie formatted, restarted empty
    DISK_FULL = "disk_full"  # the bookie sees a full disk (read-only) for the hold
    BOOKIE_SESSION_EXPIRY = "bookie_session_expiry"  # frozen past its ZooKeeper session timeout
    AUTORECOVERY_SESSION_EXPIRY = "autorecovery_session_expiry"  # an AutoRecovery process, the same way
    ZK_RESTART = "zk_restart"  # the ZooKeeper server stops and starts on the same port and data
    PROXY_DELAY = "proxy_delay"  # the client<->bookie proxy delays every chunk
    PROXY_DROP = "proxy_drop"  # ... swallows traffic (a silent network)
    PROXY_RESET = "proxy_reset"  # ... resets connections (TCP RST)
    PROXY_TRUNCATE = "proxy_truncate"  # ... forwards half a response, then resets
    CORRUPT_ZNODE = "corrupt_znode"  # a closed ledger's metadata znode overwritten with garbage
    AUTORECOVERY_KILL = "autorecovery_kill"  # SIGKILL of an AutoRecovery process (auditor or worker)


BOOKIE_FAILURES: frozenset[FaultKind] = frozenset(
    {
        FaultKind.BOOKIE_KILL,
        FaultKind.BOOKIE_PAUSE,
        FaultKind.BOOKIE_RESTART,
        FaultKind.BOOKIE_WIPE,
        FaultKind.DISK_FULL,
        FaultKind.BOOKIE_SESSION_EXPIRY,
        FaultKind.PROXY_DELAY,
        FaultKind.PROXY_DROP,
        FaultKind.PROXY_RESET,
        FaultKind.PROXY_TRUNCATE,
    }
)
"""Faults that make one bookie unavailable (or lossy) for a while; they count against the failure budget."""

AUTORECOVERY_FAULTS: frozenset[FaultKind] = frozenset(
    {
        FaultKind.AUTORECOVERY_KILL,
        FaultKind.AUTORECOVERY_SESSION_EXPIRY,
    }
)

HOLD_S: dict[FaultKind, tuple[float, float]] = {
    FaultKind.BOOKIE_KILL: (2.0, 8.0),
    FaultKind.BOOKIE_PAUSE: (1.0, 5.0),
    FaultKind.BOOKIE_RESTART: (0.0, 0.0),
    FaultKind.BOOKIE_WIPE: (1.0, 3.0),
    FaultKind.DISK_FULL: (3.0, 8.0),
    FaultKind.BOOKIE_SESSION_EXPIRY: (0.0, 0.0),  # the injector holds for the session timeout itself
    FaultKind.AUTORECOVERY_SESSION_EXPIRY: (0.0, 0.0),
    FaultKind.ZK_RESTART: (0.5, 3.0),
    FaultKind.PROXY_DELAY: (2.0, 6.0),
    FaultKind.PROXY_DROP: (1.0, 4.0),
    FaultKind.PROXY_RESET: (0.5, 2.0),
    FaultKind.PROXY_TRUNCATE: (0.5, 2.0),
    FaultKind.CORRUPT_ZNODE: (0.0, 0.0),
    FaultKind.AUTORECOVERY_KILL: (1.0, 5.0),
}
"""How long a fault lasts before it is healed (uniform in the range)."""

SESSION_HOLD_EXTRA_S = 3.0
"""A session-expiry fault freezes its process this much longer than the ZooKeeper session timeout."""


@dataclass(frozen=True)
class Fault:
    """One fault of the schedule: `kind` at `at_s` seconds into the run on `target`, healed after `hold_s`.

    `target` is a bookie index (bookie and proxy faults), an AutoRecovery process index, a ledger pick
    (corrupt_znode: an index into the closed ledgers at that moment) or 0 (zk_restart).
    """

    index: int
    at_s: float
    kind: FaultKind
    target: int
    hold_s: float


@dataclass(frozen=True)
class Schedule:
    seed: int
    duration_s: float
    faults: tuple[Fault, ...]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.faults:
            out[f.kind.value] = out.get(f.kind.value, 0) + 1
        return out


def parse_kinds(text: str | None) -> tuple[FaultKind, ...]:
    """`--faults kind,kind,...` (None or "all": every kind); ValueError naming the unknown ones."""
    if text is None or text.strip() in ("", "all"):
        return tuple(FaultKind)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in FaultKind.__members__.values()]
    if unknown:
        raise ValueError(
            f"unknown fault kind(s) {', '.join(unknown)}; known: {', '.join(k.value for k in FaultKind)}"
        )
    return tuple(dict.fromkeys(FaultKind(n) for n in names))


def make_schedule(
    *,
    seed: int,
    duration_s: float,
    bookies: int,
    kinds: Sequence[FaultKind],
    max_bookie_failures: int = 1,
    autorecovery_processes: int = 2,
    mean_gap_s: float = 3.0,
    session_timeout_s: float = 6.0,
    repair_window_s: float = 20.0,
) -> Schedule:
    """Faults at random offsets in [0.5 s, duration_s), no more than `max_bookie_failures` bookie failures
    at once (counting a wipe until `repair_window_s` after it heals), each bookie failing alone."""
    if duration_s <= 0 or bookies < 1 or max_bookie_failures < 0 or mean_gap_s <= 0:
        raise ValueError("duration_s, bookies and mean_gap_s must be positive, max_bookie_failures >= 0")
    rng = random.Random(seed)
    kinds = tuple(kinds)
    busy: list[tuple[float, float, int]] = []  # bookie failures: (start, end, bookie)
    faults: list[Fault] = []
    zk_free_at = 0.0
    ar_free_at: dict[int, float] = {}
    t = rng.uniform(0.5, mean_gap_s)
    while t < duration_s and kinds:
        kind = kinds[rng.randrange(len(kinds))]
        lo, hi = HOLD_S[kind]
        hold = round(rng.uniform(lo, hi), 3)
        if kind in (FaultKind.BOOKIE_SESSION_EXPIRY, FaultKind.AUTORECOVERY_SESSION_EXPIRY):
            hold = session_timeout_s + SESSION_HOLD_EXTRA_S
        target = 0
        if kind in BOOKIE_FAILURES:
            end = t + hold + (repair_window_s if kind is FaultKind.BOOKIE_WIPE else 1.0)
            free = _free_bookies(busy, t, end, bookies, max_bookie_failures)
            if free:
                target = free[rng.randrange(len(free))]
                busy.append((t, end, target))
            else:  # the failure budget is spent: a fault that fails no bookie, if any was asked for
                others = [k for k in kinds if k not in BOOKIE_FAILURES]
                if not others:
                    t += max(0.5, rng.expovariate(1 / mean_gap_s))
                    continue
                kind = others[rng.randrange(len(others))]
                hold = round(rng.uniform(*HOLD_S[kind]), 3)
                if kind is FaultKind.AUTORECOVERY_SESSION_EXPIRY:
                    hold = session_timeout_s + SESSION_HOLD_EXTRA_S
        if kind is FaultKind.ZK_RESTART:
            if t < zk_free_at:  # one ZooKeeper restart at a time
                t += max(0.5, rng.expovariate(1 / mean_gap_s))
                continue
            zk_free_at = t + hold + 5.0
        elif kind in AUTORECOVERY_FAULTS:
            idle = [i for i in range(max(1, autorecovery_processes)) if ar_free_at.get(i, 0.0) <= t]
            if not idle:  # every AutoRecovery process is already down or frozen
                t += max(0.5, rng.expovariate(1 / mean_gap_s))
                continue
            target = idle[rng.randrange(len(idle))]
            ar_free_at[target] = t + hold + 1.0
        elif kind is FaultKind.CORRUPT_ZNODE:
            target = rng.randrange(1 << 16)
        faults.append(Fault(index=len(faults), at_s=round(t, 3), kind=kind, target=target, hold_s=hold))
        t += max(0.5, rng.expovariate(1 / mean_gap_s))
    return Schedule(seed=seed, duration_s=duration_s, faults=tuple(faults))


def _free_bookies(
    busy: Iterable[tuple[float, float, int]], start: float, end: float, bookies: int, limit: int
) -> list[int]:
    """Bookies with no failure overlapping [start, end), or [] when `limit` failures already overlap it."""
    overlapping = [b for s, e, b in busy if s < end and start < e]
    if len(overlapping) >= limit:
        return []
    taken = set(overlapping)
    return [b for b in range(bookies) if b not in taken]
