"""Materialized-table statements: Flink's parser and converter vectors, our deviations, injection.

Vectors are ported from apache/flink ``MaterializedTableStatementParserTest`` and
``SqlMaterializedTableNodeToOperationConverterTest``; positions are the ``^...^`` marks of
those tests (Calcite's 1-based line and column; at the end of the text, its last character).

Not checked when a statement is parsed: the converter's checks against the query's schema
(a column list of another length or unknown names, incompatible types, a nullable or unknown
primary-key column, a partition column missing from the query, a date-formatter on a non-string
column) need Spark to plan the query.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

import pytest

from airflow_provider_staged.materialized.definition import Column, parse_definition
from airflow_provider_staged.materialized.freshness import Freshness, RefreshMode
from airflow_provider_staged.sql.materialized_statements import (
    CreateMaterializedTable,
    DescribeMaterializedTable,
    DropMaterializedTable,
    ExplainMaterializedTable,
    MaterializedStatementError,
    RefreshMaterializedTable,
    ResumeMaterializedTable,
    ShowCreateMaterializedTable,
    ShowMaterializedTables,
    SuspendMaterializedTable,
    check_values,
    parse_materialized_statement,
)
from airflow_provider_staged.staging.identifiers import TableIdentifier

parse = parse_materialized_statement
T = TableIdentifier


def error(text: str) -> MaterializedStatementError:
    with pytest.raises(MaterializedStatementError) as info:
        parse(text)
    return info.value


def assert_error(text: str, line: int, column: int, match: str) -> None:
    """The error is at (line, column), its text says where and matches ``match``."""
    err = error(text)
    assert (err.line, err.column) == (line, column), str(err)
    assert str(err).startswith(f"line {line}, column {column}: ")
    assert re.search(match, err.message), err.message


def create(text: str) -> CreateMaterializedTable:
    statement = parse(text)
    assert isinstance(statement, CreateMaterializedTable)
    return statement


# -- Flink's parser test: accepted forms ----------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ALTER MATERIALIZED TABLE tb1 SUSPEND", SuspendMaterializedTable(T("default", "tb1"))),
        ("ALTER MATERIALIZED TABLE tb1 RESUME", ResumeMaterializedTable(T("default", "tb1"), {})),
        ("ALTER MATERIALIZED TABLE tb1 RESUME\nWITH (\n  'group.id' = 'testGroup',\n"
         "  'topic' = 'test'\n)",
         ResumeMaterializedTable(T("default", "tb1"), {"group.id": "testGroup", "topic": "test"})),
        ("ALTER MATERIALIZED TABLE tbl1 REFRESH", RefreshMaterializedTable(T("default", "tbl1"), {})),
        # Flink's parser takes numbers as partition values; they are kept as their text (Flink's
        # gateway then refuses non-string partition columns, MaterializedTableStatementITCase;
        # Hive partition values are strings, so here the number is the partition's value).
        ("ALTER MATERIALIZED TABLE tbl1 REFRESH \n PARTITION (part1 = 2023, part2 = 2024)",
         RefreshMaterializedTable(T("default", "tbl1"), {"part1": "2023", "part2": "2024"})),
        # The converter test's partition spec.
        ("ALTER MATERIALIZED TABLE mtbl1 REFRESH PARTITION (ds1 = '1', ds2 = '2')",
         RefreshMaterializedTable(T("default", "mtbl1"), {"ds1": "1", "ds2": "2"})),
        ("ALTER MATERIALIZED TABLE mtbl1 RESUME WITH ('k1' = 'v1')",
         ResumeMaterializedTable(T("default", "mtbl1"), {"k1": "v1"})),
        # Not Flink's: CASCADE, the FRESHNESS = DOWNSTREAM tables that read it follow the commit.
        ("ALTER MATERIALIZED TABLE mtbl1 REFRESH PARTITION (ds1 = '1') CASCADE",
         RefreshMaterializedTable(T("default", "mtbl1"), {"ds1": "1"}, cascade=True)),
        ("ALTER MATERIALIZED TABLE mtbl1 REFRESH CASCADE", RefreshMaterializedTable(T("default", "mtbl1"),
                                                                                    cascade=True)),
        ("DROP MATERIALIZED TABLE tbl1", DropMaterializedTable(T("default", "tbl1"), False)),
        ("DROP MATERIALIZED TABLE IF EXISTS tbl1", DropMaterializedTable(T("default", "tbl1"), True)),
        ("DESCRIBE MATERIALIZED TABLE db.t", DescribeMaterializedTable(T("db", "t"))),
        ("desc materialized table t", DescribeMaterializedTable(T("default", "t"))),
        ("SHOW MATERIALIZED TABLES", ShowMaterializedTables()),
        # Flink 2.2: SHOW MATERIALIZED TABLES [(FROM | IN) [catalog.]db] [[NOT] LIKE 'pattern'].
        ("SHOW MATERIALIZED TABLES FROM sales", ShowMaterializedTables("sales")),
        ("show materialized tables in spark_catalog.Sales not like 'tmp%'",
         ShowMaterializedTables("sales", "tmp%", True)),
        ("SHOW MATERIALIZED TABLES LIKE 'orders\\_%'", ShowMaterializedTables(None, "orders\\_%")),
        # Flink 2.2's SHOW CREATE [OR ALTER] MATERIALIZED TABLE (sql-gateway materialized_table.q).
        ("SHOW CREATE MATERIALIZED TABLE users_shops;",
         ShowCreateMaterializedTable(T("default", "users_shops"))),
        ("show create or alter materialized table Db.T", ShowCreateMaterializedTable(T("db", "t"), True)),
    ],
)
def test_flink_parser_accepts(text: str, expected: object) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "alter materialized table DB.Orders suspend",
        "ALTER MATERIALIZED TABLE `db`.`orders` SUSPEND",
        "ALTER MATERIALIZED TABLE spark_catalog.db.orders SUSPEND",  # Spark's session catalog
        "/* why */ ALTER -- comment\n  MATERIALIZED /* x */ TABLE db.orders\n SUSPEND -- done",
        "\n\tALTER MATERIALIZED TABLE db.orders SUSPEND;",
        "ALTER MATERIALIZED TABLE db.orders SUSPEND ; -- nothing else",
    ],
)
def test_names_case_comments_and_a_trailing_semicolon(text: str) -> None:
    assert parse(text) == SuspendMaterializedTable(T("db", "orders"))


@pytest.mark.parametrize(
    ("text", "column", "match"),
    [
        ("SHOW CREATE MATERIALIZED TABLES t", 26, "expected TABLE, found 'TABLES'"),
        ("SHOW CREATE OR ALTER MATERIALIZED TABLE", 39, "expected \\[db.\\]name, found the end"),
        ("SHOW CREATE MATERIALIZED TABLE a b", 34, "expected the end of the statement, found 'b'"),
    ],
)
def test_show_create_errors(text: str, column: int, match: str) -> None:
    assert_error(text, 1, column, match)


# -- Flink's parser test: errors at its positions -------------------------------------------
FLINK_CREATE_HEAD = (
    "CREATE MATERIALIZED TABLE tbl1\n(\n   PRIMARY KEY (a, b)\n)\nCOMMENT 'table comment'\n"
    "PARTITIONED BY (a, h)\nWITH (\n  'group.id' = 'latest', \n  'kafka.topic' = 'log.test'\n)\n"
)


@pytest.mark.parametrize(
    ("text", "line", "column", "match"),
    [
        ("CREATE MATERIALIZED TABLE tbl1\n(a, b STRING)\nAS SELECT a, b, h, t m FROM source",
         2, 7, "expected ',' or '\\)', found 'STRING'"),
        # Flink reports syntax errors before validation (the enforced key, unknown options).
        (FLINK_CREATE_HEAD + "FRESHNESS = 123\nAS SELECT a, b, h, t m FROM source", 11, 13,
         "only supports define interval type FRESHNESS.*found '123'"),
        (FLINK_CREATE_HEAD + "FRESHNESS = INTERVAL '3' MINUTE\nREFRESH_MODE = FULL\n", 12, 20,
         "expected AS, found the end of the statement"),
        ("CREATE TEMPORARY MATERIALIZED TABLE tbl1\nAS SELECT 1", 1, 18,
         "CREATE TEMPORARY MATERIALIZED TABLE is not supported"),
        ("CREATE OR REPLACE MATERIALIZED TABLE tbl1\nAS SELECT 1", 1, 19,
         "REPLACE MATERIALIZED TABLE is not supported"),
        ("ALTER MATERIALIZED TABLE tb1 SUSPEND PARTITION", 1, 38,
         "expected the end of the statement, found 'PARTITION'"),
        ("ALTER MATERIALIZED TABLE tb1", 1, 28, "expected SUSPEND, RESUME .*, REFRESH .* or AS query"),
        ("ALTER MATERIALIZED TABLE tb1 RESUME PARTITION", 1, 37,
         "expected the end of the statement, found 'PARTITION'"),
        ("ALTER MATERIALIZED TABLE tbl1 REFRESH PARTITION()", 1, 49,
         "expected a partition column name, found '\\)'"),
        ("DROP MATERIALIZED TABLE tb1 IF EXISTS", 1, 29,
         "expected the end of the statement, found 'IF'"),
        ("DROP TEMPORARY MATERIALIZED TABLE tbl1", 1, 16,
         "DROP TEMPORARY MATERIALIZED TABLE is not supported"),
        ("CREATE MATERIALIZED TABLE tbl1 FRESHNESS = INTERVAL 1 DAY AS SELECT 1", 1, 55,
         "only supports define interval type FRESHNESS.*must be quoted.*found '1'"),
        # testAlterMaterializedTable{RefreshMode,Freshness,Set,Reset} (their accepted forms:
        # test_sql_alter_materialized_table.py).
        ("ALTER MATERIALIZED TABLE tbl1 SET REFRESH_MODE", 1, 46,
         "expected '=', found the end of the statement"),
        ("ALTER MATERIALIZED TABLE tbl1 SET REFRESH_MODE = NONE", 1, 50,
         "expected FULL or CONTINUOUS, found 'NONE'"),
        ("ALTER MATERIALIZED TABLE tbl1 SET FRESHNESS = INTERVAL 1 DAY", 1, 58,
         "MATERIALIZED TABLE only supports define interval type FRESHNESS.*found '1'"),
        ("ALTER MATERIALIZED TABLE tbl1 SET FRESHNESS", 1, 43,
         "expected '=', found the end of the statement"),
        ("ALTER MATERIALIZED TABLE tbl1 SET", 1, 33,
         "expected FRESHNESS, REFRESH_MODE or '\\(', found the end of the statement"),
        ("ALTER MATERIALIZED TABLE tbl1 RESET", 1, 35, "expected '\\(', found the end of the statement"),
    ],
)
def test_flink_parser_errors_at_flink_positions(text: str, line: int, column: int, match: str) -> None:
    assert_error(text, line, column, match)
    assert isinstance(error(text), ValueError)


# -- deliberate deviations from Flink -------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "column", "match"),
    [
        # Flink's schema forms: here the definition's column list (file or CREATE OR ALTER) is
        # where columns change (ADD: test_sql_alter_materialized_table.py).
        ("alter materialized table mt1 modify new_column string comment 'docs'", 30, "MODIFY is not"),
        ("alter materialized table mt1 drop watermark", 30, "DROP is not supported"),
        ("alter materialized table mt1 rename to mt2", 30, "RENAME is not supported"),
        # Flink's parser stops at a second statement; a trailing ';' alone is accepted here
        # because statements read from a script carry one.
        ("ALTER MATERIALIZED TABLE t SUSPEND; ALTER MATERIALIZED TABLE u SUSPEND", 37,
         "only one statement is allowed, found 'ALTER'"),
        # A catalog other than Spark's session catalog is not the metastore commits go to.
        ("ALTER MATERIALIZED TABLE default_catalog.default_database.mt1 SUSPEND", 26,
         r"expected \[db.\]name \(or spark_catalog.db.name\), found "
         "'default_catalog.default_database.mt1'"),
        ("SHOW MATERIALIZED TABLES FROM hive.db", 31, "expected a database name"),
        ("SHOW MATERIALIZED TABLES NOT 'x'", 30, "expected LIKE"),
        # ...so Flink's "Multiple WATERMARK declarations" (testAddWatermark) is not reached.
        ("alter materialized table default_catalog.default_database.mt1 add (\nwatermark for ts as "
         "ts - interval '1' second,\nwatermark for f1 as now()\n)", 26, "expected \\[db.\\]name"),
        # No buckets here: refused at DISTRIBUTION, before Flink's 'Encountered "RANDOM"'
        # (testAddDistribution, col 50).
        ("alter materialized table mt1 add distribution by RANDOM(a, h) into 6 buckets", 34,
         "DISTRIBUTION is not supported"),
        # originalQueryCases' `m``tbl`: metastore table names are letters, digits and underscores.
        ("CREATE MATERIALIZED TABLE `m``tbl` COMMENT 'a''b' AS SELECT * FROM t1", 27,
         "invalid table name 'm`tbl'"),
    ],
)
def test_deviations(text: str, column: int, match: str) -> None:
    assert_error(text, 1, column, match)


# -- CREATE: Flink's vectors ----------------------------------------------------------------
UNITS = "Materialized table freshness only supports SECOND, MINUTE, HOUR, DAY, WEEK as the time unit."
FULL_40_MINUTES = ("In full refresh mode, only freshness that are factors of 60 are currently supported "
                   "when the time unit is MINUTE.")
def test_flink_create_vectors_accepted_with_supported_options() -> None:
    """The converter test's table, with an option this project honours instead of Kafka's."""
    statement = create(
        "CREATE MATERIALIZED TABLE mtbl1 (\n"
        "   CONSTRAINT ct1 PRIMARY KEY(a) NOT ENFORCED)\n"
        "COMMENT 'materialized table comment'\n"
        "PARTITIONED BY (a, d)\n"
        "WITH (\n  'format' = 'parquet', \n  'owner' = 'data'\n)\n"
        "FRESHNESS = INTERVAL '30' SECOND\n"
        "REFRESH_MODE = FULL\n"
        "AS SELECT * FROM t1"
    )
    d = statement.definition
    assert statement.table == T("default", "mtbl1") and not statement.or_alter
    assert (d.primary_key, d.primary_key_name, d.comment) == (("a",), "ct1", "materialized table comment")
    assert d.partition_by == ("a", "d")
    assert dict(d.options) == {"format": "parquet", "owner": "data"}
    assert (d.freshness, d.refresh_mode) == (Freshness(30, "SECOND"), RefreshMode.FULL)
    assert d.schedule == "* * * * * */30"  # every 30 s aligned to the minute
    assert d.query == "SELECT * FROM t1"
    assert d.source_path == "<statement>"


def test_columns_and_column_constraints() -> None:
    d = create(
        "CREATE OR ALTER MATERIALIZED TABLE db.users_shops (\n"
        "  ts timestamp(3),\n"
        "  id ARRAY<ROW(f0 INT, f1 DECIMAL(10, 2))> NOT NULL PRIMARY KEY NOT ENFORCED COMMENT 'k',\n"
        "  name STRING NULL\n"
        ") REFRESH_MODE = FULL AS SELECT 1"
    )
    assert d.or_alter
    assert d.definition.columns == (
        Column("ts", "timestamp(3)"),
        Column("id", "ARRAY<ROW(f0 INT, f1 DECIMAL(10, 2))>", False, "k"),
        Column("name", "STRING"),
    )
    assert d.definition.primary_key == ("id",)
    names = create("CREATE MATERIALIZED TABLE tbl1\n(a, b, h, m)\nAS SELECT a, b, h, t m FROM source")
    assert [c.name for c in names.definition.columns] == ["a", "b", "h", "m"]
    assert all(c.data_type is None for c in names.definition.columns)


def test_freshness_defaults_and_derived_modes_as_flink() -> None:
    # Converter tests: no FRESHNESS and FULL -> 1 hour; neither -> 3 minutes, derived CONTINUOUS.
    full = create("CREATE MATERIALIZED TABLE mtbl1 REFRESH_MODE = FULL AS SELECT * FROM t1").definition
    assert (full.freshness, full.refresh_mode, full.schedule) == (
        Freshness(1, "HOUR"), RefreshMode.FULL, "0 * * * *")
    auto = create("CREATE MATERIALIZED TABLE mtbl1 AS SELECT * FROM t1").definition
    assert (auto.freshness, auto.refresh_mode, auto.schedule) == (
        Freshness(3, "MINUTE"), RefreshMode.CONTINUOUS, None)
    cases = [
        ("FRESHNESS = INTERVAL '30' SECOND", RefreshMode.CONTINUOUS),
        ("FRESHNESS = INTERVAL '30' DAY\nREFRESH_MODE = CONTINUOUS", RefreshMode.CONTINUOUS),
        ("FRESHNESS = INTERVAL '1' DAY", RefreshMode.FULL),
        ("FRESHNESS = INTERVAL '30' SECOND\nREFRESH_MODE = FULL", RefreshMode.FULL),
        ("FRESHNESS = INTERVAL '3' MINUTES", RefreshMode.CONTINUOUS),  # plural units, as Flink
        ("FRESHNESS = INTERVAL '1' DAYS", RefreshMode.FULL),
        # Flink's units include WEEK (MaterializedTableUtils); FULL runs as Airflow's @weekly.
        ("FRESHNESS = INTERVAL '1' WEEK", RefreshMode.FULL),
        ("FRESHNESS = INTERVAL '2' WEEKS\nREFRESH_MODE = CONTINUOUS", RefreshMode.CONTINUOUS),
    ]
    for clause, mode in cases:
        d = create(f"CREATE MATERIALIZED TABLE mtbl1\n{clause}\nAS SELECT * FROM t1").definition
        assert d.refresh_mode is mode, clause
    weekly = create("CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '1' WEEK AS SELECT 1").definition
    assert (weekly.freshness, weekly.schedule) == (Freshness(1, "WEEK"), "0 0 * * 0")


@pytest.mark.parametrize(
    ("text", "line", "column", "match"),
    [
        # createWithInvalidFreshness, Flink's messages after the value they refuse.
        ("CREATE MATERIALIZED TABLE mtbl1\nFRESHNESS = INTERVAL '40' MINUTE\nREFRESH_MODE = FULL\n"
         "AS SELECT * FROM t1", 2, 1, "INTERVAL '40' MINUTE: " + re.escape(FULL_40_MINUTES)),
        ("CREATE MATERIALIZED TABLE mtbl1\nFRESHNESS = INTERVAL '40' MINUTE\nAS SELECT * FROM t1",
         2, 1, "INTERVAL '40' MINUTE: " + re.escape(FULL_40_MINUTES)),
        ("CREATE MATERIALIZED TABLE mtbl1\nFRESHNESS = INTERVAL -'30' SECOND\nREFRESH_MODE = FULL\n"
         "AS SELECT * FROM t1", 2, 22, re.escape(
             "The freshness interval currently only supports positive integer type values. But was: -30")),
        ("CREATE MATERIALIZED TABLE mtbl1\nFRESHNESS = INTERVAL '30' YEAR\nAS SELECT * FROM t1",
         2, 27, "'YEAR': " + re.escape(UNITS)),
        ("CREATE MATERIALIZED TABLE mtbl1\nFRESHNESS = INTERVAL '30' DAY TO HOUR\nAS SELECT * FROM t1",
         2, 31, "DAY TO ...: " + re.escape(UNITS)),
        ("CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '2' WEEK\nAS SELECT 1", 2, 1,
         re.escape("INTERVAL '2' WEEK: In full refresh mode, freshness must be 1 when the time unit is "
                   "WEEK.")),
        # IntervalFreshnessTest.testIllegalIntervalFreshness: a value beyond Flink's int.
        ("CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '12345678901234567890' MINUTE\n"
         "REFRESH_MODE = CONTINUOUS AS SELECT 1", 1, 50, "But was: 12345678901234567890"),
        # createWithInvalidSchema: UNIQUE, and Flink's rule for ENFORCED keys.
        ("CREATE MATERIALIZED TABLE mtbl1 (\n   CONSTRAINT ct1 UNIQUE(a) NOT ENFORCED)\n"
         "FRESHNESS = INTERVAL '30' SECOND\nAS SELECT * FROM t1", 2, 4,
         "UNIQUE constraint is not supported yet"),
        ("CREATE MATERIALIZED TABLE tbl1\n(\n   PRIMARY KEY (a, b)\n)\nAS SELECT 1", 3, 4,
         "PRIMARY KEY must be NOT ENFORCED.*only supported mode is NOT ENFORCED"),
        ("CREATE MATERIALIZED TABLE t (a INT, CONSTRAINT k PRIMARY KEY (a) ENFORCED) AS SELECT 1",
         1, 37, "PRIMARY KEY must be NOT ENFORCED"),
        ("CREATE MATERIALIZED TABLE t (a INT PRIMARY KEY NOT ENFORCED, PRIMARY KEY (a) NOT ENFORCED)"
         " AS SELECT 1", 1, 62, "duplicate primary key"),
        # createWithInvalidPartitions: a date-formatter must name a partition column.
        ("CREATE MATERIALIZED TABLE mtbl1\nPARTITIONED BY (b, c)\nWITH (\n"
         " 'partition.fields.ds.date-formatter' = 'yyyy-MM-dd'\n)\nFRESHNESS = INTERVAL '30' SECOND\n"
         "REFRESH_MODE = FULL\nAS SELECT * FROM t3", 4, 2, re.escape(
             "Column 'ds' referenced by materialized table option 'partition.fields.ds.date-formatter' "
             "isn't a partition column. Available partition columns: ['b', 'c'].")),
        # Flink says "Available partition columns: ['']" for an unpartitioned table: an empty list.
        ("CREATE MATERIALIZED TABLE mtbl1\nWITH (\n 'partition.fields.c.date-formatter' = 'yyyy-MM-dd'\n"
         ")\nFRESHNESS = INTERVAL '30' SECOND\nREFRESH_MODE = FULL\nAS SELECT * FROM t3", 3, 2,
         re.escape("isn't a partition column. Available partition columns: [].")),
        # The options a Flink definition usually carries: only those honoured here pass.
        ("CREATE MATERIALIZED TABLE t WITH ('connector' = 'filesystem', 'format' = 'json') "
         "AS SELECT 1", 1, 35, "option 'connector' = 'filesystem' is not supported: .*'staged_hive'"),
        ("CREATE MATERIALIZED TABLE t WITH ('connector' = 'staged_hive', 'format' = 'json') "
         "AS SELECT 1", 1, 64, "option 'format' = 'json' is not supported.*'parquet'"),
        ("CREATE MATERIALIZED TABLE t WITH ('format' = 'json') AS SELECT 1", 1, 35,
         "option 'format' = 'json' is not supported.*'parquet'"),
        # Flink constructs that cannot be honoured here: named, reported after the syntax.
        ("CREATE MATERIALIZED TABLE tbl1\n(ts TIMESTAMP(3),\n watermark FOR ts AS ts - interval '3' "
         "second)\nAS SELECT 1", 3, 2, "WATERMARK is not supported"),
        ("CREATE MATERIALIZED TABLE t (c AS a + 1) AS SELECT 1", 1, 32, "computed column 'c'"),
        # SqlMaterializedTableNodeToOperationConverterTest.before: the tables with non-persisted
        # columns; their expressions' operators (||, /, %, [ ]) parse, the column is reported.
        ("CREATE MATERIALIZED TABLE base_mtbl_with_non_persisted (\n   m STRING METADATA VIRTUAL,"
         "   calc AS 'a' || 'b')\nFRESHNESS = INTERVAL '30' SECOND\nREFRESH_MODE = FULL\nAS SELECT 1",
         2, 13, "metadata column 'm'"),
        ("CREATE MATERIALIZED TABLE base_mtbl_with_non_persisted_last (\n   a INT NOT NULL,"
         "   c AS UPPER(CAST(a AS STRING)))\nFRESHNESS = INTERVAL '30' SECOND\nREFRESH_MODE = FULL\n"
         "AS SELECT 1 as a", 2, 24, "computed column 'c'"),
        ("CREATE MATERIALIZED TABLE t (calc AS 'a' || m['k'] / 2 % 3, d INT) AS SELECT 1", 1, 35,
         "computed column 'calc'"),
        ("CREATE MATERIALIZED TABLE t (m STRING METADATA VIRTUAL) AS SELECT 1", 1, 39,
         "metadata column 'm'"),
        ("CREATE MATERIALIZED TABLE tbl1\nDISTRIBUTED BY HASH (a) INTO 4 BUCKETS\nAS SELECT 1", 2, 1,
         "DISTRIBUTED BY/INTO is not supported"),
        ("create materialized table tbl1 start_mode = from_now(INTERVAL '1' HOUR) as select * "
         "from t", 1, 32, "START_MODE is not supported"),
        # MaterializedTableStatementParserTest.testStartMode: Flink's syntax errors come first.
        ("create materialized table tbl1 start_mode = from_now(timestamp '2023-04-22 21:37:58') as "
         "select * from t", 1, 64, "START_MODE literal must be an interval for FROM_NOW and "
         "RESUME_OR_FROM_NOW modes, found \"'2023-04-22 21:37:58'\""),
        ("create materialized table tbl1 start_mode = resume_or_from_timestamp(interval '2' minutes) "
         "as select * from t", 1, 70, "expected TIMESTAMP, found 'interval'"),
        ("create materialized table tbl1 start_mode = from_later as select * from t", 1, 45,
         "expected one of FROM_BEGINNING, .*, found 'from_later'"),
        # Clause order is Flink's.
        ("CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '1' DAY\nPARTITIONED BY (ds)\nAS SELECT 1",
         3, 1, "expected REFRESH_MODE or AS, found 'PARTITIONED' \\(clauses go in the order"),
        ("CREATE MATERIALIZED TABLE t COMMENT 'a' COMMENT 'b' AS SELECT 1", 1, 41,
         "expected PARTITIONED BY, WITH, FRESHNESS, REFRESH_MODE or AS, found 'COMMENT'"),
        ("CREATE MATERIALIZED TABLE t (a INT, b) AS SELECT 1", 1, 38, "expected a type for column 'b'"),
        # A list of names alone names every column: the key and partitions must be among them.
        ("CREATE MATERIALIZED TABLE t (a, b, CONSTRAINT k PRIMARY KEY (c) NOT ENFORCED) AS SELECT 1",
         1, 62, r"column 'c' is not in the column list \(a, b\)"),
        ("CREATE MATERIALIZED TABLE t (a, b)\nPARTITIONED BY (b, `DS`) AS SELECT 1", 2, 20,
         r"column 'DS' is not in the column list"),
        ("CREATE MATERIALIZED TABLE t (a INT, a INT) AS SELECT 1", 1, 37, "duplicate column 'a'"),
        ("CREATE MATERIALIZED TABLE t AS SELECT 1; DROP TABLE x", 1, 42, "only one statement"),
    ],
)
def test_create_errors(text: str, line: int, column: int, match: str) -> None:
    assert_error(text, line, column, match)


@pytest.mark.parametrize(
    "mode",
    [
        "from_beginning", "from_now", "from_now(INTERVAL '1' HOUR)",
        "from_timestamp(TIMESTAMP '2023-04-22 21:37:58')", "resume_or_from_beginning",
        "resume_or_from_now", "resume_or_from_now(interval '2' minutes)",
        "resume_or_from_timestamp(TIMESTAMP WITH LOCAL TIME ZONE '2023-04-22 21:37:58')",
    ],
)
def test_flink_start_modes_parse_then_are_refused(mode: str) -> None:
    """MaterializedTableStatementParserTest.testStartMode's accepted forms: read as Flink reads
    them, then refused at START_MODE (a CONTINUOUS table resumes from its own checkpoint)."""
    assert_error(f"create materialized table tbl1 start_mode = {mode} as select * from t", 1, 32,
                 "START_MODE is not supported")


FLINK_KAFKA = "WITH (\n  'group.id' = 'latest', \n  'kafka.topic' = 'log.test'\n)\n"
FLINK_TAIL = "AS SELECT a, b, h, t m FROM source"
FLINK_CREATE_FORMS = {
    "Full example": "MATERIALIZED TABLE tbl1\n(\n  ts timestamp(3),\n  id varchar,\n  watermark FOR ts "
                    "AS ts - interval '3' second,\n  PRIMARY KEY (id)\n)\nCOMMENT 'table comment'\n"
                    "DISTRIBUTED BY HASH (a) INTO 4 BUCKETS\nPARTITIONED BY (a, h)\n" + FLINK_KAFKA
                    + "FRESHNESS = INTERVAL '3' MINUTES\n" + FLINK_TAIL,
    "With columns": "MATERIALIZED TABLE tbl1\n(\n  a INT, b STRING, h INT, m INT\n)\nCOMMENT 'table "
                    "comment'\nDISTRIBUTED BY HASH (a) INTO 4 BUCKETS\nPARTITIONED BY (a, h)\n" + FLINK_KAFKA
                    + "FRESHNESS = INTERVAL '3' MINUTE\n" + FLINK_TAIL,
    "With columns and watermarks": "MATERIALIZED TABLE tbl1\n(\n  ts timestamp(3),\n  id varchar,\n  "
                                   "watermark FOR ts AS ts - interval '3' second\n)\nCOMMENT 'table comment'"
                                   "\nDISTRIBUTED BY HASH (a) INTO 4 BUCKETS\nPARTITIONED BY (a, h)\n"
                                   + FLINK_KAFKA + "FRESHNESS = INTERVAL '3' MINUTE\n" + FLINK_TAIL,
    "Without table constraint": "MATERIALIZED TABLE tbl1\nCOMMENT 'table comment'\nFRESHNESS = INTERVAL "
                                "'3' DAYS\nREFRESH_MODE = FULL\n" + FLINK_TAIL,
    "With primary key": "MATERIALIZED TABLE tbl1\n(\n   PRIMARY KEY (a, b)\n)\nCOMMENT 'table comment'\n"
                        "FRESHNESS = INTERVAL '3' MINUTE\nREFRESH_MODE = FULL\n" + FLINK_TAIL,
    "Without freshness": "MATERIALIZED TABLE tbl1\n(\n   PRIMARY KEY (a, b)\n)\n" + FLINK_KAFKA + FLINK_TAIL,
    "With column identifiers only": "MATERIALIZED TABLE tbl1\n(a, b, h, m)\nCOMMENT 'table comment'\n"
                                    "DISTRIBUTED BY HASH (a) INTO 4 BUCKETS\nPARTITIONED BY (a, h)\n"
                                    + FLINK_KAFKA + "FRESHNESS = INTERVAL '3' MINUTE\n" + FLINK_TAIL,
}


@pytest.mark.parametrize("operation", ["CREATE ", "CREATE OR ALTER "])
@pytest.mark.parametrize(
    ("form", "line", "column", "match"),
    [
        ("Full example", 5, 3, "WATERMARK is not supported"),
        ("With columns", 6, 1, "DISTRIBUTED BY/INTO is not supported"),
        ("With columns and watermarks", 5, 3, "WATERMARK is not supported"),
        # Flink's converter refuses these two too: '3' DAYS in FULL mode, an ENFORCED key.
        ("Without table constraint", 3, 1, "freshness must be 1 when the time unit is DAY"),
        ("With primary key", 3, 4, "PRIMARY KEY must be NOT ENFORCED"),
        ("Without freshness", 3, 4, "PRIMARY KEY must be NOT ENFORCED"),
        ("With column identifiers only", 4, 1, "DISTRIBUTED BY/INTO is not supported"),
    ],
)
def test_flink_create_forms_name_the_first_part_not_honoured(
    operation: str, form: str, line: int, column: int, match: str
) -> None:
    """MaterializedTableStatementParserTest.testMaterializedTable: Flink's parser accepts the 14
    forms; each carries a construct not honoured here (or refused by Flink's own validation)."""
    assert_error(operation + FLINK_CREATE_FORMS[form], line, column, match)


def test_flink_full_examples_are_refused_naming_the_first_unsupported_part() -> None:
    """Flink's parser accepts its "Full example"; its watermark and Kafka options are not ours."""
    full = (
        "CREATE MATERIALIZED TABLE tbl1\n(\n  ts timestamp(3),\n  id varchar,\n"
        "  watermark FOR ts AS ts - interval '3' second,\n  PRIMARY KEY (id)\n)\n"
        "COMMENT 'table comment'\nDISTRIBUTED BY HASH (a) INTO 4 BUCKETS\nPARTITIONED BY (a, h)\n"
        "WITH (\n  'group.id' = 'latest', \n  'kafka.topic' = 'log.test'\n)\n"
        "FRESHNESS = INTERVAL '3' MINUTES\nAS SELECT a, b, h, t m FROM source"
    )
    err = error(full)
    assert (err.line, err.column) == (5, 3) and "WATERMARK" in err.message
    # Without them, what remains is accepted.
    ours = (full.replace("  watermark FOR ts AS ts - interval '3' second,\n", "")
            .replace("PRIMARY KEY (id)", "PRIMARY KEY (id) NOT ENFORCED")
            .replace("DISTRIBUTED BY HASH (a) INTO 4 BUCKETS\n", "")
            .replace("'group.id' = 'latest', \n  'kafka.topic' = 'log.test'", "'format' = 'parquet'"))
    d = create(ours).definition
    assert [c.name for c in d.columns] == ["ts", "id"]
    assert (d.primary_key, d.freshness) == (("id",), Freshness(3, "MINUTE"))


@pytest.mark.parametrize(
    ("text", "query"),
    [
        # Flink's originalQueryCases: the query is the text after AS, comments kept...
        ("CREATE MATERIALIZED TABLE mtbl1 AS /* keep me */\nselect a, b from t1",
         "/* keep me */\nselect a, b from t1"),
        ("CREATE MATERIALIZED TABLE mtbl1 AS WITH q AS (SELECT a FROM t1) SELECT a FROM q",
         "WITH q AS (SELECT a FROM t1) SELECT a FROM q"),
        ("CREATE MATERIALIZED TABLE mtbl1 AS \n\n\n\n--keep\n--me\nSELECT * FROM t1\n\n",
         "--keep\n--me\nSELECT * FROM t1"),
        ("CREATE MATERIALIZED TABLE mtbl1\n-- note before AS\nAS SELECT * FROM t1", "SELECT * FROM t1"),
        ("CREATE MATERIALIZED TABLE `m_tbl` COMMENT 'a''b' AS SELECT * FROM t1", "SELECT * FROM t1"),
        # ...except a comment after the last token (Flink keeps it): a trailing `--` comment
        # would swallow whatever a runner appends to the query, so it is dropped here.
        ("CREATE MATERIALIZED TABLE mtbl1 AS select a, b from t1 -- trailing comment",
         "select a, b from t1"),
    ],
)
def test_original_query(text: str, query: str) -> None:
    assert create(text).definition.query == query


@pytest.mark.parametrize(("text", "mode", "or_alter"), [
    ("EXPLAIN CREATE MATERIALIZED TABLE myTable123 AS SELECT 123", "", False),
    ("EXPLAIN CREATE OR ALTER MATERIALIZED TABLE myTable123 AS SELECT 123", "", True),
    ("explain plan for create materialized table myTable123 as select 123", "", False),
    ("-- why\nEXPLAIN\n  codegen /* c */ CREATE MATERIALIZED TABLE myTable123 AS SELECT 123;", "CODEGEN",
     False),
])
def test_flink_explain_create(text: str, mode: str, or_alter: bool) -> None:
    """SqlMaterializedTableNodeToOperationConverterTest.testExplainCreate[OrAlter]MaterializedTable:
    the CREATE inside, as it parses alone (Spark's EXPLAIN modes, Flink's PLAN FOR)."""
    statement = parse(text)
    assert isinstance(statement, ExplainMaterializedTable) and statement.mode == mode
    assert statement.create.or_alter is or_alter and statement.table == T("default", "mytable123")
    assert statement.create.definition.query.upper() == "SELECT 123"


@pytest.mark.parametrize(("text", "line", "column", "match"), [
    ("EXPLAIN ALTER MATERIALIZED TABLE t SUSPEND", 1, 9,
     re.escape("only CREATE [OR ALTER] MATERIALIZED TABLE and ALTER MATERIALIZED TABLE ... AS can be "
               "explained (their query's plan), found 'ALTER'")),
    ("EXPLAIN\nSHOW MATERIALIZED TABLES", 2, 1, "can be explained .*, found 'SHOW'"),
    ("EXPLAIN CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '30' YEAR AS SELECT 1", 1, 63,
     "'YEAR': Materialized table freshness only supports"),
])
def test_explain_errors_at_their_place(text: str, line: int, column: int, match: str) -> None:
    assert_error(text, line, column, match)


# -- not ours: passed on to Spark -----------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "SELECT 1",
        "CREATE TABLE t AS SELECT 1",
        "CREATE OR REPLACE TABLE t AS SELECT 1",
        "CREATE TEMPORARY VIEW v AS SELECT 1",
        "DESCRIBE materialized",  # a table named "materialized"
        "DESC materialized.t",
        "DROP TABLE materialized",
        "CREATE MATERIALIZED VIEW mv AS SELECT 1",  # Spark's declarative pipelines
        "DROP MATERIALIZED VIEW mv",
        "SELECT 'ALTER MATERIALIZED TABLE t SUSPEND'",
        "-- ALTER MATERIALIZED TABLE t SUSPEND\nSELECT 1",
        "ALTER TABLE materialized SET TBLPROPERTIES ('a' = 'b')",
        "EXPLAIN SELECT 1",
        "EXPLAIN CREATE MATERIALIZED VIEW mv AS SELECT 1",
        "EXPLAIN EXTENDED SELECT 'CREATE MATERIALIZED TABLE t AS SELECT 1'",
        "EXPLAINCREATE MATERIALIZED TABLE t AS SELECT 1",
        "SHOW CREATE TABLE t",
        "SHOW CREATE MATERIALIZED VIEW mv",
        "",
        "  ",
    ],
)
def test_other_statements_are_not_ours(text: str) -> None:
    assert parse(text) is None


