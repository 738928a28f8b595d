"""SqlSession's own logic on a stand-in Spark conf: SET/RESET reach Spark, positions of errors."""

from __future__ import annotations

import contextlib
import json
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_staged.sql.properties import SessionProperties, Source
from airflow_provider_staged.sql.session import SqlSession, StatementError, _like
from airflow_provider_staged.sql.splitting import split_statements


class FakeConf:
    """Spark's runtime conf: refuses static keys as Spark does."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        if key == "spark.driver.memory":
            raise RuntimeError("[CANNOT_MODIFY_STATIC_CONFIG] Cannot modify a static Spark config")
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class FakeSpark:
    def __init__(self) -> None:
        self.conf = FakeConf()
        self.catalog = FakeCatalog()

    def sql(self, text: str) -> Any:
        raise RuntimeError("[PARSE_SYNTAX_ERROR] Syntax error at or near SELEC. (line 2, pos 3)")


def session(config: dict[str, str] | None = None) -> SqlSession:
    properties = SessionProperties()
    for key, value in (config or {}).items():
        properties.put(key, value, Source.CONFIG)
    return SqlSession(FakeSpark(), properties, lambda: pytest.fail("no settings needed"),
                      lambda options: pytest.fail("no Airflow needed"))


def run(sql_session: SqlSession, text: str) -> Any:
    (statement,) = split_statements(text)
    return sql_session.execute(statement)


def test_spark_keys_follow_set_and_reset() -> None:
    s = session({"spark.sql.shuffle.partitions": "3"})
    conf = s.spark.conf.values
    assert conf == {"spark.sql.shuffle.partitions": "3"}  # config values reach Spark at start
    run(s, "SET 'spark.sql.shuffle.partitions' = '7'")
    assert conf["spark.sql.shuffle.partitions"] == "7"
    run(s, "SET 'sql-client.execution.max-table-result.rows' = '5'")
    assert "sql-client.execution.max-table-result.rows" not in conf  # client keys stay here
    run(s, "RESET 'spark.sql.shuffle.partitions'")
    assert conf["spark.sql.shuffle.partitions"] == "3"
    run(s, "SET 'spark.sql.ansi.enabled' = 'false'")
    run(s, "RESET")
    assert conf == {"spark.sql.shuffle.partitions": "3"} and s.properties.max_rows == 1000


def test_a_key_spark_refuses_changes_nothing() -> None:
    s = session()
    with pytest.raises(StatementError, match="CANNOT_MODIFY_STATIC_CONFIG"):
        run(s, "SET 'spark.driver.memory' = '8g'")
    assert s.properties.get("spark.driver.memory") is None


def test_spark_error_position_is_mapped_into_the_file() -> None:
    s = session()
    (_, statement) = split_statements("SELECT 1;\n  SELECT\n  SELEC 2")
    with pytest.raises(StatementError) as caught:
        s.execute(statement)
    assert (caught.value.line, caught.value.column) == (3, 4)  # the statement's line 2, pos 3
    assert "\n" not in caught.value.message


def test_like_patterns() -> None:
    assert _like("dai%").fullmatch("daily") and not _like("dai%").fullmatch("xdaily")
    assert _like("d_ily").fullmatch("DAILY") and not _like("a.c").fullmatch("abc")


class FakeTables:
    """MaterializedTables with one definition and nothing else."""

    def __init__(self, text: str) -> None:
        self.text = text

    def definition(self, identifier: Any) -> Any:
        from airflow_provider_staged.materialized.definition import parse_definition

        definition = parse_definition(self.text, "users_shops.sql")
        assert identifier == definition.identifier
        return definition


@pytest.mark.parametrize("or_alter", ["", "OR ALTER "])
def test_show_create_materialized_table_as_flinks_script(or_alter: str) -> None:
    """materialized_table.q: SHOW CREATE shows the default FRESHNESS and the derived REFRESH_MODE."""
    tables = FakeTables("CREATE MATERIALIZED TABLE users_shops\nPARTITIONED BY (ds)\n"
                        "WITH ('format' = 'parquet')\nAS SELECT user_id, ds FROM orders")
    s = SqlSession(FakeSpark(), SessionProperties(), lambda: pytest.fail("no settings needed"),
                   lambda options: contextlib.nullcontext(tables))
    result = run(s, f"SHOW CREATE {or_alter}MATERIALIZED TABLE users_shops;")
    assert result.columns == ["result"]
    assert result.rows == [(
        f"CREATE {or_alter}MATERIALIZED TABLE `default`.`users_shops`\nPARTITIONED BY (`ds`)\n"
        "WITH (\n  'format' = 'parquet'\n)\nFRESHNESS = INTERVAL '3' MINUTE\nREFRESH_MODE = CONTINUOUS\n"
        "AS SELECT user_id, ds FROM orders",
    )]


class FakeCatalog:
    """Spark's catalog: its current database (``USE``)."""

    def __init__(self, database: str = "default") -> None:
        self.database = database

    def currentDatabase(self) -> str:
        return self.database

    def setCurrentDatabase(self, name: str) -> None:
        self.database = name


