"""ALTER MATERIALIZED TABLE ... SET / RESET / SET FRESHNESS / SET REFRESH_MODE / AS query.

Tests named after apache/flink's ``MaterializedTableStatementParserTest`` (parser vectors) and
``SqlMaterializedTableNodeToOperationConverterTest`` (converter vectors), with Flink's messages;
the parser's syntax errors of these forms are in test_sql_materialized_statements.py
(test_flink_parser_errors_at_flink_positions). Then the SQL client's execution: the changed
definition runs as CREATE OR ALTER of it, and a bad value stops it before any work.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_staged.materialized.definition import parse_definition
from airflow_provider_staged.materialized.freshness import Freshness, RefreshMode
from airflow_provider_staged.materialized.query_change import QueryChangeError, check_definition_change
from airflow_provider_staged.sql.materialized_statements import (
    AlterMaterializedTableChange,
    MaterializedStatementError,
    check_values,
    parse_materialized_statement,
)
from airflow_provider_staged.sql.properties import SessionProperties
from airflow_provider_staged.sql.session import SqlSession, StatementError
from airflow_provider_staged.sql.splitting import split_statements
from airflow_provider_staged.staging.identifiers import TableIdentifier

# Flink's converter test table base_mtbl (a, b, c, d from t3), partitioned here by d.
BASE = ("CREATE MATERIALIZED TABLE base_mtbl\nPARTITIONED BY (d)\nWITH ('owner' = 'me', 'retries' = '2')\n"
        "FRESHNESS = INTERVAL '1' HOUR\nAS SELECT a, b, c, d FROM t3;\n")
BASE_COLUMNS = [("a", "long"), ("b", "string"), ("c", "integer"), ("d", "string")]


def change(text: str) -> AlterMaterializedTableChange:
    statement = parse_materialized_statement(text)
    assert isinstance(statement, AlterMaterializedTableChange)
    check_values(statement)
    return statement


def refused(text: str) -> MaterializedStatementError:
    with pytest.raises(MaterializedStatementError) as info:
        change(text).apply(parse_definition(BASE))
    return info.value


# -- MaterializedTableStatementParserTest ----------------------------------------------------
def test_alter_materialized_table_refresh_mode() -> None:
    for mode in RefreshMode:
        statement = change(f"ALTER MATERIALIZED TABLE tbl1 SET REFRESH_MODE = {mode.value}")
        assert statement.refresh_mode is mode and statement.table == TableIdentifier("default", "tbl1")


def test_alter_materialized_table_freshness() -> None:
    statement = change("ALTER MATERIALIZED TABLE tbl1 SET FRESHNESS = INTERVAL '1' DAY")
    assert statement.freshness == Freshness(1, "DAY")
    assert statement.clause == "ALTER MATERIALIZED TABLE SET FRESHNESS" and statement.at == (1, 35)


def test_alter_materialized_table_set() -> None:
    statement = change("ALTER MATERIALIZED TABLE tbl1 SET (\n  'owner' = 'val1',\n  'tags' = 'val2'\n)")
    assert dict(statement.options) == {"owner": "val1", "tags": "val2"}
    assert dict(statement.positions) == {"owner": (2, 3), "tags": (3, 3)}
    # Flink's parser takes SET (); its converter refuses it (SqlAlterMaterializedTableOptionsConverter).
    with pytest.raises(MaterializedStatementError, match=r"^line 1, column 31: ALTER MATERIALIZED TABLE SET "
                       r"does not support empty options\.$"):
        change("ALTER MATERIALIZED TABLE tbl1 SET ()")
    # Flink's parser vector names keys no definition has here: refused at the key, before any work.
    with pytest.raises(MaterializedStatementError, match=r"line 2, column 3: .*unknown option 'key1'"):
        change("ALTER MATERIALIZED TABLE tbl1 SET (\n  'key1' = 'val1',\n  'key2' = 'val2'\n)")


def test_alter_materialized_table_reset() -> None:
    assert change("ALTER MATERIALIZED TABLE tbl1 RESET ('owner', 'tags')").reset == ("owner", "tags")
    with pytest.raises(MaterializedStatementError, match=r"column 31: ALTER MATERIALIZED TABLE RESET does "
                       r"not support empty key\.$"):
        change("ALTER MATERIALIZED TABLE tbl1 RESET ()")
    # SqlAlterMaterializedTableResetConverter's rule, at the key.
    with pytest.raises(MaterializedStatementError, match=r"column 47: ALTER MATERIALIZED TABLE RESET does "
                       r"not support changing 'connector'\.$"):
        change("ALTER MATERIALIZED TABLE tbl1 RESET ('owner', 'connector')")
    with pytest.raises(MaterializedStatementError, match=r"column 38: .*unknown option 'key1'"):
        change("ALTER MATERIALIZED TABLE tbl1 RESET ('key1', 'key2')")
    with pytest.raises(MaterializedStatementError, match=r"column 46: .*duplicate option 'tags'"):
        change("ALTER MATERIALIZED TABLE tbl1 RESET ('tags', 'tags')")


def test_alter_materialized_table_as_query() -> None:
    statement = change("ALTER MATERIALIZED TABLE tbl1\nAS SELECT * FROM t;")
    assert statement.query == "SELECT * FROM t" and statement.positions["AS"] == (2, 4)
    # Flink's second vector (`... FROM t AS`, its parser's error at column 51): the query is Spark
    # SQL here, which Spark's analysis refuses at execution (test_a_query_error_points_into_the_statement).
    assert change("ALTER MATERIALIZED TABLE tbl1 AS SELECT * FROM t AS").query == "SELECT * FROM t AS"


def test_alter_materialized_table_add_schema() -> None:
    """The key forms: ENFORCED (or nothing said) and UNIQUE refused with Flink's words; NOT
    ENFORCED adds the key to the definition."""
    with pytest.raises(MaterializedStatementError, match=r"column 34: .*Flink doesn't support ENFORCED mode "
                       "for PRIMARY KEY constraint"):
        change("alter materialized table mt1 add constraint ct1 primary key(a, b)")
    statement = change("alter materialized table mt1 add constraint ct1 primary key(a, b) not enforced")
    assert (statement.primary_key, statement.primary_key_name, statement.columns) == (("a", "b"), "ct1", ())
    with pytest.raises(MaterializedStatementError, match="UNIQUE constraint is not supported yet"):
        change("alter materialized table mt1 add unique(a, b)")


@pytest.mark.parametrize("text", [
    "alter materialized table mt1 add new_column int not null",
    "alter materialized table mt1 add new_column string comment 'new_column docs'",
    "alter materialized table mt1 add new_column string comment 'new_column docs' first",
    "alter materialized table mt1 add new_column string comment 'new_column docs' after id",
    "alter materialized table mt1 add new_column array<row(f0 int, f1 bigint)> comment 'new_column docs'",
    "alter materialized table mt1 add (new_column map<string, int>)",
])
def test_add_single_column(text: str) -> None:
    """testAddSingleColumn / testAddNestedColumn's physical columns parse (what Flink then allows
    is decided against the query: test_add_column_is_refused_with_flinks_rules)."""
    statement = change(text)
    assert statement.columns == ("new_column",) and statement.positions["new_column"][1] in (34, 35)


@pytest.mark.parametrize(("text", "column", "message"), [
    # testAddSingleColumn's computed and metadata columns; testAddNestedColumn's nested ones
    ("alter materialized table mt1 add col_int as col_a - col_b after col_b", 42, "'col_int' is a computed"),
    ("alter materialized table mt1 add col_int int metadata from 'mk1' virtual comment 'c' after col_b", 46,
     "'col_int' is a computed, metadata or nested column"),
    ("alter materialized table mt1 add (new_row row(f0 int, f1 bigint) comment 'new_column docs', f2 as "
     "new_row.f0 + 1)", 96, "'f2' is a computed"),
    ("alter materialized table mt1 add (new_row.f2 array<int>)", 42,
     "'new_row' is a computed, metadata or nested"),
    # testAddWatermark
    ("alter materialized table mt1 add watermark for ts as ts - interval '1' second", 34,
     "WATERMARK is not supported"),
])
def test_add_forms_no_definition_has_are_refused(text: str, column: int, message: str) -> None:
    with pytest.raises(MaterializedStatementError) as info:
        change(text)
    assert (info.value.line, info.value.column) == (1, column) and message in info.value.message


def test_alter_materialized_table_add_primary_key() -> None:
    """The key goes into the definition's column list (checked NOT NULL against the query when it
    runs as CREATE OR ALTER); a second key is refused with Flink's SchemaAddConverter message."""
    new = change("ALTER MATERIALIZED TABLE base_mtbl ADD CONSTRAINT pk PRIMARY KEY (a) NOT ENFORCED").apply(
        parse_definition(BASE))
    assert (new.primary_key, new.primary_key_name) == (("a",), "pk")
    with pytest.raises(MaterializedStatementError, match=re.escape(
            "The base table has already defined the primary key constraint [`a`]. You might want to drop it "
            "before adding a new one.")):
        change("ALTER MATERIALIZED TABLE base_mtbl ADD PRIMARY KEY (b) NOT ENFORCED").apply(new)


