"""Engine ``connect``: staged builds whose Spark work runs on the gateway (a real Spark Connect
server on the test metastore), while the attempt, manifest and commit stay in the task.

The operator runs under a real ``airflow dags test`` (committing, and SIGTERMed while its write
runs on the server) and in-process with a real ``OutletEventAccessors``; a materialized table
with ``'engine' = 'connect'`` is refreshed on the running Airflow.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider_staged.airflow.operators.staged_table import StagedCreateTableAsOperator
from airflow_provider_staged.discovery.embedded import GatewayInfo, MetastoreInfo
from airflow_provider_staged.engine.connect import ConnectEngine
from airflow_provider_staged.engine.runners import make_engine
from airflow_provider_staged.local.gateway import log_file
from airflow_provider_staged.materialized.continuous_run import ContinuousRefresh
from airflow_provider_staged.materialized.definition import parse_definition
from airflow_provider_staged.materialized.params import parse_refresh_request
from airflow_provider_staged.materialized.refresh import run_refresh, staged_refresh
from airflow_provider_staged.materialized.workflow.scheduler import (
    CreatePeriodicRefreshWorkflow,
    DeleteRefreshWorkflow,
    RefreshTrigger,
)
from airflow_provider_staged.staging.identifiers import TableIdentifier
from airflow_provider_staged.staging.journal import AttemptState
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.settings import StagedSettings
from airflow_provider_staged.storage.files import normalize_location
from tests.fixtures.airflow_cli import AirflowCli
from tests.integration.staged_helpers import (
    assert_aborted_unwritten,
    build,
    expected_snapshot,
    part_files,
    snapshot,
    staged_table,
    stop_group,
    table_location,
    version_dirs,
    wait_for_part_files,
)
from tests.integration.test_mt_auto_suspend import wait_for
from tests.integration.test_mt_continuous import D0, D1, ids, partition_ids, partitions
from tests.integration.test_mt_workflow_e2e import Rest, rest, scheduler  # noqa: F401 (fixtures)

GATEWAY_CONN_ID = "gateway_test"
STAGED_CONN_ID = "staged_connect_test"
SQL = "SELECT id, id % 7 AS k, concat('gw-', id) AS label FROM range(5000)"
# Two Spark tasks (the gateway has two cores), each sleeping 50 ms per row: ~100 s of writing.
SQL_SLOW = (
    "SELECT id, reflect('java.lang.Thread', 'sleep', 50L) AS z "
    "FROM (SELECT /*+ REPARTITION(2) */ id FROM range(4000)) AS shuffled"
)


def gateway_connection(gateway: GatewayInfo) -> str:
    """The gateway as the Spark provider's ``spark_connect`` connection (token as password)."""
    return json.dumps({"conn_type": "spark_connect", "host": "localhost", "port": gateway.port,
                       "password": gateway.token})


@pytest.fixture(scope="module")
def database(spark: Any) -> str:
    name = "gw_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE {name}")
    return name


