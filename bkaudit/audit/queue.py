"""Which findings go to BookKeeper's under-replication queue, and with which replicas (a domain rule).

* durability violations (no_replica, below_ack_quorum, below_write_quorum), with the bookies missing entries
  as the replicas: the ReplicationWorker re-replicates the fragments on them;
* placement_fail only when asked (`publish_placement`), with an EMPTY replica list (BookKeeper's BP-54
  `repairedPlacementPolicyNotAdheringBookieEnabled` behaviour: the worker relocates the ensemble);
* never a finding on a ledger already under repair: a second mark would only reset the marker's
  grace-period clock.
"""

from __future__ import annotations

from bkaudit.audit.base import DURABILITY_CATEGORIES, Category, Finding
from bkaudit.audit.details import DurabilityDetail


def replicas_to_publish(finding: Finding, *, publish_placement: bool) -> tuple[str, ...] | None:
    """The replica list to mark for this finding, or None when it is not for the queue."""
    if finding.ledger_id is None:
        return None
    if finding.category in DURABILITY_CATEGORIES:
        facts = finding.facts
        bookies = facts.bookies_missing_entries if isinstance(facts, DurabilityDetail) else ()
        return bookies or ((finding.bookie_id,) if finding.bookie_id else ())
    if finding.category is Category.PLACEMENT_FAIL and publish_placement:
        return ()
    return None
