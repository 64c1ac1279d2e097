"""The one JSON form of a finding's detail (`violations.detail`, docs/tables.md): rendered and parsed here.

The column is a public interface: its keys, their order and which keys are left out stay as they were when
the checks wrote dicts. A detail is the category's own keys (`bkaudit.audit.details`), then what the run
added, in the order it adds it: the evidence basis, the znode version (a metadata finding keeps it among its
own keys), `reevaluated`, and the marker of a ledger already under repair. `parse` is `render`'s inverse, for
rows read back (the executors' findings on the driver, the `violations` table); it tolerates missing keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from bkaudit.audit.base import (
    DURABILITY_CATEGORIES,
    PLACEMENT_CATEGORIES,
    Category,
    EvidenceBasis,
    Finding,
    Range,
    RunNotes,
    ZnodeStamp,
)
from bkaudit.audit.details import (
    CAUSE_LOST_BOOKIE,
    BookieGap,
    CorruptEntriesDetail,
    DurabilityDetail,
    ExtraEntriesDetail,
    FindingDetail,
    MetadataDetail,
    OpenSegmentNote,
    OpenSegmentUnknownDetail,
    OverdueMarkerDetail,
    PlacementDetail,
    PlacementSegment,
    UnreachableBookieDetail,
    UnverifiableDetail,
    UnverifiedBookie,
)


def text(finding: Finding) -> str:
    """The `detail` column's text of a finding."""
    return json.dumps(render(finding), separators=(",", ":"), default=str)


def render(finding: Finding) -> dict[str, Any]:
    """The detail document of a finding: its facts' keys, then the run's notes."""
    facts = finding.facts
    out = _facts(facts) if facts is not None else {}
    notes = finding.notes
    if isinstance(facts, MetadataDetail):
        out["znode_version"] = finding.znode_version
    if notes.basis is not None:
        out.update(basis_json(notes.basis))
    if notes.znode is not None:
        out["znode_version"] = notes.znode.version
    if notes.reevaluated:
        out["reevaluated"] = True
    if notes.under_repair:
        out["under_repair"] = True
        out["marker_replicas"] = list(notes.marker_replicas)
        out["marker_ctime_ms"] = notes.marker_ctime_ms
    return out


def basis_json(basis: EvidenceBasis) -> dict[str, Any]:
    """`{"evidence": "listing"}`, or `{"evidence": "reads", "sampled_fraction": f}`."""
    if basis.by_reads:
        return {"evidence": basis.evidence, "sampled_fraction": basis.sampled_fraction}
    return {"evidence": basis.evidence}


def open_segment(note: OpenSegmentNote) -> dict[str, int | None]:
    return {"segment": note.segment, "first_entry": note.first_entry, "checked_to": note.checked_to}


def _ranges(ranges: Sequence[Range]) -> list[list[int]]:
    return [list(r) for r in ranges]


def _facts(d: FindingDetail) -> dict[str, Any]:
    out: dict[str, Any]
    if isinstance(d, DurabilityDetail):
        out = {
            "ensemble_size": d.ensemble_size,
            "write_quorum": d.write_quorum,
            "ack_quorum": d.ack_quorum,
            "entries_checked": d.entries_checked,
            "entries_below_write_quorum": d.entries_below_write_quorum,
            "entries_below_ack_quorum": d.entries_below_ack_quorum,
            "entries_without_replica": d.entries_without_replica,
            "replicas_histogram": {str(k): v for k, v in d.replicas_histogram.items()},
            "worst_entries": _ranges(d.worst_entries),
            "bookies_missing_entries": list(d.bookies_missing_entries),
            "missing_by_bookie": [_gap(g) for g in d.missing_by_bookie],
            "partial": d.partial,
            "unverified_bookies": list(d.unverified_bookies),
            "ranges_truncated": d.ranges_truncated,
        }
        if d.lost_bookies:
            out["cause"] = CAUSE_LOST_BOOKIE
            out["lost_bookies"] = list(d.lost_bookies)
    elif isinstance(d, ExtraEntriesDetail):
        out = {"extra_count": d.extra_count, "extra_entries": _ranges(d.extra_entries),
               "ranges_truncated": d.ranges_truncated}
    elif isinstance(d, CorruptEntriesDetail):
        out = {"corrupt_count": d.corrupt_count, "corrupt_entries": _ranges(d.corrupt_entries),
               "entries_read": d.entries_read, "ranges_truncated": d.ranges_truncated}
    elif isinstance(d, PlacementDetail):
        out = {
            "policy": d.policy,
            "adherence": d.adherence,
            "write_quorum": d.write_quorum,
            "ack_quorum": d.ack_quorum,
            "segments": [{"segment": s.segment, "ensemble": list(s.ensemble), "adherence": s.adherence,
                          "reasons": list(s.reasons)} for s in d.segments],
            "locations": dict(d.locations),
        }
        if d.bookkeeper_verdict is not None:
            out["bookkeeper_verdict"] = d.bookkeeper_verdict
        return out
    elif isinstance(d, OverdueMarkerDetail):
        return {"marked_at_ms": d.marked_at_ms, "age_s": d.age_s, "grace_period_s": d.grace_period_s,
                "replicas": list(d.replicas), "locked_by": d.locked_by}
    elif isinstance(d, UnreachableBookieDetail):
        return {"state": d.state, "attempts": d.attempts, "status": d.status, "error": d.error,
                "ledgers_unverified": d.ledgers_unverified}
    elif isinstance(d, OpenSegmentUnknownDetail):
        return {"reason": d.reason, "reason_code": d.reason_code,
                "open_segment": open_segment(d.open_segment), "bookies": [_unverified(b) for b in d.bookies]}
    elif isinstance(d, UnverifiableDetail):
        out = {"reason": d.reason, "reason_code": d.reason_code}
        if d.bookies is not None:
            out["bookies"] = [_unverified(b) for b in d.bookies]
        if d.versions is not None:
            out["versions"] = list(d.versions)
    else:
        out = {"error": d.error, "parsed": d.parsed}
        if d.parsed:
            out["problems"] = list(d.problems)
        else:
            out["raw_bytes"] = d.raw_bytes
        return out
    if d.open_segment is not None:
        out["open_segment"] = open_segment(d.open_segment)
    return out


