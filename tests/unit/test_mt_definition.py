"""The CREATE MATERIALIZED TABLE parser: every clause, comments, quoting, errors with lines."""

import re
from datetime import date, timedelta
from pathlib import Path

import pytest

from airflow_provider_staged.materialized.definition import (
    DefinitionError,
    check_query,
    load_definition,
    parse_definition,
    read_identifier,
)
from airflow_provider_staged.materialized.freshness import Freshness, RefreshMode
from airflow_provider_staged.staging.identifiers import TableIdentifier

ORDERS = """\
CREATE MATERIALIZED TABLE analytics.orders_daily
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
FRESHNESS = INTERVAL '1' DAY
REFRESH_MODE = FULL
AS SELECT ds, count(*) AS orders, sum(amount) AS revenue FROM raw.orders GROUP BY ds;
"""


def parse(text: str):
    return parse_definition(text, "defs/t.sql")


def error(text: str) -> DefinitionError:
    with pytest.raises(DefinitionError) as info:
        parse(text)
    return info.value


def test_issue_example() -> None:
    d = parse(ORDERS)
    assert d.identifier == TableIdentifier("analytics", "orders_daily")
    assert d.partition_by == ("ds",)
    assert dict(d.options) == {"partition.fields.ds.date-formatter": "yyyy-MM-dd"}
    assert dict(d.partition_formatters) == {"ds": "%Y-%m-%d"}
    assert d.freshness == Freshness(1, "DAY")
    assert d.refresh_mode is RefreshMode.FULL
    assert d.schedule == "0 0 * * *"
    assert d.query == (
        "SELECT ds, count(*) AS orders, sum(amount) AS revenue FROM raw.orders GROUP BY ds"
    )
    assert d.text == ORDERS
    assert d.source_path == "defs/t.sql"
    assert (d.comment, d.catchup, d.owner, d.tags, d.retries, d.start_date) == (
        None, False, None, (), None, None
    )


def test_every_clause_comments_quoting_and_case() -> None:
    d = parse("""
-- leading comment; with a ; and a 'quote
create Materialized table `Sales`.`by_hour` /* block
   comment */ comment 'it''s -- not a comment'
partitioned by (`DS`, hr)
with (
  'partition.fields.ds.date-formatter' = 'yyyyMMdd',
  'partition.fields.HR.date-formatter' = 'HH',
  'owner' = 'data-eng', 'tags' = 'sales, hourly,',
  'retries' = '3', 'catchup' = 'TRUE', 'start-date' = '2024-01-01',
  'refresh-mode.freshness-threshold' = '2 h'
)
freshness = interval '2' hour
as
  SELECT ds, hr, 'a;b' AS s, "x;" AS t, `c;` FROM t -- trailing ; comment
  ; /* done */
""")
    assert d.identifier == TableIdentifier("sales", "by_hour")
    assert d.comment == "it's -- not a comment"
    assert d.partition_by == ("ds", "hr")
    assert dict(d.partition_formatters) == {"ds": "%Y%m%d", "hr": "%H"}
    assert (d.owner, d.tags, d.retries, d.catchup) == ("data-eng", ("sales", "hourly"), 3, True)
    assert d.start_date == date(2024, 1, 1)
    # 2 hours is not below the 2 h threshold: FULL, scheduled every two hours.
    assert d.refresh_mode is RefreshMode.FULL
    assert d.schedule == "0 */2 * * *"
    # Comments after the last token are not part of the query.
    assert d.query == "SELECT ds, hr, 'a;b' AS s, \"x;\" AS t, `c;` FROM t"


def test_default_database_and_no_trailing_semicolon() -> None:
    d = parse("CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '5' MINUTE AS SELECT 1")
    assert d.identifier == TableIdentifier("default", "t")
    # Below the 30 minute default threshold, without an explicit mode: CONTINUOUS, no cron.
    assert d.refresh_mode is RefreshMode.CONTINUOUS
    assert d.schedule is None
    assert d.query == "SELECT 1"


