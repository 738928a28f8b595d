"""Partitions whose values the data gives quotes, backslashes or newlines, refreshed one at a time
(real Spark and metastore): the value is quoted in the query's filter and escaped in the
partition's directory and name, and only that partition is replaced."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.discovery.embedded import MetastoreInfo
from airflow_provider_staged.engine.runners import EmbeddedEngine
from airflow_provider_staged.materialized.definition import parse_definition
from airflow_provider_staged.materialized.params import parse_refresh_request
from airflow_provider_staged.materialized.refresh import run_refresh, staged_refresh
from airflow_provider_staged.staging.settings import StagedSettings

QUOTE, NEWLINE, BACKSLASH = "it's v1.0", "two\nlines", "back\\slash"
# The metastore matches a partition's name as a regular expression: its '.' finds this one too.
LOOKALIKE = "it's v1x0"
VALUES = (QUOTE, NEWLINE, BACKSLASH, LOOKALIKE)


def _rows(spark: Any, table: str) -> set[tuple[int, str]]:
    spark.catalog.refreshTable(table)
    return {(row.id, row.k) for row in spark.table(table).collect()}


def test_partitions_with_quotes_and_newlines_refresh_one_at_a_time(
    spark: Any, metastore: MetastoreInfo, tmp_path: Path,
) -> None:
    database = "pv_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE {database}")
    spark.createDataFrame([(i, VALUES[i % 4]) for i in range(8)], "id BIGINT, k STRING") \
        .createOrReplaceTempView("pv_rows")
    spark.sql(f"CREATE TABLE {database}.src USING parquet AS SELECT * FROM pv_rows")
    definition = parse_definition(
        f"CREATE MATERIALIZED TABLE {database}.t PARTITIONED BY (k)\nFRESHNESS = INTERVAL '1' HOUR\n"
        f"REFRESH_MODE = FULL\nAS SELECT id, k FROM {database}.src", tmp_path / "t.sql")
    settings = StagedSettings(metastore.uri, metastore.warehouse, str(tmp_path / "journal"))
    engine = EmbeddedEngine(settings)  # the test's session: one Spark per process

    def refresh(conf: dict[str, Any]) -> None:
        request = parse_refresh_request(conf, definition, datetime.now(timezone.utc))
        staged = staged_refresh(definition, request, settings, None)
        run_refresh(definition, request, settings, staged, engine)

    refresh({"isPeriodic": False})  # the whole table: the data's values become partitions
    target = definition.identifier.name
    assert _rows(spark, target) == {(i, VALUES[i % 4]) for i in range(8)}

    spark.sql(f"INSERT INTO {database}.src VALUES (100, 'it\\'s v1.0'), (101, 'it\\'s v1x0')")
    spark.sql(f"INSERT INTO {database}.src SELECT 102, concat('two', char(10), 'lines')")
    refresh({"k": QUOTE})  # the Trigger form's field, as typed
    rows = _rows(spark, target)
    assert (100, QUOTE) in rows and (101, LOOKALIKE) not in rows and (102, NEWLINE) not in rows

    refresh({"isPeriodic": False, "staticPartitions": {"k": NEWLINE}})
    refresh({"isPeriodic": False, "staticPartitions": {"k": BACKSLASH}})
    rows = _rows(spark, target)
    assert (102, NEWLINE) in rows and (101, LOOKALIKE) not in rows
    assert rows == {(i, VALUES[i % 4]) for i in range(8)} | {(100, QUOTE), (102, NEWLINE)}
    with MetastoreClient(metastore.uri) as client:
        partitions = {part.values[0]: part.sd.location for part in client.partitions(database, "t")}
    assert set(partitions) == set(VALUES)
    assert partitions[QUOTE].endswith("/k=it%27s v1.0") and partitions[NEWLINE].endswith("/k=two%0Alines")
