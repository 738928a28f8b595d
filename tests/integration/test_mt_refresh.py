"""Materialized-table refreshes through real ``airflow dags test`` runs (real Spark + metastore)."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.staging.journal import AttemptState
from airflow_provider_staged.staging.journal_files import FileJournal
from tests.fixtures.airflow_cli import REPO, staged_connection
from tests.integration.staged_helpers import (
    assert_aborted_unwritten,
    attempt_path,
    build,
    snapshot,
    staged_table,
    version_dirs,
)

SOURCE_SQL = (
    "SELECT id, concat('2024-01-0', CAST(id % 5 + 1 AS STRING)) AS ds, "
    "CAST(id % 10 AS DECIMAL(10, 2)) AS amount FROM range(1000)"
)
# A refresh that reaches ds = 2024-01-05 fails in the write task: the rows are sorted by ds
# there, so the partitions before it have been written into the attempt's directory already.
PARTITIONED = """
CREATE MATERIALIZED TABLE {db}.orders_daily
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
FRESHNESS = INTERVAL '1' DAY
REFRESH_MODE = FULL
AS SELECT ds, IF(ds = '2024-01-05', raise_error('injected refresh failure'), orders) AS orders, revenue
   FROM (SELECT ds, count(*) AS orders, sum(amount) AS revenue FROM {db}.orders GROUP BY ds) AS per_day;
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
    build(spark, staged_table(metastore, FileJournal(journal_dir), f"{db}.orders", "create"), SOURCE_SQL)
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
    return db, env, journal_dir


def _attempts(journal_dir, table):
    return [r for r in FileJournal(journal_dir).records() if r.target == table]


def _state(spark, metastore, journal_dir, db, table="orders_daily"):
    """Everything a refresh may change: partitions, content, version directories, attempts."""
    target = f"{db}.{table}"
    return {
        "partitions": _partitions(metastore, db, table),
        "content": snapshot(spark, target),
        "version_dirs": version_dirs(metastore, target),
        "attempts": {r.attempt_id: r.state for r in _attempts(journal_dir, target)},
    }


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
    db, env, journal_dir = mt_env
    dag_id, table = f"mt__{db}__orders_daily", f"{db}.orders_daily"
    # A daily run fired at 2024-01-02 00:00:00 refreshes ds = 2024-01-01.
    result, output = _dags_test(airflow_cli, env, dag_id, "2024-01-02T00:00:00+00:00")
    assert result.returncode == 0, output[-4000:]
    assert set(_partitions(metastore, db)) == {("2024-01-01",)}
    assert _rows(spark, table) == _expected(spark, db, "ds = '2024-01-01'")

    conf = {"isPeriodic": False, "staticPartitions": {"ds": "2024-01-03"}}
    result, output = _dags_test(airflow_cli, env, dag_id, "--conf", json.dumps(conf))
    assert result.returncode == 0, output[-4000:]
    partitions = _partitions(metastore, db)
    assert set(partitions) == {("2024-01-01",), ("2024-01-03",)}
    # One line names what was committed: table, partitions with their rows, version, rows.
    assert "Refresh committed (one-time, schedule time " in output, output[-4000:]
    assert f"table {table}, partitions ds=2024-01-03: ds=2024-01-03 (1 row); version " in output
    before_rows = _rows(spark, table)
    assert before_rows == _expected(spark, db, "ds IN ('2024-01-01', '2024-01-03')")
    before = _state(spark, metastore, journal_dir, db)
    assert list(before["attempts"].values()) == [AttemptState.COMMITTED] * 2

    # A full refresh reaches ds = 2024-01-05, whose row fails the write task mid-write.
    full = {"isPeriodic": False}
    result, output = _dags_test(airflow_cli, env, dag_id, "--conf", json.dumps(full))
    assert result.returncode == 1 and "DagRun failed" in output, output[-4000:]
    assert "injected refresh failure" in output
    # Spark's own report: the task failed inside the file writer, i.e. after it began writing.
    assert "FileFormatDataWriter.writeWithIterator" in output, output[-4000:]
    after = _state(spark, metastore, journal_dir, db)
    (failed,) = [r for r in _attempts(journal_dir, table) if r.attempt_id not in before["attempts"]]
    assert failed.state is AttemptState.ABORTED, failed
    assert failed.kind == "hive_partitions" and failed.task.dag_id == dag_id
    assert_aborted_unwritten(failed)
    assert after["attempts"] == {**before["attempts"], failed.attempt_id: AttemptState.ABORTED}
    # No orphan: the failed attempt's directory is gone, the table's are as they were.
    assert not attempt_path(failed).exists()
    assert after["version_dirs"] == before["version_dirs"]
    assert after["partitions"] == before["partitions"] == partitions
    assert after["content"] == before["content"]
    assert _rows(spark, table) == before_rows


