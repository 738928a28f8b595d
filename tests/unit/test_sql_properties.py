"""Session properties: parsing SET/RESET, validation, and defaults < config < init file < session."""

from __future__ import annotations

import pytest

from airflow_provider_staged.sql.properties import (
    ATOMICITY,
    MAX_ROWS,
    RESULT_MODE,
    PropertyError,
    ResetProperty,
    SessionProperties,
    SetProperty,
    ShowProperties,
    Source,
    parse_property_command,
)
from airflow_provider_staged.sql.splitting import tokenize


def parse(text: str) -> object:
    return parse_property_command(text, tokenize(text))


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ("SET", ShowProperties()),
        ("set 'a.b' = 'c d'", SetProperty("a.b", "c d")),
        ("SET 'k' = 'it\\'s'", SetProperty("k", "it's")),
        ("SET 'sql-client.execution.max-table-result.rows' = 10", SetProperty(MAX_ROWS, "10")),
        ("SET spark.sql.shuffle.partitions=8", SetProperty("spark.sql.shuffle.partitions", "8")),
        (
            "SET spark.sql.session.timeZone = Europe/Paris",
            SetProperty("spark.sql.session.timeZone", "Europe/Paris"),
        ),
        ("SET 'k'", ShowProperties("k")),
        ("RESET", ResetProperty()),
        ("RESET 'k'", ResetProperty("k")),
        ("RESET spark.sql.shuffle.partitions", ResetProperty("spark.sql.shuffle.partitions")),
        # Spark statements that start with SET stay Spark's
        ("SET VAR x = 1", None),
        ("SET VARIABLE x = 1", None),
        ("SET TIME ZONE 'UTC'", None),
        ("SET -v", None),
        ("SELECT 1", None),
    ],
)
def test_parse(text: str, command: object) -> None:
    assert parse(text) == command


def test_reset_with_a_value_is_refused() -> None:
    with pytest.raises(PropertyError, match="RESET takes a key only"):
        parse("RESET 'k' = 'v'")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (ATOMICITY, "maybe", "invalid table.ctas.atomicity-enabled 'maybe'"),
        (RESULT_MODE, "grid", "expected one of tableau, table, changelog"),
        (MAX_ROWS, "0", "expected a whole number >= 1"),
        (MAX_ROWS, "ten", "'ten'"),
        (MAX_ROWS, "\uff15", f"invalid {MAX_ROWS} '\uff15'"),
        (MAX_ROWS, "\u00b2", f"invalid {MAX_ROWS} '\u00b2'"),
        (MAX_ROWS, "9" * 5000, "expected a whole number >= 1"),
        ("sql-client.unknown", "1", "unknown client property 'sql-client.unknown'"),
        ("table.exec.mini-batch.enabled", "true", "unknown client property"),
        ("bad key", "1", "invalid property key 'bad key'"),
        ("k", "a\nb", "control character"),
    ],
)
def test_bad_values_are_named_and_change_nothing(key: str, value: str, message: str) -> None:
    properties = SessionProperties()
    before = properties.rows()
    with pytest.raises(PropertyError, match=message.replace("(", r"\(").replace(".", r"\.")):
        properties.checked(key, value)
    assert properties.rows() == before


def test_values_are_normalised() -> None:
    properties = SessionProperties()
    assert properties.checked(ATOMICITY, "FALSE") == (ATOMICITY, "false")
    assert properties.checked(RESULT_MODE, " Changelog ") == (RESULT_MODE, "changelog")
    assert properties.checked("workflow-scheduler.airflow.endpoint", "http://x") == (
        "workflow-scheduler.airflow.endpoint",
        "http://x",
    )


def test_precedence_default_config_init_session_and_reset() -> None:
    properties = SessionProperties()
    key = "spark.sql.shuffle.partitions"
    assert properties.get(MAX_ROWS) == "1000" and properties.get(key) is None
    properties.put(MAX_ROWS, "50", Source.CONFIG)
    properties.put(key, "3", Source.CONFIG)
    properties.layer = Source.INIT
    properties.put(key, "5")
    properties.layer = Source.SESSION
    assert properties.get(key) == "5"
    properties.put(key, "7")
    rows = {row.key: (row.value, row.source) for row in properties.rows()}
    assert rows[key] == ("7", Source.SESSION)
    assert rows[MAX_ROWS] == ("50", Source.CONFIG)
    assert rows[ATOMICITY] == ("true", Source.DEFAULT)
    properties.remove(key)  # RESET 'k': the init file's value shows again
    assert properties.get(key) == "5"
    properties.put(MAX_ROWS, "9")
    assert properties.max_rows == 9
    assert sorted(properties.clear()) == [MAX_ROWS]  # RESET: the session layer only
    assert properties.max_rows == 50 and properties.get(key) == "5"
    assert properties.spark_values() == {key: "5"}


def test_typed_accessors() -> None:
    properties = SessionProperties({RESULT_MODE: "table"})
    assert properties.result_mode == "table" and properties.atomic is True
    properties.put(*properties.checked(ATOMICITY, "0"))
    assert properties.atomic is False
