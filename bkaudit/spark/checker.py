"""Spark job 2: the cluster metadata checker (BP-34) over a snapshot, with a bookie fan-out.

`run_check` composes the phases of one run; `jobs/metadata_checker.py`, `bkaudit check` and the decommission
audit all call it. What varies between runs is explicit: the ledger selection (every ledger, or those naming
given bookies: `bkaudit.job.inputs.LedgerSelection`) and the result sink (the checker's Delta tables, or the
returned result only: `bkaudit.job.sink`). Each phase returns what the next one needs:

1. **snapshot**: the given `--snapshot-id`, the latest successful one, or a fresh one (`--fresh`)
   (`spark.checker_inputs`);
2. **load** (driver): the selected ledgers joined with their segments (Arrow; on Spark for huge snapshots),
   the snapshot's bookies and markers (`spark.checker_inputs`), the cluster view (registrations, endpoints)
   and placement inputs (one topology rule: `/bookies` wins over `[placement] locations`), and the LAC of
   open ledgers (`spark.checker_live`);
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

The run's settings, flags applied, are its `spark.checker_run.RunContext`. A failure at any step is recorded
by the sink (the Delta sink reverts what the run committed and writes one
'failed' `audit_runs` row) and raised as CheckFailed; the staging files are always deleted.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from bkaudit.audit.base import Category
from bkaudit.audit.classification import count_findings, count_under_repair, exit_code
from bkaudit.audit.coverage import CHECK_KINDS, RunCoverage, stamps
from bkaudit.audit.reads import EVIDENCE_READS
from bkaudit.config import Settings
from bkaudit.job.bookie_stats import bookie_findings, bookie_stats, lost_bookies
from bkaudit.job.check_options import CheckOptions, validate_options
from bkaudit.job.cluster_view import ClusterView, read_cluster_view, read_placement_inputs, registered_now
from bkaudit.job.fanout import FanoutConfig
from bkaudit.job.findings import Located, violations_of
from bkaudit.job.inputs import ALL, LedgerSelection, ensemble_loads, remove_staging, shape_rows, shapes_of
from bkaudit.job.ledger_pass import LedgerPassPlan, ReadEvidencePlan, read_side_output
from bkaudit.job.live import Session, live_reads, overdue_markers, probe_evidence, record_check_times
from bkaudit.job.publish import publish
from bkaudit.job.read_evidence import java_listers, limit_pinned_listing, probe_targets
from bkaudit.job.reread import RereadRules, reread
from bkaudit.job.result import FAILED, SUCCEEDED, CheckFailed, CheckResult
from bkaudit.job.run_metrics import export_run_metrics
from bkaudit.job.sink import DeltaSink, ResultSink, RunInfo
from bkaudit.rpc.settings import RpcSettings
from bkaudit.rpc.tls import TlsConfig
from bkaudit.spark.checker_inputs import RunInputs, load_inputs, resolve_snapshot
from bkaudit.spark.checker_live import OpenSegments, open_segments, switch_fallback
from bkaudit.spark.checker_run import RunContext
from bkaudit.store import bind
from bkaudit.tables.checker_schemas import CHECKER_TABLES
from bkaudit.tables.read import require_writable
from bkaudit.zk.client import close, connect
from bkaudit.zk.ledgers import read_layout, require_cluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
    out = sink if sink is not None else DeltaSink(ctx.warehouse)
    result = CheckResult(ctx.run_id, options.snapshot_id, ctx.started.strftime("%Y-%m-%d"))
    info = RunInfo(zk=ctx.zk.connect, root=ctx.zk.root, config=ctx.config(), started=ctx.started, t0=ctx.t0)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(remove_staging, ctx.staging, options=ctx.warehouse.options)
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
                export_run_metrics(result, success=False, conf=ctx.conf,
                                   pushgateway_url=options.pushgateway_url)
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
        require_writable(ctx.warehouse, (*CHECKER_TABLES, "audit_runs"))
    snapshot_id = resolve_snapshot(spark, ctx)
    result.snapshot_id = snapshot_id
    t = _lap(result, "snapshot", t)

    zk = connect(ctx.zk)
    cleanup.callback(_close_quietly, zk)
    require_cluster(zk, root=ctx.zk.root)  # a wrong root is an error, not a clean audit of nothing
    cluster = bind(zk, ctx.zk, layout=read_layout(zk, root=ctx.zk.root))  # the cluster as it is laid out
    session = Session(cluster, TlsConfig.from_settings(ctx.settings),
                      ctx.settings.get(RpcSettings).max_frame_bytes)
    inputs = load_inputs(spark, ctx, snapshot_id, selection)
    known = inputs.bookies.column("bookie_id").to_pylist()
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
        storage_options=ctx.warehouse.options,
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
        options=ctx.warehouse.options,
        say=ctx.say,
        fallback=lambda failed: switch_fallback(
            ctx, inputs, view, tls, failed, readers=readers, ends=opened.ends
        ),
    )
    for bookie, why in fan.switched.items():
        modes[bookie] = (EVIDENCE_READS, why)
    passed = read_side_output(plan.side_dir, options=plan.storage_options)
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
    if conf.publish_underreplicated:
        ctx.say("publishing under-replicated ledgers")
        violations, _stats = publish(
            cluster,
            violations,
            publish_placement=conf.publish_placement,
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
        record_check_times(session, result.check_stamps)
    if conf.write_check_ctimes and selection.complete and len(result.check_stamps) < len(CHECK_KINDS):
        ctx.say(f"the Auditor's check times this run did not cover are left alone (stamped: "
                f"{', '.join(result.check_stamps) or 'none'}; docs/checker.md)")
    if selection.complete:
        export_run_metrics(result, success=True, conf=conf, pushgateway_url=ctx.options.pushgateway_url)


def _close_quietly(zk: Any) -> None:
    try:
        close(zk)
    except Exception:
        pass










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
        shapes = shapes_of(ctx.warehouse, inputs.snapshot_id, ids)
    return combine_on_driver(fan.response_paths, shapes, ids, max_ranges=max_ranges, lost=lost,
                             open_ends=open_ends, options=ctx.warehouse.options)