# -- injection: values stay data ------------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    [
        "'; DROP TABLE x; --",
        "2024-01-01'); DROP TABLE x; --",
        "a\nb",
        "back\\slash\\'",
        "ünï'cødé ✓",
        "/* c */ -- d",
        "`ident`",
        "",
    ],
)
def test_partition_values_are_decoded_data(value: str) -> None:
    literal = "'" + value.replace("'", "''") + "'"
    statement = parse(f"ALTER MATERIALIZED TABLE db.t REFRESH PARTITION (ds = {literal}, hh = '10')")
    assert statement == RefreshMaterializedTable(T("db", "t"), {"ds": value, "hh": "10"})


def test_issue_injection_example_is_data() -> None:
    statement = parse("ALTER MATERIALIZED TABLE t REFRESH PARTITION (ds = ''' ; DROP TABLE x; --')")
    assert statement == RefreshMaterializedTable(T("default", "t"), {"ds": "' ; DROP TABLE x; --"})


@pytest.mark.parametrize(
    ("text", "column", "match"),
    [
        # A quote that closes the literal early leaves SQL after it: never run, an error.
        ("ALTER MATERIALIZED TABLE t REFRESH PARTITION (ds = ''); DROP TABLE x; --')", 57,
         "only one statement is allowed, found 'DROP'"),
        ("ALTER MATERIALIZED TABLE t REFRESH PARTITION (ds = '') DROP TABLE x", 56,
         "expected the end of the statement, found 'DROP'"),
        ("ALTER MATERIALIZED TABLE t REFRESH PARTITION (ds = 'a' || 'b')", 56,
         "expected ',' or '\\)', found '|'"),
        ("ALTER MATERIALIZED TABLE t REFRESH PARTITION (ds = x)", 52,
         "expected a quoted value for partition column 'ds', found 'x'"),
        ("ALTER MATERIALIZED TABLE t REFRESH PARTITION (ds = NULL)", 52, "expected a quoted value"),
        ("ALTER MATERIALIZED TABLE t REFRESH PARTITION (`ds; DROP` = 'a')", 47,
         "invalid partition column 'ds; DROP'"),
        ("ALTER MATERIALIZED TABLE t REFRESH PARTITION (ds = 'a', ds = 'b')", 57,
         "duplicate partition column 'ds'"),
        ("ALTER MATERIALIZED TABLE t REFRESH PARTITION (ds = 'unterminated)", 52,
         "unterminated string literal"),
        ("ALTER MATERIALIZED TABLE `t; DROP TABLE x` SUSPEND", 26, "invalid table name"),
        ("ALTER MATERIALIZED TABLE t RESUME WITH ('k' = 'v'); DROP TABLE x", 53, "only one statement"),
        # Flink keeps the last of two equal keys; which one the user meant is unknown: refused.
        ("ALTER MATERIALIZED TABLE t RESUME WITH ('k' = 'v', 'k' = 'w')", 52, "duplicate option 'k'"),
        ("ALTER MATERIALIZED TABLE t RESUME WITH (k = 'v')", 41, "quoted option key"),
        ('ALTER MATERIALIZED TABLE "t" SUSPEND', 26, "quote names with backticks"),
    ],
)
def test_injection_is_rejected(text: str, column: int, match: str) -> None:
    assert_error(text, 1, column, match)


