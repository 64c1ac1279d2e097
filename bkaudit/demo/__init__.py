"""`bkaudit demo` (`make demo`): the whole audit story on a throw-away local cluster, in a few minutes.

1. start ZooKeeper + 6 bookies on 3 racks;            5. snapshot + check: the damage, per category,
2. write a few hundred ledgers (mixed E/WQ/AQ, some       published to the under-replication queue;
   open, some on Pulsar topics);                        6. auto-recovery drains the queue;
3. snapshot + check: clean;                            7. snapshot + check: durability clean again, what
4. faults: kill a bookie; wipe, format and restart        remains explained in plain words;
   another; a ledger with every copy on one rack;      8. the HTML report;   9. stop everything.
6b. lifecycle: a new bookie joins, an old one is drained (Active -> Draining -> Drained, docs/lifecycle.md)
   by the Auditor while it serves reads only; the final check and the report show its state.

The two damaged bookies share a rack on purpose: rack-aware placement never puts two bookies of one rack in
a WQ=2 write set, so every entry keeps a copy and recovery can succeed (losing two racks' worth of bookies
at once would be real data loss, which no audit can undo). The demo is also an end-to-end test: every
expectation is checked, `--json` prints them, and the exit status is 1 when one fails.

Spark runs in this process (one JVM for the three runs); auto-recovery runs as `bkaudit autorecovery run
--once`, a separate process like in production. Everything it started is stopped on exit, failure or
Ctrl-C, unless `--keep`.

The command is bkaudit.demo.commands, the run and its expectations bkaudit.demo.run, the ledgers it writes
bkaudit.demo.workload, its terminal output bkaudit.demo.progress.
"""
