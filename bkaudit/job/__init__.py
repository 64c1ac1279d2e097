"""The checker's and snapshot's job layer without Spark: phases, fan-out, publishing, ZooKeeper scan plans.

Everything here runs with pyarrow and the I/O packages (zk, rpc, tables) only; `bkaudit.spark` composes it
into Spark jobs. See docs/architecture.md.
"""