# -- SqlMaterializedTableNodeToOperationConverterTest ----------------------------------------
def test_alter_materialized_table_as_query_appends_columns() -> None:
    """testAlterMaterializedTableAsQuery: the new query appends e and f; everything else of the
    table (options, freshness, partitioning, refresh mode) is kept."""
    old = parse_definition(BASE)
    new = change("ALTER MATERIALIZED TABLE base_mtbl AS SELECT a, b, c, d, d as e, cast('123' as string) "
                 "as f FROM t3").apply(old)
    assert new.query == "SELECT a, b, c, d, d as e, cast('123' as string) as f FROM t3"
    assert (new.options, new.freshness, new.partition_by, new.refresh_mode, new.schedule) == (
        old.options, old.freshness, old.partition_by, old.refresh_mode, old.schedule)
    query = [*BASE_COLUMNS, ("e", "string"), ("f", "string")]
    assert check_definition_change(old, new, BASE_COLUMNS, query) == [("e", "string"), ("f", "string")]


@pytest.mark.parametrize(("query", "columns", "message"), [
    ("SELECT a, c, b, d FROM t3", [("a", "long"), ("c", "integer"), ("b", "string"), ("d", "string")],
     "Column mismatch at position 2: Original column is [`b` STRING], but new column is [`c` INT]."),
    ("SELECT a, b, d FROM t3", [("a", "long"), ("b", "string"), ("d", "string")],
     "Dropping of persisted column `c` is not supported."),
    ("SELECT a, b, CAST(c AS BIGINT) AS c, d FROM t3",
     [("a", "long"), ("b", "string"), ("c", "long"), ("d", "string")],
     "Column mismatch at position 3: Original column is [`c` INT], but new column is [`c` BIGINT]."),
])
def test_alter_materialized_table_as_query_with_incompatible_schema(
    query: str, columns: list[tuple[str, str]], message: str
) -> None:
    """Flink 2.x (FLIP-492): only appending columns keeps the table's data; its messages."""
    old = parse_definition(BASE)
    new = change(f"ALTER MATERIALIZED TABLE base_mtbl AS {query}").apply(old)
    with pytest.raises(QueryChangeError) as info:
        check_definition_change(old, new, BASE_COLUMNS, columns)
    assert message in str(info.value)


