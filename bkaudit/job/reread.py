"""BP-34's rule before anything is reported: re-read each ledger's znode and marker, and re-evaluate the
ledgers whose metadata changed while they were being checked.

Pure decisions over injected reads (`LiveReads`): the driver passes ZooKeeper and bookie calls
(`bkaudit.job.live`), tests pass dictionaries. Per ledger with findings:
deleted since the snapshot → dropped (counted); metadata changed → checked again from the current metadata
(its bookies asked again) until the znode stays put, at most `max_rounds` times, else `ledger_unverifiable`
(metadata_changing); unchanged → its findings, marked `under_repair` when the ledger carries a marker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from bkaudit.audit.availability import REASON_METADATA_CHANGING, unverifiable
from bkaudit.audit.base import Finding
from bkaudit.audit.evidence import BookieEvidence
from bkaudit.audit.metadata import MetadataCheck, MetadataRecord
from bkaudit.audit.open_segments import OpenSegment, open_segment_finding
from bkaudit.audit.placement import PlacementCheck
from bkaudit.audit.reconcile import MarkerState, Recheck, ZnodeVersion, apply_marker, recheck
from bkaudit.errors import FormatError
from bkaudit.formats.ledger_metadata import parse
from bkaudit.job.combine import ledger_findings
from bkaudit.job.findings import Located
from bkaudit.model.shape import LedgerShape

Znodes = Callable[[Sequence[int]], Mapping[int, tuple[bytes, ZnodeVersion]]]
"""Ledger ids → current (data, version) of each ledger znode that exists."""
Markers = Callable[[Sequence[int]], Mapping[int, MarkerState]]
"""Ledger ids → the under-replication marker of each marked ledger."""
AskBookies = Callable[
    [Sequence[LedgerShape], Mapping[int, tuple[str, bytes]]], Mapping[int, list[BookieEvidence]]
]
"""Shapes (and each ledger's digest type and password) → every bookie's evidence per ledger id."""
OpenSegments = Callable[[Sequence[LedgerShape], Mapping[int, tuple[str, bytes]]], Mapping[int, OpenSegment]]
"""Shapes of ledgers that are not closed (and their digest types) → how far each one's last segment is checked
(`bkaudit.audit.open_segments`)."""


@dataclass(frozen=True)
class LiveReads:
    """The reads a re-read needs, done now (not from the snapshot)."""

    znodes: Znodes
    markers: Markers
    ask: AskBookies
    open_segments: OpenSegments | None = None
    """None: the last segment of an open ledger is not checked (`check_open_ledgers` off)."""


@dataclass(frozen=True)
class RereadRules:
    """How to judge a re-evaluated ledger (the run's placement and durability settings)."""

    placement: PlacementCheck
    lost: frozenset[str]
    """Lost bookies of the run (`bookie_stats.lost_bookies`): their copies count missing."""
    max_ranges: int
    max_rounds: int


@dataclass(frozen=True)
class RereadOutcome:
    findings: list[Located]
    deleted: int = 0
    """Ledgers with findings deleted while the run checked them (their findings are dropped)."""
    reevaluated: int = 0
    """Ledger evaluations repeated from current metadata (one per ledger and round)."""
    changed: int = 0
    """Ledgers whose metadata had changed at the first re-read."""


Changed = dict[int, tuple[bytes, ZnodeVersion, Located]]


def _seen_version(x: Located) -> ZnodeVersion | None:
    return None if x.version is None else ZnodeVersion(int(x.version), x.mzxid)


def sort_rechecked(
    seen: Mapping[int, tuple[ZnodeVersion | None, Located]],
    current: Mapping[int, tuple[bytes, ZnodeVersion]],
) -> tuple[list[int], Changed, int]:
    """The one re-read rule, applied to ledgers evaluated at the `seen` znode versions: (ledgers whose znode
    did not move, ledgers whose znode changed with its current data and version, how many were deleted)."""
    stable: list[int] = []
    changed: Changed = {}
    deleted = 0
    for ledger_id, (version, loc) in seen.items():
        now = current.get(ledger_id)
        verdict = recheck(version, None if now is None else now[1])
        if verdict is Recheck.DELETED:
            deleted += 1
        elif verdict is Recheck.CHANGED:
            assert now is not None
            changed[ledger_id] = (now[0], now[1], loc)
        else:
            stable.append(ledger_id)
    return stable, changed, deleted


def reread(located: Sequence[Located], *, reads: LiveReads, rules: RereadRules) -> RereadOutcome:
    """Every finding that survives the re-read, with its marker state applied."""
    by_ledger: dict[int, list[Located]] = {}
    out: list[Located] = []
    for x in located:
        if x.finding.ledger_id is None:
            out.append(x)
        else:
            by_ledger.setdefault(int(x.finding.ledger_id), []).append(x)
    current = reads.znodes(sorted(by_ledger))
    markers = reads.markers(sorted(by_ledger))
    seen = {lid: (_seen_version(items[0]), items[0]) for lid, items in by_ledger.items()}
    stable, changed, deleted = sort_rechecked(seen, current)
    for ledger_id in stable:
        for x in by_ledger[ledger_id]:
            out.extend(x.with_finding(f) for f in apply_marker([x.finding], markers.get(ledger_id)))
    if not changed:
        return RereadOutcome(out, deleted=deleted)
    redone = reevaluate(changed, reads=reads, rules=rules)
    fresh_markers = reads.markers(
        sorted({int(x.finding.ledger_id) for x in redone.findings if x.finding.ledger_id is not None})
    )
    for x in redone.findings:
        lid = x.finding.ledger_id
        marker = fresh_markers.get(int(lid)) if lid is not None else None
        out.extend(x.with_finding(g) for g in apply_marker([x.finding], marker))
    return RereadOutcome(out, deleted + redone.deleted, redone.reevaluated, changed=len(changed))


def evaluate_metadata(
    ledger_id: int, data: bytes, version: ZnodeVersion, placement: PlacementCheck
) -> tuple[LedgerShape | None, tuple[str, bytes] | None, list[Finding]]:
    """(shape to ask the bookies about, digest type and password, findings so far) of current metadata;
    no shape when the metadata itself is the finding."""
    try:
        md = parse(data)
    except FormatError as exc:
        record = MetadataRecord(ledger_id, parse_error=str(exc), raw_size=len(data), version=version.version)
        return None, None, MetadataCheck().evaluate(record)
    shape = LedgerShape.from_metadata(ledger_id, md, version=version.version)
    found = MetadataCheck().evaluate(MetadataRecord(ledger_id, shape=shape, version=version.version))
    if found:
        return None, None, found
    return shape, (md.digest_type.name, md.password), placement.evaluate(shape)


def reevaluate(changed: Changed, *, reads: LiveReads, rules: RereadRules) -> RereadOutcome:
    """Check ledgers again from their current metadata (their bookies asked again), until it is stable."""
    results: list[Located] = []
    todo = dict(changed)
    deleted = reevaluated = 0
    for _round in range(rules.max_rounds):
        if not todo:
            break
        reevaluated += len(todo)
        shapes: dict[int, LedgerShape] = {}
        digests: dict[int, tuple[str, bytes]] = {}
        fresh: dict[int, list[Finding]] = {}
        for ledger_id, (data, ver, _loc) in todo.items():
            shape, creds, fresh[ledger_id] = evaluate_metadata(ledger_id, data, ver, rules.placement)
            if shape is not None and creds is not None:
                shapes[ledger_id], digests[ledger_id] = shape, creds
        still_open = [x for x in shapes.values() if not x.closed]
        if still_open and reads.open_segments is not None:
            for ledger_id, seg in reads.open_segments(still_open, digests).items():
                shapes[ledger_id] = shapes[ledger_id].with_open_end(seg.end)
                if not seg.known:
                    fresh[ledger_id].append(open_segment_finding(seg))
        evidence = reads.ask(list(shapes.values()), digests)
        for ledger_id, shape in shapes.items():
            fresh[ledger_id] += ledger_findings(
                shape, evidence.get(ledger_id, []), max_ranges=rules.max_ranges, lost=rules.lost
            )
        # stable only if the znode did not move again while we were asking
        again = reads.znodes(sorted(todo))
        stable, next_todo, gone = sort_rechecked({lid: (v, loc) for lid, (_d, v, loc) in todo.items()}, again)
        deleted += gone
        for ledger_id in stable:
            _data, ver, loc = todo[ledger_id]
            for f in fresh.get(ledger_id, []):
                g = f.stamped(ver.version, reevaluated=True)
                results.append(Located(g, ver.version, ver.mzxid, loc.managed_ledger))
        todo = next_todo
    for ledger_id, (_data, ver, loc) in todo.items():
        f = unverifiable(
            ledger_id,
            f"metadata changed {rules.max_rounds} times while it was being checked",
            REASON_METADATA_CHANGING,
        ).stamped(ver.version)
        results.append(Located(f, ver.version, ver.mzxid, loc.managed_ledger))
    return RereadOutcome(results, deleted=deleted, reevaluated=reevaluated)
