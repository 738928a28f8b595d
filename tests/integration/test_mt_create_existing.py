"""CREATE MATERIALIZED TABLE over a name the catalog already holds refuses, and changes nothing.

Flink refuses a materialized table whose identifier exists ("Table (or view) ... already
exists"). Adopting the table would write the refresh status into its parameters and let the
first refresh replace the user's rows with the query's. Driven as users drive it: ``staged mt
create`` (a process of its own, and the typer app with and without the Spark check) and the SQL
client, against the session's real metastore, Spark and Airflow.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflow_provider_staged.catalogs.metastore.client import MetastoreClient
from airflow_provider_staged.cli.sql import catalog_settings, make_session
from airflow_provider_staged.discovery.embedded import AirflowInfo, MetastoreInfo
from airflow_provider_staged.local.airflow_server import api_token
from airflow_provider_staged.materialized.catalog_status import REFRESH_STATUS_KEY
from airflow_provider_staged.sql.properties import SessionProperties, Source
from airflow_provider_staged.sql.session import SqlSession, StatementError
from airflow_provider_staged.sql.splitting import split_statements

pytestmark = pytest.mark.slow

STAGED = Path(sys.executable).with_name("staged")


def definition(table: str, source: str, or_alter: bool = False) -> str:
    create = "CREATE OR ALTER" if or_alter else "CREATE"
    return (f"{create} MATERIALIZED TABLE {table}\nWITH ('schedule.cron' = '0 0 1 1 *')\n"
            f"FRESHNESS = INTERVAL '1' DAY\nAS SELECT id, ds FROM {source}")


@pytest.fixture
def env(metastore: MetastoreInfo, staged_home: Path) -> Iterator[None]:
    """The SQL client finds the test metastore as `staged sql` does (its environment)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STAGED_HOME", str(staged_home))
        patch.setenv("STAGED_METASTORE_URI", metastore.uri)
        yield


def sql_session(spark: Any, metastore: MetastoreInfo, airflow_server: AirflowInfo,
                definitions_dir: Path) -> SqlSession:
    user, password = airflow_server.credentials("admin")
    properties = SessionProperties()
    for key, value in {
        "workflow-scheduler.airflow.endpoint": airflow_server.endpoint,
        "workflow-scheduler.airflow.definitions-dir": str(definitions_dir),
        "workflow-scheduler.airflow.username": user,
        "workflow-scheduler.airflow.password": password,
        "workflow-scheduler.airflow.parse-timeout": "240",
    }.items():
        properties.put(*properties.checked(key, value), layer=Source.CONFIG)
    return make_session(spark, properties, lambda: catalog_settings(metastore.uri, metastore.warehouse))


def execute(session: SqlSession, sql: str) -> str:
    """The statement's message; a failure raises :class:`StatementError`."""
    [statement] = split_statements(sql + ";")
    return session.execute(statement).message or ""


def refused(session: SqlSession, sql: str) -> str:
    with pytest.raises(StatementError) as caught:
        execute(session, sql)
    return caught.value.message


def snapshot(spark: Any, metastore: MetastoreInfo, name: str) -> tuple[list[tuple[Any, ...]], dict[str, str]]:
    """The table's rows and its parameters, as the catalog has them now."""
    database, table = name.split(".")
    spark.catalog.refreshTable(name)
    rows = sorted(tuple(row) for row in spark.table(name).collect())
    with MetastoreClient(metastore.uri) as client:
        params = dict(client.get_table(database, table).parameters or {})
    return rows, params


def leftovers(definitions_dir: Path, db: str, table: str) -> list[str]:
    """Anything in the definitions folder for ``db.table``: definition, state file, lock."""
    return sorted(path.name for path in definitions_dir.iterdir() if f"{db}__{table}." in path.name)


