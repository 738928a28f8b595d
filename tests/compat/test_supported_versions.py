"""The core at both ends of the supported versions (README, "Supported versions").

``scripts/compat.sh`` runs it in an environment of the lowest versions
(``scripts/lowest-versions.txt``); at the newest ones, ``tests/integration`` covers each of its
steps (``scripts/test.sh`` leaves it out of the main run, for the suite's time budget). It
therefore uses only what every supported Airflow and pyspark has: Airflow's CLI, a DagBag, the
staged CLI, the fixtures' metastore and Spark.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
import uuid
from pathlib import Path

import airflow
import pytest
from packaging.version import Version

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.materialized.continuous_run import ContinuousRefresh, read_progress
from airflow_provider_staged.materialized.definition import parse_definition
from airflow_provider_staged.sink.hive import HiveSink
from airflow_provider_staged.sink.runtime import write_batch, write_stream
from airflow_provider_staged.staging.audits import RowExpectation
from airflow_provider_staged.staging.journal import AttemptState
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.settings import StagedSettings
from tests.fixtures.airflow_cli import REPO, staged_connection
from tests.integration.staged_helpers import build, expected_snapshot, snapshot, staged_table, version_dirs

SOURCE_SQL = (
    "SELECT id, concat('2024-01-0', CAST(id % 3 + 1 AS STRING)) AS ds, id % 7 AS amount FROM range(300)"
)
DAILY = """
CREATE MATERIALIZED TABLE {db}.orders_daily
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
FRESHNESS = INTERVAL '1' DAY
REFRESH_MODE = FULL
AS SELECT ds, count(*) AS orders, sum(amount) AS revenue FROM {db}.orders GROUP BY ds;
"""
BROKEN = (
    "CREATE MATERIALIZED TABLE {db}.seven\nFRESHNESS = INTERVAL '7' MINUTE\nREFRESH_MODE = FULL\nAS SELECT 1"
)


@pytest.fixture(scope="module")
def database(metastore) -> str:
    name = "compat_" + uuid.uuid4().hex[:8]
    with MetastoreClient(metastore.uri) as client:
        client.ensure_database(name, metastore.warehouse)
    return name


@pytest.fixture(scope="module")
def journal_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("compat-journal")


@pytest.fixture(scope="module")
def orders(spark, metastore, database, journal_dir) -> str:
    """The source table, built by an atomic CTAS."""
    target = f"{database}.orders"
    build(spark, staged_table(metastore, FileJournal(journal_dir), target, "create"), SOURCE_SQL)
    return target


@pytest.fixture(scope="module")
def dags_folder(tmp_path_factory, database) -> Path:
    """The DAG factory's file, reading a good and a broken definition."""
    folder = tmp_path_factory.mktemp("compat-dags")
    shutil.copy(REPO / "dags" / "materialized_tables.py", folder)
    (folder / "materialized").mkdir()
    (folder / "materialized" / "orders_daily.sql").write_text(DAILY.format(db=database))
    (folder / "materialized" / "seven.sql").write_text(BROKEN.format(db=database))
    return folder


def test_airflow_loads_the_provider_and_its_connection_type(airflow_cli):
    result = airflow_cli.run("providers", "hooks", "--output", "json")
    assert result.returncode == 0, result.stderr[-3000:]
    listed = json.loads(result.stdout.splitlines()[-1])  # Airflow 3.0 logs its start to stdout too
    (hook,) = [h for h in listed if h["connection_type"] == "staged_hive"]
    assert hook["class"] == "airflow_provider_staged.airflow.hooks.staged_table.StagedTableHook"
    assert hook["package_name"] == "airflow-provider-staged"


def test_dag_factory_builds_refresh_dags_and_shows_broken_definitions(
    dags_folder, database, staged_default_connection
):
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.0
        from airflow.models.dagbag import DagBag

    dagbag = DagBag(dag_folder=str(dags_folder))
    assert dagbag.import_errors == {}
    daily, broken = dagbag.dags[f"mt__{database}__orders_daily"], dagbag.dags["mt__broken__seven"]
    # The Task SDK's timetable (Airflow 3.1 on) names its cron `expression`; core's (3.0) `summary`.
    assert (getattr(daily.timetable, "expression", None) or daily.timetable.summary) == "0 0 * * *"
    assert "ds" in daily.params and [task.task_id for task in daily.tasks] == ["refresh"]
    assert "seven.sql:2: FRESHNESS: invalid freshness INTERVAL '7' MINUTE" in broken.description
    # Airflow deep-copies DAGs (3.0's `dags test` does): the operators and definitions must copy.
    assert [task.task_id for task in copy.deepcopy(daily).tasks] == ["refresh"]


def test_atomic_ctas_then_a_failed_replace_keeps_the_table(spark, metastore, journal_dir, orders):
    assert snapshot(spark, orders) == expected_snapshot(spark, SOURCE_SQL)
    before = version_dirs(metastore, orders)
    failing = "SELECT id, ds, IF(id = 299, raise_error('injected failure'), amount) AS amount FROM " + orders
    replace = staged_table(metastore, FileJournal(journal_dir), orders, "replace")
    with pytest.raises(Exception, match="injected failure"):
        build(spark, replace, failing)
    assert snapshot(spark, orders) == expected_snapshot(spark, SOURCE_SQL)
    assert version_dirs(metastore, orders) == before
    assert FileJournal(journal_dir).get(replace.attempt_id).state is AttemptState.ABORTED