def test_alter_materialized_table_options() -> None:
    """SqlAlterMaterializedTableOptionsConverter: SET adds or replaces options, the rest stay;
    RESET removes them (a key the table does not have is no change, as Flink's TableChange.reset)."""
    old = parse_definition(BASE)
    new = change("ALTER MATERIALIZED TABLE base_mtbl SET ('retries' = '5', 'tags' = 'x,y')").apply(old)
    assert dict(new.options) == {"owner": "me", "retries": "5", "tags": "x,y"}
    assert (new.retries, new.tags, new.query) == (5, ("x", "y"), old.query)
    new = change("ALTER MATERIALIZED TABLE base_mtbl RESET ('owner', 'catchup')").apply(old)
    assert dict(new.options) == {"retries": "2"} and new.owner is None


@pytest.mark.parametrize(("text", "position", "message"), [
    # The converter test's SET: Flink keeps the last of two equal keys; here it is refused.
    ("ALTER MATERIALIZED TABLE base_mtbl SET ('format' = 'json2', 'k1' = 'v1', 'k2' = 'v2', 'k2' = 'newV2')",
     (1, 87), "duplicate option 'k2'"),
    ("ALTER MATERIALIZED TABLE base_mtbl SET ('format' = 'json2')", (1, 41),
     "option 'format' = 'json2' is not supported: refreshes write parquet"),
    ("ALTER MATERIALIZED TABLE base_mtbl SET ('owner' = 'you',\n 'retries' = 'many')", (2, 2),
     "option 'retries' must be an integer 0..100, not 'many'"),
    ("ALTER MATERIALIZED TABLE base_mtbl SET ('catchup' = 'true')", (1, 41),
     "option 'catchup' = 'true' needs a 'start-date'"),
    ("ALTER MATERIALIZED TABLE base_mtbl SET ('schedule.cron' = '61 * * * *')", (1, 41),
     "invalid cron expression '61 \\* \\* \\* \\*'"),
    ("ALTER MATERIALIZED TABLE base_mtbl SET ('partition.fields.a.date-formatter' = 'yyyy')", (1, 41),
     "Column 'a' referenced by materialized table option .* isn't a partition column"),
    # FULL's freshness limits (Flink's message), at FRESHNESS.
    ("ALTER MATERIALIZED TABLE base_mtbl SET FRESHNESS = INTERVAL '40' MINUTE", (1, 40),
     "In full refresh mode, only freshness that are factors of 60 are currently supported"),
    ("ALTER MATERIALIZED TABLE base_mtbl SET FRESHNESS = INTERVAL '0' SECOND", (1, 61),
     "The freshness interval currently only supports positive integer type values. But was: 0"),
    # Flink's CREATE OR ALTER rule: the mode the table was created with stays.
    ("ALTER MATERIALIZED TABLE base_mtbl SET REFRESH_MODE = CONTINUOUS", (1, 40),
     "Changing of REFRESH MODE is unsupported: default.base_mtbl refreshes in FULL mode"),
])
def test_alter_materialized_table_bad_values_are_refused_at_the_value(
    text: str, position: tuple[int, int], message: str
) -> None:
    with pytest.raises(MaterializedStatementError) as info:
        change(text).apply(parse_definition(BASE))
    assert (info.value.line, info.value.column) == position, info.value.message
    assert re.search(message, info.value.message), info.value.message


