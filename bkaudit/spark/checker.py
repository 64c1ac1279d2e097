"""Spark job 2: the cluster metadata checker (BP-34) over a snapshot, with a bookie fan-out.

`run_check` composes the phases of one run; `jobs/metadata_checker.py`, `bkaudit check` and the decommission
audit all call it. What varies between runs is explicit: the ledger selection (every ledger, or those naming
given bookies: `bkaudit.job.inputs.LedgerSelection`) and the result sink (the checker's Delta tables, or the
returned result only: `bkaudit.job.sink`). Each phase returns what the next one needs:

1. **snapshot**: the given `--snapshot-id`, the latest successful one, or a fresh one (`--fresh`);
2. **load** (driver): the selected ledgers joined with their segments (Arrow; on Spark for huge snapshots),
   the snapshot's bookies and markers, the cluster view (registrations, endpoints) and placement inputs
   (one topology rule: `/bookies` wins over `[placement] locations`);
3. **ledger pass and fan-out** (Spark, one job): metadata and placement findings, then one request per
   (ledger, bookie) that must hold entries, asked in batches (`bkaudit.job.fanout_task`), with BP-34's
   delayed re-check of failures (`spark.checker_stages`);
4. **combine**: per ledger, the bookies' evidence → durability, extra entries, unverifiable
   (`bkaudit.job.combine`, on the driver or on Spark), and per bookie the call statistics
   (`bkaudit.job.bookie_stats`);
5. **re-read before reporting** (`bkaudit.job.reread`): deleted → dropped; metadata changed → re-evaluated
   from the new metadata; marked under-replicated → kept as `under_repair`;
6. **progress and availability**: overdue markers → `underreplicated_too_long`; bookies that stayed
   unreachable while registered → `bookie_unreachable_but_registered`;
7. **publish** (optional) into the under-replication queue (`bkaudit.job.publish`), then **write** to the
   sink; a complete run also stamps the Auditor's check times and exports metrics.

A failure at any step is recorded by the sink (the Delta sink reverts what the run committed and writes one
'failed' `audit_runs` row) and raised as CheckFailed; the staging files are always deleted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from bkaudit.audit.base import Category
from bkaudit.audit.classification import FailOn, count_findings, count_under_repair, exit_code
from bkaudit.audit.coverage import RunCoverage, stamps
from bkaudit.audit.open_segments import OpenSegment, open_segment_finding
from bkaudit.audit.reads import EVIDENCE_READS
from bkaudit.audit.settings import CheckerSettings
from bkaudit.config import Settings, ZkSettings
from bkaudit.errors import BkAuditError
from bkaudit.job.bookie_stats import bookie_findings, bookie_stats, lost_bookies
from bkaudit.job.check_options import CheckOptions, validate_options
from bkaudit.job.cluster_view import ClusterView, read_cluster_view, read_placement_inputs, registered_now
from bkaudit.job.fanout import FanoutConfig, shape_of
from bkaudit.job.findings import Located, violations_of
from bkaudit.job.inputs import (
    ALL,
    INDEX_ENTRIES_PER_PAGE,
    LedgerSelection,
    ensemble_loads,
    ledger_input,
    ledger_pass_tasks,
    listing_pages,
    remove_staging,
    shape_rows,
    shapes_of,
    stage_ledger_input,
    staging_dir,
)
from bkaudit.job.ledger_pass import (
    LEDGER_INPUT_SCHEMA,
    LedgerPassPlan,
    ReadEvidencePlan,
    iter_shapes,
    read_requests,
    read_side_output,
)
from bkaudit.job.live import (
    Session,
    live_reads,
    overdue_markers,
    probe_evidence,
    read_open_segments,
    record_check_times,
    switch_to_reads,
)
from bkaudit.job.publish import publish
from bkaudit.job.read_evidence import PROBE_SCAN_LEDGERS, java_listers, limit_pinned_listing, probe_targets
from bkaudit.job.reread import RereadRules, reread
from bkaudit.job.result import FAILED, SUCCEEDED, CheckFailed, CheckResult, new_run_id
from bkaudit.job.run_metrics import export_run_metrics
from bkaudit.job.sink import DeltaSink, ResultSink, RunInfo
from bkaudit.model.shape import CLOSED, LedgerShape
from bkaudit.rpc.pool import BookieClientPool
from bkaudit.rpc.settings import RpcSettings
from bkaudit.rpc.tls import TlsConfig
from bkaudit.spark.snapshot import run_snapshot
from bkaudit.store import ZkStore
from bkaudit.tables.checker_schemas import CHECKER_TABLES
from bkaudit.tables.read import latest_snapshot_id, read_arrow, require_writable, snapshot_versions
from bkaudit.tables.store import validate_snapshot_id
from bkaudit.zk.client import acls, close, connect
from bkaudit.zk.ledgers import read_layout, require_cluster
from bkaudit.zk.paths import CHECK_CTIME_NODES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from bkaudit.spark.checker_stages import FanoutOutput

__all__ = ["CheckFailed", "CheckOptions", "CheckResult", "run_check", "validate_options"]

log = logging.getLogger(__name__)

DRIVER_COMBINE_MAX = 20_000
"""Up to this many ledgers needing the per-ledger combine, it runs on the driver (no shuffle)."""
FUSED_FANOUT_MAX_BOOKIES = 32
"""Up to this many bookies, each ledger-pass task asks every bookie about its own requests (no shuffle of
every request through the JVM to group them by bookie): a task's chunk of
`fanout_task.TASK_CHUNK_REQUESTS` then still holds over 1,500 requests per bookie, three listing calls or
more. Beyond it, one thread per bookie per task would be many threads with small calls: the requests are
repartitioned by bookie instead."""
DRIVER_INPUT_MAX_LEDGERS = 2_000_000
"""Up to this many ledgers in the snapshot, the driver joins ledgers and segments with Arrow."""


@dataclass(frozen=True)
class RunContext:
    """A run's fixed inputs: settings, options and what follows from them."""

    settings: Settings
    options: CheckOptions
    conf: CheckerSettings
    zk: ZkSettings
    run_id: str
    started: datetime
    t0: float
    now_ms: int
    fail_on: FailOn
    publish: bool
    publish_placement: bool
    staging: str

    @classmethod
    def of(cls, settings: Settings, options: CheckOptions) -> RunContext:
        conf = settings.get(CheckerSettings)
        started = datetime.now(UTC)
        run_id = validate_snapshot_id(options.run_id or new_run_id(started))
        return cls(
            settings=settings,
            options=options,
            conf=conf,
            zk=settings.get(ZkSettings),
            run_id=run_id,
            started=started,
            t0=time.monotonic(),
            now_ms=options.now_ms if options.now_ms is not None else int(time.time() * 1000),
            fail_on=FailOn(options.fail_on or conf.fail_on),
            publish=conf.publish_underreplicated
            if options.publish_underreplicated is None
            else options.publish_underreplicated,
            publish_placement=conf.publish_placement
            if options.publish_placement is None
            else options.publish_placement,
            staging=staging_dir(options.warehouse, run_id),
        )

    def say(self, message: str) -> None:
        log.info("check %s: %s", self.run_id, message)
        if self.options.progress is not None:
            self.options.progress(message)

    def config(self) -> dict[str, Any]:
        """What the `audit_runs` row records of the run's configuration (secrets masked)."""
        return {
            "checker": dataclasses.asdict(self.conf),
            "settings": self.settings.redacted(),
            "fail_on": self.fail_on.value,
            "publish_underreplicated": self.publish,
            "publish_placement": self.publish_placement,
            "fresh": self.options.fresh,
        }


