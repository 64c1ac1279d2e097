"""The checker's live reads on the driver: ZooKeeper (rate-limited, pipelined) and a few bookies, now.

These are the I/O ports of the pure phases: `LiveReads` for the re-read (`bkaudit.job.reread`), the evidence
probe of each bookie (and its switch to reads during the run), the LAC of open ledgers (how far their last
segment is checked), the confirmation of overdue markers and the Auditor's check-time stamps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from bkaudit.audit.batching import call_budget
from bkaudit.audit.evidence import BookieEvidence
from bkaudit.audit.expected import expected_by_bookie
from bkaudit.audit.open_segments import (
    LacAnswer,
    OpenSegment,
    decide_open_segment,
    first_entry_readers,
    lac_of_bodies,
    last_add_confirmed,
    needs_first_entry,
)
from bkaudit.audit.progress import Marker, ProgressCheck
from bkaudit.audit.reads import EVIDENCE_LISTING, EVIDENCE_READS, plan_reads, read_evidence
from bkaudit.audit.reconcile import MarkerState, ZnodeVersion
from bkaudit.audit.settings import CheckerSettings
from bkaudit.audit.statuses import STATUS_CIRCUIT_OPEN, STATUS_OK, STATUS_UNAVAILABLE, is_transport_failure
from bkaudit.errors import BookieError, FormatError
from bkaudit.formats.records import parse_underreplicated_marker
from bkaudit.job.breaker import Breaker
from bkaudit.job.fanout import query_bookie
from bkaudit.job.findings import Located
from bkaudit.job.read_evidence import probe_listing, read_and_verify
from bkaudit.job.reread import LiveReads
from bkaudit.model.shape import LedgerShape
from bkaudit.rpc.pool import BookieClientPool
from bkaudit.rpc.tls import TlsConfig
from bkaudit.zk.client import rate_limiter

if TYPE_CHECKING:
    from bkaudit.store.base import ClusterStore

log = logging.getLogger(__name__)

_K = TypeVar("_K")

EvidenceModes = Mapping[str, tuple[str, str]]
"""Bookie → (evidence mode: listing or reads, why) for this run."""


@dataclass(frozen=True)
class Session:
    """The run's cluster store and how its bookies are asked."""

    cluster: ClusterStore
    tls: TlsConfig | None = None  # as the fan-out: TLS bookies refuse a plaintext re-evaluation
    max_frame_bytes: int = 5 * 1024 * 1024  # as the fan-out: [rpc] max_frame_bytes bounds every answer


def read_znodes(
    s: Session, ledger_ids: Sequence[int], conf: CheckerSettings
) -> dict[int, tuple[bytes, ZnodeVersion]]:
    limiter = rate_limiter(conf.zk_reads_per_s) if conf.zk_reads_per_s else None
    found = s.cluster.ledgers.read_raw(ledger_ids, rate_limiter=limiter)
    return {i: (data, ZnodeVersion(version, mzxid)) for i, (data, version, mzxid) in found.items()}


