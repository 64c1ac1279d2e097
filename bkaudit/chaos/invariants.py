"""The invariants of a chaos run, checked against its recorded history (pure: no I/O).

1. acknowledged_readable: every acknowledged entry reads back at the end with the payload it was acknowledged
   with, unless AQ or more of the bookies that stored it lost their data (wipes recorded as `damage`), or its
   ledger's metadata was corrupted on purpose.
2. recovery_covers_acks: a ledger's last entry, as any close (writer or recovery) and the final metadata
   record it, is >= every entry acknowledged on it.
3. closes_agree: every close of a ledger, and its final metadata, name the same last entry.
4. findings_explained: in a check taken while nothing changed the cluster ("stable"), every ledger the
   schedule damaged and AutoRecovery had not repaired yet is reported in the durability category its damage
   gives (metadata corruption as metadata_unparseable), and no finding lacks a cause in the history.
5. clean_after_drain: in the final check (after faults stopped and AutoRecovery drained) no durability
   finding remains, except on ledgers with a data-loss record; and a data-loss record is explained by
   damage to AQ or more of an entry's bookies.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bkaudit.audit.base import DURABILITY_CATEGORIES, PLACEMENT_CATEGORIES, Category
from bkaudit.audit.classification import durability_category
from bkaudit.model.quorum import write_set

Event = dict[str, Any]

DURABILITY = frozenset(c.value for c in DURABILITY_CATEGORIES)
PLACEMENT = frozenset(c.value for c in PLACEMENT_CATEGORIES)
REREGISTER_S = 15.0
"""How long after a bookie fault heals it may still be missing from /available (session expiry, restart)."""


@dataclass(frozen=True)
class Violation:
    invariant: str
    ledger: int | None
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"invariant": self.invariant, "ledger": self.ledger, "detail": self.detail}


@dataclass(frozen=True)
class Quorum:
    e: int
    wq: int
    aq: int


class HistoryView:
    """The history indexed the way the invariants read it."""

    def __init__(self, events: Iterable[Event]) -> None:
        self.events = list(events)
        self.quorum: dict[int, Quorum] = {}
        self.created: dict[int, list[str] | None] = {}
        self.acks: dict[int, dict[int, str]] = defaultdict(dict)
        self.closes: dict[int, list[Event]] = defaultdict(list)
        self.final_reads: dict[tuple[int, int], Event] = {}
        self.final_metadata: dict[int, Event] = {}
        self.damage: dict[int, list[Event]] = defaultdict(list)
        self.corrupted: set[int] = set()
        self.repairs: dict[int, list[Event]] = defaultdict(list)
        self.data_loss: dict[int, Event] = {}
        self.checks: list[Event] = []
        self.findings: dict[int, list[Event]] = defaultdict(list)
        self.caused: set[int] = set()  # ledgers with a crash, recovery, ensemble change or repair swap
        self.bookie_faults: list[tuple[str, float, float]] = []  # (bookie, start, healed) of bookie faults
        self.written: dict[int, tuple[float, float]] = {}  # ledger -> (created, closed or crashed)
        for ev in self.events:
            self._index(ev)
        self._windows()

    def _windows(self) -> None:
        started: dict[int, Event] = {}
        healed: dict[int, float] = {}
        for ev in self.events:
            if ev["type"] == "fault" and ev.get("bookie"):
                if ev["phase"] == "start":
                    started[ev["index"]] = ev
            elif ev["type"] == "fault" and ev["phase"] in ("heal", "heal_failed"):
                healed[ev["index"]] = ev["t"]
        for index, ev in started.items():
            self.bookie_faults.append((ev["bookie"], ev["t"], healed.get(index, float("inf"))))
        created = {e["ledger"]: e["t"] for e in self.events if e["type"] == "create"}
        for ledger, t0 in created.items():
            ends = [
                e["t"] for e in self.events if e["type"] in ("close", "crash") and e.get("ledger") == ledger
            ]
            self.written[ledger] = (t0, min(ends) if ends else float("inf"))

    def any_bookie_failed(self, ledger: int, *, slack_s: float) -> bool:
        """Any bookie was failed (or not yet re-registered) while the ledger was written."""
        window = self.written.get(ledger)
        return window is not None and any(
            s < window[1] and window[0] < e + slack_s for _, s, e in self.bookie_faults
        )

    def missed_writes(self, ledger: int, *, slack_s: float = 0.0) -> bool:
        """A bookie of the ledger was failed (killed, paused, cut off, ...) while the ledger was written: the
        writer may have closed with entries acknowledged by AQ but never stored on that bookie. `slack_s`
        extends each failure past its heal (a bookie re-registers some seconds after it is back)."""
        window = self.written.get(ledger)
        if window is None:
            return False
        bookies = set(self.created.get(ledger) or [])
        final = self.final_metadata.get(ledger)
        for ensemble in (final or {}).get("ensembles", []):
            bookies.update(ensemble)
        return any(
            b in bookies and s < window[1] and window[0] < e + slack_s for b, s, e in self.bookie_faults
        )

    def _index(self, ev: Event) -> None:
        kind: str = ev["type"]
        ledger: Any = ev.get("ledger")
        if kind == "create":
            self.quorum[ledger] = Quorum(ev["e"], ev["wq"], ev["aq"])
            self.created[ledger] = ev.get("ensemble")
        elif kind == "ack":
            self.acks[ledger][int(ev["entry"])] = ev["digest"]
        elif kind == "close":
            self.closes[ledger].append(ev)
            if ev.get("by") != "writer" or int(ev.get("segments", 1)) > 1:
                self.caused.add(ledger)
        elif kind == "crash":
            self.caused.add(ledger)
        elif kind == "final_read":
            self.final_reads[(ledger, int(ev["entry"]))] = ev
        elif kind == "final_metadata":
            self.final_metadata[ledger] = ev
            if "ensembles" in ev and ev["ensembles"] != [self.created.get(ledger)]:
                self.caused.add(ledger)  # an ensemble change, in place or as a new segment, or a repair swap
        elif kind == "damage":
            if ev.get("kind") == "metadata":
                self.corrupted.add(ledger)
            else:
                self.damage[ledger].append(ev)
        elif kind == "repair":
            self.repairs[ledger].append(ev)
            self.caused.add(ledger)
        elif kind == "data_loss":
            self.data_loss[ledger] = ev
        elif kind == "check":
            self.checks.append(ev)
        elif kind == "finding":
            self.findings[int(ev["n"])].append(ev)

    def lost_holders(self, ledger: int, entry: int, damage: Sequence[Event] | None = None) -> int:
        """How many damage events (distinct bookies) removed `entry` of `ledger` from a bookie storing it."""
        bookies = set()
        for d in self.damage.get(ledger, []) if damage is None else damage:
            if d["first"] <= entry <= d["last"] and d["index"] in write_set(entry, d["e"], d["wq"]):
                bookies.add(d["bookie"])
        return len(bookies)

    def outstanding_damage(self, ledger: int, at: float) -> list[Event]:
        """Damage done before `at` that no repair begun after it had finished by `at`."""
        out = []
        for d in self.damage.get(ledger, []):
            if d["t"] >= at:
                continue
            repaired = any(
                r["locked_t"] > d["t"] and r["done_t"] <= at and _same_segment(r, d)
                for r in self.repairs.get(ledger, [])
            )
            if not repaired:
                out.append(d)
        return out


def _same_segment(repair: Event, damage: Event) -> bool:
    """A repair of the whole ledger (segment None) covers any damage; a segment swap only its own segment; a
    bookie's data-integrity check (a repair naming a bookie) only that bookie's damage."""
    if repair.get("bookie") is not None and damage.get("bookie") != repair["bookie"]:
        return False
    return repair.get("segment") is None or damage.get("segment") in (None, repair["segment"])


def check(events: Iterable[Event]) -> list[Violation]:
    """Every violation of the invariants in this history (empty: the run upheld the guarantee)."""
    h = HistoryView(events)
    return [
        *acknowledged_readable(h),
        *recovery_covers_acks(h),
        *closes_agree(h),
        *findings_explained(h),
        *clean_after_drain(h),
    ]


def acknowledged_readable(h: HistoryView) -> list[Violation]:
    out = []
    for ledger, acks in sorted(h.acks.items()):
        if ledger in h.corrupted:
            continue
        aq = h.quorum[ledger].aq if ledger in h.quorum else 1
        bad: list[str] = []
        for entry, digest in sorted(acks.items()):
            read = h.final_reads.get((ledger, entry))
            if read is not None and read.get("digest") == digest:
                continue
            if h.lost_holders(ledger, entry) >= aq:
                continue  # AQ or more of its bookies lost their disks: beyond the guarantee
            why = (
                "never read back"
                if read is None
                else (
                    f"payload differs (acked {digest}, read {read['digest']})"
                    if read.get("digest")
                    else f"unreadable: {read.get('detail', '')}"
                )
            )
            bad.append(f"entry {entry}: {why}")
        if bad:
            out.append(
                Violation(
                    "acknowledged_readable",
                    ledger,
                    f"{len(bad)} acknowledged entries lost with < AQ={aq} bookies damaged: "
                    + "; ".join(bad[:5]),
                )
            )
    return out


def recovery_covers_acks(h: HistoryView) -> list[Violation]:
    out = []
    for ledger, acks in sorted(h.acks.items()):
        if not acks or ledger in h.corrupted:
            continue
        top = max(acks)
        ends = [(c.get("by", "?"), int(c["last_entry"])) for c in h.closes.get(ledger, [])]
        final = h.final_metadata.get(ledger)
        if final is not None and final.get("state") == "CLOSED":
            ends.append(("final metadata", int(final["last_entry"])))
        for by, last in ends:
            if last < top:
                out.append(
                    Violation(
                        "recovery_covers_acks",
                        ledger,
                        f"{by} closed at entry {last} but entry {top} was acknowledged",
                    )
                )
    return out


def closes_agree(h: HistoryView) -> list[Violation]:
    out = []
    for ledger in sorted(set(h.closes) | set(h.final_metadata)):
        if ledger in h.corrupted:
            continue
        ends = {(c.get("by", "?"), int(c["last_entry"])) for c in h.closes.get(ledger, [])}
        final = h.final_metadata.get(ledger)
        if final is not None and final.get("state") == "CLOSED":
            ends.add(("final metadata", int(final["last_entry"])))
        if len({last for _, last in ends}) > 1:
            out.append(
                Violation(
                    "closes_agree",
                    ledger,
                    "closes disagree: " + ", ".join(f"{by}={last}" for by, last in sorted(ends)),
                )
            )
    return out


def expected_category(h: HistoryView, ledger: int, damage: Sequence[Event]) -> str | None:
    """The durability category the outstanding `damage` gives `ledger` (None: no entry is short)."""
    if not damage:
        return None
    final = h.final_metadata.get(ledger)
    last = int(final["last_entry"]) if final is not None else None
    worst: int | None = None
    wq = aq = 0
    for d in damage:
        wq, aq = d["wq"], d["aq"]
        hi = d["last"] if last is None else min(d["last"], last)
        for entry in range(d["first"], hi + 1):
            if d["index"] not in write_set(entry, d["e"], d["wq"]):
                continue
            replicas = d["wq"] - h.lost_holders(ledger, entry, damage)
            worst = replicas if worst is None else min(worst, replicas)
    if worst is None:
        return None
    category = durability_category(worst, wq, aq)
    return category.value if category is not None else None


def findings_explained(h: HistoryView) -> list[Violation]:
    out = []
    for chk in h.checks:
        if not chk.get("stable"):
            continue
        n, started = int(chk["n"]), float(chk["started"])
        ended = float(chk["ended"]) if chk.get("ended") is not None else started
        by_ledger: dict[int | None, set[str]] = defaultdict(set)
        for f in h.findings.get(n, []):
            by_ledger[f.get("ledger")].add(f["category"])
        ledgers = {ledger for ledger in h.damage if ledger is not None} | h.corrupted
        for ledger in sorted(ledgers):
            found = by_ledger.get(ledger, set())
            if ledger in h.corrupted:
                if Category.METADATA_UNPARSEABLE.value not in found:
                    out.append(
                        Violation(
                            "findings_explained",
                            ledger,
                            f"check {n}: corrupted metadata not reported as metadata_unparseable "
                            f"(found: {sorted(found) or 'nothing'})",
                        )
                    )
                continue
            # damage still unrepaired when the check ENDED must be reported; a repair finishing while the
            # check ran (a bookie's integrity check keeps working then) may or may not have been seen
            damage = [d for d in h.outstanding_damage(ledger, ended) if d.get("closed", True)]
            want = expected_category(h, ledger, damage)
            if want is not None and want not in found:
                out.append(
                    Violation(
                        "findings_explained",
                        ledger,
                        f"check {n}: damage {_bookies(damage)} should be reported as {want} "
                        f"(found: {sorted(found) or 'nothing'})",
                    )
                )
        for subject, categories in sorted(by_ledger.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
            for category in sorted(categories):
                cause = _cause(h, subject, category, started)
                if cause is None:
                    out.append(
                        Violation(
                            "findings_explained",
                            subject,
                            f"check {n}: {category} finding has no cause in the history",
                        )
                    )
    return out


def _cause(h: HistoryView, ledger: int | None, category: str, at: float) -> str | None:
    if ledger is None:
        return None  # bookie-level findings (unreachable but registered): nothing explains them when stable
    if category == Category.METADATA_UNPARSEABLE.value:
        return "corrupted" if ledger in h.corrupted else None
    if category in DURABILITY:
        if h.outstanding_damage(ledger, at):
            return "damage"
        if category == Category.BELOW_WRITE_QUORUM.value and h.missed_writes(ledger):
            return (
                "a bookie failed while the ledger was written"  # AQ copies, not WQ: what the writer promised
            )
        return "data loss record" if ledger in h.data_loss else None
    reshaped = ledger in h.caused or ledger in h.damage
    if (category in PLACEMENT or category == Category.EXTRA_ENTRIES.value) and reshaped:
        # ensemble changes, recoveries and repairs pick bookies among the survivors / leave unacked tails
        return "ensemble change or recovery"
    if category in PLACEMENT and h.any_bookie_failed(ledger, slack_s=REREGISTER_S):
        return "created while a bookie was away: placement picked among the others"
    return None


def clean_after_drain(h: HistoryView) -> list[Violation]:
    out = []
    finals = [c for c in h.checks if c.get("final")]
    if finals:
        n = int(finals[-1]["n"])
        for f in h.findings.get(n, []):
            ledger = f.get("ledger")
            if f["category"] in DURABILITY and ledger not in h.data_loss:
                out.append(
                    Violation(
                        "clean_after_drain",
                        ledger,
                        f"check {n} after AutoRecovery drained: {f['category']} and no data-loss record",
                    )
                )
    for ledger, record in sorted(h.data_loss.items()):
        aq = h.quorum[ledger].aq if ledger in h.quorum else 1
        unexplained = [
            e
            for lo, hi in record.get("ranges", [])
            for e in range(lo, hi + 1)
            if e in h.acks.get(ledger, {}) and h.lost_holders(ledger, e) < aq
        ]
        if unexplained:
            out.append(
                Violation(
                    "clean_after_drain",
                    ledger,
                    f"data-loss record for acknowledged entries {unexplained[:5]} that fewer than "
                    f"AQ={aq} damaged bookies held",
                )
            )
    return out


def _bookies(damage: Sequence[Event]) -> str:
    return ",".join(sorted({str(d["bookie"]) for d in damage}))