def run_check(
    spark: SparkSession,
    settings: Settings,
    options: CheckOptions,
    *,
    selection: LedgerSelection = ALL,
    sink: ResultSink | None = None,
) -> CheckResult:
    """Run the checker once; returns the result (exit_code set) or raises CheckFailed after recording it.

    `selection`: which ledgers (default every one); `sink`: where results go (default the checker's Delta
    tables in `options.warehouse`). Only a complete selection stamps the Auditor's check times and exports
    metrics: gauges and check times describe full audits.
    """
    ctx = RunContext.of(settings, options)
    out = sink if sink is not None else DeltaSink(options.warehouse)
    result = CheckResult(ctx.run_id, options.snapshot_id, ctx.started.strftime("%Y-%m-%d"))
    info = RunInfo(zk=ctx.zk.connect, root=ctx.zk.root, config=ctx.config(), started=ctx.started, t0=ctx.t0)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(remove_staging, ctx.staging)
        try:
            _check(spark, ctx, selection, out, result, info, cleanup)
        except BaseException as exc:
            result.status = FAILED
            result.exit_code = 1
            result.error = f"{type(exc).__name__}: {exc}"
            result.seconds = time.monotonic() - ctx.t0
            log.error("check %s failed: %s", result.run_id, result.error)
            out.fail(result, info)
            if selection.complete:
                export_run_metrics(result, success=False, conf=ctx.conf, options=options)
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise CheckFailed(f"check {result.run_id} failed: {exc}", result) from exc
    return result


