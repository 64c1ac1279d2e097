"""bench/java_auditor.py's pure parts: reading what BookKeeper's Auditor logged, the write sets, the truth.

The log lines are verbatim from a run of Apache BookKeeper 4.17.3's AuditorReplicasCheckTask on this
machine (bench/java_auditor.py --ledgers 300, 2026-11-29): what its reportLedgersWithMissingEntries prints,
two bookies of one ledger on one line, then the ledger's category line. Expected write sets and categories
are worked by hand from RoundRobinDistributionSchedule (entry e on ensemble indexes (e + i) mod E, i < WQ).
"""

from __future__ import annotations

from bench import java_auditor as ja

PREFIX = "2026-11-29T12:44:04,324 ERROR [AuditorBookie-bench-auditor:3181] AuditorReplicasCheckTask - "
ENSEMBLE = "[127.0.0.5:33433, 127.0.0.3:43423, 127.0.0.7:53725, 127.0.0.6:53551, 127.0.0.4:45391]"
LOG = (
    f"{PREFIX}Ledger : 202 has following missing entries : In segment starting at 0 with ensemble "
    f"{ENSEMBLE}, following entries [3, 4] are missing in bookie: 127.0.0.5:33433, In segment starting at 0 "
    f"with ensemble {ENSEMBLE}, following entries [4] are missing in bookie: 127.0.0.3:43423\n"
    f"{PREFIX}Ledger : 202 entryId : 4 is having: 1 replicas, less than ackQuorum num of replicas : 2\n"
    "2026-11-29T12:44:04,342 INFO  [AuditorBookie-bench-auditor:3181] AuditorReplicasCheckTask - Completed "
    "ReplicasCheck in 2419 milliSeconds numLedgersFoundHavingNoReplicaOfAnEntry 19 "
    "numLedgersFoundHavingLessThanAQReplicasOfAnEntry 30 "
    "numLedgersFoundHavingLessThanWQReplicasOfAnEntry 2.\n"
)


def test_the_auditors_report_becomes_a_category_entries_and_the_bookies_it_names() -> None:
    found, by_bookie = ja.replicas_found(LOG)
    assert found == {202: ("below_ack_quorum", [(3, 4)])}
    assert by_bookie == [[202, "127.0.0.5:33433", [3, 4]], [202, "127.0.0.3:43423", [4]]]
    assert ja.COMPLETED["replicas"].search(LOG).group(1) == "2419"
    assert ja.replicas_found("nothing here\n") == ({}, [])


def test_write_sets_follow_the_round_robin_schedule_per_segment() -> None:
    a, b, c, d, e, f = "a:1", "b:1", "c:1", "d:1", "e:1", "f:1"
    # E5/WQ3, entries 0-14, the bookie at index 4 replaced from entry 5 on
    led = ja.Ledger(7, 5, 3, 2, ((0, (a, b, c, d, e)), (5, (a, b, c, d, f))), 14, True)
    assert led.stored_on(e) == {0: [2, 3, 4]}  # 2 -> 2,3,4; 3 -> 3,4,0; 4 -> 4,0,1
    assert led.stored_on(f) == {1: [7, 8, 9, 12, 13, 14]}
    assert led.stored_on(a) == {0: [0, 3, 4], 1: [5, 8, 9, 10, 13, 14]}
    assert led.stored_on("z:1") == {}


def test_truth_counts_the_copies_left_of_each_entry() -> None:
    one = ja.Ledger(1, 3, 3, 2, ((0, ("a", "b", "c")),), 9, True)  # WQ3 AQ2
    two = ja.Ledger(2, 3, 2, 2, ((0, ("a", "b", "c")),), 9, True)  # WQ2 AQ2
    lost = {1: {"a": {3, 4, 6}}, 2: {"a": {0, 3}, "b": {0}}}
    assert ja.truth({1: one, 2: two}, lost) == {
        1: ("below_write_quorum", [(3, 4), (6, 6)]),  # 2 copies of 3 left
        2: ("no_replica", [(0, 0), (3, 3)]),  # entry 0 was on a and b only
    }


def test_the_ledger_mix_adds_up_to_the_ledgers_asked_for() -> None:
    for n in (100, 10_000, 100_003):
        assert sum(count for _, _, count in ja.shares(n)) == n
    assert {entries for _, entries, _ in ja.shares(10_000)} == {5, 20, 100, 1000}
