"""Placement policy adherence of every segment's ensemble (BookKeeper's placementPolicyCheck, part B).

The policy semantics live once in `bkaudit.model.placement` (also used by the client and the replication
worker); this check only applies them to ledgers and turns the worst segment into a finding. Differences from
BookKeeper's check, on purpose:

* every ledger is judged, open ones included (BookKeeper skips open ledgers, yet a Pulsar ledger stays open
  for hours and is exactly the one whose ensemble changes under failures);
* a finding carries the reasons (`PlacementPolicy.explain`): which write set, which racks or zones;
* the ensemble is judged against the whole topology, whoever is up (BookKeeper's rack-aware check counts only
  writable bookies, its region-aware check always answers MEETS_STRICT). So that operators can reconcile the
  two tools, each finding records `bookkeeper_verdict`, what BookKeeper's own Auditor would have said of the
  ledger (NOT_CHECKED for open ledgers, which it skips), and `bookkeeper_only` counts the ledgers it would
  flag that we pass (docs/placement.md).

Results are memoised per (ensemble, WQ, AQ): real clusters reuse a few hundred ensembles across millions of
ledgers, so the policy runs a few hundred times, not millions.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import ClassVar

from bkaudit.audit.base import Category, Check, Finding
from bkaudit.audit.details import PlacementDetail, PlacementSegment
from bkaudit.errors import BkAuditError
from bkaudit.model.placement import Adherence, PlacementPolicy
from bkaudit.model.shape import LedgerShape
from bkaudit.model.topology import Topology

_MEMO_LIMIT = 200_000
NOT_CHECKED = "NOT_CHECKED"  # BookKeeper's placementPolicyCheck skips ledgers that are not closed

CATEGORY_OF: dict[Adherence, Category] = {
    Adherence.FAIL: Category.PLACEMENT_FAIL,
    Adherence.MEETS_SOFT: Category.PLACEMENT_SOFT,
}


class PlacementCheck(Check[LedgerShape]):
    """One finding per ledger whose worst segment is FAIL (placement_fail) or MEETS_SOFT (placement_soft).

    The detail lists every non-strict segment with its ensemble, adherence, reasons and the locations the
    policy saw, so an operator can tell "wrong placement" from "wrong rack map".
    """

    name: ClassVar[str] = "placement"
    categories: ClassVar[tuple[Category, ...]] = (Category.PLACEMENT_FAIL, Category.PLACEMENT_SOFT)

    def __init__(
        self,
        policy: PlacementPolicy,
        topology: Topology,
        policy_name: str | None = None,
        *,
        writable: Collection[str] | None = None,
    ) -> None:
        self.policy = policy
        self.topology = topology
        self.policy_name = policy_name or type(policy).__name__
        # bookies writable now: BookKeeper's verdict is only computed when they are known
        self.writable = frozenset(writable) if writable is not None else None
        self.bookkeeper_only = 0  # ledgers BookKeeper's Auditor would flag while we find nothing
        self._memo: dict[tuple[tuple[str, ...], int, int], tuple[Adherence, tuple[str, ...]]] = {}
        self._bk_memo: dict[tuple[tuple[str, ...], int, int], Adherence] = {}

    def judge(
        self, ensemble: tuple[str, ...], write_quorum: int, ack_quorum: int
    ) -> tuple[Adherence, tuple[str, ...]]:
        """Adherence and reasons for one ensemble, memoised."""
        key = (ensemble, write_quorum, ack_quorum)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        level, reasons = self.policy.evaluate(ensemble, write_quorum, ack_quorum, self.topology)
        result = (Adherence(level), tuple(reasons))
        if len(self._memo) < _MEMO_LIMIT:
            self._memo[key] = result
        return result

    def bookkeeper_verdict(self, subject: LedgerShape) -> str | None:
        """BookKeeper's Auditor placementPolicyCheck on this ledger: FAIL / MEETS_SOFT / MEETS_STRICT for a
        closed ledger (its worst segment), NOT_CHECKED for an open one; None if writable bookies are unknown.
        """
        if self.writable is None:
            return None
        if not subject.closed:
            return NOT_CHECKED
        worst = Adherence.MEETS_STRICT
        for seg in subject.segments:
            key = (seg.ensemble, subject.write_quorum, subject.ack_quorum)
            level = self._bk_memo.get(key)
            if level is None:
                level = self.policy.bookkeeper_adherence(*key, self.topology, writable=self.writable)
                if len(self._bk_memo) < _MEMO_LIMIT:
                    self._bk_memo[key] = level
            worst = min(worst, level)
        return worst.name

    def evaluate(self, subject: LedgerShape) -> list[Finding]:
        if not subject.segments or subject.problems():
            return []  # malformed metadata is the metadata check's finding, not a placement one
        judged: list[tuple[int, tuple[str, ...], Adherence, tuple[str, ...]]] = []
        try:
            for i, seg in enumerate(subject.segments):
                level, reasons = self.judge(seg.ensemble, subject.write_quorum, subject.ack_quorum)
                judged.append((i, seg.ensemble, level, reasons))
            bookkeeper = self.bookkeeper_verdict(subject)
        except (BkAuditError, ValueError):
            return []
        worst = min(level for _i, _e, level, _r in judged)
        category = CATEGORY_OF.get(worst)
        if category is None:
            if bookkeeper in (Adherence.FAIL.name, Adherence.MEETS_SOFT.name):
                self.bookkeeper_only += 1
            return []
        segments = tuple(
            PlacementSegment(i, tuple(ens), level.name, tuple(reasons))
            for i, ens, level, reasons in judged
            if level is not Adherence.MEETS_STRICT
        )
        bookies = sorted({b for _i, ens, _l, _r in judged for b in ens})
        first_worst = next(i for i, _e, level, _r in judged if level is worst)
        return [
            Finding(
                category=category,
                ledger_id=subject.ledger_id,
                segment_index=first_worst,
                facts=PlacementDetail(
                    policy=self.policy_name,
                    adherence=worst.name,
                    write_quorum=subject.write_quorum,
                    ack_quorum=subject.ack_quorum,
                    segments=segments,
                    locations={b: self.topology.location(b) for b in bookies},
                    bookkeeper_verdict=bookkeeper,
                ),
            )
        ]
