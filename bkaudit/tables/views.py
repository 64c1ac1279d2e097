"""Named SQL views over the warehouse: "latest successful run" and per-topic questions, in portable SQL.

One definition serves every engine a data engineer uses: DataFusion (delta-rs `QueryBuilder`), DuckDB and
Spark SQL all accept these statements. Views reference the base tables by their table names, so an engine
only needs the tables registered under those names (`spark_views`, `duckdb_views` do it; `with_views`
inlines the views as CTEs for engines where a query is all you can send, such as `QueryBuilder`).

"Latest" follows the rule the jobs use: the most recently finished run whose marker row says 'succeeded'
(`audit_runs` for the checker, `snapshots` for the snapshot job); a failed or half-written run never wins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bkaudit.tables.location import Warehouse

VIEWS: dict[str, str] = {
    "latest_run": (
        "SELECT * FROM audit_runs WHERE status = 'succeeded' "
        "ORDER BY finished_at DESC, run_id DESC LIMIT 1"
    ),
    "latest_violations": (
        "SELECT v.* FROM violations v JOIN latest_run r ON v.run_id = r.run_id"
    ),
    "latest_snapshot": (
        "SELECT * FROM snapshots WHERE status = 'succeeded' "
        "ORDER BY finished_at DESC, snapshot_id DESC LIMIT 1"
    ),
    "latest_ledgers": (
        "SELECT l.* FROM ledgers l JOIN latest_snapshot s ON l.snapshot_id = s.snapshot_id"
    ),
    "topic_violations": (
        "SELECT managed_ledger, "
        "COUNT(*) AS violations, "
        "COUNT(DISTINCT ledger_id) AS ledgers, "
        "SUM(CASE WHEN severity = 'critical' THEN 1 ELSE 0 END) AS critical, "
        "SUM(CASE WHEN severity = 'warning' THEN 1 ELSE 0 END) AS warning, "
        "SUM(CASE WHEN under_repair THEN 1 ELSE 0 END) AS under_repair, "
        "MIN(min_replicas) AS least_replicas "
        "FROM latest_violations WHERE managed_ledger IS NOT NULL GROUP BY managed_ledger"
    ),
}
"""name -> SELECT; a view may use the ones defined before it."""

BASE_TABLES = ("audit_runs", "violations", "snapshots", "ledgers")
NEEDS = {
    "latest_run": {"audit_runs"},
    "latest_violations": {"audit_runs", "violations"},
    "latest_snapshot": {"snapshots"},
    "latest_ledgers": {"snapshots", "ledgers"},
    "topic_violations": {"audit_runs", "violations"},
}
"""The base tables each view reads (a view is created only where they exist)."""


def with_views(query: str, *, available: set[str] | None = None) -> str:
    """`query` prefixed with the views as CTEs (for engines that take one statement, e.g. QueryBuilder);
    with `available` (the registered base tables), only the views those tables can serve."""
    ctes = ",\n".join(
        f"{name} AS ({sql})"
        for name, sql in VIEWS.items()
        if available is None or NEEDS[name] <= available
    )
    return f"WITH {ctes}\n{query}"


def create_statements(*, temporary: bool = False, available: set[str] | None = None) -> list[str]:
    """`CREATE OR REPLACE [TEMP] VIEW` statements in dependency order (what `bkaudit tables views` prints);
    with `available`, only the views whose base tables are in it."""
    kind = "TEMP VIEW" if temporary else "VIEW"
    return [
        f"CREATE OR REPLACE {kind} {name} AS {sql}"
        for name, sql in VIEWS.items()
        if available is None or NEEDS[name] <= available
    ]


def spark_views(spark: Any, warehouse: Warehouse | str) -> None:
    """Register the base tables (every row, no Delta jars needed) and the views as Spark temp views."""
    from bkaudit.tables.read import load, table_exists

    present = {t for t in BASE_TABLES if table_exists(warehouse, t)}
    for table in sorted(present):
        load(spark, warehouse, table, latest=False).createOrReplaceTempView(table)
    for statement in create_statements(temporary=True, available=present):
        spark.sql(statement)


def duckdb_views(con: Any, warehouse: Warehouse | str) -> None:
    """Register the base tables (delta-rs datasets: stats-pruned, current files only) and the views."""
    from bkaudit.tables.location import Warehouse
    from bkaudit.tables.read import table_exists
    from bkaudit.tables.store import open_delta, table_uri

    present = {t for t in BASE_TABLES if table_exists(warehouse, t)}
    for table in sorted(present):
        uri = table_uri(warehouse, table)
        con.register(table, open_delta(uri, options=Warehouse.of(warehouse).options).to_pyarrow_dataset())
    for statement in create_statements(available=present):
        con.execute(statement)
