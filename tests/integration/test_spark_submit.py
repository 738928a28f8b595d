"""The spark-submit engine against a real standalone cluster started from the pyspark wheel.

The operator runs with ``engine="spark_submit"``: the Spark provider's ``SparkSubmitHook``
submits the shipped job script (client mode) to the cluster through an Airflow connection
defined by an environment variable; the Airflow side commits the manifest the job wrote.
Some tests call ``execute`` the way the task runner calls it, with a real
``OutletEventAccessors``; the others run the DAG ``staged_spark_submit`` (``tests/dags``) under a
real ``airflow dags test``, including a SIGTERM of it while the job runs on the cluster.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import psycopg
import pytest
from airflow.providers.common.compat.sdk import AirflowException
from airflow.sdk.execution_time.context import OutletEventAccessors
from psycopg import sql

from airflow_provider_staged.airflow.operators.staged_table import StagedCreateTableAsOperator
from airflow_provider_staged.discovery.embedded import MetastoreInfo
from airflow_provider_staged.staging.journal import AttemptState
from airflow_provider_staged.staging.journal_files import FileJournal
from airflow_provider_staged.staging.storage_paths import JOBS_DIR
from tests.fixtures.airflow_cli import AirflowCli
from tests.fixtures.postgres_server import PostgresServer
from tests.fixtures.spark_standalone import StandaloneCluster
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

SPARK_CONN_ID = "spark_test"
STAGED_CONN_ID = "staged_test"
SQL = "SELECT id, id % 97 AS k, concat('row-', id) AS label FROM range(20000)"
# The second of two partitions fails on the cluster after the first has written its file.
# (The projection runs after the shuffle, in the stage that writes.)
SQL_FAILS_ON_CLUSTER = (
    "SELECT IF(id = 19999, raise_error('injected task failure'), id) AS id "
    "FROM (SELECT /*+ REPARTITION(2) */ id FROM range(20000)) AS shuffled"
)


def spark_connection(cluster: StandaloneCluster) -> dict[str, Any]:
    """The cluster as a Spark provider connection (client mode: the driver runs next to the task)."""
    return {
        "conn_type": "spark",
        "host": "spark://127.0.0.1",
        "port": cluster.port,
        "extra": {"deploy-mode": "client"},
    }


@pytest.fixture(scope="module")
def connections(
    spark_cluster: StandaloneCluster, metastore: MetastoreInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """``spark_test`` (the cluster, client mode) and ``staged_test`` (the metastore); yields the journal."""
    journal_dir = tmp_path_factory.mktemp("submit-journal")
    spark_conn = spark_connection(spark_cluster)
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
    (record,) = [r for r in FileJournal(connections).records() if r.target == target]
    assert record.state is AttemptState.COMMITTED
    assert table_location(metastore, target) == record.location
    assert version_dirs(metastore, target) == [record.location.rsplit("/", 1)[1]]
    assert context["outlet_events"][operator.outlets[0]].extra["version"] == record.attempt_id
    # The spec and the manifest went through the warehouse (no file of this host's), then away.
    jobs = Path(metastore.warehouse) / JOBS_DIR
    assert jobs.is_dir() and list(jobs.iterdir()) == []


def test_query_failing_on_the_cluster_fails_the_task_and_keeps_the_previous_version(
    spark: Any, metastore: MetastoreInfo, connections: Path, database: str, tmp_path: Path
) -> None:
    target = f"{database}.kept"
    # The previous version is built in-process: only the failing build goes to the cluster.
    build(spark, staged_table(metastore, FileJournal(tmp_path), target, "create"), SQL)
    before, before_dirs = snapshot(spark, target), version_dirs(metastore, target)
    # One try per Spark task: the failure is deterministic, retries would only cost time.
    operator = submit_operator(
        target, SQL_FAILS_ON_CLUSTER, "replace", spark_conf={"spark.task.maxFailures": "1"}
    )

    with pytest.raises(AirflowException, match="spark-submit"):
        operator.execute(task_context("fails"))

    assert snapshot(spark, target) == before
    assert version_dirs(metastore, target) == before_dirs
    (record,) = [r for r in FileJournal(connections).records() if r.target == target]
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
    (record,) = [r for r in FileJournal(connections).records() if r.target == target]
    assert record.state is AttemptState.COMMITTED
    # The hook logs the command and the driver's output through Airflow's logging (to stdout).
    logged = caplog.text + "".join(capfd.readouterr())
    assert "Spark-Submit cmd" in logged and "staged-write" in logged
    journal_text = "".join(path.read_text() for path in connections.glob("*.json"))
    assert postgres.password not in logged + journal_text


# -- under ``airflow dags test`` ------------------------------------------------------------------

# One Spark write task on the 1-core executor; each row sleeps 50 ms in it (the projection runs
# after the shuffle): about 200 s of writing its part file.
SQL_SLOW = (
    "SELECT id, reflect('java.lang.Thread', 'sleep', 50L) AS z "
    "FROM (SELECT /*+ REPARTITION(1) */ id FROM range(4000)) AS shuffled"
)


def dags_test_env(
    airflow_cli: AirflowCli,
    cluster: StandaloneCluster,
    metastore: MetastoreInfo,
    journal_dir: Path,
    target: str,
    sql_text: str,
    purpose: str,
    marker: str,
) -> dict[str, str]:
    """The environment of ``airflow dags test staged_spark_submit``: both connections come from
    ``AIRFLOW_CONN_*``; ``marker`` is a Spark setting that tags the processes of this run."""
    spark_conf = {
        "spark.ui.enabled": "false",
        "spark.task.maxFailures": "1",
        "spark.staged.test.marker": marker,
    }
    return airflow_cli.task_env(
        metastore,
        journal_dir,
        target,
        STAGED_TEST_SQL=sql_text,
        STAGED_TEST_PURPOSE=purpose,
        STAGED_TEST_SPARK_CONN_ID=SPARK_CONN_ID,
        STAGED_TEST_SPARK_CONF=json.dumps(spark_conf),
        **{f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}": json.dumps(spark_connection(cluster))},
    )


def master_apps(cluster: StandaloneCluster) -> dict[str, list[dict[str, Any]]]:
    """The master's view of applications: ``activeapps`` and ``completedapps``."""
    with urllib.request.urlopen(f"{cluster.webui_url}/json/", timeout=10) as response:
        status = json.load(response)
    return {key: status.get(key, []) for key in ("activeapps", "completedapps")}


