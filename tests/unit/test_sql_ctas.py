"""Which CTAS/RTAS statements the client runs atomically, and what it refuses (naming why)."""

from __future__ import annotations

import pytest

from airflow_provider_staged.sql.ctas import CtasPlan, is_ctas, plan_ctas
from airflow_provider_staged.sql.splitting import tokenize
from airflow_provider_staged.staging.api import StagingPurpose as P
from airflow_provider_staged.staging.identifiers import TableIdentifier


def plan(sql: str) -> CtasPlan:
    tokens = tokenize(sql)
    assert is_ctas(tokens)
    return plan_ctas(sql, tokens, "cur")


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "CREATE TABLE t AS SELECT 1 AS a",
            CtasPlan(TableIdentifier("cur", "t"), P.CREATE_TABLE_AS, "SELECT 1 AS a"),
        ),
        (
            "create table if not exists db.t as select 1",
            CtasPlan(TableIdentifier("db", "t"), P.CREATE_TABLE_AS_IF_NOT_EXISTS, "select 1"),
        ),
        (
            "REPLACE TABLE `db`.`T` AS SELECT 1",
            CtasPlan(TableIdentifier("db", "t"), P.REPLACE_TABLE_AS, "SELECT 1"),
        ),
        (
            "CREATE OR REPLACE TABLE spark_catalog.db.t AS (SELECT 1)",
            CtasPlan(TableIdentifier("db", "t"), P.CREATE_OR_REPLACE_TABLE_AS, "(SELECT 1)"),
        ),
        (
            "CREATE TABLE t USING parquet PARTITIONED BY (ds, h) OPTIONS ('compression' = 'zstd') AS\n"
            "WITH x AS (SELECT 1 AS a, 'd' AS ds, 0 AS h) SELECT * FROM x",
            CtasPlan(
                TableIdentifier("cur", "t"),
                P.CREATE_TABLE_AS,
                "WITH x AS (SELECT 1 AS a, 'd' AS ds, 0 AS h) SELECT * FROM x",
                ("ds", "h"),
                {"compression": "zstd"},
            ),
        ),
        # the query keeps its text: a string with ';' and Spark-only syntax is not regenerated
        (
            "CREATE TABLE t AS SELECT 'a;b' AS s, CAST(1 AS INT) AS i",
            CtasPlan(
                TableIdentifier("cur", "t"), P.CREATE_TABLE_AS, "SELECT 'a;b' AS s, CAST(1 AS INT) AS i"
            ),
        ),
    ],
)
def test_plans(sql: str, expected: CtasPlan) -> None:
    assert plan(sql) == expected


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE t (a INT) USING parquet",
        "CREATE TABLE t LIKE s",
        "SELECT 1 AS a",
        "CREATE VIEW v AS SELECT 1",
        "CREATE TEMPORARY VIEW v AS SELECT 1",
        "INSERT INTO t SELECT 1",
    ],
)
def test_not_ctas(sql: str) -> None:
    assert not is_ctas(tokenize(sql))


