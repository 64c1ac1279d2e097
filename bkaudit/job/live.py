"""The checker's live reads on the driver: ZooKeeper (rate-limited, pipelined) and a few bookies, now.

These are the I/O ports of the pure phases: `LiveReads` for the re-read (`bkaudit.job.reread`), the evidence
probe of each bookie, the confirmation of overdue markers and the Auditor's check-time stamps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from bkaudit.audit.batching import call_budget
from bkaudit.audit.durability import BookieEvidence, expected_by_bookie
from bkaudit.audit.progress import Marker, ProgressCheck
from bkaudit.audit.reads import EVIDENCE_LISTING, EVIDENCE_READS, plan_reads, read_evidence
from bkaudit.audit.reconcile import MarkerState, ZnodeVersion
from bkaudit.audit.settings import CheckerSettings
from bkaudit.errors import FormatError
from bkaudit.formats.records import parse_underreplicated_marker
from bkaudit.job.fanout import query_bookie
from bkaudit.job.findings import Located
from bkaudit.job.read_evidence import probe_listing, read_and_verify
from bkaudit.job.reread import LiveReads
from bkaudit.model.shape import LedgerShape
from bkaudit.rpc.pool import BookieClientPool
from bkaudit.rpc.tls import TlsConfig
from bkaudit.zk import paths
from bkaudit.zk import underreplication as ur
from bkaudit.zk.client import rate_limiter
from bkaudit.zk.multiread import read_batched
from bkaudit.zk.paths import CHECK_CTIME_NODES

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from kazoo.security import ACL

log = logging.getLogger(__name__)

EvidenceModes = Mapping[str, tuple[str, str]]
"""Bookie → (evidence mode: listing or reads, why) for this run."""


@dataclass(frozen=True)
class Session:
    """The run's ZooKeeper session and where its cluster lives."""

    zk: KazooClient
    root: str
    layout: str = "hierarchical"
    tls: TlsConfig | None = None  # as the fan-out: TLS bookies refuse a plaintext re-evaluation
    max_frame_bytes: int = 5 * 1024 * 1024  # as the fan-out: [rpc] max_frame_bytes bounds every answer


def read_znodes(
    s: Session, ledger_ids: Sequence[int], conf: CheckerSettings
) -> dict[int, tuple[bytes, ZnodeVersion]]:
    by_path = {paths.ledger_path(i, root=s.root, layout=s.layout): i for i in ledger_ids}
    limiter = rate_limiter(conf.zk_reads_per_s) if conf.zk_reads_per_s else None
    out: dict[int, tuple[bytes, ZnodeVersion]] = {}
    for path, data, stat in read_batched(s.zk, list(by_path), rate_limiter=limiter):
        if stat is not None and data is not None:
            out[by_path[path]] = (data, ZnodeVersion(int(stat.version), int(stat.mzxid)))
    return out


def read_markers(s: Session, ledger_ids: Sequence[int], conf: CheckerSettings) -> dict[int, MarkerState]:
    by_path = {paths.underreplicated_ledger_path(i, root=s.root): i for i in ledger_ids}
    limiter = rate_limiter(conf.zk_reads_per_s) if conf.zk_reads_per_s else None
    out: dict[int, MarkerState] = {}
    for path, data, stat in read_batched(s.zk, list(by_path), rate_limiter=limiter):
        if stat is None or data is None:
            continue
        try:
            m = parse_underreplicated_marker(data)
            out[by_path[path]] = MarkerState(tuple(m.replicas), m.ctime)
        except FormatError:
            out[by_path[path]] = MarkerState((), None)  # a corrupt marker is still a marker
    return out


def ask_bookies(
    s: Session,
    shapes: Sequence[LedgerShape],
    digests: Mapping[int, tuple[str, bytes]],
    *,
    conf: CheckerSettings,
    modes: EvidenceModes,
    seed: str,
) -> dict[int, list[BookieEvidence]]:
    """Driver-side fan-out for a few re-evaluated ledgers (batching and judgement as on executors).

    Bookies without listing are verified by reads, as in the fan-out; `digests` gives each ledger's digest
    type and password from its current metadata (so MAC entries are verified in full here).
    """
    readers = {b for b, (mode, _why) in modes.items() if mode == EVIDENCE_READS}
    by_bookie: dict[str, list[LedgerShape]] = {}
    for shape in shapes:
        for bookie in expected_by_bookie(shape):
            by_bookie.setdefault(bookie, []).append(shape)
    out: dict[int, list[BookieEvidence]] = {}
    if not by_bookie:
        return out
    pool = BookieClientPool(zk=s.zk, root=s.root, request_timeout_s=conf.call_timeout_s, tls=s.tls,
                            max_frame_bytes=s.max_frame_bytes)

    def one(bookie: str, items: list[LedgerShape]) -> list[tuple[int, BookieEvidence]]:
        client = pool.get(bookie)
        if bookie in readers:
            plans = [
                list(plan_reads(x, bookie, conf.verification_percentage, seed=seed).entries) for x in items
            ]
            return [
                (items[p].ledger_id, read_evidence(items[p], bookie, summary))
                for p, summary, _c in read_and_verify(
                    client,
                    bookie,
                    [x.ledger_id for x in items],
                    plans,
                    [digests.get(x.ledger_id, (None, None))[0] for x in items],
                    passwords=[digests.get(x.ledger_id, (None, None))[1] for x in items],
                    max_in_flight=conf.read_max_in_flight_per_bookie,
                    failure_threshold=conf.bookie_failure_threshold,
                )
            ]
        return [
            (x.ledger_id, ev)
            for x, ev, _c in query_bookie(
                client,
                bookie,
                items,
                batch_size=conf.batch_size,
                max_in_flight=conf.max_in_flight_per_bookie,
                failure_threshold=conf.bookie_failure_threshold,
                max_call_bytes=call_budget(s.max_frame_bytes),
            )
        ]

    try:
        with ThreadPoolExecutor(max_workers=min(16, len(by_bookie))) as ex:
            for pairs in ex.map(lambda kv: one(*kv), by_bookie.items()):
                for ledger_id, ev in pairs:
                    out.setdefault(ledger_id, []).append(ev)
    finally:
        pool.close()
    return out