class SchemaSpark(FakeSpark):
    """Analyses every query to ``SELECT 1 AS shop_id, 2 AS user_id``'s schema."""

    def __init__(self, database: str = "default") -> None:
        super().__init__()
        self.queries: list[str] = []
        self.catalog = FakeCatalog(database)
        self.analysed_in: list[str] = []  # the current database of each query's analysis

    def sql(self, text: str) -> Any:
        self.queries.append(text)
        self.analysed_in.append(self.catalog.currentDatabase())
        fields = [{"name": name, "type": "integer", "nullable": False, "metadata": {}}
                  for name in ("shop_id", "user_id")]
        schema = type("Schema", (), {"json": lambda _: json.dumps({"type": "struct", "fields": fields})})()
        return type("Frame", (), {"schema": schema})()


class CreatingTables:
    """MaterializedTables that records what CREATE asks of it (no table exists yet)."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.scheduler = type("Scheduler", (), {"definition_file": lambda _, dag_id: None})()

    def check_graph(self, definition: Any) -> None:
        """No other table: no cycle (tests/unit/test_mt_cascade.py has some)."""

    def unrefreshed_upstream(self, definition: Any, exists: Any) -> list[Any]:
        return []

    def create(self, text: str) -> Any:
        self.created.append(text)
        return type("Handler", (), {"as_summary_string": lambda _: "dag"})()


def creating_session(database: str = "default") -> tuple[SqlSession, CreatingTables, SchemaSpark]:
    tables, spark = CreatingTables(), SchemaSpark(database)
    s = SqlSession(spark, SessionProperties(), lambda: pytest.fail("no settings needed"),
                   lambda options: contextlib.nullcontext(tables))
    return s, tables, spark


@pytest.mark.parametrize(("columns", "position", "message"), [
    ("(shop_id)", (2, 1), "The number of columns in the column list must match the number of columns"),
    ("(shop_id STRING, user_id STRING)", (2, 40),
     "Incompatible types for sink column 'shop_id' at position 1"),
    ("(shop_id INT, user_id INT, PRIMARY KEY(id) NOT ENFORCED)", (2, 78),
     "Primary key column 'id' is not defined in the schema at line 1, column 78"),
])
def test_a_create_that_does_not_fit_its_query_creates_nothing(
    columns: str, position: tuple[int, int], message: str
) -> None:
    s, tables, spark = creating_session()
    (_, statement) = split_statements(f"SET 'a' = 'b';\nCREATE MATERIALIZED TABLE users_shops {columns} "
                                      "AS SELECT 1 as shop_id, 2 as user_id")
    with pytest.raises(StatementError) as caught:
        s.execute(statement)
    assert caught.value.message.startswith(message)
    assert (caught.value.line, caught.value.column) == position  # in the input: the statement's line 2
    assert tables.created == [] and spark.queries == ["SELECT 1 as shop_id, 2 as user_id"]


def test_a_create_that_fits_its_query_is_created() -> None:
    s, tables, _ = creating_session()
    text = "CREATE MATERIALIZED TABLE users_shops (user_id, shop_id) AS SELECT 1 as shop_id, 2 as user_id"
    result = run(s, text)
    assert tables.created == [text]
    assert result.message == "Materialized table default.users_shops created: dag (ACTIVATED)"


def test_after_use_an_unqualified_materialized_table_is_refused() -> None:
    """`USE p; CREATE MATERIALIZED TABLE plain ... FROM src` made default.plain (past the check of
    an ordinary p.plain), its query analysed in p but refreshed in default: every refresh failed."""
    s, tables, spark = creating_session("p")
    with pytest.raises(StatementError) as caught:
        run(s, "CREATE MATERIALIZED TABLE plain AS SELECT 1 as shop_id, 2 as user_id")
    assert caught.value.message.startswith("default.plain not created: after USE p, ")
    assert "write p.plain" in caught.value.message
    assert tables.created == [] and spark.queries == [] and spark.catalog.database == "p"


def test_after_use_the_query_is_analysed_as_its_refreshes_read_it() -> None:
    s, tables, spark = creating_session("p")
    text = "CREATE MATERIALIZED TABLE p.users_shops AS SELECT 1 as shop_id, 2 as user_id"
    assert run(s, text).message.startswith("Materialized table p.users_shops created")
    assert tables.created == [text]
    assert spark.analysed_in == ["default"] and spark.catalog.database == "p"  # USE p holds again


@pytest.mark.parametrize("text", [
    "DROP MATERIALIZED TABLE t", "ALTER MATERIALIZED TABLE t SUSPEND", "DESCRIBE MATERIALIZED TABLE t",
    "SHOW CREATE MATERIALIZED TABLE t", "ALTER MATERIALIZED TABLE t REFRESH",
])
def test_after_use_an_unqualified_name_is_refused(text: str) -> None:
    """It was read as default.t: after USE p, DROP MATERIALIZED TABLE t dropped default.t's workflow."""
    spark = FakeSpark()
    spark.catalog.setCurrentDatabase("p")
    s = SqlSession(spark, SessionProperties(), lambda: pytest.fail("no settings needed"),
                   lambda options: pytest.fail("no materialized table is touched"))
    with pytest.raises(StatementError) as caught:
        run(s, text)
    assert caught.value.message.startswith("default.t: after USE p, ") and "write p.t" in caught.value.message


