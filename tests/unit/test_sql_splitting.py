"""Statement splitting: sqlglot's Spark tokenizer decides where a ``;`` ends a statement."""

from __future__ import annotations

import pytest

from airflow_provider_staged.sql.splitting import SplitError, Statement, is_complete, split_statements


def texts(sql: str) -> list[str]:
    return [statement.text for statement in split_statements(sql)]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT 1; SELECT 2", ["SELECT 1", "SELECT 2"]),
        ("SELECT 'a;b'; SELECT 2;", ["SELECT 'a;b'", "SELECT 2"]),
        ('SELECT "a;b"', ['SELECT "a;b"']),
        ("SELECT `weird;name` FROM t", ["SELECT `weird;name` FROM t"]),
        ("SELECT 'it\\'s; here'", ["SELECT 'it\\'s; here'"]),
        ("SELECT 1 -- no; split\n, 2", ["SELECT 1 -- no; split\n, 2"]),
        ("SELECT /* ; */ 1", ["SELECT /* ; */ 1"]),
        (";;SELECT 1;;;", ["SELECT 1"]),
        ("-- only a comment\n/* and; another */", []),
        ("", []),
        (
            "BEGIN DECLARE x INT DEFAULT 1; IF x > 0 THEN SELECT 1; END IF; "
            "WHILE x < 3 DO SET x = x + 1; END WHILE; END; SELECT 2",
            [
                "BEGIN DECLARE x INT DEFAULT 1; IF x > 0 THEN SELECT 1; END IF; "
                "WHILE x < 3 DO SET x = x + 1; END WHILE; END",
                "SELECT 2",
            ],
        ),
        (
            "BEGIN SELECT CASE WHEN 1 = 1 THEN 'a;' END; CASE x WHEN 1 THEN SELECT 1; END CASE; END;"
            " SELECT 3",
            [
                "BEGIN SELECT CASE WHEN 1 = 1 THEN 'a;' END; CASE x WHEN 1 THEN SELECT 1; END CASE; END",
                "SELECT 3",
            ],
        ),
        (
            "lbl: BEGIN BEGIN SELECT 1; END; END; SELECT 2",
            ["lbl: BEGIN BEGIN SELECT 1; END; END", "SELECT 2"],
        ),
        (
            "SELECT CASE WHEN a THEN 1 END FROM t; SELECT 2",
            ["SELECT CASE WHEN a THEN 1 END FROM t", "SELECT 2"],
        ),
        ("BEGIN; SELECT 1", ["BEGIN", "SELECT 1"]),  # a transaction word, not a block
        (
            "ALTER MATERIALIZED TABLE t REFRESH PARTITION (ds = ''' ; DROP TABLE x; --')",
            ["ALTER MATERIALIZED TABLE t REFRESH PARTITION (ds = ''' ; DROP TABLE x; --')"],
        ),
    ],
)
def test_split(sql: str, expected: list[str]) -> None:
    assert texts(sql) == expected


def test_positions_are_those_of_the_first_token() -> None:
    sql = "-- header\nSELECT 1;\n\n  /* c */ SELECT\n 2 ;  SELECT 3"
    assert split_statements(sql) == [
        Statement("SELECT 1", 2, 1),
        Statement("SELECT\n 2", 4, 11),
        Statement("SELECT 3", 5, 7),
    ]


@pytest.mark.parametrize(
    ("sql", "line", "column", "what"),
    [
        ("SELECT 1;\nSELECT 'abc", 2, 8, "string"),
        ("SELECT 1; /* open", 1, 11, "comment"),
        ("SELECT `abc", 1, 8, "quoted identifier"),
    ],
)
def test_unterminated_token_names_its_position(sql: str, line: int, column: int, what: str) -> None:
    with pytest.raises(SplitError) as caught:
        split_statements(sql)
    assert (caught.value.line, caught.value.column) == (line, column)
    assert f"unterminated {what}" in str(caught.value)
    assert f"line {line}, column {column}" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "complete"),
    [
        ("SELECT 1;", True),
        ("SELECT 1", False),
        ("SELECT 'a;", False),
        ("SELECT 1; -- trailing comment", True),
        ("SELECT 1 /* ; */", False),
        ("BEGIN SELECT 1;", False),
        ("BEGIN SELECT 1; END;", True),
        ("SELECT CASE WHEN 1 = 1 THEN 2 END;", True),
        ("", False),
    ],
)
def test_is_complete(text: str, complete: bool) -> None:
    assert is_complete(text) is complete