def _lap(result: CheckResult, phase: str, since: float) -> float:
    now = time.monotonic()
    result.phase_seconds[phase] = round(result.phase_seconds.get(phase, 0.0) + now - since, 3)
    return now


def _check(
    spark: SparkSession,
    ctx: RunContext,
    selection: LedgerSelection,
    sink: ResultSink,
    result: CheckResult,
    info: RunInfo,
    cleanup: contextlib.ExitStack,
) -> None:
    # pyspark is an optional extra: the Spark stages are imported when a check runs, not when the CLI loads
    from bkaudit.spark.checker_stages import fanout_stage, ledger_pass_stage

    conf = ctx.conf
    t = time.monotonic()
    if isinstance(sink, DeltaSink):  # a broken table fails the run before the snapshot commits anything
        require_writable(ctx.options.warehouse, (*CHECKER_TABLES, "audit_runs"))
    snapshot_id = resolve_snapshot(spark, ctx)
    result.snapshot_id = snapshot_id
    t = _lap(result, "snapshot", t)

    zk = connect(ctx.zk)
    cleanup.callback(_close_quietly, zk)
    require_cluster(zk, root=ctx.zk.root)  # a wrong root is an error, not a clean audit of nothing
    session = Session(
        zk, ctx.zk.root, read_layout(zk, root=ctx.zk.root), TlsConfig.from_settings(ctx.settings),
        ctx.settings.get(RpcSettings).max_frame_bytes,
    )
    inputs = load_inputs(spark, ctx, snapshot_id, selection)
    known = inputs.bookies.column("bookie_id").to_pylist()
    cluster = ZkStore(zk, root=ctx.zk.root, layout=session.layout, acl=acls(ctx.zk))
    view = read_cluster_view(cluster, known=known)
    placement = read_placement_inputs(cluster, ctx.settings)
    t = _lap(result, "load", t)

    ctx.say("ledger pass and fan-out: metadata, placement, then every bookie asked for its entries")
    tls = TlsConfig.from_settings(ctx.settings)
    candidates = sorted(ensemble_loads(inputs.table)) if inputs.table is not None else sorted(view.targets)
    modes = probe_evidence(
        candidates, probes=probe_targets(inputs.closed_sample(), candidates), targets=view.targets, conf=conf,
        tls=tls,
    )
    if java_listers(modes, batch_listing=view.batch_listing):
        pages = inputs.listing_pages()
        modes = limit_pinned_listing(modes, pages=pages, batch_listing=view.batch_listing,
                                     max_pages=conf.java_listing_max_pages)
        pinned = [b for b in java_listers(modes, batch_listing=view.batch_listing) if pages.get(b)]
        if pinned:
            ctx.say(
                f"{len(pinned)} Java bookie(s) listed, up to {max(pages[b] for b in pinned):,} index pages "
                "each: a Java bookie keeps every page and index file it lists until it restarts "
                "(docs/compatibility.md, 'Listing pins index pages')"
            )
    readers = frozenset(b for b, (mode, _why) in modes.items() if mode == EVIDENCE_READS)
    if readers:
        ctx.say(
            f"{len(readers)} bookie(s) without listing, verified by reads ({conf.verification_percentage:g}% "
            f"between first and last): {', '.join(sorted(readers))}"
        )
    opened = open_segments(ctx, inputs, view, tls) if conf.check_open_ledgers else OpenSegments()
    if opened.segments:
        ctx.say(f"{len(opened.segments)} open ledgers: last segments checked up to their bookies' LAC "
                f"({len(opened.unknown)} without an established LAC)")
    plan = LedgerPassPlan(
        placement=placement,
        writable=view.writable,
        check_open_ledgers=conf.check_open_ledgers,
        side_dir=f"{ctx.staging}/ledger-pass",
        reads=ReadEvidencePlan(readers, conf.verification_percentage, seed=ctx.run_id),
        open_ends=opened.ends,
    )
    source = inputs.files if inputs.files is not None else inputs.frame()
    loads = {
        **dict.fromkeys(view.targets, 1),
        **(ensemble_loads(inputs.table) if inputs.table is not None else {}),
    }
    fuse = len(loads) <= FUSED_FANOUT_MAX_BOOKIES
    fan = fanout_stage(
        spark,
        None if fuse else ledger_pass_stage(spark, plan, source),
        fused=(lambda config: ledger_pass_stage(spark, plan, source, fanout=config)) if fuse else None,
        config=lambda attempt: fanout_config(ctx, view, attempt),
        retry_attempts=conf.retry_attempts,
        retry_delay_s=conf.retry_delay_s,
        partitions_per_bookie=conf.partitions_per_bookie,
        loads=loads,
        staging=ctx.staging,
        say=ctx.say,
        fallback=lambda failed: switch_fallback(
            ctx, inputs, view, tls, failed, readers=readers, ends=opened.ends
        ),
    )
    for bookie, why in fan.switched.items():
        modes[bookie] = (EVIDENCE_READS, why)
    passed = read_side_output(plan.side_dir)
    result.ledgers_checked = passed.ledgers
    result.ledgers_durability_checked = passed.durability_ledgers
    result.entries_checked = passed.entries
    result.bookkeeper_placement_only = passed.bookkeeper_placement_only
    t = _lap(result, "ledger_pass_and_fanout", t)
    if result.bookkeeper_placement_only:
        ctx.say(
            f"{result.bookkeeper_placement_only} ledgers pass our placement check but would fail "
            "BookKeeper's (it counts only writable bookies: docs/placement.md)"
        )

    result.bookies = bookie_stats(fan.calls, view=view, evidence=modes)
    result.bookies_checked = len(result.bookies)  # bookies asked (answered or not)
    lost = lost_bookies(result.bookies, registered_now=registered_now(cluster))
    if lost:
        ctx.say(f"{len(lost)} lost bookie(s), not registered and silent through the re-check: their copies "
                f"count missing ({', '.join(sorted(lost))})")
    located = passed.located + opened.findings + combine(spark, ctx, inputs, fan, lost, opened.ends)
    t = _lap(result, "combine", t)

    ctx.say(f"re-reading {len({x.finding.ledger_id for x in located})} ledgers before reporting")
    rules = RereadRules(
        placement=placement.check(view.writable),
        lost=lost,
        max_ranges=conf.max_ranges_per_row,
        max_rounds=conf.max_reevaluations,
    )
    checked = reread(located, reads=live_reads(session, conf=conf, modes=modes, seed=ctx.run_id), rules=rules)
    if checked.changed:
        ctx.say(f"metadata changed for {checked.changed} ledgers: re-evaluated them")
    result.deleted_during_run = checked.deleted
    result.reevaluated = checked.reevaluated
    t = _lap(result, "reread", t)

    found = checked.findings
    found += overdue_markers(session, inputs.markers, grace_period_s=conf.grace_period_s, now_ms=ctx.now_ms)
    found += bookie_findings(
        result.bookies, state_of=lambda b: str(cluster.registry.bookie_state(b))
    )
    t = _lap(result, "progress", t)

    violations = violations_of(found)
    if ctx.publish:
        ctx.say("publishing under-replicated ledgers")
        violations, _stats = publish(
            cluster,
            violations,
            publish_placement=ctx.publish_placement,
            rate_per_s=conf.publish_rate_per_s,
        )
        t = _lap(result, "publish", t)
    result.violations = violations
    findings = [v.finding for v in violations]
    result.counts = count_findings(findings)
    result.under_repair = count_under_repair(findings)
    result.published = sum(1 for v in violations if v.published)
    result.seconds = time.monotonic() - ctx.t0
    ctx.say("writing tables")
    sink.write(result, info)
    _lap(result, "write", t)
    result.status = SUCCEEDED
    result.exit_code = exit_code(result.counts, ctx.fail_on)
    result.seconds = time.monotonic() - ctx.t0
    covered = RunCoverage(
        every_ledger=selection.complete,
        unreadable_ledgers=sum(1 for f in findings if f.category is Category.METADATA_UNPARSEABLE),
        open_segments=conf.check_open_ledgers and not opened.unknown,
        unverified_ledgers=sum(1 for f in findings if f.category is Category.LEDGER_UNVERIFIABLE),
        exact=conf.verification_percentage >= 100 or not any(m == EVIDENCE_READS for m, _w in modes.values()),
    )
    result.check_stamps = stamps(covered)
    if conf.write_check_ctimes and result.check_stamps:
        record_check_times(session, result.check_stamps, acl=acls(ctx.zk))
    if conf.write_check_ctimes and selection.complete and len(result.check_stamps) < len(CHECK_CTIME_NODES):
        ctx.say(f"the Auditor's check times this run did not cover are left alone (stamped: "
                f"{', '.join(result.check_stamps) or 'none'}; docs/checker.md)")
    if selection.complete:
        export_run_metrics(result, success=True, conf=conf, options=ctx.options)