class CatalogSpark(FakeSpark):
    catalog = type("Catalog", (), {"currentDatabase": lambda _: "default"})()


@pytest.mark.parametrize(("clauses", "position", "message"), [
    ("\n  PARTITIONED BY ()", (3, 3), "PARTITIONED BY () names no column"),
    (" PARTITIONED BY ( )", (2, 16), "PARTITIONED BY () names no column"),
    (" PARTITIONED BY (ds, DS)", (2, 16), "duplicate partition column 'ds' in PARTITIONED BY"),
    (" PARTITIONED BY (ds)\n  PARTITIONED BY (x)", (3, 3), "PARTITIONED BY is given twice"),
])
def test_a_ctas_with_a_bad_partitioned_by_is_refused_at_the_clause(
    clauses: str, position: tuple[int, int], message: str
) -> None:
    """Not an unpartitioned table, nor the last clause's columns: nothing is built."""
    s = SqlSession(CatalogSpark(), SessionProperties(), lambda: pytest.fail("no settings needed"),
                   lambda options: pytest.fail("nothing is built"))
    (_, statement) = split_statements(f"SELECT 1;\nCREATE TABLE t{clauses} AS SELECT 1 AS ds, 2 AS x")
    with pytest.raises(StatementError) as caught:
        s.execute(statement)
    assert caught.value.message.startswith(message) and "\n" not in caught.value.message
    assert (caught.value.line, caught.value.column) == position  # in the input: the statement's line 2


class ListingTables:
    """MaterializedTables holding ``default.daily`` and ``p.daily``, ``p.hourly``."""

    def list(self) -> list[tuple[Any, Any]]:
        from pathlib import Path

        from airflow_provider_staged.staging.identifiers import TableIdentifier

        names = [("default", "daily"), ("p", "daily"), ("p", "hourly")]
        return [(TableIdentifier(d, t), Path(f"{d}__{t}.sql")) for d, t in names]


@pytest.mark.parametrize(("database", "text", "expected"), [
    ("default", "SHOW MATERIALIZED TABLES", ["default.daily"]),
    ("p", "SHOW MATERIALIZED TABLES", ["p.daily", "p.hourly"]),
    ("p", "SHOW MATERIALIZED TABLES LIKE 'h%'", ["p.hourly"]),
    ("p", "SHOW MATERIALIZED TABLES FROM default", ["default.daily"]),
])
def test_show_without_from_lists_the_current_database(database: str, text: str, expected: list[str]) -> None:
    """As Flink's (and Spark's SHOW TABLES): after USE p it listed every database's tables."""
    spark = FakeSpark()
    spark.catalog.setCurrentDatabase(database)
    s = SqlSession(spark, SessionProperties(), lambda: pytest.fail("no settings needed"),
                   lambda options: contextlib.nullcontext(ListingTables()))
    assert [name for name, _ in run(s, text).rows] == expected


