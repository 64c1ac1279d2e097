"""The checks of the cluster metadata checker (BP-34) as pure functions over value objects.

One module per concern on a shared base (`base.Check`), as BookKeeper's Auditor has one task per check:
`durability`, `placement`, `progress`, `availability`, `metadata`, plus `classification` (categories,
severities, counts, exit codes) and `reconcile` (the pre-report metadata re-read). No I/O: the Spark job in
`bkaudit.spark.checker` feeds them rows and bookie answers and writes what they return.
"""
