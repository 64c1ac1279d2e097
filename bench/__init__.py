"""bkaudit's benchmarks (docs/performance.md), a package so they import each other and bkaudit by name.

Run one from the repo root as a module, `python -m bench.checker --quick`; by path (`python bench/checker.py`)
it needs the repo root on PYTHONPATH, as the tests that run a bench give it. bench/harness.py starts each
side's fresh process as `python -m bench.harness --call module:function`, the module in this package.
Results go to bench/results/ (raw JSON, never rewritten).
"""
