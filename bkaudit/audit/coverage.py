"""Which of the Auditor's check-time stamps a checker run may write: what it covered as the Java task does.

A Java Auditor, once elected, schedules each periodic check from its `*ctime` znode (Auditor.java:
`scheduleCheckAllLedgersTask`, `schedulePlacementPolicyCheckTask`, `scheduleReplicasCheck`): the first run
waits the interval minus the time since the stamp, and the intervals are long (`auditorPeriodicCheckInterval`
604800 s by default, ServerConfiguration). A stamp written by a run that did less than the Java task would
hold the real check back for up to a week, so each stamp needs the run to have covered what its task covers:

* `checkallledgers` (`AuditorCheckAllLedgersTask`: every ledger opened, LedgerChecker on every fragment, the
  last segment of open ledgers up to the LAC; a ledger it cannot open fails the whole run, and it stamps only
  a completed run): every ledger of the snapshot, open segments included (`check_open_ledgers` on and every
  open ledger's LAC established), no bookie left unverified (no `ledger_unverifiable` row);
* `replicascheck` (`AuditorReplicasCheckTask`: every entry of every closed ledger compared with each bookie's
  list): every ledger, no bookie left unverified, and every bookie's evidence exact (its listing, or reads of
  every entry: `verification_percentage` 100);
* `placementpolicycheck` (`AuditorPlacementPolicyCheckTask`: the metadata of every ledger, no bookie asked):
  every ledger.

A ledger whose metadata does not decode (`metadata_unparseable`) is covered by none of them: each Java task
fails on it (its metadata read fails, `asyncProcessLedgers` ends with an error) and stamps nothing, so neither
does the run.
"""

from __future__ import annotations

from dataclasses import dataclass

CHECK_ALL_LEDGERS = "checkallledgers"
PLACEMENT_POLICY_CHECK = "placementpolicycheck"
REPLICAS_CHECK = "replicascheck"
CHECK_KINDS = (CHECK_ALL_LEDGERS, PLACEMENT_POLICY_CHECK, REPLICAS_CHECK)
"""The stamps' kinds, as `bkaudit.zk.paths.CHECK_CTIME_NODES` names their znodes."""


@dataclass(frozen=True, slots=True)
class RunCoverage:
    """What one finished checker run covered."""

    every_ledger: bool
    """The run selected every ledger of the snapshot (not the decommission audit's selection)."""
    unreadable_ledgers: int
    """`metadata_unparseable` rows: ledgers no check could judge."""
    open_segments: bool
    """The last segments of open ledgers were checked, each up to an established LAC."""
    unverified_ledgers: int
    """`ledger_unverifiable` rows of the run (a bookie that gave no usable answer, metadata that kept
    changing, an open segment whose LAC was not established)."""
    exact: bool
    """Every bookie's evidence was exact: its listing, or reads of every entry it must hold."""


def stamps(coverage: RunCoverage) -> tuple[str, ...]:
    """The `*ctime` kinds this run may stamp (possibly none)."""
    if not coverage.every_ledger or coverage.unreadable_ledgers:
        return ()
    out = [PLACEMENT_POLICY_CHECK]
    if coverage.unverified_ledgers == 0:
        if coverage.open_segments:
            out.insert(0, CHECK_ALL_LEDGERS)
        if coverage.exact:
            out.append(REPLICAS_CHECK)
    return tuple(out)
