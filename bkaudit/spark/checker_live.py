"""A checker run's own calls to bookies from the driver, beside the fan-out: the LAC of open ledgers' last
segments (`open_segments`) and the fan-out's in-run switch of silent listers to reads (`switch_fallback`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bkaudit.audit.open_segments import OpenSegment, open_segment_finding
from bkaudit.job.cluster_view import ClusterView
from bkaudit.job.findings import Located
from bkaudit.job.ledger_pass import iter_shapes, read_requests
from bkaudit.job.live import read_open_segments, switch_to_reads
from bkaudit.model.shape import LedgerShape
from bkaudit.rpc.pool import BookieClientPool
from bkaudit.rpc.settings import RpcSettings
from bkaudit.rpc.tls import TlsConfig
from bkaudit.spark.checker_inputs import RunInputs
from bkaudit.spark.checker_run import RunContext


@dataclass(frozen=True)
class OpenSegments:
    """How far the run checks the last segment of each ledger that is not closed (`read_open_segments`)."""

    segments: Mapping[int, OpenSegment] = dataclasses.field(default_factory=dict)
    findings: list[Located] = dataclasses.field(default_factory=list)
    """`ledger_unverifiable` for those whose LAC could not be established."""

    @property
    def ends(self) -> dict[int, int]:
        return {i: seg.end for i, seg in self.segments.items() if seg.end is not None}

    @property
    def unknown(self) -> list[int]:
        return sorted(i for i, seg in self.segments.items() if not seg.known)


def open_segments(
    ctx: RunContext, inputs: RunInputs, view: ClusterView, tls: TlsConfig | None
) -> OpenSegments:
    """The LAC of every open ledger from its last ensemble, as checkAllLedgers opens it (driver; open ledgers
    are a small share of a cluster's: one per Pulsar topic)."""
    rows = inputs.open_ledgers()
    shapes: list[LedgerShape] = []
    where: dict[int, dict[str, Any]] = {}
    for batch in rows.to_batches(max_chunksize=10_000):
        for row, shape in iter_shapes(batch):
            if shape is None or shape.closed or not shape.segments or shape.problems():
                continue
            shapes.append(shape)
            where[shape.ledger_id] = row
    if not shapes:
        return OpenSegments()
    conf = ctx.conf
    pool = BookieClientPool(static=view.targets, tls=tls, request_timeout_s=conf.call_timeout_s,
                            connect_timeout_s=min(ctx.settings.get(RpcSettings).connect_timeout_s,
                                                  conf.call_timeout_s),
                            max_frame_bytes=ctx.settings.get(RpcSettings).max_frame_bytes)
    try:
        segments = read_open_segments(
            pool, shapes, {i: r.get("digest_type") for i, r in where.items()}, conf=conf
        )
    finally:
        pool.close()
    findings = []
    for i, seg in segments.items():
        if seg.known:
            continue
        row = where[i]
        f = open_segment_finding(seg, znode_version=row["znode_version"])
        findings.append(Located(f, row["znode_version"], row["znode_mzxid"], row["managed_ledger"]))
    return OpenSegments(segments, findings)


def switch_fallback(
    ctx: RunContext,
    inputs: RunInputs,
    view: ClusterView,
    tls: TlsConfig | None,
    failed: pa.Table,
    *,
    readers: frozenset[str],
    ends: Mapping[int, int],
) -> tuple[dict[str, str], pa.Table]:
    """The fan-out's in-run switch (`fanout_stage(fallback=...)`): bookies whose listing went unanswered
    while they answer reads (`live.switch_to_reads`), and their failed listing requests as reads."""

    def shapes(ids: Sequence[int]) -> dict[int, LedgerShape]:
        return {i: s.with_open_end(ends.get(i)) for i, s in inputs.shapes(ids, ctx.warehouse).items()}

    switched = switch_to_reads(
        failed, shapes=shapes, readers=readers, targets=view.targets, conf=ctx.conf, tls=tls
    )
    if not switched:
        return {}, failed.slice(0, 0)
    moved = failed.filter(pc.and_(
        pc.is_in(failed.column("bookie_id"), pa.array(sorted(switched), pa.string())),
        pc.is_null(failed.column("read_entries")),
    ))
    ids = sorted(set(moved.column("ledger_id").to_pylist()))
    requests = read_requests(moved, shapes(ids), percentage=ctx.conf.verification_percentage,
                             seed=ctx.run_id)
    return switched, requests
