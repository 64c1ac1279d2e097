"""The checks of the cluster metadata checker (BP-34) as pure functions over value objects.

One module per concern on a shared base (`base.Check`), as BookKeeper's Auditor has one task per check:
`durability`, `placement`, `progress`, `availability`, `metadata`, `reads`, plus `classification`
(categories, severities, counts, exit codes), `reconcile` (the pre-report metadata re-read), `statuses`
(what a bookie's answer can be) and `queue` (which findings go to the under-replication queue). No I/O:
the job layer (`bkaudit.job`, composed by `bkaudit.spark.checker`) feeds them rows and bookie answers and
writes what they return.
"""
