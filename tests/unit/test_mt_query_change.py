"""CREATE OR ALTER MATERIALIZED TABLE of an existing table: Flink's schema rule and its messages."""

from __future__ import annotations

import pytest

from airflow_provider_staged.materialized.definition import parse_definition
from airflow_provider_staged.materialized.query_change import (
    QueryChangeError,
    appended_columns,
    check_definition_change,
    schema_columns,
    stored_order,
)

OLD = [("a", "long"), ("b", "string")]


def test_appending_columns_at_the_end_is_allowed() -> None:
    assert appended_columns(OLD, OLD) == []
    new = [*OLD, ("c", "double"), ("d", {"type": "array", "elementType": "long", "containsNull": True})]
    assert appended_columns(OLD, new) == new[2:]
    assert appended_columns([("A", "long")], [("a", "long")]) == []  # Spark's names: case-insensitive


def test_dropping_a_column_is_refused_with_flinks_message() -> None:
    with pytest.raises(QueryChangeError) as caught:
        appended_columns(OLD, OLD[:1])
    assert str(caught.value) == (
        "Failed to modify query because drop column is unsupported. When modifying a query, you can only "
        "append new columns at the end of original schema. The original schema has 2 columns, but the "
        "newly derived schema from the query has 1 columns."
    )


@pytest.mark.parametrize(
    ("new", "mismatch"),
    [
        ([("b", "string"), ("a", "long")], "position 1: Original column is [`a` BIGINT], but new column is "
                                          "[`b` STRING]."),
        ([("a", "long"), ("b", "integer"), ("c", "long")],
         "position 2: Original column is [`b` STRING], but new column is [`b` INT]."),
        ([("x", "long"), ("b", "string")], "position 1: Original column is [`a` BIGINT], but new column is "
                                          "[`x` BIGINT]."),
        ([("c", "long"), *OLD], "position 1: Original column is [`a` BIGINT], but new column is "
                                "[`c` BIGINT]."),
    ],
    ids=["reorder", "retype", "rename", "insert-before"],
)
def test_other_changes_are_refused_with_the_position(new: list, mismatch: str) -> None:
    with pytest.raises(QueryChangeError) as caught:
        appended_columns(OLD, new)
    assert str(caught.value) == (
        "When modifying the query of a materialized table, currently only support appending columns at "
        "the end of original schema, dropping, renaming, and reordering columns are not supported.\n"
        f"Column mismatch at {mismatch}"
    )


def test_schema_json_and_the_stored_order() -> None:
    schema = ('{"type":"struct","fields":[{"name":"ds","type":"string","nullable":true,"metadata":{}},'
              '{"name":"n","type":"long","nullable":false,"metadata":{}}]}')
    assert schema_columns(schema) == [("ds", "string"), ("n", "long")]
    # Spark stores a partitioned table's partition columns last
    assert stored_order(schema_columns(schema), ["DS"]) == [("n", "long"), ("ds", "string")]


def definition(partitioned: bool = False, mode: str = "FULL", query: str = "SELECT ds, 1 AS n FROM s"):
    return parse_definition(
        "CREATE OR ALTER MATERIALIZED TABLE db.t\n"
        + ("PARTITIONED BY (ds)\n" if partitioned else "")
        + f"FRESHNESS = INTERVAL '1' DAY\nREFRESH_MODE = {mode}\nAS {query}"
    )


def test_definition_change_of_a_table() -> None:
    old = definition()
    query = [("ds", "string"), ("n", "integer"), ("extra", "string")]
    assert check_definition_change(old, definition(), [("ds", "string"), ("n", "integer")], query) == [
        ("extra", "string")
    ]
    # never refreshed: no data to keep compatible
    assert check_definition_change(old, definition(), None, [("other", "long")]) == []
    with pytest.raises(QueryChangeError, match="drop column is unsupported"):
        check_definition_change(old, definition(), [("ds", "string"), ("n", "integer")], [("ds", "string")])


def test_partitioned_table_keeps_its_layout_and_schema() -> None:
    old = definition(partitioned=True)
    stored = [("n", "integer"), ("ds", "string")]
    # the same columns in the query's own order: the stored order is data columns, then partitions
    assert check_definition_change(old, definition(partitioned=True), stored, [("ds", "string"),
                                                                               ("n", "integer")]) == []
    with pytest.raises(QueryChangeError, match=r"partitioned table db.t cannot append columns \(`x` BIGINT"):
        check_definition_change(old, definition(partitioned=True), stored,
                                [("ds", "string"), ("n", "integer"), ("x", "long")])
    with pytest.raises(QueryChangeError, match=r"cannot change PARTITIONED BY \(ds\) to \(\)"):
        check_definition_change(old, definition(), stored, [("n", "integer"), ("ds", "string")])
    with pytest.raises(QueryChangeError, match="cannot change the refresh mode FULL to CONTINUOUS"):
        check_definition_change(old, definition(partitioned=True, mode="CONTINUOUS"), stored, stored)


def test_continuous_table_keeps_its_query() -> None:
    old = definition(mode="CONTINUOUS")
    stored = [("ds", "string"), ("n", "integer")]
    # a new freshness is fine, a new query is not: the stream resumes from the old one's checkpoint
    assert check_definition_change(old, definition(mode="CONTINUOUS"), stored, stored) == []
    with pytest.raises(QueryChangeError, match=r"CONTINUOUS table db\.t cannot change its query"):
        check_definition_change(old, definition(mode="CONTINUOUS", query="SELECT ds, 2 AS n FROM s"), stored,
                                stored)