def _close_quietly(zk: Any) -> None:
    try:
        close(zk)
    except Exception:
        pass


def resolve_snapshot(spark: SparkSession, ctx: RunContext) -> str:
    """The snapshot to check: the given one (must have succeeded), a fresh one, or the latest successful."""
    options = ctx.options
    if options.fresh:
        ctx.say("taking a fresh snapshot")
        return str(run_snapshot(spark, ctx.settings, warehouse=options.warehouse).snapshot_id)
    if options.snapshot_id:
        snapshot_versions(options.warehouse, options.snapshot_id)  # NoSnapshot unless it succeeded
        return options.snapshot_id
    latest = latest_snapshot_id(options.warehouse)
    if latest is None:
        raise BkAuditError(
            f"no successful snapshot in {options.warehouse}: run `bkaudit snapshot` first or pass --fresh"
        )
    return latest


@dataclass(frozen=True)
class RunInputs:
    """The selected ledgers of the snapshot (staged for the ledger pass, or as a Spark frame), and the
    snapshot's small tables (bookies; markers of the selected ledgers)."""

    snapshot_id: str
    bookies: pa.Table
    markers: pa.Table
    table: pa.Table | None
    """The ledger input joined on the driver (None: too large, joined on Spark)."""
    files: list[str] | None
    frame: Callable[[], DataFrame]
    """The ledger input as a Spark frame (lazy; used when `files` is None, and by the Spark combine)."""

    def closed_sample(self) -> list[pa.RecordBatch]:
        """Closed ledgers with entries, in a stable order, at most `PROBE_SCAN_LEDGERS`: what each bookie's
        evidence probe picks its ledgers from (`read_evidence.probe_targets`)."""
        if self.table is not None:  # only the sample's rows are copied, not every closed ledger's
            rows = pc.indices_nonzero(_closed_with_entries(self.table))
            order = pc.sort_indices(pc.take(self.table.column("ledger_id"), rows))[:PROBE_SCAN_LEDGERS]
            head: pa.Table = self.table.take(pc.take(rows, order))
            return list(head.to_batches(max_chunksize=10_000))
        from pyspark.sql import functions as F  # optional pyspark (see _check)

        frame = self.frame().where((F.col("state") == CLOSED) & (F.col("last_entry_id") >= 0))
        sample: pa.Table = frame.orderBy("ledger_id").limit(PROBE_SCAN_LEDGERS).toArrow()
        return list(sample.to_batches(max_chunksize=10_000))

    def listing_pages(self) -> dict[str, int]:
        """Per bookie, the index pages listing its ledgers reads on a Java bookie (`inputs.listing_pages`)."""
        if self.table is not None:
            return listing_pages(self.table)
        from pyspark.sql import functions as F  # optional pyspark (see _check)

        pages = F.floor(F.greatest(F.coalesce(F.col("last_entry_id"), F.lit(-1)), F.lit(0))
                        / INDEX_ENTRIES_PER_PAGE) + 1
        bookies = F.explode(F.flatten(F.col("segments.ensemble"))).alias("bookie")
        pairs = self.frame().select("ledger_id", pages.alias("pages"), bookies).distinct()
        rows = pairs.groupBy("bookie").agg(F.sum("pages").alias("pages")).collect()
        return {str(r["bookie"]): int(r["pages"]) for r in rows}

    def open_ledgers(self) -> pa.Table:
        """The ledger input rows of ledgers that are not closed (LEDGER_INPUT_SCHEMA)."""
        if self.table is not None:
            state = self.table.column("state")
            return self.table.filter(pc.invert(pc.fill_null(pc.equal(state, CLOSED), False)))
        from pyspark.sql import functions as F  # optional pyspark (see _check)

        frame = self.frame().where(F.col("state").isNull() | (F.col("state") != CLOSED))
        return frame.toArrow().cast(LEDGER_INPUT_SCHEMA)

    def shapes(self, ledger_ids: Sequence[int], warehouse: str) -> dict[int, LedgerShape]:
        """The shapes of a few ledgers of the input, by id (from the driver's table, else the snapshot)."""
        wanted = pa.array(sorted(set(ledger_ids)), pa.int64())
        rows = shape_rows(self.table, wanted) if self.table is not None else shapes_of(
            warehouse, self.snapshot_id, ledger_ids)
        return {i: shape_of(r) for i, r in rows.items()}