def test_alter_materialized_table_freshness_keeps_the_refresh_mode() -> None:
    """A freshness below the threshold would derive CONTINUOUS; the table keeps FULL, as Flink's
    catalog keeps the mode resolved at creation: the new definition writes it."""
    new = change("ALTER MATERIALIZED TABLE base_mtbl SET FRESHNESS = INTERVAL '10' MINUTE").apply(
        parse_definition(BASE))
    assert (new.freshness, new.refresh_mode, new.schedule) == (Freshness(10, "MINUTE"), RefreshMode.FULL,
                                                               "*/10 * * * *")
    assert "REFRESH_MODE = FULL" in new.text
    same = change("ALTER MATERIALIZED TABLE base_mtbl SET FRESHNESS = INTERVAL '2' HOUR").apply(
        parse_definition(BASE))
    assert same.schedule == "0 */2 * * *" and "REFRESH_MODE" not in same.text  # still derived
    assert change("ALTER MATERIALIZED TABLE base_mtbl SET REFRESH_MODE = FULL").apply(
        parse_definition(BASE)).refresh_mode is RefreshMode.FULL
    # a threshold above the freshness would derive CONTINUOUS too
    threshold = "ALTER MATERIALIZED TABLE base_mtbl SET ('refresh-mode.freshness-threshold' = '2 h')"
    raised = change(threshold).apply(parse_definition(BASE))
    assert raised.refresh_mode is RefreshMode.FULL and "REFRESH_MODE = FULL" in raised.text


