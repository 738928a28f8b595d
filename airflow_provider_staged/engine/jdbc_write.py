"""The Spark job's writer into a staged PostgreSQL table (the engine side of ``jdbc_table``)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from psycopg import sql

from airflow_provider_staged.catalogs.postgres_connections import PostgresConnection
from airflow_provider_staged.catalogs.postgres_types import postgres_columns
from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.kinds.jdbc_table import (
    POSTGRES_DRIVER,
    type_staged_table,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@contextlib.contextmanager
def _quiet_py4j() -> Iterator[None]:
    """py4j logs every JVM call with its arguments at DEBUG: keep the password out of it."""
    logger = logging.getLogger("py4j")
    level = logger.level
    logger.setLevel(max(level, logging.INFO))
    try:
        yield
    finally:
        logger.setLevel(level)


def write_staged_jdbc(df: DataFrame, spec: dict[str, Any]) -> dict[str, Any]:
    """The Spark job's JDBC writer: type the staged table from ``df``'s schema, write, describe
    it; with audits, count the row expectations during the write, then audit the staged table."""
    audited = None
    if spec.get("audits"):
        from airflow_provider_staged.engine.audit_job import audit_staged, observe_audits

        df, audited = observe_audits(df, spec["audits"])
    columns = postgres_columns(df.schema.jsonValue())
    names = [column.name for column in columns]
    if names != df.columns:  # toDF costs a round of analysis: only when a name changes
        df = df.toDF(*names)
    password = os.environ.get(spec["password_env"])
    if password is None:
        raise StagingError(
            f"the environment variable {spec['password_env']} (the database password) is not set"
        )
    connection = PostgresConnection.from_endpoint(spec["endpoint"], password)
    schema, staged = spec["schema"], spec["staged_table"]
    options = {
        "url": connection.jdbc_url(),
        "driver": POSTGRES_DRIVER,
        "dbtable": sql.Identifier(schema, staged).as_string(),
        "user": connection.user,
        "password": password,
        "batchsize": str(spec["batch_size"]),
    }
    if spec.get("num_partitions"):
        options["numPartitions"] = str(spec["num_partitions"])
    # One connection for the DDL before and the size after (idle, lock-free, meanwhile).
    with connection.reused() as conn:
        oid = type_staged_table(conn, schema, staged, columns, spec["lock_timeout_ms"])
        with _quiet_py4j():
            writer = df.write.format("jdbc").options(**options)
        writer.mode("append").save()
        count = sql.SQL("(SELECT count(*) FROM {})").format(sql.Identifier(schema, staged))
        # A row-count change audit compares counts: an audited build records its rows.
        counted = spec.get("count_rows") or audited is not None
        rows, size = conn.execute(
            sql.SQL("SELECT {}, pg_total_relation_size({})").format(
                count if counted else sql.NULL, sql.Literal(oid)
            )
        ).fetchone()
    manifest = {
        "format": "jdbc",
        "location": f"{schema}.{staged}",
        "table_oid": oid,
        "columns": [[column.name, column.definition] for column in columns],
        "rows": None if rows is None else int(rows),
        "bytes": int(size),
    }
    if audited is not None:
        def read_staged() -> DataFrame:
            with _quiet_py4j():
                reader = df.sparkSession.read.format("jdbc").options(**options)
            return reader.load()

        manifest["audits"], manifest["dropped_rows"] = audit_staged(df, read_staged, *audited)
    return manifest
