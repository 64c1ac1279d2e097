"""Pure transformations for the cluster's registry: bookie registrations and under-replication markers →
rows of the `bookies` and `underreplicated_ledgers` tables (no I/O).

Small tables built on the driver, once per snapshot; apart from the ledger rows (`bkaudit.tables.rows`),
whose hot path is tuned for a million znodes, because they change with BookKeeper's registry records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from bkaudit.tables.rows import describe_error
from bkaudit.tables.schemas import BOOKIES, UNDERREPLICATED_LEDGERS

WRITABLE = "writable"
READONLY = "readonly"
UNAVAILABLE = "unavailable"  # has a cookie, registered neither writable nor read-only
UNKNOWN = "unknown"  # named in a ledger's ensemble, but no registration and no cookie


@dataclass(frozen=True)
class BookieRecord:
    """What ZooKeeper says about one bookie (input of `bookie_table`)."""

    bookie_id: str
    state: str
    has_cookie: bool
    service_info: bytes | None = None  # registration data (writable or read-only znode)
    lifecycle_state: str | None = None  # `cookies/<id>/state` (None: no cookie; Active when absent)


def bookie_table(
    records: Iterable[BookieRecord], topology: Any | None = None, hostnames: Mapping[str, str] | None = None
) -> pa.Table:
    """Rows of the `bookies` table; `topology` is a bkaudit.model.topology.Topology (None: no racks)."""
    from bkaudit.formats.records import parse_bookie_service_info

    rows = []
    for rec in sorted(records, key=lambda r: r.bookie_id):
        endpoints, properties, error = None, None, None
        if rec.service_info is not None:
            try:
                info = parse_bookie_service_info(rec.service_info, rec.bookie_id)
                endpoints = [
                    {
                        "id": e.id,
                        "host": e.host,
                        "port": e.port,
                        "protocol": e.protocol,
                        "auth": list(e.auth),
                        "extensions": list(e.extensions),
                    }
                    for e in info.endpoints
                ]
                properties = list(info.properties)
            except Exception as exc:
                error = describe_error(exc)
        row = {
            "bookie_id": rec.bookie_id,
            "state": rec.state,
            "has_cookie": rec.has_cookie,
            "endpoints": endpoints,
            "properties": properties,
            "error": error,
            "hostname": (hostnames or {}).get(rec.bookie_id),
            "lifecycle_state": rec.lifecycle_state,
        }
        row.update(_location(topology, rec.bookie_id))
        rows.append(row)
    schema = pa.schema([f for f in BOOKIES.schema if f.name not in ("snapshot_id", "snapshot_date")])
    return pa.Table.from_pylist(rows, schema=schema)


def _location(topology: Any | None, bookie_id: str) -> dict[str, str | None]:
    """location/rack/region/zone from the rack map; all None when the bookie is not mapped.

    A two-component location reads as /region/rack for region-aware placement and as /zone/upgradedomain for
    zone-aware placement; both columns are filled and the checker picks the one its policy uses.
    """
    if topology is None or not topology.is_resolved(bookie_id):
        return {"location": None, "rack": None, "region": None, "zone": None}
    return {
        "location": topology.location(bookie_id),
        "rack": topology.rack(bookie_id),
        "region": topology.region(bookie_id),
        "zone": topology.zone(bookie_id),
    }


@dataclass(frozen=True)
class MarkerRecord:
    """One under-replication marker znode and its lock (lock_data None = no lock znode)."""

    ledger_id: int
    data: bytes
    lock_data: bytes | None = None


def underreplicated_table(markers: Iterable[MarkerRecord]) -> pa.Table:
    """Rows of `underreplicated_ledgers`: missing replicas, mark time, lock holder ('' = anonymous lock)."""
    from bkaudit.formats.records import parse_lock_data, parse_underreplicated_marker

    rows = []
    for m in sorted(markers, key=lambda r: r.ledger_id):
        row: dict[str, Any] = {
            "ledger_id": m.ledger_id,
            "missing_replicas": None,
            "marked_at": None,
            "locked_by": None,
            "parse_error": None,
        }
        try:
            marker = parse_underreplicated_marker(m.data)
            row["missing_replicas"] = list(marker.replicas)
            row["marked_at"] = marker.ctime * 1000 if marker.ctime is not None and marker.ctime >= 0 else None
        except Exception as exc:
            row["parse_error"] = describe_error(exc)
        if m.lock_data is not None:
            try:
                row["locked_by"] = parse_lock_data(m.lock_data) or ""
            except Exception:
                row["locked_by"] = ""
        rows.append(row)
    schema = pa.schema(
        [f for f in UNDERREPLICATED_LEDGERS.schema if f.name not in ("snapshot_id", "snapshot_date")]
    )
    return pa.Table.from_pylist(rows, schema=schema)