def test_alter_materialized_table_freshness_downstream_and_back() -> None:
    """SET FRESHNESS = DOWNSTREAM (beyond Flink): no schedule of its own, refreshed after its
    inputs' commits; SET FRESHNESS = INTERVAL gives it one again. Options stay."""
    statement = change("ALTER MATERIALIZED TABLE base_mtbl SET FRESHNESS = DOWNSTREAM")
    assert statement.follows_inputs and statement.freshness is None
    follower = statement.apply(parse_definition(BASE))
    assert (follower.follows_inputs, follower.schedule, follower.refresh_mode, follower.owner) == (
        True, None, RefreshMode.FULL, "me")
    assert "FRESHNESS = DOWNSTREAM" in follower.text
    daily = change("ALTER MATERIALIZED TABLE base_mtbl SET FRESHNESS = INTERVAL '1' DAY").apply(follower)
    assert (daily.follows_inputs, daily.schedule) == (False, "0 0 * * *")
    # Changing another option keeps it DOWNSTREAM.
    assert change("ALTER MATERIALIZED TABLE base_mtbl SET ('owner' = 'you')").apply(follower).follows_inputs


@pytest.mark.parametrize(("definition", "position", "message"), [
    # DOWNSTREAM refreshes in FULL mode: from CONTINUOUS that is a change of mode (Flink's rule).
    ("CREATE MATERIALIZED TABLE base_mtbl FRESHNESS = INTERVAL '10' SECOND AS SELECT a FROM t3",
     (1, 40), "Changing of REFRESH MODE is unsupported: default.base_mtbl refreshes in CONTINUOUS mode; "
     "DROP MATERIALIZED TABLE it, then CREATE it with FRESHNESS = DOWNSTREAM"),
    ("CREATE MATERIALIZED TABLE base_mtbl WITH ('schedule.cron' = '0 1 * * *') FRESHNESS = INTERVAL '1' DAY "
     "AS SELECT a FROM t3", (1, 40), "option 'schedule.cron': FRESHNESS = DOWNSTREAM refreshes on the "
     "commits of the tables it reads, never on a schedule"),
])
def test_alter_materialized_table_freshness_downstream_refused(
    definition: str, position: tuple[int, int], message: str
) -> None:
    statement = change("ALTER MATERIALIZED TABLE base_mtbl SET FRESHNESS = DOWNSTREAM")
    with pytest.raises(MaterializedStatementError) as info:
        statement.apply(parse_definition(definition))
    assert (info.value.line, info.value.column) == position, info.value.message
    assert info.value.message == f"ALTER MATERIALIZED TABLE SET FRESHNESS: {message}"


# -- execution in the SQL client ---------------------------------------------------------------
class ColumnsSpark:
    """Spark that analyses every query to ``columns``; every table and database exists."""

    def __init__(self, columns: list[tuple[str, str]]) -> None:
        self.columns = columns
        self.queries: list[str] = []
        self.conf = type("Conf", (), {"set": lambda *_: None})()
        self.catalog = type("Catalog", (), {
            "currentDatabase": lambda _: "default", "setCurrentDatabase": lambda *_: None,
            "databaseExists": lambda *_: True, "tableExists": lambda *_: True})()

    def sql(self, text: str) -> Any:
        self.queries.append(text)
        if "FROM t AS" in text:
            raise RuntimeError("[PARSE_SYNTAX_ERROR] Syntax error at or near end of input. SQLSTATE: "
                               "42601 (line 1, pos 18)")
        if text.startswith("EXPLAIN"):
            return type("Plan", (), {"columns": ["plan"], "limit": lambda self, _: self,
                                     "collect": lambda _: []})()
        fields = [{"name": name, "type": kind, "nullable": True, "metadata": {}}
                  for name, kind in self.columns]
        schema = type("Schema", (), {"json": lambda _: json.dumps({"type": "struct", "fields": fields})})()
        return type("Frame", (), {"schema": schema})()