def test_partition_refresh_under_airflow_dags_test(
    airflow_cli, spark, metastore, journal_dir, orders, dags_folder, database
):
    env = airflow_cli.env(
        AIRFLOW__CORE__DAGS_FOLDER=str(dags_folder),
        AIRFLOW_CONN_STAGED_DEFAULT=staged_connection(
            metastore.port, metastore.uri, journal_dir, metastore.warehouse
        ),
    )
    if Version(airflow.__version__) < Version("3.0.2"):  # its `dags test` reads the DAG's file from the DB
        reserialized = airflow_cli.run("dags", "reserialize", env=env)
        assert reserialized.returncode == 0, reserialized.stderr[-3000:]
    # A daily run fired at 2024-01-03 00:00 refreshes ds = 2024-01-02.
    dag_id = f"mt__{database}__orders_daily"
    result = airflow_cli.run("dags", "test", dag_id, "2024-01-03T00:00:00+00:00", env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    with MetastoreClient(metastore.uri) as client:
        assert [p.values for p in client.partitions(database, "orders_daily")] == [["2024-01-02"]]
    spark.catalog.refreshTable(f"{database}.orders_daily")
    rows = spark.sql(f"SELECT ds, orders FROM {database}.orders_daily").collect()
    assert [tuple(row) for row in rows] == [("2024-01-02", 100)]

    # The staged CLI reads it back through the same connection (pyarrow, no JVM).
    shown = airflow_cli.staged("show", f"{database}.orders_daily", "--output", "json", env=env)
    assert shown.returncode == 0, shown.stderr[-3000:]
    versions = airflow_cli.staged("versions", f"{database}.orders_daily", "--output", "json", env=env)
    assert versions.returncode == 0, versions.stderr[-3000:]
    (kept,) = json.loads(versions.stdout)
    assert (kept["partition"], kept["status"]) == ("ds=2024-01-02", "current")
    # One word for version: the partition shown is at the version `staged versions` calls current.
    assert json.loads(shown.stdout)["partitions"] == [
        {"partition": "ds=2024-01-02", "rows": 1, "version": kept["version"]}]


def test_the_hive_sink_audits_batches_and_streams(spark, metastore, database, journal_dir, tmp_path):
    """The built-in sink's native path (Spark's writer, ``observe``, Spark's file sink) on every
    supported pyspark; only Python sinks need pyspark 4's data sources."""
    settings = StagedSettings(metastore.uri, metastore.warehouse, str(journal_dir))
    batches, streamed = f"{database}.events", f"{database}.events_streamed"
    keep = [RowExpectation("p_not_1", "p <> 1", "drop")]
    write_batch(spark.sql("SELECT id, CAST(id % 3 AS INT) AS p FROM range(12)"),
                HiveSink(batches, settings, partition_by=["p"], audits=keep))
    source = tmp_path / "events"
    spark.sql("SELECT id, CAST(id % 3 AS INT) AS p FROM range(12, 20)").write.json(str(source))
    stream = spark.readStream.schema("id BIGINT, p INT").json(str(source))
    query = write_stream(stream, HiveSink(streamed, settings, partition_by=["p"]),
                         checkpoint_location=str(tmp_path / "checkpoint"), trigger_interval="1 second")
    query.processAllAvailable()
    query.stop()
    assert _ids(spark, batches) == [i for i in range(12) if i % 3 != 1]
    assert _ids(spark, streamed) == list(range(12, 20))
    committed = [r for r in FileJournal(journal_dir).records() if r.target in (batches, streamed)]
    assert {r.state for r in committed} == {AttemptState.COMMITTED}
    assert sum(r.manifest["dropped_rows"] for r in committed) == 4


def test_a_continuous_table_streams(spark, metastore, database, journal_dir, tmp_path):
    settings = StagedSettings(metastore.uri, metastore.warehouse, str(journal_dir))
    source = f"{database}.clicks"
    spark.sql(f"CREATE TABLE {source} (id BIGINT, v INT) USING parquet LOCATION '{tmp_path / 'clicks'}'")
    spark.sql(f"INSERT INTO {source} SELECT id, CAST(id AS INT) FROM range(6)")
    parsed = parse_definition(f"CREATE MATERIALIZED TABLE {database}.clicks_live\n"
                              "FRESHNESS = INTERVAL '5' SECOND\n"
                              f"AS SELECT id, v FROM {source} WHERE v % 2 = 0", "clicks_live.sql")
    refresh = ContinuousRefresh(parsed, settings, spark)
    refresh.start()
    try:
        deadline = time.monotonic() + 90
        while _ids(spark, parsed.identifier.name) != [0, 2, 4]:
            assert time.monotonic() < deadline, f"no rows streamed: {refresh.report()}"
            time.sleep(1)
    finally:
        refresh.stop()
    assert read_progress(refresh.root).state == "stopped"


def _ids(spark, table: str) -> list[int]:
    if not spark.catalog.tableExists(table):
        return []
    spark.catalog.refreshTable(table)
    return sorted(row.id for row in spark.table(table).collect())
