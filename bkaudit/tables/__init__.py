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

from typing import Any

_EXPORTS = {
    "load": "read",
    "read_arrow": "read",
    "latest_snapshot_id": "read",
    "snapshots": "read",
    "snapshot_versions": "read",
    "table_exists": "read",
    "native_delta_available": "read",
    "TableNotFound": "read",
    "TableUnreadable": "read",
    "NoSnapshot": "read",
    "spec": "catalog",
    "tables": "catalog",
    "table_uri": "store",
}
"""Public name -> its module in this package, imported on first use (read and store pull in pyarrow)."""

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module == "read":
        from bkaudit.tables import read
        return getattr(read, name)
    if module == "catalog":
        from bkaudit.tables import catalog
        return getattr(catalog, name)
    if module == "store":
        from bkaudit.tables import store
        return getattr(store, name)
    raise AttributeError(f"module 'bkaudit.tables' has no attribute {name!r}")