def _closed_with_entries(table: pa.Table) -> pa.ChunkedArray:
    closed = pc.fill_null(pc.equal(table.column("state"), CLOSED), False)
    return pc.and_(closed, pc.fill_null(pc.greater_equal(table.column("last_entry_id"), 0), False))


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
        return {i: s.with_open_end(ends.get(i)) for i, s in inputs.shapes(ids, ctx.options.warehouse).items()}

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


def load_inputs(
    spark: SparkSession, ctx: RunContext, snapshot_id: str, selection: LedgerSelection
) -> RunInputs:
    from bkaudit.spark.checker_stages import ledger_input_frame  # optional pyspark (see _check)

    wh = ctx.options.warehouse
    bookies = read_arrow(wh, "bookies", snapshot_id=snapshot_id)
    markers = read_arrow(wh, "underreplicated_ledgers", snapshot_id=snapshot_id)
    table = ledger_input(wh, snapshot_id, selection, DRIVER_INPUT_MAX_LEDGERS)
    files = None
    if table is not None:
        cores = max(1, spark.sparkContext.defaultParallelism)
        files = stage_ledger_input(
            table, f"{ctx.staging}/ledger-input", ledger_pass_tasks(table.num_rows, cores=cores)
        )
        if not selection.complete:
            markers = markers.filter(pc.is_in(markers.column("ledger_id"), table.column("ledger_id")))
    elif not selection.complete:
        ids = ledger_input_frame(spark, wh, snapshot_id, selection).select("ledger_id").toArrow()
        markers = markers.filter(pc.is_in(markers.column("ledger_id"), ids.column("ledger_id")))

    def frame() -> DataFrame:
        return ledger_input_frame(spark, wh, snapshot_id, selection)

    return RunInputs(snapshot_id, bookies, markers, table, files, frame)


