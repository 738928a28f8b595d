"""Materialized-table refreshes through real ``airflow dags test`` runs (real Spark + metastore)."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from airflow_provider_staged.metastore.client import MetastoreClient
from airflow_provider_staged.staging.journal import AttemptJournal
from tests.fixtures.airflow_cli import REPO, staged_connection
from tests.integration.staged_helpers import build, staged_table

SOURCE_SQL = (
    "SELECT id, concat('2024-01-0', CAST(id % 5 + 1 AS STRING)) AS ds, "
    "CAST(id % 10 AS DECIMAL(10, 2)) AS amount FROM range(1000)"
)
PARTITIONED = """
CREATE MATERIALIZED TABLE {db}.orders_daily
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
FRESHNESS = INTERVAL '1' DAY
REFRESH_MODE = FULL
AS SELECT ds, count(*) AS orders, sum(amount) AS revenue FROM {db}.orders
   WHERE IF(ds = '2024-01-05', raise_error('injected refresh failure'), true)
   GROUP BY ds;
"""
UNPARTITIONED = """
CREATE MATERIALIZED TABLE {db}.orders_total
FRESHNESS = INTERVAL '1' HOUR
AS SELECT count(*) AS orders, sum(amount) AS revenue FROM {db}.orders;
"""


@pytest.fixture(scope="module")
def mt_env(airflow_cli, metastore, spark, tmp_path_factory):
    db = "mt_" + uuid.uuid4().hex[:8]
    with MetastoreClient(metastore.uri) as client:
        client.ensure_database(db, metastore.warehouse)
    journal_dir = tmp_path_factory.mktemp("mt-journal")
    build(spark, staged_table(metastore, AttemptJournal(journal_dir), f"{db}.orders", "create"), SOURCE_SQL)
    dags = tmp_path_factory.mktemp("mt-dags")
    shutil.copy(REPO / "dags" / "materialized_tables.py", dags / "materialized_tables.py")
    (dags / "materialized").mkdir()
    (dags / "materialized" / "orders_daily.sql").write_text(PARTITIONED.format(db=db))
    (dags / "materialized" / "orders_total.sql").write_text(UNPARTITIONED.format(db=db))
    env = airflow_cli.env(
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW_CONN_STAGED_DEFAULT=staged_connection(
            metastore.port, metastore.uri, journal_dir, metastore.warehouse
        ),
    )
    return db, env


def _partitions(metastore, db, table="orders_daily"):
    with MetastoreClient(metastore.uri) as client:
        return {tuple(p.values): p.sd.location for p in client.partitions(db, table)}


def _rows(spark, table, columns=("ds", "orders", "revenue")):
    spark.catalog.refreshTable(table)
    return {tuple(r) for r in spark.table(table).select(*columns).collect()}


def _expected(spark, db, where="true"):
    sql = f"SELECT ds, count(*) AS orders, sum(amount) AS revenue FROM {db}.orders WHERE {where} GROUP BY ds"
    return {tuple(r) for r in spark.sql(sql).collect()}


def _dags_test(airflow_cli, env, dag_id, *args):
    result = airflow_cli.run("dags", "test", dag_id, *args, env=env)
    return result, result.stdout + result.stderr


def test_periodic_then_static_then_failed_full_refresh(airflow_cli, metastore, spark, mt_env):
    db, env = mt_env
    dag_id = f"mt__{db}__orders_daily"
    # A daily run fired at 2024-01-02 00:00:00 refreshes ds = 2024-01-01.
    result, output = _dags_test(airflow_cli, env, dag_id, "2024-01-02T00:00:00+00:00")
    assert result.returncode == 0, output[-4000:]
    assert set(_partitions(metastore, db)) == {("2024-01-01",)}
    assert _rows(spark, f"{db}.orders_daily") == _expected(spark, db, "ds = '2024-01-01'")

    conf = {"isPeriodic": False, "staticPartitions": {"ds": "2024-01-03"}}
    result, output = _dags_test(airflow_cli, env, dag_id, "--conf", json.dumps(conf))
    assert result.returncode == 0, output[-4000:]
    partitions = _partitions(metastore, db)
    assert set(partitions) == {("2024-01-01",), ("2024-01-03",)}
    before = _rows(spark, f"{db}.orders_daily")
    assert before == _expected(spark, db, "ds IN ('2024-01-01', '2024-01-03')")

    # A full refresh reaches ds = 2024-01-05, whose rows fail the query mid-job.
    full = {"isPeriodic": False}
    result, output = _dags_test(airflow_cli, env, dag_id, "--conf", json.dumps(full))
    assert "injected refresh failure" in output
    assert _partitions(metastore, db) == partitions
    assert _rows(spark, f"{db}.orders_daily") == before


def test_unpartitioned_full_refresh_replaces_table(airflow_cli, metastore, spark, mt_env):
    db, env = mt_env
    result, output = _dags_test(airflow_cli, env, f"mt__{db}__orders_total")
    assert result.returncode == 0, output[-4000:]
    row = spark.sql(f"SELECT count(*) AS n, sum(amount) AS r FROM {db}.orders").first()
    assert _rows(spark, f"{db}.orders_total", ("orders", "revenue")) == {(row.n, row.r)}


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"isPeriodic": False, "staticPartitions": {"ds": "2024-01-01'; DROP TABLE x; --"}}, "ds"),
        ({"isPeriodic": False, "staticPartitions": {"region": "eu"}}, "region"),
        ({"scheduleTime": "2024/01/02"}, "2024/01/02"),
        (
            {"isPeriodic": False, "executionConfig": {"spark.sql.warehouse.dir": "/tmp/x"}},
            "spark.sql.warehouse.dir",
        ),
    ],
)
def test_bad_refresh_requests_fail_clearly_and_change_nothing(
    airflow_cli, metastore, spark, mt_env, conf, message
):
    db, env = mt_env
    before = _partitions(metastore, db)
    _, output = _dags_test(airflow_cli, env, f"mt__{db}__orders_daily", "--conf", json.dumps(conf))
    assert message in output
    assert "RefreshRequestError" in output or "ParamValidationError" in output or "invalid" in output
    assert _partitions(metastore, db) == before


def test_definitions_folder_example_parses():
    from airflow_provider_staged.materialized.definition import load_definition

    definition = load_definition(Path(REPO / "dags" / "materialized" / "orders_daily.sql"))
    assert definition.identifier.name == "analytics.orders_daily"
    assert definition.partition_by == ("ds",)
