"""Shared fixtures: real services are started once per test session, on loopback, free ports."""

pytest_plugins = [
    "tests.fixtures.airflow_home",
    "tests.fixtures.metastore",
    "tests.fixtures.spark",
    "tests.fixtures.spark_cluster",
    "tests.fixtures.gateway",
    "tests.fixtures.postgres",
    "tests.fixtures.airflow_server",
    "tests.fixtures.airflow_cli",
    "tests.fixtures.browser",
]