def _gap(g: BookieGap) -> dict[str, Any]:
    out: dict[str, Any] = {"bookie": g.bookie, "segment": g.segment, "bookie_index": g.bookie_index,
                           "missing_count": g.missing_count, "missing": _ranges(g.missing)}
    if g.lost:
        out["cause"] = CAUSE_LOST_BOOKIE
    if g.in_open_segment:
        out["open_segment"] = True
    return out


def _unverified(b: UnverifiedBookie) -> dict[str, Any]:
    if b.reason_code is None:
        return {"bookie": b.bookie, "status": b.status, "error": b.error}
    return {"bookie": b.bookie, "status": b.status, "reason_code": b.reason_code, "error": b.error}


# -- reading back ------------------------------------------------------------------------------------------


def parse_text(
    category: Category, raw: str | Mapping[str, Any] | None
) -> tuple[FindingDetail | None, RunNotes]:
    """`parse` of a `detail` column's text (or an already decoded document; None or "" is empty)."""
    doc = json.loads(raw) if isinstance(raw, str) and raw else dict(raw or {})
    return parse(category, doc)


def facts_of_row(category: str, raw: str | Mapping[str, Any] | None) -> FindingDetail | None:
    """The typed detail of a row read from a table, for display: None for an unknown category or a detail
    that does not parse (a report must not fail on one odd row)."""
    try:
        return parse_text(Category(category), raw)[0]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def parse(category: Category, d: Mapping[str, Any]) -> tuple[FindingDetail | None, RunNotes]:
    """The typed detail and run notes of a detail document (`render`'s inverse); facts None when the
    document has only run notes. A key a document lacks (a row of an older version) reads as its default."""
    return _parse_facts(category, d), _parse_notes(d)


def _parse_notes(d: Mapping[str, Any]) -> RunNotes:
    basis = None
    if "evidence" in d:
        basis = EvidenceBasis(str(d["evidence"]), _float(d.get("sampled_fraction")))
    return RunNotes(
        basis=basis,
        znode=ZnodeStamp(_int(d["znode_version"])) if "znode_version" in d else None,
        reevaluated=bool(d.get("reevaluated", False)),
        under_repair=bool(d.get("under_repair", False)),
        marker_replicas=tuple(str(b) for b in d.get("marker_replicas") or ()),
        marker_ctime_ms=_int(d.get("marker_ctime_ms")),
    )


_NOTE_KEYS = frozenset(
    {"evidence", "sampled_fraction", "znode_version", "reevaluated", "under_repair", "marker_replicas",
     "marker_ctime_ms"}
)


