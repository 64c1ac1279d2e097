"""Every Delta table bkaudit writes, by name: the one place to see the warehouse.

A static catalog (no registration on import): a table is added here, next to its schema module, and
docs/tables.md documents its columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from bkaudit.tables.checker_schemas import AUDIT_RUNS, BOOKIE_CHECKS, DECOMMISSION_AUDITS, VIOLATIONS
from bkaudit.tables.schemas import (
    BOOKIES,
    LEDGER_SEGMENTS,
    LEDGERS,
    SNAPSHOTS,
    UNDERREPLICATED_LEDGERS,
    VALIDATION_RESULTS,
    TableSpec,
)

TABLES: Mapping[str, TableSpec] = MappingProxyType({
    t.name: t
    for t in (
        # bkaudit snapshot (bkaudit.spark.snapshot): `snapshots` committed last
        LEDGERS,
        LEDGER_SEGMENTS,
        BOOKIES,
        UNDERREPLICATED_LEDGERS,
        VALIDATION_RESULTS,
        SNAPSHOTS,
        # bkaudit check (the checker job): `audit_runs` committed last
        VIOLATIONS,
        BOOKIE_CHECKS,
        AUDIT_RUNS,
        # bkaudit decommission-audit
        DECOMMISSION_AUDITS,
    )
})


def spec(name: str) -> TableSpec:
    """The table `name`; KeyError naming the known tables otherwise."""
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"unknown table {name!r} (known: {', '.join(sorted(TABLES))})") from None


def tables() -> Mapping[str, TableSpec]:
    """Every table, by name."""
    return TABLES