@pytest.mark.parametrize(
    ("sql", "properties"),
    [
        ("CREATE TABLE t TBLPROPERTIES ('k' = 'v') AS SELECT 1", {"k": "v"}),
        # Spark's clause order, decoded literals (no SQL in the values), unquoted dotted keys
        (
            "CREATE OR REPLACE TABLE t USING parquet PARTITIONED BY (ds) COMMENT 'it\\'s ; here' "
            "TBLPROPERTIES ('owner.team' = 'data', quality.tier = 2, 'pii' = false, 'x' = 'a' 'b') "
            "AS SELECT 1 AS a, 'd' AS ds",
            {"comment": "it's ; here", "owner.team": "data", "quality.tier": "2", "pii": "false", "x": "ab"},
        ),
        (
            "CREATE TABLE t PARTITIONED BY (ds) TBLPROPERTIES ('partition.expiration-time' = '30 d') "
            "AS SELECT 1 AS a, '2024-01-01' AS ds",
            {"partition.expiration-time": "30 d"},
        ),
        ("CREATE TABLE t AS SELECT 1", {}),
    ],
)
def test_table_properties(sql: str, properties: dict[str, str]) -> None:
    assert plan(sql).properties == properties


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("CREATE TABLE t STORED AS ORC AS SELECT 1", "unsupported clause 'STORED AS ORC'"),
        ("CREATE TABLE t USING delta AS SELECT 1", "unsupported clause 'USING DELTA'"),
        ("CREATE TABLE t LOCATION '/tmp/x' AS SELECT 1", "unsupported clause"),
        ("CREATE TABLE t ROW FORMAT DELIMITED AS SELECT 1", "unsupported clause"),
        # TBLPROPERTIES: keys Spark or the staged commit own, bad keys and values name themselves
        ("CREATE TABLE t TBLPROPERTIES ('staged.version' = 'x') AS SELECT 1",
         "table property 'staged.version' of cur.t is reserved"),
        ("CREATE TABLE t TBLPROPERTIES ('Staged.Rows' = '9') AS SELECT 1",
         "'Staged.Rows' of cur.t is reserved"),
        ("CREATE TABLE t TBLPROPERTIES ('spark.sql.sources.provider' = 'orc') AS SELECT 1", "is reserved"),
        ("CREATE TABLE t TBLPROPERTIES ('owner' = 'me') AS SELECT 1", "'owner' of cur.t is reserved"),
        ("CREATE TABLE t TBLPROPERTIES ('location' = '/x') AS SELECT 1", "'location' of cur.t is reserved"),
        ("CREATE TABLE t TBLPROPERTIES ('materialized.refresh-status' = 'ACTIVATED') AS SELECT 1",
         "'materialized.refresh-status' of cur.t is reserved"),
        ("CREATE TABLE t TBLPROPERTIES ('numRows' = '0') AS SELECT 1", "'numRows' of cur.t is reserved"),
        ("CREATE TABLE t TBLPROPERTIES ('a b' = 'x') AS SELECT 1", "invalid table property key 'a b'"),
        ("CREATE TABLE t TBLPROPERTIES ('k' = 'a\\u0000b') AS SELECT 1",
         "invalid value of table property 'k'"),
        ("CREATE TABLE t TBLPROPERTIES ('k' = current_date()) AS SELECT 1", "expected a literal value"),
        ("CREATE TABLE t TBLPROPERTIES ('partition.expiration-time' = '1 d') AS SELECT 1",
         "table properties of cur.t: 'partition.expiration-time' needs a partitioned table"),
        ("CREATE TABLE t PARTITIONED BY (ds) TBLPROPERTIES ('partition.expiration-time' = 'soon') "
         "AS SELECT 1 AS a, 'x' AS ds", "invalid partition.expiration-time 'soon'"),
        (
            "CREATE TABLE t USING parquet CLUSTERED BY (a) INTO 4 BUCKETS AS SELECT 1 AS a",
            "unsupported clause",
        ),
        ("CREATE TABLE t (a INT) AS SELECT 1", "column list"),
        ("CREATE TABLE t USING parquet OPTIONS ('PATH' = '/elsewhere') AS SELECT 1",
         "'PATH' = '/elsewhere'.? in an atomic CTAS of cur.t: the build writes a new version directory"),
        # Spark's other spellings of the key (unquoted, backticked, without '='), and a second one.
        ("CREATE TABLE t USING parquet OPTIONS (path '/x') AS SELECT 1", "OPTIONS .'path' = '/x'."),
        ("CREATE TABLE t USING parquet OPTIONS (`Path` = '/x') AS SELECT 1", "OPTIONS .'Path' = '/x'."),
        ("CREATE TABLE t USING parquet OPTIONS ('compression' = 'zstd', 'path' = '/x') AS SELECT 1",
         "OPTIONS .'path' = '/x'."),
        ("CREATE TABLE t USING parquet OPTIONS ('compression' = 'zstd') LOCATION '/x' AS SELECT 1",
         "unsupported clause \"LOCATION '/x'\""),
        ("CREATE TABLE other.db.t AS SELECT 1", "catalog 'other'"),
        ("CREATE TABLE `x-y` AS SELECT 1", "invalid table name 'x-y'"),
        ("CREATE TABLE t PARTITIONED BY (`a b`) AS SELECT 1", "invalid partition column 'a b'"),
        # Not an unpartitioned table, nor the last clause's or a repeated column.
        ("CREATE TABLE t PARTITIONED BY () AS SELECT 1", "names no column: list the partition columns"),
        ("CREATE TABLE t PARTITIONED BY (a, A) AS SELECT 1 AS a", "duplicate partition column 'a'"),
        ("CREATE TABLE t PARTITIONED BY (a) PARTITIONED BY (b) AS SELECT 1 AS a, 2 AS b",
         "PARTITIONED BY is given twice"),
    ],
)
def test_refused_with_a_reason(sql: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")) as caught:
        plan(sql)
    if message.startswith(("unsupported clause", "column list")):
        assert "table.ctas.atomicity-enabled" in str(caught.value)  # the way to the plain path
