"""bkaudit's Delta tables: schemas, staged writes + one commit per table, Spark reads, validation.

Public reading API (imported lazily so `import bkaudit.tables` stays light)::

    from bkaudit import tables
    df = tables.load(spark, "/data/bkaudit", "ledgers")                       # latest successful snapshot
    df = tables.load(spark, "/data/bkaudit", "ledgers", snapshot_id="20261122T051500Z-1a2b3c")
    df = tables.load(spark, "/data/bkaudit", "ledgers", version=12)           # Delta time travel
    tables.latest_snapshot_id("/data/bkaudit")

An object store with storage options is given as a `bkaudit.tables.location.Warehouse`, e.g.
`Warehouse("s3a://bucket/bkaudit", {"aws_region": "eu-west-1"})` (a plain URI has none).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "load": "bkaudit.tables.read",
    "read_arrow": "bkaudit.tables.read",
    "latest_snapshot_id": "bkaudit.tables.read",
    "snapshots": "bkaudit.tables.read",
    "snapshot_versions": "bkaudit.tables.read",
    "table_exists": "bkaudit.tables.read",
    "native_delta_available": "bkaudit.tables.read",
    "TableNotFound": "bkaudit.tables.read",
    "TableUnreadable": "bkaudit.tables.read",
    "NoSnapshot": "bkaudit.tables.read",
    "spec": "bkaudit.tables.catalog",
    "tables": "bkaudit.tables.catalog",
    "table_uri": "bkaudit.tables.store",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'bkaudit.tables' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