def read_markers(s: Session, ledger_ids: Sequence[int], conf: CheckerSettings) -> dict[int, MarkerState]:
    limiter = rate_limiter(conf.zk_reads_per_s) if conf.zk_reads_per_s else None
    out: dict[int, MarkerState] = {}
    for ledger_id, data in s.cluster.queue.markers_of(ledger_ids, rate_limiter=limiter).items():
        try:
            m = parse_underreplicated_marker(data)
            out[ledger_id] = MarkerState(tuple(m.replicas), m.ctime)
        except FormatError:
            out[ledger_id] = MarkerState((), None)  # a corrupt marker is still a marker
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
    registry = s.cluster.registry
    pool = BookieClientPool(registry=registry, request_timeout_s=conf.call_timeout_s, tls=s.tls,
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
                read_timeout_s=conf.call_timeout_s,
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


def live_open_segments(
    s: Session,
    shapes: Sequence[LedgerShape],
    digests: Mapping[int, tuple[str, bytes]],
    *,
    conf: CheckerSettings,
) -> dict[int, OpenSegment]:
    """`read_open_segments` for a few re-evaluated ledgers, their bookies resolved from ZooKeeper now."""
    registry = s.cluster.registry
    pool = BookieClientPool(registry=registry, request_timeout_s=conf.call_timeout_s, tls=s.tls,
                            max_frame_bytes=s.max_frame_bytes)
    try:
        return read_open_segments(pool, shapes, {i: d[0] for i, d in digests.items()}, conf=conf)
    finally:
        pool.close()


def live_reads(s: Session, *, conf: CheckerSettings, modes: EvidenceModes, seed: str) -> LiveReads:
    return LiveReads(
        znodes=lambda ids: read_znodes(s, ids, conf),
        markers=lambda ids: read_markers(s, ids, conf),
        ask=lambda shapes, digests: ask_bookies(s, shapes, digests, conf=conf, modes=modes, seed=seed),
        open_segments=(lambda shapes, digests: live_open_segments(s, shapes, digests, conf=conf))
        if conf.check_open_ledgers else None,
    )


def probe_evidence(
    candidates: Iterable[str],
    *,
    probes: Mapping[str, Sequence[tuple[int, int]]],
    targets: Mapping[str, str],
    conf: CheckerSettings,
    tls: TlsConfig | None,
) -> dict[str, tuple[str, str]]:
    """Per bookie and run: listing or reads (`[checker] listing_unsupported`, else a probe).

    Each bookie is probed with ledgers the metadata places on it (`probes`, from
    `read_evidence.probe_targets`): a listing request and a read per ledger, all bookies in parallel, one
    deadline of `listing_probe_timeout_s` (`read_evidence.probe_listing`).
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
            return bookie, probe_listing(pool.get(bookie), timeout_s=timeout, probes=probes.get(bookie, ()))
        except Exception as exc:  # a bookie we cannot even build a client for: the fan-out says so
            return bookie, (EVIDENCE_LISTING, f"not probed: {exc}")

    try:
        with ThreadPoolExecutor(max_workers=min(16, len(to_probe))) as ex:
            modes.update(ex.map(one, to_probe))
    finally:
        pool.close()
    return modes


SWITCH_PROBE_LEDGERS = 3
"""Ledgers whose failed listing is tried again, with a read, before a bookie switches to reads mid-run."""


def switch_to_reads(
    failed: pa.Table,
    *,
    shapes: Callable[[Sequence[int]], Mapping[int, LedgerShape]],
    readers: Iterable[str],
    targets: Mapping[str, str],
    conf: CheckerSettings,
    tls: TlsConfig | None,
) -> dict[str, str]:
    """Bookies to verify by reads from now on in this run: their listing of a ledger they store got no answer
    while they answer reads of it (a Java bookie on DbLedgerStorage that the start-of-run probe could not
    tell, e.g. because it lacked every probed ledger). `failed`: the fan-out rows of an attempt that got no
    answer (bookie_id, ledger_id, status, read_entries); bookie → why, for those that switch."""
    if failed.num_rows == 0:
        return {}
    skip = set(readers)
    listing = failed.filter(pc.is_null(failed.column("read_entries")))
    ledgers: dict[str, list[int]] = {}
    for r in listing.select(["bookie_id", "ledger_id", "status"]).to_pylist():
        got = ledgers.setdefault(str(r["bookie_id"]), [])
        if str(r["bookie_id"]) in skip or not is_transport_failure(str(r["status"])):
            continue
        if len(got) < SWITCH_PROBE_LEDGERS and int(r["ledger_id"]) not in got:
            got.append(int(r["ledger_id"]))
    ledgers = {b: ids for b, ids in ledgers.items() if ids}
    if not ledgers:
        return {}
    known = shapes(sorted({i for ids in ledgers.values() for i in ids}))
    timeout = min(conf.listing_probe_timeout_s, conf.call_timeout_s)
    pool = BookieClientPool(static=targets, tls=tls, request_timeout_s=timeout, connect_timeout_s=timeout)

    def one(bookie: str, ids: list[int]) -> tuple[str, str, str]:
        probes = []
        for i in ids:
            shape = known.get(i)
            entries = plan_reads(shape, bookie, 0.0).entries if shape is not None else ()
            if entries:
                probes.append((i, entries[0]))
        if not probes:
            return bookie, EVIDENCE_LISTING, "nothing to probe"
        try:
            mode, why = probe_listing(pool.get(bookie), timeout_s=timeout, probes=probes)
        except Exception as exc:
            return bookie, EVIDENCE_LISTING, f"not probed: {exc}"
        return bookie, mode, why

    try:
        with ThreadPoolExecutor(max_workers=min(16, len(ledgers))) as ex:
            decided = list(ex.map(lambda kv: one(*kv), ledgers.items()))
    finally:
        pool.close()
    out = {b: f"switched during the run: {why}" for b, mode, why in decided if mode == EVIDENCE_READS}
    for b, why in out.items():
        log.warning("bookie %s: listing stopped answering; verified by reads from now on (%s)", b, why)
    return out


def _per_bookie(
    pool: BookieClientPool,
    work: Mapping[str, Sequence[_K]],
    send: Callable[[Any, _K], Future[Any]],
    *,
    max_in_flight: int,
    failure_threshold: int,
    doing: str,
) -> dict[tuple[str, _K], Any]:
    """(bookie, item) → the call's result or its BookieError: each bookie's items sent from its own thread,
    at most `max_in_flight` outstanding, the rest CIRCUIT_OPEN once `failure_threshold` transport failures in
    a row opened its breaker (a frozen bookie costs a few deadlines, not one per item)."""

    def one(bookie: str, items: Sequence[_K]) -> dict[tuple[str, _K], Any]:
        out: dict[tuple[str, _K], Any] = {}
        try:
            client = pool.get(bookie)
        except Exception as exc:
            err = BookieError(STATUS_UNAVAILABLE, str(exc), bookie_id=bookie)
            return {(bookie, k): err for k in items}
        breaker = Breaker(bookie, failure_threshold)
        pending: dict[Future[Any], _K] = {}
        todo = iter(items)
        left = len(items)
        while left:
            while not breaker.open and len(pending) < max_in_flight and left - len(pending) > 0:
                k = next(todo)
                try:
                    pending[send(client, k)] = k
                except Exception as exc:
                    out[(bookie, k)] = BookieError(STATUS_UNAVAILABLE, str(exc), bookie_id=bookie)
                    left -= 1
            if not pending:
                break
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in done:
                k = pending.pop(fut)
                left -= 1
                try:
                    out[(bookie, k)] = fut.result()
                    breaker.answered()
                except BaseException as exc:
                    status = exc.status if isinstance(exc, BookieError) else STATUS_UNAVAILABLE
                    out[(bookie, k)] = exc if isinstance(exc, BookieError) else BookieError(
                        status, str(exc), bookie_id=bookie)
                    breaker.failed(status, exc, doing=doing)
        skipped = BookieError(STATUS_CIRCUIT_OPEN, breaker.skipped(doing), bookie_id=bookie)
        for k in todo:
            out[(bookie, k)] = skipped
        return out

    merged: dict[tuple[str, _K], Any] = {}
    if not work:
        return merged
    with ThreadPoolExecutor(max_workers=min(16, len(work))) as ex:
        for part in ex.map(lambda kv: one(*kv), work.items()):
            merged.update(part)
    return merged


def read_open_segments(
    pool: BookieClientPool,
    shapes: Sequence[LedgerShape],
    digest_types: Mapping[int, str | None],
    *,
    conf: CheckerSettings,
) -> dict[int, OpenSegment]:
    """How far this run checks the last segment of each ledger that is not closed, as checkAllLedgers does
    (`bkaudit.audit.open_segments`): a READ_LAC to each bookie of its last ensemble (LedgerOpenOp without
    recovery, PendingReadLacOp), then, for ledgers whose LAC is below that segment's first entry, a read of
    that entry from its write set (LedgerChecker.checkLedger). Ledgers whose LAC could not be established
    are asked again after `retry_delay_s`, `retry_attempts` times (BP-34's delayed re-check)."""
    todo = [s for s in shapes if not s.closed and s.segments]
    out: dict[int, OpenSegment] = {}
    for attempt in range(conf.retry_attempts + 1):
        if not todo:
            break
        if attempt:
            time.sleep(conf.retry_delay_s)
        asked: dict[str, list[int]] = {}
        for shape in todo:
            for bookie in dict.fromkeys(shape.segments[-1].ensemble):
                asked.setdefault(bookie, []).append(shape.ledger_id)
        lacs = _per_bookie(pool, asked, lambda c, lid: c.read_lac(lid),
                           max_in_flight=conf.read_max_in_flight_per_bookie,
                           failure_threshold=conf.bookie_failure_threshold, doing="reading LACs")
        answers: dict[int, list[LacAnswer]] = {}
        firsts: dict[str, list[tuple[int, int]]] = {}
        for shape in todo:
            got = [_lac_answer(shape, i, b, lacs.get((b, shape.ledger_id)), digest_types.get(shape.ledger_id))
                   for i, b in enumerate(shape.segments[-1].ensemble)]
            answers[shape.ledger_id] = got
            if needs_first_entry(shape, last_add_confirmed(shape, got)):
                first = (shape.ledger_id, shape.segments[-1].first_entry_id)
                for bookie in dict.fromkeys(first_entry_readers(shape)):
                    firsts.setdefault(bookie, []).append(first)
        reads = _per_bookie(
            pool, firsts, lambda c, k: c.read_entry(*k),
            max_in_flight=conf.read_max_in_flight_per_bookie, failure_threshold=conf.bookie_failure_threshold,
            doing="reading first entries",
        )
        again: list[LedgerShape] = []
        for shape in todo:
            first = (shape.ledger_id, shape.segments[-1].first_entry_id)
            statuses = [_status(reads.get((b, first))) for b in first_entry_readers(shape)]
            seg = decide_open_segment(shape, answers[shape.ledger_id], bookies=shape.segments[-1].ensemble,
                                      first_entry_statuses=statuses)
            out[shape.ledger_id] = seg
            if not seg.known:
                again.append(shape)
        todo = again
    return out


def _status(value: Any) -> str:
    if value is None:
        return STATUS_UNAVAILABLE
    return value.status if isinstance(value, BookieError) else STATUS_OK


def _lac_answer(
    shape: LedgerShape, index: int, bookie: str, value: Any, digest_type: str | None
) -> LacAnswer:
    if value is None or isinstance(value, BookieError):
        return LacAnswer(index, _status(value), error=str(value) if value is not None else "not asked")
    try:
        lac = lac_of_bodies(shape.ledger_id, digest_type, value.lac_body, value.last_entry_body)
    except FormatError as exc:
        return LacAnswer(index, STATUS_OK, error=f"body does not verify: {exc}")
    return LacAnswer(index, STATUS_OK, lac)


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
            marker = s.cluster.queue.marker(ledger_id)
        except FormatError:
            marker = None
        if marker is None:
            continue
        m = Marker(ledger_id, tuple(marker.replicas), marker.ctime, r.get("locked_by"))
        out.extend(Located(f) for f in check.evaluate(m))
    return out


def record_check_times(s: Session, kinds: Iterable[str]) -> None:
    """Stamp the `*ctime` znodes of the Auditor checks this run covered (`bkaudit.audit.coverage.stamps`),
    as the Java Auditor does when one completes (binary protobuf, epoch ms). A Java auditor elected later
    schedules its next run from them, and `bookkeeper shell` tooling sees when the checks last ran. A
    failed write is logged, not fatal."""
    now_ms = int(time.time() * 1000)
    try:
        for kind in kinds:
            s.cluster.queue.write_check_ctime(kind, now_ms)
    except Exception as exc:
        log.warning("could not record the check times in ZooKeeper: %s", exc)
