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

from kazoo.recipe.watchers import DataWatch

from bkaudit.errors import FormatError
from bkaudit.model import lifecycle as lc
from bkaudit.zk import paths

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from bkaudit.bookie.mode import BookieMode

log = logging.getLogger(__name__)

LIFECYCLE_REASON = "lifecycle"  # Draining / DrainingFailed / Drained
OPERATOR_REASON = "operator"  # PUT /api/v1/bookie/state/readonly {"readOnly": true}


def serves_reads_only(data: bytes | None) -> bool:
    """What a state znode's bytes mean for serving; unreadable data errs on the safe side (read-only)."""
    if not data:
        return False
    try:
        return lc.parse(data).state.serves_reads_only
    except FormatError as exc:
        log.warning("unreadable lifecycle state (%s): serving reads only until it is fixed", exc)
        return True


def operator_read_only(data: bytes | None) -> bool:
    import json

    if not data:
        return False
    try:
        value = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError):
        return False
    return isinstance(value, dict) and value.get("readOnly") is True


def _removed(zk: KazooClient, bookie_id: str, *, root: str) -> bool:
    try:
        return zk.exists(paths.cookie_path(bookie_id, root=root)) is None
    except Exception as exc:  # unknown: stay as we are (read-only) rather than open for writes
        log.warning("could not look up the cookie of %s (%s): serving reads only", bookie_id, exc)
        return True


def watch(
    zk: KazooClient, bookie_id: str, mode: BookieMode, *, root: str, state_root: str | None = None
) -> None:
    """Keep `mode` in step with the bookie's lifecycle state and read-only switch (first reading now).

    The state sits beside the cookie under `root`; the switch under bkaudit's state root (`[zk] state_root`).
    """

    def on_state(data: bytes | None, _stat: object) -> None:
        reads_only = serves_reads_only(data)
        if data is None and LIFECYCLE_REASON in mode.reasons and _removed(zk, bookie_id, root=root):
            # `lifecycle remove` deleted the state with the cookie while this bookie still runs: it stays
            # read-only until it is stopped, as a decommissioned BookKeeper bookie (its restart is refused:
            # no cookie). Only a state znode gone with the cookie still there means Active again.
            log.info("bookie %s was removed from the cluster: serving reads only until it stops", bookie_id)
            reads_only = True
        if reads_only != (LIFECYCLE_REASON in mode.reasons):
            log.info("lifecycle state of %s: %s", bookie_id, "serving reads only" if reads_only else "active")
        mode.set(LIFECYCLE_REASON, reads_only)

    def on_switch(data: bytes | None, _stat: object) -> None:
        mode.set(OPERATOR_REASON, operator_read_only(data))

    DataWatch(zk, paths.lifecycle_state_path(bookie_id, root=root), on_state)
    DataWatch(zk, paths.serving_path(bookie_id, root=root, state_root=state_root), on_switch)
