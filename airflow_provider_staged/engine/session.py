"""Build the SparkSession that reads source tables from the Hive Metastore."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Debian's libpostgresql-jdbc-java (scripts/setup.sh installs it); STAGED_JDBC_JAR overrides.
DEFAULT_JDBC_JAR = "/usr/share/java/postgresql.jar"


def jdbc_jars_conf() -> dict[str, str]:
    """``spark.jars`` with the PostgreSQL JDBC driver when the jar exists (JDBC staged tables)."""
    jar = os.environ.get("STAGED_JDBC_JAR", DEFAULT_JDBC_JAR)
    return {"spark.jars": jar} if Path(jar).is_file() else {}


def hive_conf(metastore_uri: str, warehouse: str) -> dict[str, str]:
    """The Spark conf that points a session or a submitted job at the metastore."""
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.hive.metastore.uris": metastore_uri,
        "spark.sql.warehouse.dir": warehouse,
        # Readers must see the committed version directory, not a cached listing.
        "spark.sql.hive.filesourcePartitionFileCacheSize": "0",
    }


def build_session(
    metastore_uri: str,
    warehouse: str,
    master: str = "local[*]",
    app_name: str = "staged",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get or create the process's SparkSession bound to the metastore."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    settings = {
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "4",
        **jdbc_jars_conf(),
        **hive_conf(metastore_uri, warehouse),
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.enableHiveSupport().getOrCreate()