def test_create_over_a_table_or_view_refuses_and_changes_nothing(
    spark, metastore: MetastoreInfo, airflow_server: AirflowInfo, definitions_dir: Path,
    tmp_path: Path, env: None,
) -> None:
    db = "mtexists_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE DATABASE {db}")
    spark.sql(f"CREATE TABLE {db}.src USING parquet AS SELECT id, CAST(id AS STRING) AS ds FROM range(3)")
    # An ordinary table made by Spark's own CTAS, with a parameter of the user's ...
    spark.sql(f"CREATE TABLE {db}.t USING parquet TBLPROPERTIES ('team' = 'finance') AS "
              "SELECT id * 100 AS id, 'mine' AS ds FROM range(5)")
    spark.sql(f"CREATE VIEW {db}.v AS SELECT id, ds FROM {db}.src")
    session = sql_session(spark, metastore, airflow_server, definitions_dir)
    # ... and one made by the staged CTAS of the SQL client.
    [statement] = split_statements(f"CREATE TABLE {db}.s AS SELECT id + 7 AS id, 'ours' AS ds FROM range(2);")
    made = session.execute(statement).rows[0]
    assert (made[0], made[2]) == (f"{db}.s", 2), made
    before = {name: snapshot(spark, metastore, f"{db}.{name}") for name in ("t", "s")}
    assert before["t"][0] == [(i * 100, "mine") for i in range(5)] and before["t"][1]["team"] == "finance"

    def message(kind: str, table: str) -> str:
        return (f"{db}.{table} not created: {kind} {db}.{table} already exists in the catalog and is not a "
                "materialized table (drop it first or choose another name)")

    # `staged mt create` as a user runs it: one error line, no traceback, before Spark starts.
    source = tmp_path / "t.sql"
    source.write_text(definition(f"{db}.t", f"{db}.src") + ";\n")
    user, password = airflow_server.credentials("admin")
    options = ["--endpoint", airflow_server.endpoint, "--definitions-dir", str(definitions_dir),
               "--metastore-uri", metastore.uri, "--username", user, "--password", password]
    process_env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "STAGED_"))}
    process_env |= {"STAGED_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    result = subprocess.run([str(STAGED), "mt", *options, "create", str(source)], env=process_env,
                            capture_output=True, text=True, timeout=300)
    assert (result.returncode, result.stderr.splitlines()) == (1, [f"error: {message('table', 't')}"]), (
        result.stdout + result.stderr)

    # The typer app: the Spark check's refusal and, with --no-check, MaterializedTables.create's.
    from typer.testing import CliRunner

    from airflow_provider_staged.cli.main import app

    def cli_create(*flags: str) -> str:
        invoked = CliRunner().invoke(app, ["mt", *options, "create", str(source), *flags],
                                     env={"COLUMNS": "200"})
        assert invoked.exit_code == 1, invoked.output
        return invoked.output

    for check in ("--check", "--no-check"):
        assert message("table", "t") in cli_create(check), check
    source.write_text(definition(f"{db}.v", f"{db}.src") + ";\n")
    assert message("view", "v") in cli_create("--no-check")

    # The SQL client, as its other errors: one line at the statement.
    for table in ("t", "s"):
        for or_alter in (False, True):
            statement = definition(f"{db}.{table}", f"{db}.src", or_alter)
            assert refused(session, statement) == message("table", table), statement
    assert refused(session, definition(f"{db}.v", f"{db}.src")) == message("view", "v")

    # Nothing changed: rows, parameters, no definition or state file, no DAG.
    assert {name: snapshot(spark, metastore, f"{db}.{name}") for name in ("t", "s")} == before
    assert spark.sql(f"SELECT count(*) FROM {db}.v").collect()[0][0] == 3
    for table in ("t", "s", "v"):
        assert leftovers(definitions_dir, db, table) == [], table
        dag = httpx.get(f"{airflow_server.endpoint}/api/v2/dags/mt__{db}__{table}", timeout=180,
                        headers={"Authorization": f"Bearer {api_token(airflow_server)}"})
        assert dag.status_code == 404, dag.text
    spark.sql(f"DROP DATABASE {db} CASCADE")


def test_a_dropped_materialized_table_is_an_ordinary_table(
    spark, metastore: MetastoreInfo, airflow_server: AirflowInfo, definitions_dir: Path, env: None,
) -> None:
    """DROP MATERIALIZED TABLE keeps the data as an ordinary table (Flink drops the table): the
    name is then taken, as by any table, until the table is dropped too."""
    db = "mtdropped_" + uuid.uuid4().hex[:8]
    table = f"{db}.d"
    spark.sql(f"CREATE DATABASE {db}")
    spark.sql(f"CREATE TABLE {db}.src USING parquet AS SELECT id, CAST(id AS STRING) AS ds FROM range(3)")
    session = sql_session(spark, metastore, airflow_server, definitions_dir)
    assert "created" in execute(session, definition(table, f"{db}.src"))
    try:
        # The table as a refresh leaves it (the yearly schedule runs none now); DESCRIBE moves the
        # status from the state file into its parameters.
        execute(session, f"CREATE OR REPLACE TABLE {table} AS SELECT id, ds FROM {db}.src")
        execute(session, f"DESCRIBE MATERIALIZED TABLE {table}")
        rows, params = snapshot(spark, metastore, table)
        assert params[REFRESH_STATUS_KEY] == "ACTIVATED"
    finally:
        assert "dropped" in execute(session, f"DROP MATERIALIZED TABLE {table}")
    kept = snapshot(spark, metastore, table)
    assert kept[0] == rows and REFRESH_STATUS_KEY not in kept[1]

    assert "drop it first" in refused(session, definition(table, f"{db}.src"))
    assert snapshot(spark, metastore, table) == kept and leftovers(definitions_dir, db, "d") == []

    spark.sql(f"DROP TABLE {table}")
    assert "created" in execute(session, definition(table, f"{db}.src"))
    assert "dropped" in execute(session, f"DROP MATERIALIZED TABLE {table}")
    spark.sql(f"DROP DATABASE {db} CASCADE")