def test_operator_on_the_gateway_commits_on_the_task_side(
    spark: Any, spark_gateway: GatewayInfo, metastore: MetastoreInfo, database: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    journal_dir = tmp_path / "journal"
    staged_conn = {"conn_type": "staged_hive", "host": metastore.host, "port": metastore.port,
                   "extra": {"warehouse": metastore.warehouse, "journal_dir": str(journal_dir)}}
    monkeypatch.setenv(f"AIRFLOW_CONN_{STAGED_CONN_ID.upper()}", json.dumps(staged_conn))
    monkeypatch.setenv(f"AIRFLOW_CONN_{GATEWAY_CONN_ID.upper()}", gateway_connection(spark_gateway))
    target = f"{database}.by_k"
    operator = StagedCreateTableAsOperator(
        task_id="build", target=target, sql=SQL, engine="connect", spark_conn_id=GATEWAY_CONN_ID,
        staged_conn_id=STAGED_CONN_ID, partition_by=["k"],
    )
    ti = SimpleNamespace(dag_id="gw_it", task_id="build", run_id="r1", try_number=1, map_index=-1)
    context: dict[str, Any] = {"ti": ti, "outlet_events": OutletEventAccessors()}

    result = operator.execute(context)

    assert result["rows"] == 5000
    # A Hive table keeps its partition column last.
    assert snapshot(spark, target) == expected_snapshot(spark, f"SELECT id, label, k FROM ({SQL})")
    (record,) = FileJournal(journal_dir).records()
    assert record.state is AttemptState.COMMITTED
    assert table_location(metastore, target) == record.location
    assert len({Path(f["path"]).parent.name for f in record.manifest["files"]}) == 7  # k=0..6
    assert context["outlet_events"][operator.outlets[0]].extra["version"] == record.attempt_id
    assert operator._engine is not None and operator._engine._session is None  # released


def dags_test_env(airflow_cli: AirflowCli, gateway: GatewayInfo, metastore: MetastoreInfo,
                  journal_dir: Path, target: str, sql: str, purpose: str) -> dict[str, str]:
    return airflow_cli.task_env(
        metastore, journal_dir, target, STAGED_TEST_SQL=sql, STAGED_TEST_PURPOSE=purpose,
        STAGED_TEST_SPARK_CONN_ID=GATEWAY_CONN_ID,
        **{f"AIRFLOW_CONN_{GATEWAY_CONN_ID.upper()}": gateway_connection(gateway)},
    )


def test_dags_test_connect_commits(
    airflow_cli: AirflowCli, spark_gateway: GatewayInfo, spark: Any, metastore: MetastoreInfo,
    database: str, tmp_path: Path,
) -> None:
    target, journal_dir = f"{database}.dagtest", tmp_path / "journal"
    marker = uuid.uuid4().hex
    sql = f"SELECT id, '{marker}' AS marker FROM range(1000)"
    env = dags_test_env(airflow_cli, spark_gateway, metastore, journal_dir, target, sql, "create")

    result = airflow_cli.run("dags", "test", "staged_connect", env=env)

    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert f"connecting to Spark Connect server {spark_gateway.public_url}" in output
    assert spark_gateway.token not in output
    assert snapshot(spark, target) == expected_snapshot(spark, sql)
    (record,) = FileJournal(journal_dir).records()
    assert record.state is AttemptState.COMMITTED and record.manifest["rows"] == 1000
    assert record.task is not None and record.task.dag_id == "staged_connect"


def test_sigterm_interrupts_the_write_on_the_gateway_and_aborts(
    airflow_cli: AirflowCli, spark_gateway: GatewayInfo, spark: Any, metastore: MetastoreInfo,
    database: str, tmp_path: Path,
) -> None:
    target, journal_dir = f"{database}.killed", tmp_path / "journal"
    journal = FileJournal(journal_dir)
    build(spark, staged_table(metastore, FileJournal(tmp_path / "seed"), target, "create"), SQL)
    before, before_dirs = snapshot(spark, target), version_dirs(metastore, target)
    env = dags_test_env(airflow_cli, spark_gateway, metastore, journal_dir, target, SQL_SLOW, "replace")
    process = airflow_cli.start("dags", "test", "staged_connect", env=env, log_path=tmp_path / "task.log")
    try:
        # The kill point: the server's two tasks are writing the attempt's part files.
        kill = wait_for_part_files(journal, target, process, timeout=300)
        os.kill(process.pid, signal.SIGTERM)
        returncode = process.wait(timeout=120)
    finally:
        stop_group(process)
    log = (tmp_path / "task.log").read_text()
    assert returncode != 0, log[-4000:]
    assert "interrupting Spark Connect operations tagged" in log, log[-4000:]
    # On the server: both of its cores are free again at once (the slow write would hold them
    # for ~100 s), and its log shows the operation interrupted.
    from pyspark.sql.connect.session import SparkSession

    started = time.monotonic()
    probe = SparkSession.builder.remote(spark_gateway.url).create()
    try:
        assert probe.range(0, 8, 1, 2).selectExpr("sum(id)").collect()[0][0] == 28
    finally:
        probe.stop()
    assert time.monotonic() - started < 30
    server_log = log_file(Path(spark_gateway.home)).read_text(errors="replace")
    assert "interrupt" in server_log.lower()
    record = journal.require(kill.record.attempt_id)
    assert record.state is AttemptState.ABORTED and record.error == "task killed", log[-4000:]
    assert_aborted_unwritten(record)
    time.sleep(3)  # a task the interrupt missed would still be writing: give it time to show
    assert not kill.directory.exists(), f"{kill.directory} left behind: {part_files(kill.directory)}"
    assert version_dirs(metastore, target) == before_dirs
    assert snapshot(spark, target) == before


CONNECT_DEFINITION = """CREATE MATERIALIZED TABLE {name}
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd', 'engine' = 'connect')
FRESHNESS = INTERVAL '1' DAY
REFRESH_MODE = FULL
AS SELECT ds, count(*) AS orders FROM {source} GROUP BY ds;
"""


@pytest.mark.slow
def test_refresh_dag_with_engine_connect_on_running_airflow(
    spark_gateway: GatewayInfo, scheduler, rest: Rest, spark: Any, database: str,  # noqa: F811
) -> None:
    """The refresh task finds the gateway under the Airflow's ``STAGED_HOME`` (the session's)."""
    source = f"{database}.orders"
    spark.createDataFrame([("2024-01-01",), ("2024-01-01",), ("2024-01-02",)], "ds string") \
        .write.saveAsTable(source)
    identifier = TableIdentifier(database, "orders_daily")
    handler = scheduler.create_refresh_workflow(CreatePeriodicRefreshWorkflow(
        identifier, CONNECT_DEFINITION.format(name=identifier.name, source=source)))
    try:
        run_id = scheduler.trigger_refresh(
            handler, RefreshTrigger(is_periodic=False, static_partitions={"ds": "2024-01-01"}))
        run = rest.wait_for_run(handler.dag_id, run_id)
        assert run["state"] == "success", rest.task_states(handler.dag_id, run_id)
        spark.catalog.refreshTable(identifier.name)
        assert [tuple(r) for r in spark.table(identifier.name).collect()] == [(2, "2024-01-01")]
        log = rest.http.get(f"/dags/{handler.dag_id}/dagRuns/{run_id}/taskInstances/refresh/logs/1").text
        assert f"connecting to Spark Connect server {spark_gateway.public_url}" in log, log[-3000:]
    finally:
        scheduler.delete_refresh_workflow(DeleteRefreshWorkflow(handler))


def test_one_time_refresh_of_a_continuous_table_on_the_gateway(
    spark: Any, spark_gateway: GatewayInfo, metastore: MetastoreInfo, database: str, tmp_path: Path,
) -> None:
    """A CONTINUOUS table with ``'engine' = 'connect'``: its stream runs in-process, a refresh with
    ``staticPartitions`` overwrites exactly partition D1 on the gateway (a source file erased since
    the stream read it is gone from D1), the micro-batch the stream committed after the refresh
    began is carried into D1, D0 is untouched, and the stream's next micro-batch lands once."""
    settings = StagedSettings(metastore.uri, metastore.warehouse, str(tmp_path / "journal"))
    src = f"{database}.live_src"
    spark.sql(f"CREATE TABLE {src} (id BIGINT, v INT, ds STRING) USING parquet LOCATION '{tmp_path / 'src'}'")

    def add(first: int, count: int) -> None:
        spark.sql(f"INSERT INTO {src} SELECT id, CAST(id AS INT), IF(id % 2 = 0, '{D0}', '{D1}') "
                  f"FROM range({first}, {first + count})")

    parsed = parse_definition(
        f"CREATE MATERIALIZED TABLE {database}.live PARTITIONED BY (ds) WITH ('engine' = 'connect')\n"
        f"FRESHNESS = INTERVAL '1' SECOND\nAS SELECT id, v, ds FROM {src}", "live.sql")
    target = parsed.identifier.name
    add(0, 20)
    before = set((tmp_path / "src").glob("*.parquet"))
    spark.sql(f"INSERT INTO {src} SELECT /*+ COALESCE(1) */ id, 0, '{D1}' FROM range(1001, 1005, 2)")
    refresh = ContinuousRefresh(parsed, settings, spark)
    refresh.start()
    try:
        first = [*range(20), 1001, 1003]
        wait_for("the first rows", lambda: refresh.report() and ids(spark, target) == first)
        for erased in set((tmp_path / "src").glob("*.parquet")) - before:
            erased.unlink()  # the stream keeps its rows: only the overwrite takes them out
        request = parse_refresh_request(RefreshTrigger(static_partitions={"ds": D1}).as_conf(), parsed,
                                        datetime.now(timezone.utc))
        staged = staged_refresh(parsed, request, settings, None)
        add(20, 10)  # streamed into D1's current location before the switch: carried over
        wait_for("rows streamed during the refresh",
                 lambda: refresh.report() and ids(spark, target) == [*range(30), 1001, 1003])
        d0 = (partitions(metastore.uri, target)[D0], partition_ids(spark, target, D0))
        engine = make_engine(parsed.options["engine"], settings, url=spark_gateway.url)
        try:
            result = run_refresh(parsed, request, settings, staged, engine)
        finally:
            engine.close()

        assert isinstance(engine, ConnectEngine) and result["partitions"] == {"ds": D1}
        assert partitions(metastore.uri, target)[D1].startswith(normalize_location(staged.location) + "/")
        assert partition_ids(spark, target, D1) == list(range(1, 30, 2))  # erased rows gone, later batch kept
        assert (partitions(metastore.uri, target)[D0], partition_ids(spark, target, D0)) == d0
        add(30, 4)
        wait_for("rows after the refresh", lambda: refresh.report() and ids(spark, target) == list(range(34)))
    finally:
        refresh.stop()