class AlteringTables:
    """MaterializedTables holding ``base`` (base_mtbl): records what CREATE OR ALTER is given."""

    def __init__(self, base: str = BASE) -> None:
        self.base = base
        self.altered: list[str] = []
        self.scheduler = type("Scheduler", (), {"definition_file": lambda _, dag_id: Path("base.sql")})()

    def definition(self, identifier: TableIdentifier) -> Any:
        return parse_definition(self.base)

    def check_graph(self, definition: Any) -> None:
        """No other table: no cycle."""

    def unrefreshed_upstream(self, definition: Any, exists: Any) -> list[Any]:
        return []

    def alter(self, text: str, table_columns: Any, query_columns: Any) -> Any:
        query_columns(parse_definition(text).query)
        self.altered.append(text)
        return type("Handler", (), {"as_summary_string": lambda _: "dag"})()


def execute(
    text: str, columns: list[tuple[str, str]] = BASE_COLUMNS, base: str = BASE
) -> tuple[Any, AlteringTables, ColumnsSpark]:
    tables, spark = AlteringTables(base), ColumnsSpark(columns)
    s = SqlSession(spark, SessionProperties(), lambda: pytest.fail("no settings needed"),
                   lambda options: contextlib.nullcontext(tables))
    (statement,) = split_statements(text)
    try:
        return s.execute(statement), tables, spark
    except StatementError as err:
        return err, tables, spark


def test_set_freshness_runs_as_create_or_alter_of_the_changed_definition() -> None:
    result, tables, _ = execute("ALTER MATERIALIZED TABLE base_mtbl SET FRESHNESS = INTERVAL '30' MINUTE")
    assert result.message == ("Materialized table default.base_mtbl altered: dag refreshes the new "
                              "definition (the table keeps its data)")
    (text,) = tables.altered
    new = parse_definition(text)
    assert (new.freshness, new.schedule, dict(new.options)) == (Freshness(30, "MINUTE"), "*/30 * * * *",
                                                                {"owner": "me", "retries": "2"})


def test_set_freshness_downstream_runs_as_create_or_alter_without_a_schedule() -> None:
    result, tables, _ = execute("ALTER MATERIALIZED TABLE base_mtbl SET FRESHNESS = DOWNSTREAM")
    assert result.message.startswith("Materialized table default.base_mtbl altered")
    (text,) = tables.altered
    new = parse_definition(text)
    assert (new.follows_inputs, new.schedule, new.freshness_text) == (True, None, "DOWNSTREAM")


def test_set_freshness_of_a_continuous_table_says_when_the_stream_takes_it() -> None:
    continuous = BASE.replace("INTERVAL '1' HOUR", "INTERVAL '1' MINUTE")
    result, tables, _ = execute("ALTER MATERIALIZED TABLE base_mtbl SET FRESHNESS = INTERVAL '45' MINUTE",
                                base=continuous)
    new = parse_definition(tables.altered[0])
    assert (new.freshness, new.refresh_mode) == (Freshness(45, "MINUTE"), RefreshMode.CONTINUOUS)  # kept
    assert result.message.endswith("a running stream keeps its pace until it restarts (ALTER MATERIALIZED "
                                   "TABLE default.base_mtbl SUSPEND, then RESUME)")


