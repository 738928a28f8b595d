"""CREATE OR ALTER MATERIALIZED TABLE of an existing table: Flink's schema rule and its messages."""

from __future__ import annotations

import json

import pytest
from hmsclient.genthrift.hive_metastore import ttypes

from airflow_provider_staged.catalogs.metastore.tables import SCHEMA_KEY
from airflow_provider_staged.materialized.definition import parse_definition
from airflow_provider_staged.materialized.query_change import (
    QueryChangeError,
    appended_columns,
    check_definition_change,
    schema_columns,
    stored_order,
)
from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.kinds.hive_partitions import check_same_schema, switched_schema
from airflow_provider_staged.staging.manifest import Manifest

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
        "Dropping of persisted column `b` is not supported. "
        "Failed to modify query because drop column is unsupported. When modifying a query, you can only "
        "append new columns at the end of original schema. The original schema has 2 columns, but the "
        "newly derived schema from the query has 1 columns."
    )
    # SqlMaterializedTableNodeToOperationConverterTest.alterQuery: 'AS SELECT a, b FROM t3' names `c`.
    base = [("a", "long"), ("b", "string"), ("c", "integer"), ("d", "string")]
    with pytest.raises(QueryChangeError, match=r"^Dropping of persisted column `c` is not supported\."):
        appended_columns(base, base[:2])
    with pytest.raises(QueryChangeError, match=r"^Dropping of persisted column `b` is not supported\."):
        appended_columns(base, [("a", "long"), ("x", "string"), ("c", "integer")])


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


def test_partitioned_table_keeps_its_layout() -> None:
    old = definition(partitioned=True)
    stored = [("n", "integer"), ("ds", "string")]
    # the same columns in the query's own order: the stored order is data columns, then partitions
    assert check_definition_change(old, definition(partitioned=True), stored, [("ds", "string"),
                                                                               ("n", "integer")]) == []
    # an appended column goes before the partition columns, as Spark stores them
    assert check_definition_change(old, definition(partitioned=True), stored,
                                   [("ds", "string"), ("n", "integer"), ("x", "long")]) == [("x", "long")]
    with pytest.raises(QueryChangeError, match="drop column is unsupported"):
        check_definition_change(old, definition(partitioned=True), stored, [("ds", "string")])
    with pytest.raises(QueryChangeError, match=r"cannot change PARTITIONED BY \(ds\) to \(\)"):
        check_definition_change(old, definition(), stored, [("n", "integer"), ("ds", "string")])
    # Flink's words (SqlNodeToOperationSqlCreateOrAlterMaterializedTableConverterTest), then the modes.
    with pytest.raises(QueryChangeError, match=r"^Changing of REFRESH MODE is unsupported: CREATE OR ALTER "
                       r"of .* cannot change the refresh mode FULL to CONTINUOUS"):
        check_definition_change(old, definition(partitioned=True, mode="CONTINUOUS"), stored, stored)


def test_continuous_table_keeps_its_query() -> None:
    old = definition(mode="CONTINUOUS")
    stored = [("ds", "string"), ("n", "integer")]
    # a new freshness is fine, a new query is not: the stream resumes from the old one's checkpoint
    assert check_definition_change(old, definition(mode="CONTINUOUS"), stored, stored) == []
    with pytest.raises(QueryChangeError, match=r"CONTINUOUS table db\.t cannot change its query"):
        check_definition_change(old, definition(mode="CONTINUOUS", query="SELECT ds, 2 AS n FROM s"), stored,
                                stored)


def spark_schema(*fields: tuple[str, str, bool]) -> str:
    return json.dumps({"type": "struct", "fields": [
        {"name": name, "type": kind, "nullable": nullable, "metadata": {}} for name, kind, nullable in fields
    ]})


def table_with(*fields: tuple[str, str, bool]) -> ttypes.Table:
    return ttypes.Table(parameters={SCHEMA_KEY: spark_schema(*fields)})


def manifest_of(*fields: tuple[str, str, bool]) -> Manifest:
    return Manifest("/v", schema_json=spark_schema(*fields), columns=[(f[0], f[1]) for f in fields],
                    partition_columns=["ds"])


ID, DS = ("id", "long", False), ("ds", "string", False)


def test_partition_switch_takes_appended_columns_nullable() -> None:
    table = table_with(ID, DS)
    assert switched_schema(table, manifest_of(ID, DS), "db.t") is None
    widened = switched_schema(table, manifest_of(ID, ("extra", "string", False), DS), "db.t")
    assert widened is not None and json.loads(widened.schema_json)["fields"][1] == {
        "name": "extra", "type": "string", "nullable": True, "metadata": {}}  # old partitions: null
    assert [name for name, _ in widened.columns] == ["id", "extra", "ds"]
    # an older version (before the append) switches back in: the table keeps its schema
    wide = table_with(ID, ("extra", "string", True), DS)
    assert switched_schema(wide, manifest_of(ID, DS), "db.t") is None
    check_same_schema(wide, manifest_of(ID, DS), "db.t")
    with pytest.raises(StagingError, match="partition rollback cannot change its schema"):
        check_same_schema(table, manifest_of(ID, ("extra", "string", True), DS), "db.t")


@pytest.mark.parametrize("fields", [
    (("extra", "string", True), ID, DS),  # inserted before
    (("id", "string", False), DS),  # retyped
    (("id", "long", True), DS),  # same length, other nullability: as before, refused
    (ID, ("ds", "date", False)),  # partition column retyped
], ids=["insert", "retype", "nullability", "partition-type"])
def test_partition_switch_refuses_other_changes(fields: tuple[tuple[str, str, bool], ...]) -> None:
    with pytest.raises(StagingError, match=r"no longer matches table db\.t: a partition refresh can only"):
        switched_schema(table_with(ID, DS), manifest_of(*fields), "db.t")
