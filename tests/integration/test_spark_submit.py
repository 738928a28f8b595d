"""The spark-submit engine against a real standalone cluster started from the pyspark wheel.

The operator runs with ``engine="spark_submit"``: the Spark provider's ``SparkSubmitHook``
submits the shipped job script (client mode) to the cluster through an Airflow connection
defined by an environment variable; the Airflow side commits the manifest the job wrote.
``execute`` is called the way the task runner calls it, with a real ``OutletEventAccessors``.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
from airflow.sdk.exceptions import AirflowException
from airflow.sdk.execution_time.context import OutletEventAccessors
from psycopg import sql

from airflow_provider_staged.operators.staged_table import StagedCreateTableAsOperator
from airflow_provider_staged.services.metastore import MetastoreInfo
from airflow_provider_staged.staging.journal import AttemptJournal, AttemptState
from tests.fixtures.postgres_server import PostgresServer
from tests.fixtures.spark_standalone import StandaloneCluster
from tests.integration.staged_helpers import (
    build,
    expected_snapshot,
    snapshot,
    staged_table,
    table_location,
    version_dirs,
)

SPARK_CONN_ID = "spark_test"
STAGED_CONN_ID = "staged_test"
SQL = "SELECT id, id % 97 AS k, concat('row-', id) AS label FROM range(20000)"
# The second of two partitions fails on the cluster after the first has written its file.
SQL_FAILS_ON_CLUSTER = (
    "SELECT /*+ REPARTITION(2) */ IF(id = 19999, raise_error('injected task failure'), id) AS id "
    "FROM range(20000)"
)


@pytest.fixture(scope="module")
def connections(
    spark_cluster: StandaloneCluster, metastore: MetastoreInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """``spark_test`` (the cluster, client mode) and ``staged_test`` (the metastore); yields the journal."""
    journal_dir = tmp_path_factory.mktemp("submit-journal")
    spark_conn = {
        "conn_type": "spark",
        "host": "spark://127.0.0.1",
        "port": spark_cluster.port,
        "extra": {"deploy-mode": "client"},
    }
    staged_conn = {
        "conn_type": "staged_hive",
        "host": metastore.host,
        "port": metastore.port,
        "extra": {"warehouse": metastore.warehouse, "journal_dir": str(journal_dir)},
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}", json.dumps(spark_conn))
        patch.setenv(f"AIRFLOW_CONN_{STAGED_CONN_ID.upper()}", json.dumps(staged_conn))
        yield journal_dir


@pytest.fixture(scope="module")
def database(spark: Any) -> str:
    name = "submit_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE {name}")
    return name


def submit_operator(
    target: str, sql: str, purpose: str, spark_conf: dict[str, str] | None = None, **kwargs: Any
) -> StagedCreateTableAsOperator:
    return StagedCreateTableAsOperator(
        task_id="build",
        target=target,
        sql=sql,
        purpose=purpose,
        engine="spark_submit",
        spark_conn_id=SPARK_CONN_ID,
        staged_conn_id=STAGED_CONN_ID,
        # No driver UI: less start-up work on 2 shared cores.
        spark_conf={"spark.ui.enabled": "false", **(spark_conf or {})},
        **kwargs,
    )


def task_context(run_id: str) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="submit_it", task_id="build", run_id=run_id, try_number=1, map_index=-1)
    return {"ti": ti, "outlet_events": OutletEventAccessors()}


def test_spark_submit_commits_a_table_fresh_readers_see(
    spark: Any, metastore: MetastoreInfo, connections: Path, database: str
) -> None:
    target = f"{database}.numbers"
    operator = submit_operator(target, SQL, "create")
    context = task_context("ok")

    result = operator.execute(context)

    assert result["rows"] == 20000
    assert snapshot(spark, target) == expected_snapshot(spark, SQL)
    (record,) = [r for r in AttemptJournal(connections).records() if r.target == target]
    assert record.state is AttemptState.COMMITTED
    assert table_location(metastore, target) == record.location
    assert version_dirs(metastore, target) == [record.location.rsplit("/", 1)[1]]
    assert context["outlet_events"][operator.outlets[0]].extra["version"] == record.attempt_id


def test_query_failing_on_the_cluster_fails_the_task_and_keeps_the_previous_version(
    spark: Any, metastore: MetastoreInfo, connections: Path, database: str, tmp_path: Path
) -> None:
    target = f"{database}.kept"
    # The previous version is built in-process: only the failing build goes to the cluster.
    build(spark, staged_table(metastore, AttemptJournal(tmp_path), target, "create"), SQL)
    before, before_dirs = snapshot(spark, target), version_dirs(metastore, target)
    # One try per Spark task: the failure is deterministic, retries would only cost time.
    operator = submit_operator(
        target, SQL_FAILS_ON_CLUSTER, "replace", spark_conf={"spark.task.maxFailures": "1"}
    )

    with pytest.raises(AirflowException, match="spark-submit"):
        operator.execute(task_context("fails"))

    assert snapshot(spark, target) == before
    assert version_dirs(metastore, target) == before_dirs
    (record,) = [r for r in AttemptJournal(connections).records() if r.target == target]
    assert record.state is AttemptState.ABORTED


def test_jdbc_target_through_spark_submit_keeps_the_password_out(
    postgres: PostgresServer,
    postgres_conn_id: str,
    connections: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The job runs in spark-submit's own driver and the cluster's executor: the JDBC jar and the
    password (in the submit's environment only) must reach them, and the commit happens here."""
    caplog.set_level(logging.DEBUG)
    schema = "submit_" + uuid.uuid4().hex[:8]
    with psycopg.connect(postgres.conninfo(), autocommit=True) as db:
        db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    target = f"jdbc://{postgres_conn_id}/{schema}.numbers"
    operator = submit_operator(target, SQL, "create", jdbc_options={"count_rows": True, "batch_size": 1000})

    result = operator.execute(task_context("jdbc"))

    assert result["rows"] == 20000
    with psycopg.connect(postgres.conninfo()) as db:
        table = sql.Identifier(schema, "numbers")
        found = db.execute(
            sql.SQL("SELECT count(*), sum(k), count(DISTINCT label) FROM {}").format(table)
        ).fetchone()
        left = db.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename <> 'numbers'", (schema,)
        ).fetchone()
    assert found == (20000, sum(i % 97 for i in range(20000)), 20000)
    assert left == (0,)
    (record,) = [r for r in AttemptJournal(connections).records() if r.target == target]
    assert record.state is AttemptState.COMMITTED
    # The hook logs the command and the driver's output through Airflow's logging (to stdout).
    logged = caplog.text + "".join(capfd.readouterr())
    assert "Spark-Submit cmd" in logged and "staged-write" in logged
    journal_text = "".join(path.read_text() for path in connections.glob("*.json"))
    assert postgres.password not in logged + journal_text
