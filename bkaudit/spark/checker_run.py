"""A checker run's fixed inputs (`RunContext`): its settings with the run's flags applied, its id and clock,
and where it stages files; what every phase of `spark.checker.run_check` reads."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bkaudit.audit.classification import FailOn
from bkaudit.audit.settings import CheckerSettings
from bkaudit.config import Settings, ZkSettings, with_overrides
from bkaudit.job.check_options import CheckOptions
from bkaudit.job.inputs import staging_dir
from bkaudit.job.result import new_run_id
from bkaudit.tables.location import Warehouse
from bkaudit.tables.settings import resolve_warehouse
from bkaudit.tables.store import validate_snapshot_id

log = logging.getLogger("bkaudit.spark.checker")  # a run's progress lines keep the checker's logger name


@dataclass(frozen=True)
class RunContext:
    """A run's fixed inputs: settings, options and what follows from them."""

    settings: Settings
    """As given: what the `audit_runs` row records (the run's flags are recorded as its own choices)."""
    options: CheckOptions
    """Its `warehouse` resolved: a `Warehouse` with the `[tables]` storage options (`warehouse`)."""
    conf: CheckerSettings
    """`[checker]` with the run's flags on top (`CheckOptions.setting_overrides`)."""
    zk: ZkSettings
    run_id: str
    started: datetime
    t0: float
    now_ms: int
    staging: str

    @classmethod
    def of(cls, settings: Settings, options: CheckOptions) -> RunContext:
        conf = with_overrides(settings, options.setting_overrides()).get(CheckerSettings)
        started = datetime.now(UTC)
        run_id = validate_snapshot_id(options.run_id or new_run_id(started))
        options = dataclasses.replace(options, warehouse=resolve_warehouse(settings, options.warehouse))
        return cls(
            settings=settings,
            options=options,
            conf=conf,
            zk=settings.get(ZkSettings),
            run_id=run_id,
            started=started,
            t0=time.monotonic(),
            now_ms=options.now_ms if options.now_ms is not None else int(time.time() * 1000),
            staging=staging_dir(options.warehouse, run_id),
        )

    @property
    def warehouse(self) -> Warehouse:
        return Warehouse.of(self.options.warehouse)

    @property
    def fail_on(self) -> FailOn:
        return FailOn(self.conf.fail_on)

    def say(self, message: str) -> None:
        log.info("check %s: %s", self.run_id, message)
        if self.options.progress is not None:
            self.options.progress(message)

    def config(self) -> dict[str, Any]:
        """What the `audit_runs` row records of the run's configuration (secrets masked)."""
        return {
            "checker": dataclasses.asdict(self.settings.get(CheckerSettings)),
            "settings": self.settings.redacted(),
            "fail_on": self.fail_on.value,
            "publish_underreplicated": self.conf.publish_underreplicated,
            "publish_placement": self.conf.publish_placement,
            "fresh": self.options.fresh,
        }