def _parse_facts(category: Category, d: Mapping[str, Any]) -> FindingDetail | None:
    if all(key in _NOTE_KEYS for key in d):
        return None
    if category in DURABILITY_CATEGORIES:
        return DurabilityDetail(
            ensemble_size=int(d.get("ensemble_size") or 0),
            write_quorum=int(d.get("write_quorum") or 0),
            ack_quorum=int(d.get("ack_quorum") or 0),
            entries_checked=int(d.get("entries_checked") or 0),
            entries_below_write_quorum=int(d.get("entries_below_write_quorum") or 0),
            entries_below_ack_quorum=int(d.get("entries_below_ack_quorum") or 0),
            entries_without_replica=int(d.get("entries_without_replica") or 0),
            replicas_histogram={int(k): int(v) for k, v in (d.get("replicas_histogram") or {}).items()},
            worst_entries=_parse_ranges(d.get("worst_entries")),
            bookies_missing_entries=_strings(d.get("bookies_missing_entries")),
            missing_by_bookie=tuple(_parse_gap(m) for m in d.get("missing_by_bookie") or ()),
            partial=bool(d.get("partial", False)),
            unverified_bookies=_strings(d.get("unverified_bookies")),
            ranges_truncated=bool(d.get("ranges_truncated", False)),
            lost_bookies=_strings(d.get("lost_bookies")),
            open_segment=_parse_open(d.get("open_segment")),
        )
    if category is Category.EXTRA_ENTRIES:
        return ExtraEntriesDetail(int(d.get("extra_count") or 0), _parse_ranges(d.get("extra_entries")),
                                  bool(d.get("ranges_truncated", False)), _parse_open(d.get("open_segment")))
    if category is Category.CORRUPT_ENTRIES:
        return CorruptEntriesDetail(int(d.get("corrupt_count") or 0), _parse_ranges(d.get("corrupt_entries")),
                                    int(d.get("entries_read") or 0), bool(d.get("ranges_truncated", False)),
                                    _parse_open(d.get("open_segment")))
    if category in PLACEMENT_CATEGORIES:
        segments = tuple(
            PlacementSegment(int(s.get("segment") or 0), _strings(s.get("ensemble")), str(s.get("adherence")),
                             _strings(s.get("reasons")))
            for s in d.get("segments") or ()
        )
        verdict = d.get("bookkeeper_verdict")
        return PlacementDetail(str(d.get("policy")), str(d.get("adherence")), int(d.get("write_quorum") or 0),
                               int(d.get("ack_quorum") or 0), segments, dict(d.get("locations") or {}),
                               None if verdict is None else str(verdict))
    if category is Category.UNDERREPLICATED_TOO_LONG:
        return OverdueMarkerDetail(int(d.get("marked_at_ms") or 0), d.get("age_s", 0.0),
                                   d.get("grace_period_s", 0), _strings(d.get("replicas")),
                                   d.get("locked_by"))
    if category is Category.BOOKIE_UNREACHABLE_BUT_REGISTERED:
        return UnreachableBookieDetail(d.get("state"), int(d.get("attempts") or 0), d.get("status"),
                                       d.get("error"), int(d.get("ledgers_unverified") or 0))
    if category is Category.LEDGER_UNVERIFIABLE:
        bookies = d.get("bookies")
        parsed = None if bookies is None else tuple(_parse_unverified(b) for b in bookies)
        note = _parse_open(d.get("open_segment"))
        reason, code = str(d.get("reason")), str(d.get("reason_code"))
        if note is not None and note.checked_to is None:  # nothing of the segment was checked
            return OpenSegmentUnknownDetail(reason, code, note, parsed or ())
        versions = d.get("versions")
        return UnverifiableDetail(reason, code, parsed,
                                  None if versions is None else tuple(int(v) for v in versions), note)
    if category is Category.METADATA_UNPARSEABLE:
        return MetadataDetail(str(d.get("error")), bool(d.get("parsed", False)), _int(d.get("raw_bytes")),
                              _strings(d.get("problems")))
    return None


def _parse_gap(m: Mapping[str, Any]) -> BookieGap:
    return BookieGap(str(m.get("bookie")), int(m.get("segment") or 0), int(m.get("bookie_index") or 0),
                     int(m.get("missing_count") or 0), _parse_ranges(m.get("missing")),
                     lost=m.get("cause") == CAUSE_LOST_BOOKIE,
                     in_open_segment=bool(m.get("open_segment", False)))


def _parse_unverified(b: Mapping[str, Any]) -> UnverifiedBookie:
    code = b.get("reason_code")
    return UnverifiedBookie(str(b.get("bookie")), b.get("status"), b.get("error"),
                            None if code is None else str(code))


def _parse_open(value: Any) -> OpenSegmentNote | None:
    if not isinstance(value, Mapping):
        return None
    return OpenSegmentNote(int(value.get("segment") or 0), int(value.get("first_entry") or 0),
                           _int(value.get("checked_to")))


def _parse_ranges(value: Any) -> tuple[Range, ...]:
    return tuple((int(a), int(b)) for a, b in value or ())


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value or ())


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