# -- one parser, two entry points -----------------------------------------------------------
def test_statement_and_definition_file_share_the_parser() -> None:
    text = (
        "CREATE MATERIALIZED TABLE analytics.orders_daily\nPARTITIONED BY (ds)\n"
        "WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd', 'format' = 'PARQUET')\n"
        "FRESHNESS = INTERVAL '1' DAY\nREFRESH_MODE = FULL\n"
        "AS SELECT ds, count(*) AS orders FROM raw.orders GROUP BY ds;\n"
    )
    from_file = parse_definition(text, "<statement>")
    assert create(text).definition == replace(from_file)
    assert dict(from_file.partition_formatters) == {"ds": "%Y-%m-%d"}
    # The same bad text: the same place, reported for a file and for a statement.
    bad = text.replace("'1' DAY", "'1' YEAR")
    with pytest.raises(ValueError, match=r"^<f>:4: FRESHNESS: unsupported freshness unit 'YEAR'"):
        parse_definition(bad, "<f>")
    assert (error(bad).line, error(bad).column) == (4, 26)


def test_mutated_statements_fail_only_with_positioned_errors() -> None:
    """Cut, spliced and truncated statements: a result, None, or our error inside the text."""
    seeds = [
        "CREATE OR ALTER MATERIALIZED TABLE db.t (a INT NOT NULL COMMENT 'x', b ARRAY<ROW(c INT)>, "
        "CONSTRAINT k PRIMARY KEY (a) NOT ENFORCED) COMMENT 'c' PARTITIONED BY (a) WITH ('format' = "
        "'parquet') FRESHNESS = INTERVAL '1' DAY REFRESH_MODE = FULL AS SELECT a, b FROM s;",
        "ALTER MATERIALIZED TABLE spark_catalog.db.t REFRESH PARTITION (ds = 'a''b', hh = 10);",
        "ALTER MATERIALIZED TABLE t RESUME WITH ('k' = 'v')",
        "DROP MATERIALIZED TABLE IF EXISTS db.t -- c",
        "SHOW MATERIALIZED TABLES IN db NOT LIKE 'x%'",
        "EXPLAIN /* plan */ FORMATTED CREATE OR ALTER MATERIALIZED TABLE t (a INT) AS SELECT 1 AS a",
        "CREATE MATERIALIZED TABLE t (a, b) DISTRIBUTED BY HASH(a) INTO 4 BUCKETS AS SELECT 1",
    ]
    pieces = ["(", ")", ",", "'", "`", ";", "=", ".", "<", "--", "/*", "\n", "NOT", "AS", "1", "-"]
    rng = random.Random(11)
    for _ in range(3000):
        text = rng.choice(seeds)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(text) + 1)
            if rng.random() < 0.5:
                text = text[:at] + rng.choice(pieces) + text[at:]
            else:
                text = text[:at] + text[at + rng.randint(1, 8):]
        try:
            parse(text)
        except MaterializedStatementError as err:
            lines = text.split("\n")
            assert 1 <= err.line <= len(lines) and 1 <= err.column <= len(lines[err.line - 1]) + 1, text


def test_values_the_data_produces_pass_and_flinks_options_are_checked_after_parsing() -> None:
    """A partition value with a quote, a backslash or a newline is data (its partition can be
    refreshed); RESUME's options parse as in Flink and are checked after, at the key."""
    statement = parse("ALTER MATERIALIZED TABLE t REFRESH PARTITION (k = 'it''s\\\n; --')")
    assert statement == RefreshMaterializedTable(T("default", "t"), {"k": "it's\\\n; --"})
    check_values(statement)
    statement = parse("ALTER MATERIALIZED TABLE t RESUME\nWITH ('group.id' = 'g')")
    with pytest.raises(MaterializedStatementError) as info:
        check_values(statement)
    assert (info.value.line, info.value.column) == (2, 7)
    assert info.value.message.startswith(
        "ALTER MATERIALIZED TABLE RESUME WITH: dynamicOptions key 'group.id' is not allowed")
