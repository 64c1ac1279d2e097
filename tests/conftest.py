"""Shared fixtures live in tests/fixtures/ (one module per real component), loaded as plugins here."""

pytest_plugins = [
    "tests.fixtures.zookeeper",
    "tests.fixtures.cluster",
    "tests.fixtures.spark",
    "tests.fixtures.java",
]
