"""Security does not cost function: under the secured configuration (ZooKeeper digest + ACLs, mutual TLS to
bookies, tokens) the checker, AutoRecovery and the clients still do their jobs. Ground truth is the damage
the run injected: entries 3 and 4 deleted from the only copy of the single-copy ledger."""

from __future__ import annotations

import pytest

import bkaudit.tables.checker_schemas  # noqa: F401 - registers audit_runs and violations
from bkaudit.tables.read import read_arrow
from tests.security.flow import SecureRun

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def test_the_checker_reads_every_bookie_over_mutual_tls(secure_run: SecureRun) -> None:
    check = secure_run.facts["check"]
    counts = check["counts"]
    assert counts["bookie_unreachable_but_registered"] == 0 and counts["ledger_unverifiable"] == 0, counts
    runs = [r for r in read_arrow(str(secure_run.directory / "warehouse"), "audit_runs").to_pylist()
            if r["run_id"] == check["run_id"]]
    assert runs and runs[0]["reevaluated"] >= 1  # the ledger touched after the snapshot: asked again (TLS)
    violations = read_arrow(str(secure_run.directory / "warehouse"), "violations").to_pylist()
    single = secure_run.facts["ledgers"]["single"]
    lost = [v for v in violations if v["run_id"] == check["run_id"] and v["ledger_id"] == single
            and v["category"] == "no_replica"]
    assert [(r["first"], r["last"]) for v in lost for r in v["missing_entries"]] == [(3, 4)]
    judged = ("no_replica", "below_ack_quorum", "below_write_quorum", "ledger_unverifiable")
    others = {v["ledger_id"] for v in violations
              if v["run_id"] == check["run_id"] and v["category"] in judged}
    assert others == {single}