def test_as_query_with_an_added_column_runs_as_create_or_alter() -> None:
    columns = [*BASE_COLUMNS, ("e", "string")]
    _, tables, spark = execute("ALTER MATERIALIZED TABLE base_mtbl AS SELECT a, b, c, d, d AS e FROM t3",
                               columns)
    assert parse_definition(tables.altered[0]).query == "SELECT a, b, c, d, d AS e FROM t3"
    assert "SELECT a, b, c, d, d AS e FROM t3" in spark.queries  # Spark analysed the new query


@pytest.mark.parametrize(("text", "position", "message"), [
    ("ALTER MATERIALIZED TABLE base_mtbl SET (\n  'owner' = 'you', 'retries' = '-1')", (2, 20),
     "ALTER MATERIALIZED TABLE SET: option 'retries' must be an integer 0..100, not '-1'"),
    ("ALTER MATERIALIZED TABLE base_mtbl RESET ('connector')", (1, 43), "does not support changing"),
    ("ALTER MATERIALIZED TABLE base_mtbl SET FRESHNESS = INTERVAL '7' HOUR", (1, 40),
     "In full refresh mode, only freshness that are factors of 24 are currently supported"),
])
def test_a_bad_value_stops_before_any_work(text: str, position: tuple[int, int], message: str) -> None:
    """Refused in one line naming the value: no query analysed, no definition written (the fake
    tables record every CREATE OR ALTER; Airflow is reached only through it)."""
    error, tables, spark = execute(text)
    assert isinstance(error, StatementError) and message in error.message
    assert (error.line, error.column) == position
    assert tables.altered == [] and spark.queries == []


@pytest.mark.parametrize(("column", "message"), [
    ("e", "Invalid schema. All persisted (physical and metadata) columns in the schema part need to be "
          "present in the query part. However, physical column `e` could not be found in the query."),
    ("B", "Try to add a column `b` which already exists in the table."),  # names as the metastore has them
])
def test_add_column_is_refused_with_flinks_rules(column: str, message: str) -> None:
    """Flink 2.x: an added physical column must be one of the query's, and here the query's
    columns are all the table's; so it is refused, in Flink's words, at the column."""
    error, tables, spark = execute(f"ALTER MATERIALIZED TABLE base_mtbl ADD (\n  {column} STRING)")
    assert isinstance(error, StatementError) and message in error.message
    assert (error.line, error.column) == (2, 3) and tables.altered == []
    assert spark.queries  # the query's columns come from Spark's analysis


def test_alter_materialized_table_as_query_with_conflict_column_name() -> None:
    """Flink renames the second `a` to `a0` and adds it: a column nobody named. Refused here, at
    the query (the table's write would fail on two columns named alike)."""
    error, tables, _ = execute("ALTER MATERIALIZED TABLE base_mtbl AS SELECT a, b, c, d, c as a FROM t3",
                               [*BASE_COLUMNS, ("a", "integer")])
    assert isinstance(error, StatementError) and tables.altered == []
    assert "the query's columns 1 and 5 are both named 'a'" in error.message
    assert (error.line, error.column) == (1, 39)


def test_explain_alter_materialized_table() -> None:
    """testExplainAlterMaterializedTable: the plan of the new query as the refreshes would run it
    (the table's definition with it); nothing is altered."""
    result, tables, spark = execute("EXPLAIN ALTER MATERIALIZED TABLE base_mtbl AS SELECT a, b, c, d FROM t3")
    assert spark.queries[-1].startswith("EXPLAIN SELECT") and "FROM t3" in spark.queries[-1]
    assert tables.altered == [] and result.columns == ["plan"]


def test_a_query_error_points_into_the_statement() -> None:
    """Spark's position in the new query is the statement's, not the rendered definition's."""
    error, tables, _ = execute("ALTER MATERIALIZED TABLE base_mtbl\n  AS SELECT * FROM t AS")
    assert isinstance(error, StatementError) and "PARSE_SYNTAX_ERROR" in error.message
    assert (error.line, error.column) == (2, 24) and tables.altered == []
