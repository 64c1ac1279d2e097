"""The report's numbers: pure aggregations of one run's `violations` rows (Arrow in, plain dicts out).

Kept apart from HTML so the numbers can be tested against the table on their own, and so every count has one
definition: a "row" is a row of `violations`; "new" excludes rows on ledgers already under repair (the
checker's `counts` use the same rule); "ledgers" counts distinct non-null ledger ids.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from bkaudit.audit.base import DURABILITY_CATEGORIES, Category, Severity
from bkaudit.audit.detail_json import facts_of_row
from bkaudit.audit.details import DurabilityDetail

SEVERITY_ORDER = (Severity.CRITICAL.value, Severity.WARNING.value, Severity.INFO.value)
DURABILITY = tuple(c.value for c in DURABILITY_CATEGORIES)
MAX_RANGES_SHOWN = 12


def _rank(severity: str | None) -> int:
    try:
        return Severity(severity).rank
    except ValueError:
        return -1


def category_order(seen: Iterable[str] = ()) -> list[str]:
    """Every known category, worst severity first, then any unknown category found in the data."""
    known = sorted(Category, key=lambda c: (-c.severity.rank, c.value))
    names = [c.value for c in known]
    return names + sorted(set(seen) - set(names))


def _bookies_missing_entries(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The bookies a durability row says lack entries (none for other rows, or one that does not parse)."""
    facts = facts_of_row(row["category"], row.get("detail"))
    return facts.bookies_missing_entries if isinstance(facts, DurabilityDetail) else ()


def range_total(ranges: Iterable[Mapping[str, int]] | None) -> int:
    """Entries in inclusive ranges."""
    return sum(int(r["last"]) - int(r["first"]) + 1 for r in ranges or ())