def test_threshold_and_cron_override() -> None:
    d = parse(
        "CREATE MATERIALIZED TABLE t WITH ('refresh-mode.freshness-threshold' = '1 min', "
        "'schedule.cron' = '5 3 * * 1-5') FRESHNESS = INTERVAL '5' MINUTE AS SELECT 1"
    )
    assert d.refresh_mode is RefreshMode.FULL
    assert d.schedule == "5 3 * * 1-5"
    assert d.freshness.as_timedelta() == timedelta(minutes=5)


@pytest.mark.parametrize(
    ("text", "line", "clause", "match"),
    [
        ("CREATE TABLE t AS SELECT 1", 1, "CREATE MATERIALIZED TABLE", "expected MATERIALIZED"),
        ("CREATE MATERIALIZED TABLE c.d.t\nFRESHNESS = INTERVAL '1' DAY AS SELECT 1", 1,
         "CREATE MATERIALIZED TABLE", r"\[db.\]name.*'c.d.t'"),
        ("CREATE MATERIALIZED TABLE `my-table` FRESHNESS = INTERVAL '1' DAY AS SELECT 1", 1,
         "CREATE MATERIALIZED TABLE", "invalid table name 'my-table'"),
        ("CREATE MATERIALIZED TABLE t\nCOMMENT x\nFRESHNESS = INTERVAL '1' DAY AS SELECT 1", 2,
         "COMMENT", "quoted comment"),
        ("CREATE MATERIALIZED TABLE t\nPARTITIONED BY (ds, ds)\nFRESHNESS = INTERVAL '1' DAY AS "
         "SELECT 1", 2, "PARTITIONED BY", "duplicate partition column 'ds'"),
        ("CREATE MATERIALIZED TABLE t\nPARTITIONED BY (`d s`)\nFRESHNESS = INTERVAL '1' DAY AS "
         "SELECT 1", 2, "PARTITIONED BY", "invalid partition column 'd s'"),
        ("CREATE MATERIALIZED TABLE t\nPARTITIONED BY (ds\nFRESHNESS = INTERVAL '1' DAY AS "
         "SELECT 1", 3, "PARTITIONED BY", "expected ',' or '\\)'"),
        ("CREATE MATERIALIZED TABLE t\nWITH (\n  'owner' = 'a',\n  'ownr' = 'b'\n)\n"
         "FRESHNESS = INTERVAL '1' DAY AS SELECT 1", 4, "WITH", "unknown option 'ownr'"),
        ("CREATE MATERIALIZED TABLE t\nWITH ('owner' = 'a', 'owner' = 'b')\nFRESHNESS = "
         "INTERVAL '1' DAY AS SELECT 1", 2, "WITH", "duplicate option 'owner'"),
        ("CREATE MATERIALIZED TABLE t\nWITH (owner = 'a')\nFRESHNESS = INTERVAL '1' DAY AS "
         "SELECT 1", 2, "WITH", "quoted option key"),
        ("CREATE MATERIALIZED TABLE t\nPARTITIONED BY (ds)\nWITH (\n"
         "'partition.fields.dt.date-formatter' = 'yyyy-MM-dd')\nFRESHNESS = INTERVAL '1' DAY "
         "AS SELECT 1", 4, "WITH", "Column 'dt' referenced by .* isn't a partition column"),
        ("CREATE MATERIALIZED TABLE t\nPARTITIONED BY (ds)\nWITH (\n"
         "'partition.fields.ds.date-formatter' = 'dd.MM.yy')\nFRESHNESS = INTERVAL '1' DAY "
         "AS SELECT 1", 4, "WITH", "unsupported date-formatter 'dd.MM.yy'"),
        ("CREATE MATERIALIZED TABLE t\nWITH ('catchup' = 'yes')\nFRESHNESS = INTERVAL '1' DAY "
         "AS SELECT 1", 2, "WITH", "'catchup' must be 'true' or 'false'"),
        ("CREATE MATERIALIZED TABLE t\nWITH ('catchup' = 'true')\nFRESHNESS = INTERVAL '1' DAY "
         "AS SELECT 1", 2, "WITH", "needs a 'start-date'"),
        ("CREATE MATERIALIZED TABLE t\nWITH ('retries' = '-1')\nFRESHNESS = INTERVAL '1' DAY "
         "AS SELECT 1", 2, "WITH", "'retries' must be an integer"),
        ("CREATE MATERIALIZED TABLE t\nWITH ('start-date' = '2024-13-01')\nFRESHNESS = "
         "INTERVAL '1' DAY AS SELECT 1", 2, "WITH", "'start-date' must be a date"),
        ("CREATE MATERIALIZED TABLE t\nWITH ('schedule.cron' = '* * * * * *')\nFRESHNESS = "
         "INTERVAL '1' DAY AS SELECT 1", 2, "WITH", "invalid cron expression"),
        ("CREATE MATERIALIZED TABLE t\nWITH ('schedule.cron' = '61 * * * *')\nFRESHNESS = "
         "INTERVAL '1' DAY AS SELECT 1", 2, "WITH", "invalid cron expression"),
        ("CREATE MATERIALIZED TABLE t\nWITH ('refresh-mode.freshness-threshold' = '30')\n"
         "FRESHNESS = INTERVAL '1' DAY AS SELECT 1", 2, "WITH", "invalid duration '30'"),
        ("CREATE MATERIALIZED TABLE t\nWITH ('owner' = ' ')\nFRESHNESS = INTERVAL '1' DAY AS "
         "SELECT 1", 2, "WITH", "'owner' must not be empty"),
        ("CREATE MATERIALIZED TABLE t\nWITH ('owner' = 'a\nb')\nFRESHNESS = INTERVAL '1' DAY AS "
         "SELECT 1", 2, "WITH", "'owner' must not contain control characters"),
        (f"CREATE MATERIALIZED TABLE t\nWITH ('tags' = 'ok, {'x' * 101}')\nFRESHNESS = INTERVAL '1' "
         "DAY AS SELECT 1", 2, "WITH", "tag 'x{101}' must be at most 100 characters"),
        ("CREATE MATERIALIZED TABLE t\n\nFRESHNESS = INTERVAL '7' MINUTE\nREFRESH_MODE = FULL\n"
         "AS SELECT 1", 3, "FRESHNESS", r"INTERVAL '7' MINUTE: In full refresh mode, only freshness that "
         "are factors of 60"),
        ("CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '2' DAY AS SELECT 1", 2,
         "FRESHNESS", r"INTERVAL '2' DAY: In full refresh mode, freshness must be 1 when the time unit "
         "is DAY"),
        ("CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL 'one' DAY AS SELECT 1", 2,
         "FRESHNESS", "positive integer"),
        # Non-ASCII digits (fullwidth, superscript): Python's isdigit and int() take them.
        ("CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '\uff15' MINUTE AS SELECT 1", 2,
         "FRESHNESS", "invalid freshness INTERVAL '\uff15' MINUTE: .*positive integer"),
        ("CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '\u00b2' MINUTE AS SELECT 1", 2,
         "FRESHNESS", "positive integer"),
        (f"CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '{'9' * 5000}' MINUTE AS SELECT 1", 2,
         "FRESHNESS", "positive integer"),
        ("CREATE MATERIALIZED TABLE t\nWITH ('retries' = '\uff15')\nFRESHNESS = INTERVAL '1' DAY "
         "AS SELECT 1", 2, "WITH", "'retries' must be an integer 0..100, not '\uff15'"),
        ("CREATE MATERIALIZED TABLE t\nWITH ('retries' = '\u00b2')\nFRESHNESS = INTERVAL '1' DAY "
         "AS SELECT 1", 2, "WITH", "'retries' must be an integer"),
        ("CREATE MATERIALIZED TABLE t\nWITH ('start-date' = '\uff12\uff10\uff12\uff14-01-01')\n"
         "FRESHNESS = INTERVAL '1' DAY AS SELECT 1", 2, "WITH", "'start-date' must be a date"),
        ("CREATE MATERIALIZED TABLE t\nWITH ('refresh-mode.freshness-threshold' = '\uff13\uff10 min')"
         "\nFRESHNESS = INTERVAL '1' DAY AS SELECT 1", 2, "WITH", "invalid duration '\uff13\uff10 min'"),
        ("CREATE MATERIALIZED TABLE t\nWITH ('refresh-mode.freshness-threshold' = '99999999999 d')"
         "\nFRESHNESS = INTERVAL '1' DAY AS SELECT 1", 2, "WITH", "longer than 999999999 days"),
        ("CREATE MATERIALIZED TABLE t\nPARTITIONED BY (ds)\nWITH ('partition.expiration-time' = "
         "'\uff15 d')\nFRESHNESS = INTERVAL '1' DAY AS SELECT 1", 3, "WITH",
         "invalid partition.expiration-time '\uff15 d'"),
        ("CREATE MATERIALIZED TABLE t\nPARTITIONED BY ()\nFRESHNESS = INTERVAL '1' DAY AS SELECT 1", 2,
         "PARTITIONED BY", "expected a partition column name, found '\\)'"),
        ("CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '1' MONTH AS SELECT 1", 2,
         "FRESHNESS", r"unsupported freshness unit 'MONTH'.*SECOND, MINUTE, HOUR, DAY, WEEK"),
        ("CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '45' SECOND\nREFRESH_MODE = FULL\n"
         "AS SELECT 1", 2, "FRESHNESS", r"INTERVAL '45' SECOND: In full refresh mode, only freshness "
         "that are factors of 60"),
        ("CREATE MATERIALIZED TABLE t\nWITH ('schedule.cron' = '0 3 * * *')\nFRESHNESS = "
         "INTERVAL '3' DAY\nREFRESH_MODE = FULL\nAS SELECT 1", 3, "FRESHNESS", "freshness must be 1 when"),
        ("CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '1' DAY\nWITH ('owner' = 'a')\n"
         "AS SELECT 1", 3, "WITH", r"expected REFRESH_MODE or AS, found 'WITH' \(clauses go"),
        ("CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '1' DAY\nREFRESH_MODE = SOMETIMES\n"
         "AS SELECT 1", 3, "REFRESH_MODE", "expected FULL or CONTINUOUS"),
        ("CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '1' DAY\nAS", 3, "AS",
         "missing query"),
        ("CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '1' DAY\nAS SELECT 1;\n"
         "DROP TABLE x;", 4, "AS", "only one statement"),
        ("CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '1' DAY\nAS SELECT\n'abc", 4,
         "AS", "unterminated string"),
        # The quote runs to the next one: the error shows where the text stopped making sense.
        ("CREATE MATERIALIZED TABLE t\nCOMMENT 'abc\nFRESHNESS = INTERVAL '1' DAY AS SELECT 1",
         3, "AS", "expected PARTITIONED BY, WITH, FRESHNESS, REFRESH_MODE or AS, found '1'"),
        ("CREATE MATERIALIZED TABLE t\nCOMMENT 'ab''\n", 2, "syntax",
         "unterminated string literal"),
        ("CREATE MATERIALIZED TABLE t /* never closed\nFRESHNESS", 1, "syntax",
         "unterminated /\\* comment"),
        ("CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '1' DAY #", 2, "syntax",
         "unexpected character '#'"),
        ("", 1, "CREATE MATERIALIZED TABLE", "found the end of the file"),
    ],
)
def test_errors_name_file_line_and_clause(text: str, line: int, clause: str, match: str) -> None:
    err = error(text)
    assert (err.path, err.line, err.clause) == ("defs/t.sql", line, clause), str(err)
    assert str(err).startswith(f"defs/t.sql:{line}: {clause}: ")
    assert re.search(match, err.message), err.message
    assert isinstance(err, ValueError)


