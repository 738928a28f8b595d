"""The staged write job: run a query and write its result into an attempt's staging location.

Runs inside the Spark driver: in-process for the embedded engine, or as the application
that ``spark-submit`` starts (``python spark_job.py --spec spec.json``). It never touches the
catalog: it returns (and, when submitted, writes) the manifest that the Airflow side commits.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

def hive_columns(schema: Any) -> list[tuple[str, str]]:
    return [(field.name, field.dataType.simpleString()) for field in schema.fields]


def data_files(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Parquet files under ``root`` (a path or URI) with their row counts (from footers, no data
    read), through the storage layer: the same on a local disk and on S3."""
    import pyarrow.parquet as pq

    from airflow_provider_staged.staging.partition_paths import is_data_path
    from airflow_provider_staged.storage.files import list_files, open_input_file

    found = []
    for entry in list_files(os.fspath(root)):
        if not entry.path.endswith(".parquet") or not is_data_path(entry.path):
            continue
        with open_input_file(entry.location) as handle:
            rows = pq.ParquetFile(handle).metadata.num_rows
        found.append({"path": entry.path, "rows": rows, "bytes": entry.size})
    return found


def write_parquet(df: DataFrame, spec: dict[str, Any]) -> dict[str, Any]:
    """Write ``df`` as Parquet into the attempt's version directory and describe it."""
    location = spec["location"]
    audited = None
    if spec.get("audits"):
        from airflow_provider_staged.engine.audit_job import audit_staged, observe_audits

        df, audited = observe_audits(df, spec["audits"])
    df, partition_by = _hive_partition_columns(df, list(spec.get("partition_by") or []))
    # "error" (= errorifexists): the Spark Connect client (4.2) knows only this spelling.
    writer = df.write.format("parquet").mode("error")
    for key, value in (spec.get("options") or {}).items():
        writer = writer.option(key, value)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(location)
    data_columns = [f for f in df.schema.fields if f.name not in partition_by]
    partition_fields = [f for f in df.schema.fields if f.name in partition_by]
    from pyspark.sql.types import StructType

    ordered = StructType(data_columns + partition_fields)
    columns = hive_columns(ordered)
    manifest = {
        "location": location,
        "schema_json": ordered.json(),
        "hive_columns": columns,
        "partition_columns": partition_by,
        "files": data_files(location),
    }
    if audited is not None:
        read_staged = functools.partial(df.sparkSession.read.schema(ordered).parquet, location)
        manifest["audits"], manifest["dropped_rows"] = audit_staged(df, read_staged, *audited)
    return manifest


def _hive_partition_columns(df: DataFrame, partition_by: list[str]) -> tuple[DataFrame, list[str]]:
    """``df`` with its partition columns named in lower case, and those names.

    Spark resolves names case-insensitively and the metastore stores them lower-cased, so
    ``partition_by=["DS"]`` over a query's ``ds`` (or the reverse) is one column; its directories
    are written as ``ds=...``, the name the metastore gives its partitions.
    """
    produced = {column.lower(): column for column in df.columns}
    missing = [column for column in partition_by if column.lower() not in produced]
    if missing:
        raise ValueError(f"the query does not produce partition column(s) {missing}")
    for column in partition_by:
        if produced[column.lower()] != column.lower():
            df = df.withColumnRenamed(produced[column.lower()], column.lower())
    return df, [column.lower() for column in partition_by]


def write_table_non_atomic(df: DataFrame, spec: dict[str, Any]) -> dict[str, Any]:
    """The plain, NON-atomic path: (drop,) create the table first, then insert into it.

    Readers can see a missing or empty table while this runs, and a failure leaves it so.
    ``spec["table"]`` is an already validated and quoted identifier.
    """
    spark, table, purpose = df.sparkSession, spec["table"], spec["purpose"]
    exists = spark.catalog.tableExists(spec["table_name"])
    if exists and purpose == "create_if_not_exists":
        return {"table": table, "skipped": True}
    if exists and purpose == "create":
        raise ValueError(f"table {spec['table_name']} already exists")
    if not exists and purpose == "replace":
        raise ValueError(f"table {spec['table_name']} does not exist")
    if exists:
        spark.sql(f"DROP TABLE {table}")
    df.limit(0).write.format("parquet").saveAsTable(table)
    df.write.insertInto(table)
    return {"table": table, "skipped": False}