def by_category(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per category (all known ones, zeros included: "checked, none found" is information)."""
    stats: dict[str, dict[str, Any]] = {}
    ledgers: dict[str, set[int]] = defaultdict(set)
    for r in rows:
        s = stats.setdefault(r["category"], {"rows": 0, "new": 0, "under_repair": 0, "published": 0,
                                             "severity": r["severity"]})
        s["rows"] += 1
        s["under_repair" if r.get("under_repair") else "new"] += 1
        s["published"] += 1 if r.get("published") else 0
        if r.get("ledger_id") is not None:
            ledgers[r["category"]].add(int(r["ledger_id"]))
    out = []
    for name in category_order(stats):
        s = stats.get(name, {"rows": 0, "new": 0, "under_repair": 0, "published": 0})
        try:
            severity = Category(name).severity.value
        except ValueError:
            severity = s.get("severity") or "unknown"
        out.append({"category": name, "severity": severity, "rows": s["rows"], "new": s["new"],
                    "under_repair": s["under_repair"], "published": s["published"],
                    "ledgers": len(ledgers[name])})
    return out


def by_severity(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    counts = Counter(r["severity"] for r in rows)
    new = Counter(r["severity"] for r in rows if not r.get("under_repair"))
    order = list(SEVERITY_ORDER) + sorted(set(counts) - set(SEVERITY_ORDER))
    return [{"severity": s, "rows": counts.get(s, 0), "new": new.get(s, 0)} for s in order]


def by_bookie(rows: list[dict[str, Any]], checks: pa.Table | None,
              lifecycle: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Per bookie: rows naming it (`bookie_id`), ledgers it misses entries of, how it answered, and its
    lifecycle state (every bookie that is not Active is listed, violations or not)."""
    lifecycle = lifecycle or {}
    named: Counter[str] = Counter()
    categories: dict[str, Counter[str]] = defaultdict(Counter)
    missing: dict[str, set[int]] = defaultdict(set)
    for r in rows:
        if r.get("bookie_id"):
            named[r["bookie_id"]] += 1
            categories[r["bookie_id"]][r["category"]] += 1
        if r["category"] in DURABILITY and r.get("ledger_id") is not None:
            for b in _bookies_missing_entries(r):
                missing[b].add(int(r["ledger_id"]))
    answered = {c["bookie_id"]: c for c in (checks.to_pylist() if checks is not None else [])}
    out = []
    leaving = {b for b, s in lifecycle.items() if s != "Active"}
    for b in sorted(set(named) | set(missing) | set(answered) | leaving):
        c = answered.get(b, {})
        out.append({
            "bookie_id": b, "violations": named.get(b, 0), "ledgers_missing_entries": len(missing.get(b, ())),
            "categories": ", ".join(f"{k} {v}" for k, v in categories[b].most_common()),
            "state": c.get("state"), "reachable": c.get("reachable"), "calls": c.get("calls"),
            "errors": c.get("errors"), "ledgers_unverified": c.get("ledgers_unverified"),
            "latency_ms_p95": c.get("latency_ms_p95"), "lifecycle": lifecycle.get(b),
        })
    out.sort(key=lambda x: (-(x["violations"] + x["ledgers_missing_entries"]), x["bookie_id"]))
    return out


def by_managed_ledger(rows: list[dict[str, Any]], limit: int = 50) -> list[dict[str, Any]]:
    """Per Pulsar managed ledger (topic): rows, distinct ledgers, worst severity; worst first."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r.get("managed_ledger"):
            groups[r["managed_ledger"]].append(r)
    out = []
    for name, items in groups.items():
        worst = max((r["severity"] for r in items), key=_rank)
        cats = Counter(r["category"] for r in items)
        out.append({"managed_ledger": name, "rows": len(items),
                    "ledgers": len({r["ledger_id"] for r in items if r.get("ledger_id") is not None}),
                    "critical": sum(1 for r in items if r["severity"] == Severity.CRITICAL.value),
                    "worst_severity": worst,
                    "categories": ", ".join(f"{k} {v}" for k, v in cats.most_common())})
    out.sort(key=lambda x: (-_rank(x["worst_severity"]), -x["rows"], x["managed_ledger"]))
    return out[:limit]


def worst_ledgers(rows: list[dict[str, Any]], limit: int = 10) -> list[dict[str, Any]]:
    """Ledgers with missing entries, worst first (severity, then fewest replicas, then most entries)."""
    out = []
    for r in rows:
        ranges = r.get("missing_entries")
        if not ranges or r.get("ledger_id") is None:
            continue
        shown = [(int(x["first"]), int(x["last"])) for x in ranges[:MAX_RANGES_SHOWN]]
        out.append({
            "ledger_id": int(r["ledger_id"]), "category": r["category"], "severity": r["severity"],
            "min_replicas": r.get("min_replicas"), "missing_entries": range_total(ranges),
            "ranges": shown, "more_ranges": max(0, len(ranges) - len(shown)),
            "bookies": ", ".join(_bookies_missing_entries(r) or ([r["bookie_id"]] if r.get("bookie_id")
                                                                else [])),
            "managed_ledger": r.get("managed_ledger"), "under_repair": bool(r.get("under_repair")),
        })
    out.sort(key=lambda x: (-_rank(x["severity"]), x["min_replicas"] if x["min_replicas"] is not None else 99,
                            -x["missing_entries"], x["ledger_id"]))
    return out[:limit]


def trend(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per run (oldest first): new violations per severity, from `audit_runs.counts`."""
    out = []
    for run in runs:
        counts = dict(run.get("counts") or [])
        per: Counter[str] = Counter()
        for name, n in counts.items():
            try:
                per[Category(name).severity.value] += int(n or 0)
            except ValueError:
                per["unknown"] += int(n or 0)
        out.append({"run_id": run["run_id"], "started_at": run.get("started_at"),
                    "total": sum(int(n or 0) for n in counts.values()),
                    **{s: per.get(s, 0) for s in SEVERITY_ORDER}, "counts": counts})
    return out
