"""bkaudit.chaos: seeded fault schedules against a real local cluster, a recorded history, invariants.

`bkaudit chaos --seed S` starts a local cluster (ZooKeeper + bookies on loopback), runs writers, readers,
recoveries, AutoRecovery and the checker while injecting the faults of the schedule drawn from S, records
every acknowledgement, close, recovery, fault, finding and repair as JSON lines, and checks the invariants of
BookKeeper's guarantee against that history (docs/reliability.md). The same seed gives the same schedule.

Modules: schedule (pure: seed -> faults), history (JSON-lines recorder), invariants (pure: history ->
violations), proxy (loopback TCP proxy in front of bookies), faults (injectors), workloads (writer, reader,
recoverer threads), checkrun (the one adapter onto the checker), runner (orchestration), commands (CLI).
"""