def write_jdbc(df: DataFrame, spec: dict[str, Any]) -> dict[str, Any]:
    """Write into a staged PostgreSQL table (imported here: this module stays stdlib-only)."""
    from airflow_provider_staged.engine.jdbc_write import write_staged_jdbc

    return write_staged_jdbc(df, spec)


WRITERS: dict[str, Callable[[Any, dict[str, Any]], dict[str, Any]]] = {
    "parquet": write_parquet,
    "table": write_table_non_atomic,
    "jdbc": write_jdbc,
}


def leading_keyword(sql: str) -> str:
    """The first word of ``sql`` in upper case, after blanks, ``(`` and comments (bracketed
    comments nest in Spark SQL); ``""`` when it does not start with a word."""
    at, depth = 0, 0
    while at < len(sql):
        if depth:
            if sql.startswith("*/", at):
                depth, at = depth - 1, at + 2
            elif sql.startswith("/*", at):
                depth, at = depth + 1, at + 2
            else:
                at += 1
        elif sql.startswith("/*", at):
            depth, at = 1, at + 2
        elif sql.startswith("--", at):
            end = sql.find("\n", at)
            at = len(sql) if end < 0 else end + 1
        elif sql[at].isspace() or sql[at] == "(":
            at += 1
        else:
            break
    end = at
    while end < len(sql) and (sql[end].isalnum() or sql[end] == "_"):
        end += 1
    return sql[at:end].upper()


def query_frame(spark: SparkSession, sql: str) -> DataFrame:
    """The DataFrame of the staged build's query.

    Over Spark Connect, ``spark.sql`` is a round trip of its own (the server parses and
    analyzes the text to run a command at once) that returns, for a query, only the same SQL
    text as the relation to build on: a query is sent as that relation directly (one round
    trip and one of the server's analyses of it less per build).
    A statement starting with ``SELECT`` is a query in Spark's grammar; anything else (``WITH``
    may lead to an ``INSERT``) takes ``spark.sql``, so a command still runs once.
    """
    if type(spark).__module__.startswith("pyspark.sql.connect.") and leading_keyword(sql) == "SELECT":
        from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame
        from pyspark.sql.connect.plan import SQL

        return ConnectDataFrame(SQL(sql), spark)  # what spark.sql builds from such an answer
    return spark.sql(sql)


def run_staged_write(spark: SparkSession, sql: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``sql`` and write its result as ``spec`` says; return the manifest."""
    writer = WRITERS.get(spec.get("format", "parquet"))
    if writer is None:
        raise ValueError(f"unknown staged write format {spec.get('format')!r}")
    sql_conf = spec.get("sql_conf") or {}
    # The session may serve later builds in this process: put its settings back afterwards.
    previous = {key: spark.conf.get(key, None) for key in sql_conf}
    try:
        for key, value in sql_conf.items():
            spark.conf.set(key, value)
        manifest = writer(query_frame(spark, sql), spec)
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    if spec.get("manifest_path"):
        write_manifest(spec["manifest_path"], manifest)
    return manifest


def write_manifest(location: str, manifest: dict[str, Any]) -> None:
    """Write the manifest where the submitting side reads it (a path or a URI of the store)."""
    from airflow_provider_staged.storage.files import write_text

    write_text(location, json.dumps(manifest, indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="staged write job (spark-submit application)")
    parser.add_argument("--spec", required=True, help="JSON file or URI: sql, location, format, ...")
    args = parser.parse_args(argv)
    from airflow_provider_staged.storage.files import read_text

    spec = json.loads(read_text(args.spec))  # a path or a URI of the warehouse's store
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.enableHiveSupport().getOrCreate()
    try:
        run_staged_write(spark, spec["sql"], spec)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