def cmdline_of(proc: psutil.Process) -> str:
    """The command line of a live process; empty for a zombie or a process that is gone."""
    try:
        return " ".join(proc.cmdline())
    except psutil.NoSuchProcess:  # ZombieProcess too
        return ""


def processes_mentioning(*needles: str) -> list[psutil.Process]:
    """Live processes whose command line contains one of ``needles``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["status"] != psutil.STATUS_ZOMBIE and any(n in cmdline for n in needles):
            found.append(proc)
    return found


def test_dags_test_spark_submit_commits(
    airflow_cli: AirflowCli,
    spark_cluster: StandaloneCluster,
    spark: Any,
    metastore: MetastoreInfo,
    database: str,
    tmp_path: Path,
) -> None:
    target, journal_dir, marker = f"{database}.dagtest", tmp_path / "journal", uuid.uuid4().hex
    env = dags_test_env(airflow_cli, spark_cluster, metastore, journal_dir, target, SQL, "create", marker)

    result = airflow_cli.run("dags", "test", "staged_spark_submit", env=env)

    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "Spark-Submit cmd" in output and marker in output  # the cluster built it, not local Spark
    assert snapshot(spark, target) == expected_snapshot(spark, SQL)
    (record,) = FileJournal(journal_dir).records()
    assert record.state is AttemptState.COMMITTED and record.target == target
    assert record.task is not None and record.task.dag_id == "staged_spark_submit"
    assert record.manifest is not None and record.manifest["rows"] == 20000
    assert table_location(metastore, target) == record.location
    assert version_dirs(metastore, target) == [record.location.rsplit("/", 1)[1]]
    with sqlite3.connect(airflow_cli.home / "airflow.db") as db:
        extras = [json.loads(row[0]) for row in db.execute("SELECT extra FROM asset_event")]
    event = next(e for e in extras if e.get("target") == target)
    assert event["version"] == record.attempt_id and event["rows"] == 20000
    assert processes_mentioning(marker) == []


def test_sigterm_of_dags_test_while_spark_submit_job_runs(
    airflow_cli: AirflowCli,
    spark_cluster: StandaloneCluster,
    spark: Any,
    metastore: MetastoreInfo,
    database: str,
    tmp_path: Path,
) -> None:
    target, journal_dir, marker = f"{database}.killed", tmp_path / "journal", uuid.uuid4().hex
    journal = FileJournal(journal_dir)
    build(spark, staged_table(metastore, FileJournal(tmp_path / "seed"), target, "create"), SQL)
    before, before_dirs = snapshot(spark, target), version_dirs(metastore, target)
    env = dags_test_env(
        airflow_cli, spark_cluster, metastore, journal_dir, target, SQL_SLOW, "replace", marker
    )
    log_path = tmp_path / "dags-test.log"
    process = airflow_cli.start("dags", "test", "staged_spark_submit", env=env, log_path=log_path)
    started: list[psutil.Process] = []
    try:
        # The kill point: the executor on the cluster is writing the attempt's part files.
        kill = wait_for_part_files(journal, target, process, timeout=420)
        (app,) = [a for a in master_apps(spark_cluster)["activeapps"] if a["name"] == "staged-write"]
        assert app["state"] == "RUNNING", app
        submit = processes_mentioning(marker)  # spark-submit's JVM (the driver, client mode)
        executors = processes_mentioning(app["id"])  # the executor the worker started for it
        assert submit and executors, (submit, executors)
        # spark-submit's children: the Python driver of the job (zombies of its launcher aside).
        driver_tree = [
            child for proc in submit for child in proc.children(recursive=True) if cmdline_of(child)
        ]
        started = [*submit, *driver_tree, *executors]
        assert any("spark_job.py" in cmdline_of(p) for p in driver_tree), driver_tree

        os.kill(process.pid, signal.SIGTERM)
        returncode = process.wait(timeout=240)
        _, alive = psutil.wait_procs(started, timeout=120)
    finally:
        stop_group(process)
        for proc in started:  # only processes of this run, whatever the outcome
            if proc.is_running():
                proc.kill()
    log = log_path.read_text()
    assert returncode != 0, log[-4000:]
    assert alive == [], f"processes of the killed run still alive: {alive}"
    assert processes_mentioning(marker, app["id"]) == []
    apps = master_apps(spark_cluster)
    assert app["id"] not in [a["id"] for a in apps["activeapps"]]
    assert app["id"] in [a["id"] for a in apps["completedapps"]]
    record = journal.require(kill.record.attempt_id)
    assert record.state is AttemptState.ABORTED and record.error == "task killed", log[-4000:]
    assert_aborted_unwritten(record)
    assert not kill.directory.exists(), f"{kill.directory} left behind: {part_files(kill.directory)}"
    assert version_dirs(metastore, target) == before_dirs
    assert snapshot(spark, target) == before
