"""``staged sql`` against a real metastore, Spark (in-process and Spark Connect) and Airflow.

The statement corpus runs in embedded mode (the session's shared SparkSession) and in gateway
mode (one Spark Connect server for the module); the CLI is driven as a user does: ``-f`` in a
subprocess and an interactive session through a pseudo-terminal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pexpect
import pytest
from prompt_toolkit.history import FileHistory

from airflow_provider_staged.cli.sql import catalog_settings, gateway_spark, make_session, run_init
from airflow_provider_staged.discovery.embedded import AirflowInfo, GatewayInfo, MetastoreInfo
from airflow_provider_staged.sql.output import ResultSet
from airflow_provider_staged.sql.properties import SessionProperties, Source
from airflow_provider_staged.sql.session import SqlSession, StatementError
from airflow_provider_staged.sql.splitting import split_statements

STAGED = str(Path(sys.executable).parent / "staged")
CLI_TIMEOUT = 240


@dataclass(frozen=True)
class Case:
    """One corpus statement and what must come of it (a check of its result, or an error)."""

    sql: str
    check: Callable[[ResultSet], object] | None = None
    error: str | None = None


def rows(expected: list[tuple[Any, ...]]) -> Callable[[ResultSet], object]:
    def check(result: ResultSet) -> None:
        assert result.rows == expected, result

    return check


def info(fragment: str) -> Callable[[ResultSet], object]:
    def check(result: ResultSet) -> None:
        assert not result.columns and fragment in (result.message or ""), result

    return check


def atomic(table: str, row_count: int) -> Callable[[ResultSet], object]:
    def check(result: ResultSet) -> None:
        assert result.columns[:3] == ["table", "version", "rows"], result
        assert result.rows[0][0] == table and result.rows[0][2] == row_count and result.rows[0][4] is True

    return check


def property_row(key: str, value: str, source: str) -> Callable[[ResultSet], object]:
    def check(result: ResultSet) -> None:
        assert (key, value, source) in result.rows, result.rows

    return check


def corpus(db: str) -> list[Case]:
    """≥ 40 statements: CTAS/RTAS forms and failure atomicity, SET/RESET, splitting, errors."""
    return [
        Case(f"CREATE DATABASE IF NOT EXISTS {db}", info("succeeded")),
        Case(f"USE {db}", info("succeeded")),
        # atomic CTAS / RTAS, the four forms, unqualified names in the current database
        Case("CREATE TABLE src USING parquet AS SELECT id, CAST(id % 3 AS STRING) AS ds FROM range(10)",
             atomic(f"{db}.src", 10)),
        Case("SELECT count(*) AS n FROM src", rows([(10,)])),
        Case("CREATE TABLE src AS SELECT 1 AS id", error="already exists"),
        Case("CREATE TABLE IF NOT EXISTS src AS SELECT 1 AS id", info("exists: nothing done")),
        Case("SELECT count(*) FROM src", rows([(10,)])),
        Case("REPLACE TABLE src AS SELECT id FROM range(3)", atomic(f"{db}.src", 3)),
        Case(f"SELECT count(*) FROM {db}.src", rows([(3,)])),
        Case("REPLACE TABLE never_made AS SELECT 1 AS a", error="does not exist"),
        Case("CREATE OR REPLACE TABLE parts PARTITIONED BY (ds) OPTIONS ('compression' = 'zstd') AS "
             "SELECT id, CAST(id % 2 AS STRING) AS ds FROM range(6)", atomic(f"{db}.parts", 6)),
        Case("SELECT count(*) FROM parts WHERE ds = '1'", rows([(3,)])),
        Case("CREATE OR REPLACE TABLE parts PARTITIONED BY (ds) AS SELECT 42 AS answer, '9' AS ds",
             atomic(f"{db}.parts", 1)),
        Case("SELECT * FROM parts", rows([(42, "9")])),
        # names are case-insensitive, as in Spark
        Case("CREATE TABLE upper_parts PARTITIONED BY (DS) AS SELECT id, CAST(id % 2 AS STRING) AS Ds "
             "FROM range(4)", atomic(f"{db}.upper_parts", 4)),
        Case("SELECT ds, count(*) AS n FROM upper_parts GROUP BY ds ORDER BY ds", rows([("0", 2), ("1", 2)])),
        Case("SELECT count(*) FROM upper_parts WHERE DS = '1'", rows([(2,)])),
        # the metastore cannot change a table's partition keys: refused, the table as it was
        Case("CREATE OR REPLACE TABLE parts AS SELECT 1 AS b", error="partition keys can not be changed"),
        Case("SELECT answer FROM parts", rows([(42,)])),
        # TBLPROPERTIES and COMMENT (Spark's clause order) set by the commit's metastore call
        Case("CREATE TABLE props USING parquet PARTITIONED BY (ds) COMMENT 'built; atomically' "
             "TBLPROPERTIES ('quality.tier' = 'gold', 'partition.expiration-time' = '30 d') AS "
             "SELECT id, '2024-01-0' || CAST(id % 2 + 1 AS STRING) AS ds FROM range(4)",
             atomic(f"{db}.props", 4)),
        Case("SHOW TBLPROPERTIES props ('quality.tier')", rows([("quality.tier", "gold")])),
        Case("SHOW PARTITIONS props", rows([("ds=2024-01-01",), ("ds=2024-01-02",)])),
        Case("DESCRIBE TABLE EXTENDED props", lambda r: ("Comment", "built; atomically") in
             {row[:2] for row in r.rows}),
        Case("CREATE TABLE props_bad TBLPROPERTIES ('staged.version' = 'x') AS SELECT 1 AS a",
             error="'staged.version' of"),
        Case("SHOW TABLES LIKE 'props_bad'", rows([])),
        # failure atomicity: a failing CTAS leaves no table, a failing RTAS the old one
        Case("CREATE TABLE boom AS SELECT id, CASE WHEN id = 3 THEN raise_error('boom at 3') END AS x "
             "FROM range(5)", error="boom at 3"),
        Case("SHOW TABLES LIKE 'boom'", rows([])),
        Case("REPLACE TABLE src AS SELECT id, raise_error('no replace') AS y FROM range(2)",
             error="no replace"),
        Case("SELECT count(*) FROM src", rows([(3,)])),
        # EXPECT constraints (as in CREATE MATERIALIZED TABLE): row audits of the staged version
        Case("CREATE TABLE audited (CONSTRAINT positive EXPECT (id >= 0) ON VIOLATION FAIL UPDATE, "
             "CONSTRAINT small EXPECT (id < 8) ON VIOLATION DROP ROW) AS SELECT id FROM range(10)",
             lambda r: r.rows[0][2] == 8 and r.rows[0][5:] == (2, "positive: passed; small: dropped 2")),
        Case("REPLACE TABLE audited (CONSTRAINT positive EXPECT (id >= 0) ON VIOLATION FAIL UPDATE) AS "
             "SELECT id - 1 AS id FROM range(3)",
             error=f"audit(s) failed on {db}.audited: positive (1 failing"),
        Case("SELECT count(*) FROM audited", rows([(8,)])),
        Case("CREATE TABLE audited_bad (CONSTRAINT c EXPECT (nope > 0)) AS SELECT 1 AS id",
             error="EXPECT: constraint 'c': unknown column 'nope'"),
        Case("CREATE TABLE orc_t STORED AS ORC AS SELECT 1 AS a", error="unsupported clause 'STORED AS ORC'"),
        Case("CREATE TABLE `bad-name` AS SELECT 1 AS a", error="invalid table name 'bad-name'"),
        # the plain path, as in Flink
        Case("SET 'table.ctas.atomicity-enabled' = 'false'", info("table.ctas.atomicity-enabled = false")),
        Case("CREATE TABLE plain AS SELECT 1 AS a", info("succeeded")),
        Case("SELECT a FROM plain", rows([(1,)])),
        Case("RESET 'table.ctas.atomicity-enabled'", info("reset")),
        # properties: config (3) < init file (5) < SET (7)
        Case("SET", property_row("spark.sql.shuffle.partitions", "5", "init file")),
        Case("SET 'spark.sql.shuffle.partitions' = '7'", info("= 7")),
        Case("SET 'spark.sql.shuffle.partitions'", rows([("spark.sql.shuffle.partitions", "7")])),
        Case("SET spark.sql.shuffle.partitions", rows([("spark.sql.shuffle.partitions", "7")])),
        Case("RESET 'spark.sql.shuffle.partitions'", info("reset")),
        Case("SET", property_row("spark.sql.shuffle.partitions", "5", "init file")),
        Case("SET", property_row("table.ctas.atomicity-enabled", "true", "default")),
        Case("SET", property_row("sql-client.execution.result-mode", "changelog", "config")),
        Case("SET 'sql-client.execution.max-table-result.rows' = '2'", info("= 2")),
        Case("SELECT id FROM range(5)", lambda r: r.truncated and r.rows == [(0,), (1,)]),
        Case("RESET", info("All session properties")),
        Case("SELECT id FROM range(5)", lambda r: not r.truncated and len(r.rows) == 5),
        Case("SET 'sql-client.execution.result-mode' = 'grid'",
             error="expected one of tableau, table, changelog"),
        Case("SET 'sql-client.no-such-key' = '1'", error="unknown client property 'sql-client.no-such-key'"),
        # splitting: ';' in strings, backticks, comments, a BEGIN … END block
        Case("SELECT 'a;b' AS s, `x;y` -- c; d\nFROM (SELECT 1 AS `x;y`)", rows([("a;b", 1)])),
        Case("SELECT /* ; */ 'it\\'s' AS q", rows([("it's",)])),
        Case("BEGIN DECLARE v INT DEFAULT 1; SET v = v + 1; SELECT v * 10 AS w; END", rows([(20,)])),
        # Spark's own statements pass through
        Case("EXPLAIN SELECT * FROM src", lambda r: r.columns == ["plan"] and "Scan" in r.rows[0][0]),
        Case("DESCRIBE TABLE src", lambda r: ("id", "bigint", None) in r.rows),
        Case("SHOW TABLES", lambda r: {"src", "parts", "plain"} <= {row[1] for row in r.rows}),
        Case("SELECT nope FROM src", error="nope"),
        Case("SELEC 1", error="PARSE_SYNTAX_ERROR"),
        Case("SELECT 'last' AS done", rows([("last",)])),
    ]


@pytest.fixture(scope="module")
def gateway_url(spark_gateway: GatewayInfo) -> str:
    return spark_gateway.url


@pytest.fixture(scope="module")
def gateway_session(gateway_url: str) -> Iterator[Any]:
    """The Connect session of this module's gateway-mode clients, stopped before the gateway is:
    an open client cleans up through the server at exit, retrying for minutes once it is gone."""
    spark = gateway_spark(gateway_url)
    yield spark
    spark.stop()


@pytest.fixture(scope="module", params=["embedded", "gateway"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def client_env(metastore: MetastoreInfo, staged_home: Path) -> Iterator[dict[str, str]]:
    """The environment of `staged sql` (and of this process's sessions): the test metastore."""
    env = {"STAGED_HOME": str(staged_home), "STAGED_METASTORE_URI": metastore.uri}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        yield {**os.environ, **env, "PAGER": "cat"}


def new_session(mode: str, request: pytest.FixtureRequest, metastore: MetastoreInfo,
                config: dict[str, str]) -> SqlSession:
    spark = request.getfixturevalue("spark" if mode == "embedded" else "gateway_session")
    properties = SessionProperties()
    for key, value in config.items():
        properties.put(*properties.checked(key, value), layer=Source.CONFIG)
    return make_session(spark, properties, lambda: catalog_settings(metastore.uri, metastore.warehouse))


def airflow_session(mode: str, request: pytest.FixtureRequest, metastore: MetastoreInfo,
                    airflow_server: AirflowInfo, definitions_dir: Path) -> SqlSession:
    """A session whose materialized-table statements reach the test Airflow."""
    user, password = airflow_server.credentials("admin")
    return new_session(mode, request, metastore, {
        "workflow-scheduler.airflow.endpoint": airflow_server.endpoint,
        "workflow-scheduler.airflow.definitions-dir": str(definitions_dir),
        "workflow-scheduler.airflow.username": user,
        "workflow-scheduler.airflow.password": password,
        "workflow-scheduler.airflow.parse-timeout": "240",
    })


def run_cases(session: SqlSession, cases: list[Case]) -> list[str]:
    """Run ``cases`` as one script, split by the client's splitter; return what went wrong."""
    script = ";\n".join(case.sql for case in cases) + ";"
    statements = split_statements(script)
    assert [statement.text for statement in statements] == [case.sql for case in cases]
    failures = []
    for case, statement in zip(cases, statements, strict=True):
        try:
            result = session.execute(statement)
            for _ in result.changes or ():  # a streaming query runs (and may fail) while it prints
                pass
        except StatementError as err:
            assert statement.line <= err.line <= statement.line + statement.text.count("\n"), case.sql
            if case.error is None or case.error not in err.message or "\n" in err.message:
                failures.append(f"{case.sql!r} failed: {err.message}")
            continue
        if case.error is not None:
            failures.append(f"{case.sql!r} should fail with {case.error!r}, gave {result}")
        elif case.check is not None:
            try:
                assert case.check(result) is not False, result
            except AssertionError as err:
                failures.append(f"{case.sql!r}: {err}")
    return failures


def test_corpus(mode: str, request: pytest.FixtureRequest, metastore: MetastoreInfo,
                client_env: dict[str, str]) -> None:
    session = new_session(mode, request, metastore, {"spark.sql.shuffle.partitions": "3",
                                                     "sql-client.execution.result-mode": "changelog"})
    assert run_init(session, "SET 'spark.sql.shuffle.partitions' = '5';", "init.sql") == 0
    assert session.spark.conf.get("spark.sql.shuffle.partitions") == "5"
    cases = corpus(f"sqlc_{mode}")
    assert len(cases) >= 40
    failures = run_cases(session, cases)
    assert not failures, "\n".join(failures)
    # RESET put back what the init file set, in Spark too
    assert session.spark.conf.get("spark.sql.shuffle.partitions") == "5"


def materialized_cases(db: str, alter: bool) -> list[Case]:
    """Each materialized-table statement, in an order that never leaves a refresh running.

    ``alter``: include a CREATE OR ALTER that succeeds (it waits for Airflow to parse the new
    definition: run in one mode only, for the suite's time); the refused ones run in both.
    """
    table = f"{db}.daily"

    def described(result: ResultSet) -> None:
        facts = dict(result.rows)
        assert facts["refresh status"].startswith("SUSPENDED") and facts["paused"] == "True", facts
        assert facts["last refresh"] != "-", facts

    injection = f"ALTER MATERIALIZED TABLE {table} REFRESH PARTITION (ds = ''' ; DROP TABLE {db}.orders; --')"
    create = (f"CREATE MATERIALIZED TABLE {table}\nPARTITIONED BY (ds)\n"
              "WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')\n"
              "FRESHNESS = INTERVAL '1' DAY\nREFRESH_MODE = FULL\n"
              f"AS SELECT ds, count(*) AS orders FROM {db}.orders GROUP BY ds")

    def alter_sql(columns: str, where: str = "") -> str:
        return create.replace("CREATE", "CREATE OR ALTER", 1).replace(
            "count(*) AS orders", columns).replace("GROUP BY", f"{where}GROUP BY")

    return [
        Case(f"CREATE DATABASE IF NOT EXISTS {db}", info("succeeded")),
        Case(f"CREATE OR REPLACE TABLE {db}.orders AS SELECT CAST(id AS STRING) AS order_id, "
             "'2024-01-02' AS ds, 1.5 AS amount FROM range(4)", atomic(f"{db}.orders", 4)),
        Case(create, info("created")),
        Case(create, error="already exists"),
        Case(f"CREATE MATERIALIZED TABLE {db}.bad WITH ('format' = 'orc') AS SELECT * FROM {db}.orders",
             error="format"),
        Case(f"SHOW MATERIALIZED TABLES FROM {db}", rows([(table, f"{db}__daily.sql")])),
        Case(f"SHOW MATERIALIZED TABLES FROM {db} LIKE 'dai%'", rows([(table, f"{db}__daily.sql")])),
        Case(f"SHOW MATERIALIZED TABLES FROM {db} NOT LIKE 'dai%'", rows([])),
        # EXPLAIN shows the plan of the query the refreshes run; nothing is created
        Case(f"EXPLAIN CREATE MATERIALIZED TABLE {db}.explained AS SELECT ds, count(*) AS n FROM {db}.orders "
             "GROUP BY ds", lambda r: r.columns == ["plan"] and "== Physical Plan ==" in r.rows[0][0]),
        # a temporary view does not exist in the refreshes' Spark session
        Case(f"CREATE TEMPORARY VIEW recent_orders AS SELECT * FROM {db}.orders", info("succeeded")),
        Case(f"CREATE MATERIALIZED TABLE {db}.from_view AS SELECT ds FROM recent_orders",
             error="reads recent_orders, a temporary view of this session"),
        Case(f"ALTER MATERIALIZED TABLE {table} SUSPEND", info("suspended")),
        Case(f"ALTER MATERIALIZED TABLE {table} SUSPEND", error="refresh workflow has been suspended"),
        Case(f"ALTER MATERIALIZED TABLE {table} RESUME WITH ('bad.option' = 'x')", error="bad.option"),
        Case(f"ALTER MATERIALIZED TABLE {table} RESUME WITH ('compression' = 'zstd')", info("resumed")),
        Case(f"ALTER MATERIALIZED TABLE {table} RESUME", error="refresh workflow has been resumed"),
        Case(f"ALTER MATERIALIZED TABLE {table} SUSPEND", info("suspended")),
        # a paused DAG's run waits in the queue: nothing runs while the statements go on
        Case(f"ALTER MATERIALIZED TABLE {table} REFRESH PARTITION (ds = '2024-01-02')",
             lambda r: r.columns == ["table", "dag_id", "run_id"] and r.rows[0][0] == table),
        Case(injection, error="not triggered"),
        Case(f"ALTER MATERIALIZED TABLE {table} REFRESH PARTITION (nope = '1')", error="nope"),
        Case(f"ALTER MATERIALIZED TABLE {table} BOGUS", error="expected SUSPEND, RESUME"),
        Case(f"DESCRIBE MATERIALIZED TABLE {table}", described),
        # CREATE OR ALTER of the existing table, with data (as a refresh writes it): the workflow
        # and the catalog get the new definition, and the new query may only append columns
        Case(f"CREATE OR REPLACE TABLE {table} PARTITIONED BY (ds) AS SELECT count(*) AS orders, ds "
             f"FROM {db}.orders GROUP BY ds", atomic(table, 1)),
        *([Case(alter_sql("count(*) AS orders", "WHERE amount > 0 "), info("altered")),
           Case(f"DESCRIBE MATERIALIZED TABLE {table}", lambda r: "amount > 0" in dict(r.rows)["query"]),
           Case(f"SHOW TBLPROPERTIES {table} ('materialized.definition')",
                lambda r: "amount > 0" in r.rows[0][1])] if alter else []),
        Case(alter_sql("sum(amount) AS orders"),
             error="Column mismatch at position 1: Original column is [`orders` BIGINT], but new column is "
                   "[`orders` DECIMAL(12,1)]"),
        Case(alter_sql("count(*) AS orders").replace("SELECT ds, count(*) AS orders", "SELECT ds"),
             error="drop column is unsupported"),
        Case(alter_sql("count(*) AS orders").replace(
            "PARTITIONED BY (ds)\nWITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')\n", ""),
             error="cannot change PARTITIONED BY (ds) to ()"),
        Case(f"DESCRIBE MATERIALIZED TABLE {table}",
             lambda r: ("amount > 0" in dict(r.rows)["query"]) == alter),  # the refused ones changed nothing
        Case(f"DROP TABLE {table}", error="is a materialized table: DROP MATERIALIZED TABLE"),
        Case(f"DROP MATERIALIZED TABLE {table}", info("dropped")),
        Case(f"SHOW MATERIALIZED TABLES FROM {db}", rows([])),
        Case(f"DROP MATERIALIZED TABLE IF EXISTS {table}", info("nothing dropped")),
        Case(f"DROP MATERIALIZED TABLE {table}", error="no materialized table"),
        Case(f"SELECT count(*) FROM {db}.orders", rows([(4,)])),  # the injection dropped nothing
    ]


def test_materialized_statements(mode: str, request: pytest.FixtureRequest, metastore: MetastoreInfo,
                                 client_env: dict[str, str], airflow_server: AirflowInfo,
                                 definitions_dir: Path) -> None:
    """Flink's materialized-table statements drive the refresh DAGs of a running Airflow."""
    session = airflow_session(mode, request, metastore, airflow_server, definitions_dir)
    db = f"sqlc_mt_{mode}"
    failures = run_cases(session, materialized_cases(db, alter=mode == "gateway"))
    assert not failures, "\n".join(failures)
    assert not (definitions_dir / f"{db}__daily.sql").exists()


def refresh_now(definition_file: Path, settings: Any, partition: dict[str, str] | None = None) -> None:
    """One refresh of the definition as its DAG's task runs it (refresh.run_refresh): a periodic
    one, or of ``partition`` as ``ALTER ... REFRESH PARTITION`` asks for it."""
    from datetime import datetime, timezone

    from airflow_provider_staged.engine.runners import EmbeddedEngine
    from airflow_provider_staged.materialized.definition import load_definition
    from airflow_provider_staged.materialized.params import parse_refresh_request
    from airflow_provider_staged.materialized.refresh import run_refresh, staged_refresh
    from airflow_provider_staged.materialized.workflow.scheduler import RefreshTrigger

    definition = load_definition(definition_file)
    trigger = RefreshTrigger(static_partitions=partition) if partition else RefreshTrigger()
    request = parse_refresh_request(trigger.as_conf(), definition, datetime.now(timezone.utc))
    run_refresh(definition, request, settings, staged_refresh(definition, request, settings, None),
                EmbeddedEngine(settings))


def test_column_lists_shape_the_refreshed_table(request: pytest.FixtureRequest, metastore: MetastoreInfo,
                                                client_env: dict[str, str], airflow_server: AirflowInfo,
                                                definitions_dir: Path, spark: Any) -> None:
    """Flink's column lists (SqlMaterializedTableNodeToOperationConverterTest): names alone order
    the query's columns, typed ones cast them, the key's columns must be NOT NULL; the refresh
    writes the table so. A CREATE whose definition does not fit its query leaves nothing behind."""
    session = airflow_session("embedded", request, metastore, airflow_server, definitions_dir)
    db = "sqlc_columns"
    source = f"{db}.shops"

    def create(name: str, columns: str) -> str:
        user_id = "coalesce(user_id, 0) AS user_id" if name == "coalesced" else "user_id"
        where = " WHERE user_id IS NOT NULL" if name == "filtered" else ""
        return (f"CREATE MATERIALIZED TABLE {db}.{name} {columns}\nFRESHNESS = INTERVAL '1' DAY "
                f"AS SELECT shop_id, {user_id}, amount FROM {source}{where}")

    created = ["reordered", "typed", "coalesced"]
    failed = {
        "unknown": ("(id, name, amount)", "Column 'id' not found in the source schema."),
        "narrowed": ("(shop_id INT)", "Incompatible types for sink column 'shop_id' at position 1. The "
                     "source column has type 'BIGINT', while the target column has type 'INT'."),
        # Hive's columns are nullable in Spark, filtered or not: the key needs the hint's
        # declaration (see 'typed') or coalesce (see 'coalesced')
        "nullable": ("(PRIMARY KEY (user_id) NOT ENFORCED)",
                     "Invalid primary key 'PK_user_id'. Column 'user_id' is nullable."),
        "filtered": ("(PRIMARY KEY (user_id) NOT ENFORCED)",
                     "Invalid primary key 'PK_user_id'. Column 'user_id' is nullable."),
        "keyless": ("(CONSTRAINT k PRIMARY KEY (e) NOT ENFORCED)",
                    "Primary key column 'e' is not defined in the schema at line 1, column 75"),
    }
    cases = [
        Case(f"CREATE DATABASE IF NOT EXISTS {db}", info("succeeded")),
        Case(f"CREATE OR REPLACE TABLE {source} AS SELECT id AS shop_id, CAST(id * 10 AS INT) AS user_id, "
             "CAST(id AS DECIMAL(5, 1)) AS amount FROM range(3)", atomic(source, 3)),
        Case(create("reordered", "(user_id, amount, shop_id)"), info("created")),
        Case(create("typed", "(user_id BIGINT NOT NULL, amount DOUBLE, PRIMARY KEY (user_id) NOT ENFORCED)"),
             info("created")),
        Case(create("coalesced", "(PRIMARY KEY (user_id) NOT ENFORCED)"), info("created")),
        *(Case(create(name, columns), error=message) for name, (columns, message) in failed.items()),
        *(Case(f"ALTER MATERIALIZED TABLE {db}.{name} SUSPEND", info("suspended")) for name in created),
        Case(f"SHOW MATERIALIZED TABLES FROM {db}",
             rows([(f"{db}.{name}", f"{db}__{name}.sql") for name in sorted(created)])),
    ]
    failures = run_cases(session, cases)
    assert not failures, "\n".join(failures)
    for name in failed:  # no definition file (so no DAG), no catalog status, no table
        assert not list(definitions_dir.glob(f"{db}__{name}.*")), name
        assert not spark.catalog.tableExists(f"{db}.{name}"), name

    settings = catalog_settings(metastore.uri, metastore.warehouse)
    expected = {
        "reordered": ([("user_id", "int"), ("amount", "decimal(5,1)"), ("shop_id", "bigint")],
                      [(0, 0.0, 0), (10, 1.0, 1), (20, 2.0, 2)]),
        "typed": ([("shop_id", "bigint"), ("user_id", "bigint"), ("amount", "double")],
                  [(0, 0, 0.0), (1, 10, 1.0), (2, 20, 2.0)]),
        "coalesced": ([("shop_id", "bigint"), ("user_id", "int"), ("amount", "decimal(5,1)")],
                     [(0, 0, 0.0), (1, 10, 1.0), (2, 20, 2.0)]),
    }
    try:
        for name, (dtypes, values) in expected.items():
            refresh_now(definitions_dir / f"{db}__{name}.sql", settings)
            spark.catalog.refreshTable(f"{db}.{name}")
            table = spark.table(f"{db}.{name}")
            assert table.dtypes == dtypes, name
            assert sorted(tuple(float(v) if hasattr(v, "is_nan") else v for v in row) for row in
                          table.collect()) == values, name
    finally:
        assert not run_cases(session, [Case(f"DROP MATERIALIZED TABLE {db}.{name}", info("dropped"))
                                       for name in created])


def test_alter_set_freshness_and_as_query(request: pytest.FixtureRequest, metastore: MetastoreInfo,
                                          client_env: dict[str, str], airflow_server: AirflowInfo,
                                          definitions_dir: Path, spark: Any) -> None:
    """ALTER ... SET FRESHNESS re-schedules the DAG in Airflow; ALTER ... AS appends a column:
    the partition refreshed after it has the column's values, the one refreshed before reads null
    (Flink 2.x: existing rows keep nulls until refreshed); an incompatible query changes nothing."""
    session = airflow_session("embedded", request, metastore, airflow_server, definitions_dir)
    db = "sqlc_alter"
    table = f"{db}.daily"

    def described(freshness: str, schedule: str) -> Callable[[ResultSet], object]:
        def check(result: ResultSet) -> None:
            facts = dict(result.rows)
            assert (facts["freshness"], facts["schedule"]) == (freshness, schedule), facts

        return check

    setup = [
        Case(f"CREATE DATABASE IF NOT EXISTS {db}", info("succeeded")),
        Case(f"CREATE OR REPLACE TABLE {db}.orders AS SELECT CAST(id AS STRING) AS order_id, "
             "IF(id < 2, '2024-01-02', '2024-01-03') AS ds FROM range(5)", atomic(f"{db}.orders", 5)),
        Case(f"CREATE MATERIALIZED TABLE {table}\nPARTITIONED BY (ds)\nFRESHNESS = INTERVAL '1' DAY\n"
             f"AS SELECT ds, count(*) AS orders FROM {db}.orders GROUP BY ds", info("created")),
        Case(f"ALTER MATERIALIZED TABLE {table} SUSPEND", info("suspended")),  # only the refreshes below
    ]
    assert not run_cases(session, setup)
    settings = catalog_settings(metastore.uri, metastore.warehouse)
    definition = definitions_dir / f"{db}__daily.sql"
    refresh_now(definition, settings, {"ds": "2024-01-02"})
    try:
        failures = run_cases(session, [
            Case(f"ALTER MATERIALIZED TABLE {table} SET FRESHNESS = INTERVAL '2' HOUR", info("altered")),
            # DESCRIBE's schedule is the timetable Airflow parsed from the rewritten file
            Case(f"DESCRIBE MATERIALIZED TABLE {table}", described("INTERVAL '2' HOUR", "0 */2 * * *")),
            Case(f"ALTER MATERIALIZED TABLE {table} SET FRESHNESS = INTERVAL '7' HOUR",
                 error="only freshness that are factors of 24"),
            Case(f"ALTER MATERIALIZED TABLE {table} AS SELECT ds, max(order_id) AS orders FROM {db}.orders "
                 "GROUP BY ds", error="Column mismatch at position 1: Original column is [`orders` BIGINT]"),
            Case(f"ALTER MATERIALIZED TABLE {table} AS SELECT ds, count(*) AS orders, max(order_id) AS "
                 f"last_order FROM {db}.orders GROUP BY ds", info("altered")),
            Case(f"SHOW CREATE MATERIALIZED TABLE {table}",
                 lambda r: "FRESHNESS = INTERVAL '2' HOUR" in r.rows[0][0] and "last_order" in r.rows[0][0]),
        ])
        assert not failures, "\n".join(failures)
        refresh_now(definition, settings, {"ds": "2024-01-03"})
        spark.catalog.refreshTable(table)
        assert spark.table(table).columns == ["orders", "last_order", "ds"]
        assert sorted(tuple(row) for row in spark.table(table).collect()) == [
            (2, None, "2024-01-02"), (3, "4", "2024-01-03")]
    finally:
        assert not run_cases(session, [Case(f"DROP MATERIALIZED TABLE {table}", info("dropped"))])


STREAM_DB = "sqlc_stream"


def append_file(spark: Any, table: str, values: str) -> None:
    """One new Parquet file of ``values`` in ``table`` (a stream's next micro-batch)."""
    spark.sql(f"INSERT INTO {table} SELECT /*+ COALESCE(1) */ * FROM VALUES {values}")


def parquet_table(spark: Any, name: str, values: str) -> str:
    """A plain Spark Parquet table (new data arrives as new files) holding one file of ``values``."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {STREAM_DB}")
    table = f"{STREAM_DB}.{name}"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(f"CREATE TABLE {table} (k STRING, v INT) USING parquet")
    append_file(spark, table, values)
    return table


def stream_checkpoints() -> set[str]:
    return {path.name for path in Path(tempfile.gettempdir()).glob("staged-sql-stream-*")}


@pytest.fixture(scope="module")
def stream_events(spark: Any) -> str:
    """A Parquet table of two files (two micro-batches at one file per trigger), and a JSON table."""
    events = parquet_table(spark, "events", "('a', 1), ('b', 2)")
    append_file(spark, events, "('a', 10), ('c', 5)")
    spark.sql(f"DROP TABLE IF EXISTS {STREAM_DB}.json_t")
    spark.sql(f"CREATE TABLE {STREAM_DB}.json_t (k STRING) USING json")
    return events


def test_streaming_query_errors(mode: str, request: pytest.FixtureRequest, metastore: MetastoreInfo,
                               client_env: dict[str, str], spark: Any, stream_events: str) -> None:
    """In streaming mode a bad value, and a query that cannot stream, are clear errors naming it;
    a query Spark refuses to start leaves nothing behind; gateway mode refuses streaming queries.
    (What streaming queries print: test_embedded_cli_csv and the pty test.)"""
    session = new_session(mode, request, metastore, {"execution.runtime-mode": "streaming"})
    if mode == "gateway":
        assert run_cases(session, [Case(f"SELECT k FROM {stream_events}", error="need embedded mode"),
                                   Case("SELECT 1 AS one", rows([(1,)]))]) == []
        return
    checkpoints = stream_checkpoints()
    subject = f"the query over {stream_events} cannot run as a stream:"
    failures = run_cases(session, [
        Case("SET 'execution.runtime-mode' = 'continuous'",
             error="invalid execution.runtime-mode 'continuous': expected one of batch, streaming"),
        Case(f"USE {STREAM_DB}", info("succeeded")),  # unqualified names: in the current database
        Case("SELECT k FROM json_t",
             error=f"source table {STREAM_DB}.json_t is not a Parquet table ('json')"),
        Case("SELECT k FROM events LIMIT 1", error=f"{subject} LIMIT is not supported"),
        Case("SELECT k, v FROM events ORDER BY v", error=f"{subject} ORDER BY needs an aggregation"),
        # Spark's own check when the query starts (sorting needs its complete mode)
        Case("SELECT k, count(*) AS n FROM events GROUP BY k ORDER BY n", error=f"{subject} Sorting is not"),
        Case("SELECT nope FROM events", error="nope"),
        Case("SELECT 1 AS one", rows([(1,)])),  # a query of no table is bounded: a batch query
        Case("SET", property_row("execution.runtime-mode", "streaming", "config")),
        Case("SET 'execution.runtime-mode' = 'batch'", info("= batch")),
        Case("SELECT count(*) FROM events", rows([(4,)])),
        Case("USE default", info("succeeded")),
    ])
    assert not failures, "\n".join(failures)
    assert stream_checkpoints() == checkpoints
    assert not [t for t in spark.catalog.listTables() if t.name.startswith("__staged_stream__")]


def run_cli(args: list[str], env: dict[str, str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([STAGED, "sql", *args], env=env, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT, **kwargs)


def test_script_stops_at_the_failing_line(gateway_url: str, client_env: dict[str, str], tmp_path: Path,
                                          spark: Any) -> None:
    """-f: the error names file:line:column, exit code 1, nothing after it ran."""
    script = tmp_path / "build.sql"
    script.write_text(
        "CREATE DATABASE IF NOT EXISTS sqlc_script;\n"
        "CREATE OR REPLACE TABLE sqlc_script.first AS SELECT 1 AS a;\n"
        "-- the next statement fails on its line 2\n"
        "SELECT a\n  FROM sqlc_script.missing_table;\n"
        "CREATE TABLE sqlc_script.after_error AS SELECT 1 AS a;\n"
    )
    init = tmp_path / "init.sql"
    init.write_text("SET 'sql-client.execution.max-table-result.rows' = '1';\n")
    done = run_cli(["--gateway", gateway_url, "-i", str(init), "-f", str(script)], client_env)
    assert done.returncode == 1, done
    # the statement starts on line 4; Spark locates the missing table on its line 2, column 8
    assert f"error: {script}:5:8:" in done.stderr and "missing_table" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert "sqlc_script.first" in done.stdout  # the statement before it ran and printed its table

    # an error in the init file: exit code 1 naming it, nothing of -e runs
    init.write_text("SET 'sql-client.execution.result-mode' = 'grid';\n")
    done = run_cli(["--gateway", gateway_url, "-i", str(init), "-e", "SELECT 'ran' AS x"], client_env)
    assert done.returncode == 1 and f"error: {init}:1:1:" in done.stderr and "ran" not in done.stdout
    assert not spark.catalog.tableExists("sqlc_script.after_error")
    assert spark.catalog.tableExists("sqlc_script.first")

    # --continue-on-error goes on (exit code still 1); --output json prints only the rows
    done = run_cli(["--gateway", gateway_url, "-f", str(script), "--continue-on-error", "-o", "json"],
                   client_env)
    assert done.returncode == 1
    assert spark.catalog.tableExists("sqlc_script.after_error")
    documents = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(doc[0]["table"], doc[0]["rows"], doc[0]["atomic"]) for doc in documents] == [
        ("sqlc_script.first", 1, True), ("sqlc_script.after_error", 1, True)]


def test_embedded_cli_csv(client_env: dict[str, str], staged_home: Path, stream_events: str) -> None:
    """Embedded mode in its own process: Spark in-process against the configured metastore.
    Streaming queries in -e print the changes of the data there now, then the script goes on:
    a SELECT its rows as +I, an aggregation +I/-U/+U across the table's two files."""
    started = time.monotonic()
    checkpoints = stream_checkpoints()
    # embedded explicitly: the gateway of this home runs on the same metastore (the default then)
    done = run_cli(["--mode", "embedded", "-e", "SELECT 1 AS a, 'x;y' AS b; "
                    "SET 'execution.runtime-mode' = 'streaming'; "
                    "SET 'sql-client.execution.streaming.max-files-per-trigger' = '1'; "
                    "SET 'spark.sql.shuffle.partitions' = '1'; "  # an aggregation's state: 1 store
                    f"SELECT k, v FROM {stream_events}; "
                    f"SELECT upper(k) AS key, sum(v) AS total, count(*) AS n FROM {stream_events} "
                    "GROUP BY k; SELECT 2 AS c", "--output", "csv"], client_env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:3] == ["a,b", "1,x;y", "op | k | v"] and lines[-2:] == ["c", "2"], done.stdout
    # a changelog whatever --output says; one file per micro-batch
    assert sorted(lines[3:5]) == ["+I | a | 1", "+I | b | 2"], done.stdout
    assert sorted(lines[5:7]) == ["+I | a | 10", "+I | c | 5"], done.stdout
    # the key (k) is not printed: the client follows it in a hidden column
    assert lines[7] == "op | key | total | n", done.stdout
    assert sorted(lines[8:10]) == ["+I | A | 1 | 1", "+I | B | 2 | 1"], done.stdout
    second = lines[10:-2]
    assert sorted(second) == ["+I | C | 5 | 1", "+U | A | 11 | 2", "-U | A | 1 | 1"], done.stdout
    assert second.index("-U | A | 1 | 1") + 1 == second.index("+U | A | 11 | 2")
    assert "Received a total of 4 changes in 2 micro-batches; the streaming query ended" in done.stderr
    assert "Received a total of 5 changes in 2 micro-batches" in done.stderr
    assert stream_checkpoints() == checkpoints
    print(f"embedded `staged sql -e` took {time.monotonic() - started:.1f} s")


def test_interactive_session_through_a_pty(client_env: dict[str, str], staged_home: Path, spark: Any) -> None:
    """Prompt, multi-line input, a result table, an error, the history (arrow up), completion; a
    live streaming query, stopped by Ctrl-C (embedded mode: gateway mode refuses streaming)."""
    table = parquet_table(spark, "live", "('a', 1)")
    checkpoints = stream_checkpoints()
    # A real terminal type; no cursor-position requests (pexpect does not answer them).
    env = {**client_env, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = pexpect.spawn(STAGED, ["sql", "--mode", "embedded", "--master", "local[2]"], env=env,
                          encoding="utf-8", timeout=CLI_TIMEOUT, dimensions=(50, 160))
    try:
        child.expect_exact("staged:default>")
        child.send("SELECT 41 + 1\r")  # no ';' yet: the statement goes on on the next line
        child.expect_exact("->")
        child.send("  AS answer;\r")
        child.expect(r"\|\s+answer\s+\|")
        child.expect(r"\|\s+42\s+\|")
        child.expect_exact("1 row in set")
        child.expect_exact("staged:default>")
        child.send("SELECT no_such_column;\r")
        child.expect(r"error: input:1:8: .*no_such_column")
        child.expect_exact("staged:default>")
        child.send("\x1b[A")  # arrow up: the history recalls the last statement
        child.expect_exact("no_such_column")
        child.send("\x15")  # ctrl-u: clear the line
        # Tab completes the catalog's names (here the database the -f test made)
        child.send("SHOW TABLES IN sqlc_scr")
        child.expect_exact("sqlc_scr")
        child.send("\t")
        child.expect_exact("ipt")
        child.send(";\r")
        child.expect(r"\|\s+sqlc_script\s+\|\s+first\s+\|")
        child.expect_exact("staged:default>")
        # streaming: the rows there, then each appended file's rows as they arrive, until Ctrl-C
        child.send("SET 'execution.runtime-mode' = 'streaming';\r")
        child.expect_exact("execution.runtime-mode = streaming")
        child.expect_exact("staged:default>")
        child.send(f"SELECT k, v FROM {table};\r")
        child.expect_exact("op | k | v")
        child.expect_exact("+I | a | 1")
        streaming = time.monotonic()
        append_file(spark, table, "('c', 3), ('d', 4)")
        child.expect_exact("+I | c | 3", timeout=60)
        print(f"appended rows printed {time.monotonic() - streaming:.1f} s after the append")
        child.sendintr()
        child.expect(r"Received a total of 3 changes in \d+ micro-batches; the streaming query stopped "
                     r"\(Ctrl-C\)")
        child.expect_exact("staged:default>")
        child.send("SELECT 1 AS one;\r")  # the session goes on (a query of no table: a batch)
        child.expect(r"\|\s+one\s+\|")
        child.expect_exact("1 row in set")
        child.expect_exact("staged:default>")
        child.send("exit;\r")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert stream_checkpoints() == checkpoints  # the query's checkpoint went with it
    history = FileHistory(str(staged_home / "sql_history")).load_history_strings()
    assert {"SELECT 41 + 1\n  AS answer;", "SELECT no_such_column;"} <= set(history)