def fanout_config(ctx: RunContext, view: ClusterView, attempt: int) -> FanoutConfig:
    conf = ctx.conf
    rpc = ctx.settings.get(RpcSettings)
    return FanoutConfig(
        targets=dict(view.targets),
        batch_listing=view.batch_listing,
        batch_size=conf.batch_size,
        max_in_flight=conf.max_in_flight_per_bookie,
        call_timeout_s=conf.call_timeout_s,
        connect_timeout_s=min(rpc.connect_timeout_s, conf.call_timeout_s),
        failure_threshold=conf.bookie_failure_threshold,
        attempt=attempt,
        read_max_in_flight=conf.read_max_in_flight_per_bookie,
        tls=TlsConfig.from_settings(ctx.settings),
        max_frame_bytes=rpc.max_frame_bytes,
    )


def combine(
    spark: SparkSession,
    ctx: RunContext,
    inputs: RunInputs,
    fan: FanoutOutput,
    lost: frozenset[str],
    open_ends: Mapping[int, int],
) -> list[Located]:
    """Per ledger with anything to report, combine its bookies' evidence.

    On the driver over the staged answers for a few thousand ledgers (no shuffle of the whole ledger input
    for a handful of rows); on Spark when many need it, e.g. after a bookie was wiped. `lost`: the run's lost
    bookies (their copies count missing); `open_ends`: how far open ledgers' last segments were checked.
    """
    from bkaudit.spark.checker_stages import combine_on_driver, combine_stage  # optional pyspark (see _check)

    ids = fan.needs_combine
    if fan.final is None or not ids:
        return []
    ctx.say(f"combining answers of {len(ids)} ledgers")
    max_ranges = ctx.conf.max_ranges_per_row
    if len(ids) > DRIVER_COMBINE_MAX:
        return combine_stage(
            spark, fan.final, ids, inputs.frame(), max_ranges=max_ranges, lost=lost, open_ends=open_ends
        )
    wanted = pa.array(sorted(ids), pa.int64())
    shapes: Mapping[int, Mapping[str, object]]
    if inputs.table is not None:
        shapes = shape_rows(inputs.table, wanted)
    else:
        shapes = shapes_of(ctx.options.warehouse, inputs.snapshot_id, ids)
    return combine_on_driver(fan.response_paths, shapes, ids, max_ranges=max_ranges, lost=lost,
                             open_ends=open_ends)
