"""The bookie follows its lifecycle state and the operator's read-only switch, both kept in ZooKeeper.

Draining, DrainingFailed and Drained bookies serve reads only (the lifecycle design, shared/seeds/001), as
read-only bookies do: this only adds reasons to the existing BookieMode, which re-registers the bookie
under `available/readonly`. Both records live in ZooKeeper, so the mode survives restarts and can be changed
while the bookie is down. The first reading happens before the bookie registers, so a draining bookie never
shows up as writable after a restart.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bkaudit.errors import FormatError
from bkaudit.model import lifecycle as lc

if TYPE_CHECKING:
    from bkaudit.bookie.mode import BookieMode
    from bkaudit.store.base import ClusterStore, Registry

log = logging.getLogger(__name__)

LIFECYCLE_REASON = "lifecycle"  # Draining / DrainingFailed / Drained
OPERATOR_REASON = "operator"  # PUT /api/v1/bookie/state/readonly {"readOnly": true}


def serves_reads_only(state: lc.StateRecord | FormatError | None) -> bool:
    """What the bookie's state record means for serving; an unreadable one errs on the safe side."""
    if isinstance(state, FormatError):
        log.warning("unreadable lifecycle state (%s): serving reads only until it is fixed", state)
        return True
    return state is not None and state.state.serves_reads_only


def _removed(registry: Registry, bookie_id: str) -> bool:
    try:
        return not registry.has_cookie(bookie_id)
    except Exception as exc:  # unknown: stay as we are (read-only) rather than open for writes
        log.warning("could not look up the cookie of %s (%s): serving reads only", bookie_id, exc)
        return True


def watch(cluster: ClusterStore, bookie_id: str, mode: BookieMode) -> None:
    """Keep `mode` in step with the bookie's lifecycle state and read-only switch (first reading now)."""

    def on_state(state: lc.StateRecord | FormatError | None) -> None:
        reads_only = serves_reads_only(state)
        if state is None and LIFECYCLE_REASON in mode.reasons and _removed(cluster.registry, bookie_id):
            # `lifecycle remove` deleted the state with the cookie while this bookie still runs: it stays
            # read-only until it is stopped, as a decommissioned BookKeeper bookie (its restart is refused:
            # no cookie). Only a state znode gone with the cookie still there means Active again.
            log.info("bookie %s was removed from the cluster: serving reads only until it stops", bookie_id)
            reads_only = True
        if reads_only != (LIFECYCLE_REASON in mode.reasons):
            log.info("lifecycle state of %s: %s", bookie_id, "serving reads only" if reads_only else "active")
        mode.set(LIFECYCLE_REASON, reads_only)

    cluster.lifecycle.watch(bookie_id, on_state=on_state,
                            on_serving=lambda read_only: mode.set(OPERATOR_REASON, read_only))
