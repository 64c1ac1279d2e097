"""[tables] settings: where the warehouse's object store is and how long old data is kept.

Kept free of deltalake/pyspark imports so `bkaudit.config` can validate a settings file cheaply.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from bkaudit.errors import ConfigError

if TYPE_CHECKING:
    from bkaudit.tables.location import Warehouse

# An operator's input, read (never written) where settings are resolved when `[tables] storage_options` is
# empty: a JSON object of storage options (docs/tables.md). Executors get the options in their tasks instead.
ENV = "BKAUDIT_STORAGE_OPTIONS"


@dataclasses.dataclass(frozen=True)
class TablesSettings:
    """Storage options for object-store warehouses, and the retention `bkaudit tables vacuum` applies."""

    # delta-rs storage options (its key names), also mapped to pyarrow's S3/GCS/Azure filesystems, e.g.
    # {aws_endpoint_url = "http://minio:9000", aws_region = "us-east-1", aws_conditional_put = "etag"}
    # (TOML booleans and numbers are accepted and passed on as strings: options())
    storage_options: dict[str, str | bool | int | float] = dataclasses.field(default_factory=dict)
    # vacuum deletes files unreferenced for longer than this (time travel and running readers need them)
    retention_hours: int = 168
    # retention of runs: vacuum --yes also deletes runs whose run/snapshot date is older; 0 = keep every run
    keep_run_days: int = 0

    def __post_init__(self) -> None:
        for key, value in self.storage_options.items():
            if not isinstance(value, str | int | float | bool):
                raise ConfigError(f"tables.storage_options.{key}", f"expected a string, got {value!r}")
        if self.retention_hours < 0:
            raise ConfigError("tables.retention_hours", "must be >= 0")
        if self.keep_run_days < 0:
            raise ConfigError("tables.keep_run_days", "must be >= 0 (0 = keep every run)")

    def options(self) -> dict[str, str]:
        """The storage options as strings (TOML booleans and numbers become 'true', '9000', ...)."""
        return {
            k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in self.storage_options.items()
        }

    def warehouse(self, uri: str, environ: Mapping[str, str] | None = None) -> Warehouse:
        """The warehouse at `uri` with its storage options, resolved once here and then handed on: these
        `storage_options`, else the JSON object in $BKAUDIT_STORAGE_OPTIONS, else none."""
        from bkaudit.tables.location import Warehouse

        options = self.options()
        raw = (os.environ if environ is None else environ).get(ENV)
        if not options and raw:
            try:
                options = {str(k): str(v) for k, v in json.loads(raw).items()}
            except (ValueError, AttributeError):
                raise ConfigError(ENV, "must be a JSON object of delta-rs storage options") from None
        return Warehouse(uri, options)


def resolve_warehouse(settings: Any, warehouse: Warehouse | str | None = None) -> Warehouse:
    """The warehouse a command works on (`warehouse`, else the settings' one: `config.warehouse`) with the
    `[tables]` storage options of resolved settings (`config.Settings`); a `Warehouse` is kept as it is."""
    from bkaudit import config
    from bkaudit.tables.location import Warehouse

    if isinstance(warehouse, Warehouse):
        return warehouse
    return settings.get(TablesSettings).warehouse(config.warehouse(settings, warehouse))  # type: ignore[no-any-return]
