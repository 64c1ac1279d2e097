"""The static catalog of Delta tables: every table in one place, nothing registered on import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bkaudit.tables import catalog

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_catalog_names_every_table_once_by_its_own_name() -> None:
    assert {name for name, spec in catalog.TABLES.items() if spec.name != name} == set()
    expected = {"ledgers", "snapshots", "violations", "audit_runs", "bookie_checks", "decommission_audits"}
    assert expected <= set(catalog.TABLES)


def test_an_unknown_table_is_named_with_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"unknown table 'ledgerz' \(known: .*ledgers"):
        catalog.spec("ledgerz")


def test_every_table_is_documented() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in DOCS.glob("*.md"))
    assert [name for name in catalog.TABLES if f"`{name}`" not in text] == []


def test_the_pure_decommission_logic_registers_nothing_and_sees_the_catalog_table() -> None:
    """Importing `bkaudit.decommission` must not change what the warehouse holds (it did register a table)."""
    code = (
        "from bkaudit.tables import catalog; before = dict(catalog.TABLES); "
        "import bkaudit.decommission as dc; "
        "assert dict(catalog.TABLES) == before; "
        "assert dc.DECOMMISSION_AUDITS is catalog.spec('decommission_audits')"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