def test_definition_is_frozen() -> None:
    d = parse(ORDERS)
    with pytest.raises(AttributeError):
        d.query = "SELECT 2"  # type: ignore[misc]
    with pytest.raises(TypeError):
        d.options["owner"] = "x"  # type: ignore[index]


def test_check_query() -> None:
    check_query(parse(ORDERS))
    bad = parse("CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '1' DAY\nAS\nSELECT a\n"
                "FROM WHERE")
    with pytest.raises(DefinitionError, match=r"^defs/t.sql:5: AS: invalid query"):
        check_query(bad)
    drop = parse("CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '1' DAY\nAS DROP TABLE x")
    with pytest.raises(DefinitionError, match=r"expected a query .* DROP statement"):
        check_query(drop)


def test_files(tmp_path: Path) -> None:
    path = tmp_path / "any_name.sql"
    path.write_text(ORDERS)
    assert load_definition(path).source_path == str(path)
    assert read_identifier(path) == TableIdentifier("analytics", "orders_daily")
    with pytest.raises(DefinitionError, match="cannot read"):
        load_definition(tmp_path / "missing.sql")
    (tmp_path / "latin1.sql").write_bytes(b"CREATE MATERIALIZED TABLE t COMMENT '\xe9'")
    with pytest.raises(DefinitionError, match=r"latin1.sql:1: file: cannot read"):
        load_definition(tmp_path / "latin1.sql")