class PlanRow(tuple):
    __fields__ = ["plan"]


class ExplainingSpark(SchemaSpark):
    """SchemaSpark whose EXPLAIN returns one plan row naming what it explained."""

    def sql(self, text: str) -> Any:
        if not text.startswith("EXPLAIN"):
            return super().sql(text)
        self.queries.append(text)
        rows = [PlanRow([f"plan of: {text}"])]
        return type("Frame", (), {"limit": lambda frame, n: frame, "collect": lambda _: rows})()


def explaining_session(database: str = "default") -> tuple[SqlSession, ExplainingSpark]:
    spark = ExplainingSpark(database)
    s = SqlSession(spark, SessionProperties(), lambda: pytest.fail("no settings needed"),
                   lambda options: pytest.fail("EXPLAIN reaches no workflow"))
    return s, spark


@pytest.mark.parametrize(("text", "explain"), [
    # SqlMaterializedTableNodeToOperationConverterTest.testExplainCreateMaterializedTable and
    # testExplainCreateOrAlterMaterializedTable: the plan of the query, nothing created.
    ("EXPLAIN CREATE MATERIALIZED TABLE myTable123 AS SELECT 123", "EXPLAIN SELECT 123"),
    ("EXPLAIN CREATE OR ALTER MATERIALIZED TABLE myTable123 AS SELECT 123", "EXPLAIN SELECT 123"),
    # Spark's modes, and Flink's PLAN FOR.
    ("explain formatted create materialized table t as select 1 as shop_id, 2 as user_id",
     "EXPLAIN FORMATTED select 1 as shop_id, 2 as user_id"),
    ("EXPLAIN PLAN FOR CREATE MATERIALIZED TABLE t AS SELECT 1", "EXPLAIN SELECT 1"),
    # The refreshes' query: the column list's order and casts applied.
    ("EXPLAIN CREATE MATERIALIZED TABLE t (user_id, shop_id) AS SELECT 1 AS shop_id, 2 AS user_id",
     "EXPLAIN SELECT `user_id`, `shop_id` FROM (\nSELECT 1 AS shop_id, 2 AS user_id\n) AS "
     "_materialized_columns"),
])
def test_explain_create_materialized_table_shows_the_query_plan(text: str, explain: str) -> None:
    s, spark = explaining_session("p")
    text = text.replace("TABLE t", "TABLE p.t").replace("table t", "table p.t").replace(
        "myTable123", "p.myTable123")
    result = run(s, text)
    assert result.columns == ["plan"] and result.rows == [(f"plan of: {explain}",)]
    assert spark.queries[-1] == explain
    assert spark.analysed_in[-1] == "default" and spark.catalog.database == "p"  # as CREATE, USE kept


@pytest.mark.parametrize(("text", "position", "message"), [
    ("EXPLAIN ALTER MATERIALIZED TABLE t SUSPEND", (2, 9), "EXPLAIN: only CREATE [OR ALTER] MATERIALIZED "
     "TABLE and ALTER MATERIALIZED TABLE ... AS can be explained (their query's plan), found 'ALTER'"),
    ("EXPLAIN\n  DROP MATERIALIZED TABLE t", (3, 3), "EXPLAIN: only CREATE [OR ALTER] MATERIALIZED TABLE"),
    # The definition is checked as CREATE checks it, at its place.
    # (the column count at the statement's start, as for CREATE)
    ("EXPLAIN CREATE MATERIALIZED TABLE t (shop_id) AS SELECT 1 as shop_id, 2 as user_id", (2, 1),
     "The number of columns in the column list must match"),
    ("EXPLAIN CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '40' MINUTE\nREFRESH_MODE = FULL\n"
     "AS SELECT 1", (3, 1), "FRESHNESS: invalid freshness INTERVAL '40' MINUTE"),
])
def test_explain_of_what_is_not_a_create_is_refused_at_its_place(
    text: str, position: tuple[int, int], message: str
) -> None:
    s, spark = explaining_session()
    (_, statement) = split_statements(f"SET 'a' = 'b';\n{text}")
    with pytest.raises(StatementError) as caught:
        s.execute(statement)
    assert caught.value.message.startswith(message), caught.value.message
    assert (caught.value.line, caught.value.column) == position
    assert not any(query.startswith("EXPLAIN") for query in spark.queries)