def test_unpartitioned_full_refresh_replaces_table(airflow_cli, metastore, spark, mt_env):
    db, env, journal_dir = mt_env
    result, output = _dags_test(airflow_cli, env, f"mt__{db}__orders_total")
    assert result.returncode == 0, output[-4000:]
    row = spark.sql(f"SELECT count(*) AS n, sum(amount) AS r FROM {db}.orders").first()
    assert _rows(spark, f"{db}.orders_total", ("orders", "revenue")) == {(row.n, row.r)}
    (record,) = _attempts(journal_dir, f"{db}.orders_total")
    assert record.state is AttemptState.COMMITTED


BAD_VALUE = "2024-01-01'; DROP TABLE x; --"


@pytest.mark.parametrize(
    ("conf", "error"),
    [
        # The params' schemas refuse bad partitions when the run is created (before any task).
        (
            {"isPeriodic": False, "staticPartitions": {"ds": BAD_VALUE}},
            f"ParamValidationError: Invalid input for param staticPartitions: {BAD_VALUE!r} does not match",
        ),
        (
            {"ds": BAD_VALUE},
            f"ParamValidationError: Invalid input for param ds: {BAD_VALUE!r} does not match",
        ),
        (
            {"isPeriodic": False, "staticPartitions": {"region": "eu"}},
            "Invalid input for param staticPartitions: Additional properties are not allowed "
            "('region' was unexpected)",
        ),
        # What a schema cannot say is refused by the task before any attempt begins.
        (
            {"ds": "2024-02-30"},
            "RefreshRequestError: invalid value '2024-02-30' for partition column 'ds'",
        ),
        (
            {"scheduleTime": "2024/01/02"},
            "ParamValidationError: Invalid input for param scheduleTime: '2024/01/02' does not match",
        ),
        (
            {"isPeriodic": False, "executionConfig": {"spark.sql.warehouse.dir": "/tmp/x"}},
            "RefreshRequestError: executionConfig key 'spark.sql.warehouse.dir' is not allowed",
        ),
    ],
)
def test_bad_refresh_requests_fail_clearly_and_change_nothing(
    airflow_cli, metastore, spark, mt_env, conf, error
):
    db, env, journal_dir = mt_env
    before = _state(spark, metastore, journal_dir, db)
    result, output = _dags_test(airflow_cli, env, f"mt__{db}__orders_daily", "--conf", json.dumps(conf))
    assert result.returncode == 1, output[-4000:]
    assert error in output, output[-4000:]
    # Rejected before any attempt began: nothing journaled, nothing written, nothing switched.
    assert _state(spark, metastore, journal_dir, db) == before


def test_definitions_folder_example_parses():
    from airflow_provider_staged.materialized.definition import load_definition

    definition = load_definition(Path(REPO / "dags" / "materialized" / "orders_daily.sql"))
    assert definition.identifier.name == "analytics.orders_daily"
    assert definition.partition_by == ("ds",)