def test_flink_forms_in_a_file_and_error_columns() -> None:
    """The file parser is the statement parser: Flink's column list, key and OR ALTER read."""
    d = parse(
        "CREATE OR ALTER MATERIALIZED TABLE spark_catalog.sales.t (\n"
        "  ds STRING NOT NULL COMMENT 'day', n BIGINT,\n"
        "  CONSTRAINT pk PRIMARY KEY (ds) NOT ENFORCED)\n"
        "PARTITIONED BY (ds) WITH ('format' = 'parquet') REFRESH_MODE = FULL\n"
        "AS SELECT ds, count(*) AS n FROM s GROUP BY ds"
    )
    assert d.identifier == TableIdentifier("sales", "t")
    assert [(c.name, c.data_type, c.nullable, c.comment) for c in d.columns] == [
        ("ds", "STRING", False, "day"), ("n", "BIGINT", True, None)]
    assert (d.primary_key, d.primary_key_name) == (("ds",), "pk")
    assert (d.freshness, d.schedule) == (Freshness(1, "HOUR"), "0 * * * *")  # Flink's FULL default
    err = error("CREATE MATERIALIZED TABLE t\nWITH ('connectr' = 'kafka')\nAS SELECT 1")
    assert (err.line, err.column, err.clause) == (2, 7, "WITH")
    assert "supported options: format, partition.fields.<col>.date-formatter" in err.message


@pytest.mark.parametrize("connector", ["staged_hive", "STAGED_HIVE"])
def test_connector_naming_the_products_own_kind_is_accepted(connector: str) -> None:
    """Flink's definitions carry WITH ('connector' = ...): the staged Hive table is this product's
    one kind of table (the provider's staged_hive connection), so naming it changes nothing."""
    d = parse(f"CREATE MATERIALIZED TABLE t\nWITH ('connector' = '{connector}', 'format' = 'parquet')\n"
              "AS SELECT 1")
    assert dict(d.options) == {"connector": connector, "format": "parquet"}


@pytest.mark.parametrize("connector", ["filesystem", "kafka", "paimon", "hive", "staged", "staged_hive "])
def test_connector_naming_another_kind_is_refused_at_its_key(connector: str) -> None:
    err = error(f"CREATE MATERIALIZED TABLE t\nWITH ('owner' = 'a',\n      'connector' = '{connector}')\n"
                "AS SELECT 1")
    assert (err.line, err.column, err.clause) == (3, 7, "WITH")
    assert err.message == (
        f"option 'connector' = {connector!r} is not supported: a materialized table is a Hive table of "
        "the metastore written through the staged commit; name that kind or leave the option out "
        "(supported: 'staged_hive')")