def test_explain_after_use_of_an_unqualified_name_is_refused_as_create() -> None:
    s, spark = explaining_session("p")
    with pytest.raises(StatementError, match=r"default\.t not created: after USE p, .*write p\.t"):
        run(s, "EXPLAIN CREATE MATERIALIZED TABLE t AS SELECT 1")
    assert spark.queries == []


class MissingTableSpark(FakeSpark):
    """Spark's analysis of a query that reads a table it does not have: its position is the
    query's own (line 1-based, pos 0-based)."""

    def __init__(self, line: int, pos: int) -> None:
        super().__init__()
        self.where = line, pos

    def sql(self, text: str) -> Any:
        raise RuntimeError("[TABLE_OR_VIEW_NOT_FOUND] The table or view `nosuch` cannot be found. "
                           f"SQLSTATE: 42P01; line {self.where[0]} pos {self.where[1]};\n'Project [*]")


@pytest.mark.parametrize(("query", "spark_position", "position"), [
    (" SELECT * FROM nosuch", (1, 14), (2, 46)),
    ("\n  SELECT *\n  FROM nosuch", (2, 7), (4, 8)),
])
def test_a_missing_source_table_is_reported_where_the_query_names_it(
    query: str, spark_position: tuple[int, int], position: tuple[int, int]
) -> None:
    """Spark's position counts from the query; it was read from the statement's start (column 20)."""
    tables = CreatingTables()
    s = SqlSession(MissingTableSpark(*spark_position), SessionProperties(),
                   lambda: pytest.fail("no settings needed"), lambda options: contextlib.nullcontext(tables))
    (_, statement) = split_statements(f"SET 'a' = 'b';\nCREATE MATERIALIZED TABLE t AS{query}")
    with pytest.raises(StatementError) as caught:
        s.execute(statement)
    assert caught.value.message.startswith("[TABLE_OR_VIEW_NOT_FOUND] The table or view `nosuch`")
    assert (caught.value.line, caught.value.column) == position and tables.created == []


def test_show_create_keeps_an_explicit_freshness_as_flinks_script() -> None:
    """materialized_table.q, users_shops_explicit: FRESHNESS = INTERVAL '10' SECOND is shown as
    written, with the given REFRESH_MODE (the unpartitioned users_shops_continuous too)."""
    tables = FakeTables("CREATE MATERIALIZED TABLE users_shops\nPARTITIONED BY (ds)\n"
                        "FRESHNESS = INTERVAL '10' SECOND\nREFRESH_MODE = CONTINUOUS\n"
                        "AS SELECT user_id, ds FROM orders")
    s = SqlSession(FakeSpark(), SessionProperties(), lambda: pytest.fail("no settings needed"),
                   lambda options: contextlib.nullcontext(tables))
    assert run(s, "SHOW CREATE MATERIALIZED TABLE users_shops").rows == [(
        "CREATE MATERIALIZED TABLE `default`.`users_shops`\nPARTITIONED BY (`ds`)\n"
        "FRESHNESS = INTERVAL '10' SECOND\nREFRESH_MODE = CONTINUOUS\nAS SELECT user_id, ds FROM orders",
    )]


class TempViewCatalog(FakeCatalog):
    """The catalog holds databases default and sales, table sales.orders and view default.shops;
    the session also has a temporary view (Spark finds it first for an unqualified name)."""

    tables = {("sales", "orders"), ("default", "shops")}

    def databaseExists(self, name: str) -> bool:
        return name in ("default", "sales", "global_temp")

    def tableExists(self, name: str) -> bool:
        database, table = (part.strip("`") for part in name.split("`.`"))
        return (database, table) in self.tables