def live_reads(s: Session, *, conf: CheckerSettings, modes: EvidenceModes, seed: str) -> LiveReads:
    return LiveReads(
        znodes=lambda ids: read_znodes(s, ids, conf),
        markers=lambda ids: read_markers(s, ids, conf),
        ask=lambda shapes, digests: ask_bookies(s, shapes, digests, conf=conf, modes=modes, seed=seed),
    )


def probe_evidence(
    candidates: Iterable[str], *, targets: Mapping[str, str], conf: CheckerSettings, tls: TlsConfig | None
) -> dict[str, tuple[str, str]]:
    """Per bookie and run: listing or reads (`[checker] listing_unsupported`, else a probe).

    Probed in parallel, one listing request and one read each, bounded by `listing_probe_timeout_s`.
    """
    configured = set(conf.listing_unsupported)
    modes: dict[str, tuple[str, str]] = {
        b: (EVIDENCE_READS, "configured in [checker] listing_unsupported") for b in configured
    }
    to_probe = [b for b in candidates if b not in configured]
    if not to_probe:
        return modes
    timeout = min(conf.listing_probe_timeout_s, conf.call_timeout_s)
    pool = BookieClientPool(static=targets, tls=tls, request_timeout_s=timeout, connect_timeout_s=timeout)

    def one(bookie: str) -> tuple[str, tuple[str, str]]:
        try:
            return bookie, probe_listing(pool.get(bookie), timeout_s=timeout)
        except Exception as exc:  # a bookie we cannot even build a client for: the fan-out says so
            return bookie, (EVIDENCE_LISTING, f"not probed: {exc}")

    try:
        with ThreadPoolExecutor(max_workers=min(16, len(to_probe))) as ex:
            modes.update(ex.map(one, to_probe))
    finally:
        pool.close()
    return modes


def overdue_markers(s: Session, markers: pa.Table, *, grace_period_s: float, now_ms: int) -> list[Located]:
    """`underreplicated_too_long`: markers of the snapshot older than the grace period, confirmed on the
    live marker (resolved since the snapshot: nothing overdue to report)."""
    if grace_period_s <= 0:
        return []
    check = ProgressCheck(grace_period_s, now_ms)
    out: list[Located] = []
    for r in markers.to_pylist():
        if r.get("parse_error") or r.get("marked_at") is None:
            continue
        ctime_ms = int(r["marked_at"].timestamp() * 1000)
        ledger_id = int(r["ledger_id"])
        if not check.overdue(Marker(ledger_id, (), ctime_ms)):
            continue
        try:
            live = ur.get_marker(s.zk, ledger_id, root=s.root)
        except FormatError:
            live = None
        if live is None:
            continue
        marker, _stat = live
        m = Marker(ledger_id, tuple(marker.replicas), marker.ctime, r.get("locked_by"))
        out.extend(Located(f) for f in check.evaluate(m))
    return out


def record_check_times(s: Session, *, acl: list[ACL] | None) -> None:
    """Stand in for the Auditor's periodic checks in ZooKeeper: a full run did checkAllLedgers (entries on
    their bookies), placementPolicyCheck (placement, overdue markers) and replicasCheck (each bookie's
    listing), so it stamps their `*ctime` znodes as the Java Auditor does when one completes (binary
    protobuf, epoch ms). A Java auditor elected later then schedules its next run from them, and
    `bookkeeper shell` tooling sees when the checks last ran. A failed write is logged, not fatal."""
    now_ms = int(time.time() * 1000)
    try:
        for kind in CHECK_CTIME_NODES:
            ur.write_check_ctime(s.zk, kind, now_ms, root=s.root, acl=acl)
    except Exception as exc:
        log.warning("could not record the check times in ZooKeeper: %s", exc)
