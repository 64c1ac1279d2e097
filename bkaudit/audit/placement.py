"""Placement policy adherence of every segment's ensemble (BookKeeper's placementPolicyCheck, part B).

The policy semantics live once in `bkaudit.model.placement` (also used by the client and the replication
worker); this check only applies them to ledgers and turns the worst segment into a finding. Differences from
BookKeeper's check, on purpose:

* every ledger is judged, open ones included (BookKeeper skips open ledgers, yet a Pulsar ledger stays open
  for hours and is exactly the one whose ensemble changes under failures);
* a finding carries the reasons (`PlacementPolicy.explain`): which write set, which racks or zones.

Results are memoised per (ensemble, WQ, AQ): real clusters reuse a few hundred ensembles across millions of
ledgers, so the policy runs a few hundred times, not millions.
"""

from __future__ import annotations

from typing import Any, ClassVar

from bkaudit.audit.base import Category, Check, Finding
from bkaudit.audit.durability import LedgerShape
from bkaudit.errors import BkAuditError
from bkaudit.model.placement import Adherence, PlacementPolicy
from bkaudit.model.topology import Topology

_MEMO_LIMIT = 200_000

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

    def __init__(self, policy: PlacementPolicy, topology: Topology, policy_name: str | None = None) -> None:
        self.policy = policy
        self.topology = topology
        self.policy_name = policy_name or type(policy).__name__
        self._memo: dict[tuple[tuple[str, ...], int, int], tuple[Adherence, tuple[str, ...]]] = {}

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

    def evaluate(self, subject: LedgerShape) -> list[Finding]:
        if not subject.segments or subject.problems():
            return []  # malformed metadata is the metadata check's finding, not a placement one
        judged: list[tuple[int, tuple[str, ...], Adherence, tuple[str, ...]]] = []
        try:
            for i, seg in enumerate(subject.segments):
                level, reasons = self.judge(seg.ensemble, subject.write_quorum, subject.ack_quorum)
                judged.append((i, seg.ensemble, level, reasons))
        except (BkAuditError, ValueError):
            return []
        worst = min(level for _i, _e, level, _r in judged)
        category = CATEGORY_OF.get(worst)
        if category is None:
            return []
        segments: list[dict[str, Any]] = [
            {"segment": i, "ensemble": list(ens), "adherence": level.name, "reasons": list(reasons)}
            for i, ens, level, reasons in judged
            if level is not Adherence.MEETS_STRICT
        ]
        bookies = sorted({b for _i, ens, _l, _r in judged for b in ens})
        first_worst = next(i for i, _e, level, _r in judged if level is worst)
        return [
            Finding(
                category=category,
                ledger_id=subject.ledger_id,
                segment_index=first_worst,
                detail={
                    "policy": self.policy_name,
                    "adherence": worst.name,
                    "write_quorum": subject.write_quorum,
                    "ack_quorum": subject.ack_quorum,
                    "segments": segments,
                    "locations": {b: self.topology.location(b) for b in bookies},
                },
            )
        ]