@pytest.mark.parametrize(("query", "position", "name"), [
    ("SELECT shop_id, user_id FROM recent", (2, 71), "recent"),
    ("SELECT o.shop_id, r.user_id FROM sales.orders o\n  JOIN `recent` r ON o.shop_id = r.shop_id", (3, 8),
     "recent"),
    ("SELECT shop_id, user_id FROM global_temp.recent", (2, 71), "global_temp.recent"),
])
def test_a_query_of_a_temporary_view_is_refused_where_it_reads_it(
    query: str, position: tuple[int, int], name: str
) -> None:
    """Flink's docs: the AS query may not use temporary tables or views. The refreshes run in
    their own Spark session, where the view does not exist: CREATE succeeded, every refresh failed."""
    s, tables, spark = creating_session()
    spark.catalog = TempViewCatalog()
    (_, statement) = split_statements(f"SET 'a' = 'b';\nCREATE MATERIALIZED TABLE users_shops AS {query}")
    with pytest.raises(StatementError) as caught:
        s.execute(statement)
    assert caught.value.message.startswith(f"AS: the query reads {name}, a temporary view of this session")
    assert (caught.value.line, caught.value.column) == position
    assert tables.created == []


@pytest.mark.parametrize("query", [
    "SELECT shop_id, user_id FROM sales.orders",
    "SELECT shop_id, user_id FROM shops",  # a view of the catalog
    "WITH recent AS (SELECT * FROM sales.orders) SELECT shop_id, user_id FROM recent",
    "SELECT shop_id, user_id FROM parquet.`/data/orders`",  # a path, not a catalog table
])
def test_a_query_of_catalog_tables_is_created(query: str) -> None:
    s, _, spark = creating_session()
    spark.catalog = TempViewCatalog()
    assert run(s, f"CREATE MATERIALIZED TABLE users_shops AS {query}").message.startswith(
        "Materialized table default.users_shops created")


class _Catalog:
    """A metastore client of a catalog with one materialized table (mt.daily) and an ordinary one."""

    def __init__(self, uri: str) -> None:
        assert uri == "thrift://127.0.0.1:9083"

    def __enter__(self) -> _Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def get_table(self, database: str, table: str) -> Any:
        parameters = {("mt", "daily"): {"materialized.refresh-status": "ACTIVATED"},
                      ("mt", "plain"): {"spark.sql.sources.provider": "parquet"}}.get((database, table))
        return None if parameters is None else type("Table", (), {"parameters": parameters})()


class DroppingSpark(FakeSpark):
    def __init__(self) -> None:
        super().__init__()
        self.catalog = FakeCatalog("mt")
        self.queries: list[str] = []

    def sql(self, text: str) -> Any:
        self.queries.append(text)
        return type("Frame", (), {"limit": lambda frame, n: frame, "collect": lambda _: [],
                                  "columns": []})()


