"""Shared fixtures: real services are started once per test session, on loopback, free ports."""

import os

# Every JVM the suite starts (Spark drivers in-process, in Airflow tasks and in spark-submit, the
# gateway, the metastore) lives seconds to minutes on tiny data: C2 compilation costs more CPU
# than it saves there, and 2 cores are shared by all of them. The `java` launcher reads this
# variable in every child process; benchmarks and the product do not set it.
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")

pytest_plugins = [
    "tests.fixtures.airflow_home",
    "tests.fixtures.s3",
    "tests.fixtures.metastore",
    "tests.fixtures.tables",
    "tests.fixtures.spark",
    "tests.fixtures.spark_cluster",
    "tests.fixtures.gateway",
    "tests.fixtures.postgres",
    "tests.fixtures.airflow_server",
    "tests.fixtures.airflow_cli",
    "tests.fixtures.browser",
    "tests.fixtures.hosts",
]
