"""No false alarms: decide, after re-reading ZooKeeper, what happens to a ledger's findings.

BP-34's rule, which BookKeeper never implemented: before a violation (or a bookie read error) is reported,
re-read the ledger's metadata and under-replication marker.

* metadata unchanged → the findings stand;
* metadata changed (an ensemble change, a close, a replication worker swapping a bookie) → the findings were
  computed against stale metadata: re-evaluate the ledger from the new metadata (new bookie answers);
* ledger deleted → drop its findings (a deleted ledger has no durability to violate);
* marked under-replicated → keep the finding but flag it `under_repair` (reported, not counted as new, not
  published again: a second mark would only reset the marker's grace-period clock).

Versions are compared on the znode's version *and* mzxid when both are known: a ledger deleted and recreated
with the same id starts again at version 0, but never with the same mzxid.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from bkaudit.audit.base import RECHECKED_CATEGORIES, Finding


class Recheck(enum.Enum):
    UNCHANGED = "unchanged"
    CHANGED = "changed"
    DELETED = "deleted"


@dataclass(frozen=True, slots=True)
class ZnodeVersion:
    """What identifies one version of a ledger znode."""

    version: int
    mzxid: int | None = None


def recheck(seen: ZnodeVersion | None, current: ZnodeVersion | None) -> Recheck:
    """Compare the version the findings were computed from with the version read now.

    `seen=None` (the snapshot did not record a version) always re-evaluates: we cannot prove it unchanged.
    """
    if current is None:
        return Recheck.DELETED
    if seen is None:
        return Recheck.CHANGED
    if seen.version != current.version:
        return Recheck.CHANGED
    if seen.mzxid is not None and current.mzxid is not None and seen.mzxid != current.mzxid:
        return Recheck.CHANGED
    return Recheck.UNCHANGED


@dataclass(frozen=True, slots=True)
class MarkerState:
    """An under-replication marker as re-read just before writing findings."""

    replicas: tuple[str, ...] = ()
    ctime_ms: int | None = None


def apply_marker(findings: Iterable[Finding], marker: MarkerState | None) -> list[Finding]:
    """Flag findings of a ledger that is already marked under-replicated (`detail.under_repair=true`).

    Only ledger findings derived from metadata are affected (durability, placement, extra entries,
    unverifiable); `metadata_unparseable` and `underreplicated_too_long` are about the marker or the znode
    itself and stand as they are.
    """
    out: list[Finding] = []
    for f in findings:
        if marker is not None and f.category in RECHECKED_CATEGORIES:
            f = f.under_marker(marker.replicas, marker.ctime_ms)
        out.append(f)
    return out