@pytest.mark.parametrize(("text", "position"), [
    ("DROP TABLE daily", (2, 12)),
    ("drop table if exists mt.daily", (2, 22)),
    ("DROP TABLE\n  spark_catalog.`mt`.`daily` PURGE", (3, 3)),
])
def test_drop_table_of_a_materialized_table_is_refused(
    text: str, position: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """MaterializedTableStatementITCase.testDropMaterializedTableIn{Full,Continuous}Mode: DROP TABLE
    of a materialized table fails (Flink: "Table with identifier ... does not exist."). Here it
    dropped the data and left the workflow, whose next refresh wrote the table again."""
    from airflow_provider_staged.catalogs.metastore import client

    monkeypatch.setattr(client, "MetastoreClient", _Catalog)
    spark = DroppingSpark()
    s = SqlSession(spark, SessionProperties(), lambda: SimpleNamespace(metastore_uri="thrift://127.0.0.1:9083"),
                   lambda options: pytest.fail("no workflow is reached"))
    (_, statement) = split_statements(f"SET 'a' = 'b';\n{text}")
    with pytest.raises(StatementError) as caught:
        s.execute(statement)
    assert caught.value.message.startswith(
        "DROP TABLE: mt.daily is a materialized table: DROP MATERIALIZED TABLE mt.daily deletes its refresh "
        "workflow")
    assert (caught.value.line, caught.value.column) == position and spark.queries == []


@pytest.mark.parametrize("text", [
    "DROP TABLE plain", "DROP TABLE IF EXISTS mt.nothing", "DROP TABLE other_catalog.mt.daily",
    "DROP VIEW daily",
])
def test_drop_table_of_other_tables_goes_to_spark(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_staged.catalogs.metastore import client

    monkeypatch.setattr(client, "MetastoreClient", _Catalog)
    spark = DroppingSpark()
    s = SqlSession(spark, SessionProperties(), lambda: SimpleNamespace(metastore_uri="thrift://127.0.0.1:9083"),
                   lambda options: pytest.fail("no workflow is reached"))
    run(s, text)
    assert spark.queries == [text]


class _NoWorkflows:
    """MaterializedTables without workflows; the catalog holds an ordinary table mt.plain."""

    scheduler = SimpleNamespace(definition_file=lambda dag_id: None)

    def ordinary_kind(self, identifier: Any) -> str | None:
        return "table" if identifier.table == "plain" else None


@pytest.mark.parametrize(("text", "message"), [
    ("DROP MATERIALIZED TABLE IF EXISTS mt.plain", "No materialized table mt.plain (table mt.plain of the "
     "catalog is not one; DROP TABLE drops it): nothing dropped."),
    ("DROP MATERIALIZED TABLE IF EXISTS mt.gone", "No materialized table mt.gone: nothing dropped."),
])
def test_drop_materialized_table_if_exists_names_an_ordinary_table(text: str, message: str) -> None:
    """MaterializedTableStatementITCase.testDropMaterializedTableInContinuousMode: Flink refuses
    "DROP MATERIALIZED TABLE IF EXISTS datagenSource", an ordinary table. Here DROP MATERIALIZED
    TABLE keeps the data as an ordinary table, so a teardown script run twice met one: it is named
    and nothing is dropped (an error would fail the second run of the script)."""
    s = SqlSession(FakeSpark(), SessionProperties(), lambda: pytest.fail("no settings needed"),
                   lambda options: contextlib.nullcontext(_NoWorkflows()))
    assert run(s, text).message == message


class _RecordedRefreshes:
    """MaterializedTables that record each refresh's trigger."""

    def __init__(self) -> None:
        self.triggers: list[Any] = []

    def refresh(self, identifier: Any, trigger: Any) -> str:
        self.triggers.append((identifier.name, trigger))
        return "manual__1"


@pytest.mark.parametrize(("text", "downstream"), [
    ("ALTER MATERIALIZED TABLE mt.t REFRESH PARTITION (ds = '2024-01-03') CASCADE", True),
    ("ALTER MATERIALIZED TABLE mt.t REFRESH PARTITION (ds = '2024-01-03')", False),
])
def test_refresh_cascade_asks_the_downstream_tables_to_follow(text: str, downstream: bool) -> None:
    """CASCADE is `staged mt refresh --downstream` (run conf refreshDownstream)."""
    tables = _RecordedRefreshes()
    s = SqlSession(FakeSpark(), SessionProperties(), lambda: pytest.fail("no settings needed"),
                   lambda options: contextlib.nullcontext(tables))
    assert run(s, text).rows == [("mt.t", "mt__mt__t", "manual__1")]
    ((name, trigger),) = tables.triggers
    assert (name, dict(trigger.static_partitions), trigger.refresh_downstream) == (
        "mt.t", {"ds": "2024-01-03"}, downstream)
    assert ("refreshDownstream" in trigger.as_conf()) is downstream


@pytest.mark.parametrize(
    ("text", "column", "message"),
    [
        ("ALTER MATERIALIZED TABLE t REFRESH PARTITION (ds = '')", 52,
         "invalid value '' for partition column 'ds': expected a non-empty string"),
        (f"ALTER MATERIALIZED TABLE t REFRESH PARTITION (ds = '2024-01-01', k = '{'é' * 128}')", 70,
         "of partition column 'k' is 256 bytes long, the metastore stores at most 255"),
        ("ALTER MATERIALIZED TABLE t REFRESH PARTITION (k = '__HIVE_DEFAULT_PARTITION__')", 51,
         "it names the partition of null values"),
        ("ALTER MATERIALIZED TABLE t RESUME WITH ('compression' = 'lzma')", 41,
         "invalid value 'lzma' for dynamicOptions key 'compression': expected one of none"),
        ("ALTER MATERIALIZED TABLE t RESUME WITH ('compression' = 'zstd',\n  'group.id' = 'g')", 3,
         "dynamicOptions key 'group.id' is not allowed; allowed keys: compression"),
    ],
)
def test_alter_values_are_refused_at_the_value_before_airflow_is_reached(
    text: str, column: int, message: str
) -> None:
    """Issue 36: `staged sql` reached Airflow before it checked these (`staged mt refresh` did
    not); now each is refused where it is written, and nothing is opened."""
    with pytest.raises(StatementError) as info:
        run(session(), text)
    assert (info.value.line, info.value.column) == (text.count("\n") + 1, column), info.value.message
    assert message in info.value.message
