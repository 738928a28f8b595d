"""``staged show`` reads what Spark reads: partitions at their own locations, rows per partition."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from airflow_provider_staged.catalogs.metastore.reader import read_table
from airflow_provider_staged.cli.main import app
from airflow_provider_staged.engine.spark_job import run_staged_write
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.kinds.hive_partitions import HivePartitionStagedTable
from tests.fixtures.airflow_cli import staged_connection

pytestmark = pytest.mark.timeout(300)

FIRST = "SELECT id, concat('2024-01-0', id % 3 + 1) AS ds FROM range(300)"
# Refreshes only ds=2024-01-02 (the same query, as a materialized refresh does), with 250 rows.
SECOND = (
    "SELECT * FROM (SELECT id, concat('2024-01-0', id % 3 + 1) AS ds FROM range(750)) WHERE ds = '2024-01-02'"
)


def _refresh(spark, metastore, journal, identifier, spec, sql) -> str:
    """The refresh's version: the attempt id."""
    staged = HivePartitionStagedTable(identifier, ["ds"], spec, journal, metastore.uri)
    staged.begin()
    staged.written(run_staged_write(spark, sql, staged.write_spec()))
    staged.commit()
    return staged.attempt_id


def test_show_reads_partitions_at_their_own_locations(spark, metastore, tmp_path: Path) -> None:
    database = "rd_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE {database}")
    identifier = TableIdentifier(database, "daily")
    journal = FileJournal(tmp_path / "journal")
    first = _refresh(spark, metastore, journal, identifier, {}, FIRST)
    second = _refresh(spark, metastore, journal, identifier, {"ds": "2024-01-02"}, SECOND)

    snapshot = read_table(metastore.uri, identifier, limit=7)
    spark.catalog.refreshTable(identifier.name)
    by_spark = {
        f"ds={row.ds}": row.n
        for row in spark.sql(f"SELECT ds, count(*) AS n FROM {identifier.name} GROUP BY ds").collect()
    }
    assert (
        snapshot.partition_rows
        == by_spark
        == {"ds=2024-01-01": 100, "ds=2024-01-02": 250, "ds=2024-01-03": 100}
    )
    assert snapshot.total_rows == 450
    # One word for version: the attempt that wrote each partition, as `staged versions` lists it.
    assert snapshot.partition_versions == {
        "ds=2024-01-01": first, "ds=2024-01-02": second, "ds=2024-01-03": first
    }
    assert snapshot.columns == ["id", "ds"] and len(snapshot.rows) == 7

    env = {
        "AIRFLOW_CONN_SHOWN": staged_connection(
            metastore.port, metastore.uri, tmp_path / "j", metastore.warehouse
        ),
        "COLUMNS": "200",
    }
    result = CliRunner().invoke(app, ["show", identifier.name, "--conn", "shown"], env={**os.environ, **env})
    assert result.exit_code == 0, result.output
    assert f"{identifier.name}: 450 rows in 3 partitions, each at its version" in result.output
    assert f"ds=2024-01-02 │ 250  │ {second}" in result.output
    assert f"ds=2024-01-03 │ 100  │ {first}" in result.output
