"""Shared fixtures: real services are started once per test session, on loopback, free ports."""

pytest_plugins = [
    "tests.fixtures.metastore",
    "tests.fixtures.spark",
]
