"""The unified sink through the gateway (a Spark Connect session): the sink travels pickled in
the write's options and its writers and committers run on the server's Python workers."""

from __future__ import annotations

import uuid

from airflow_provider_staged.sink.hive import HiveSink
from airflow_provider_staged.sink.runtime import write_batch
from airflow_provider_staged.staging.settings import StagedSettings


def test_hive_sink_over_spark_connect(spark_gateway, metastore, tmp_path):
    from pyspark.sql.connect.session import SparkSession

    session = SparkSession.builder.remote(spark_gateway.url).create()
    try:
        database = "sinkgw_" + uuid.uuid4().hex[:6]
        session.sql(f"CREATE DATABASE {database}")
        settings = StagedSettings(metastore.uri, metastore.warehouse, str(tmp_path / "journal"))
        table = f"{database}.t"
        write_batch(session.sql("SELECT id FROM range(10)"), HiveSink(table, settings))  # Spark's writer
        write_batch(session.sql("SELECT id FROM range(10, 15)"), HiveSink(table, settings, native=False))
        ids = sorted(row.id for row in session.sql(f"SELECT id FROM {table}").collect())
        assert ids == list(range(15))
        assert {r.kind for r in settings.journal.records()} == {"hive_append"}
    finally:
        session.stop()
