"""`[lifecycle]` settings: how the Auditor drains bookies (bkaudit's own keys; BookKeeper has no drain)."""

from __future__ import annotations

import dataclasses

from bkaudit.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class LifecycleSettings:
    """Drain pacing and the failure limit that turns Draining into DrainingFailed."""

    # seconds between two drain passes of the Auditor (publish markers, gather progress, decide)
    drain_check_interval_s: float = 10.0
    # failed replications of one ledger of a draining bookie before the ledger counts as bad
    drain_max_failures: int = 5
    # timeout of one call to a BookKeeper bookie's HTTP admin API (PUT /api/v1/bookie/state/readonly), made
    # by the drain pass to make a leaving Java bookie serve reads only (bkaudit.lifecycle.serving)
    bookie_http_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.drain_check_interval_s <= 0:
            raise ConfigError("lifecycle.drain_check_interval_s", "must be > 0")
        if self.drain_max_failures < 1:
            raise ConfigError("lifecycle.drain_max_failures", "must be >= 1")
        if self.bookie_http_timeout_s <= 0:
            raise ConfigError("lifecycle.bookie_http_timeout_s", "must be > 0")
