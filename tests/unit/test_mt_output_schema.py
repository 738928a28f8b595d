"""A materialized table's columns from its column list and its query's schema (output_schema):
the vectors of Flink's SqlMaterializedTableNodeToOperationConverterTest, each named after its
test method, with the query schemas Spark reports for them."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

import pytest

from airflow_provider_staged.materialized.definition import DefinitionError, parse_definition
from airflow_provider_staged.materialized.output_schema import (
    QueryColumn,
    SqlType,
    declared_type,
    implicit_cast,
    output_columns,
    projected_query,
    query_columns,
    refresh_query,
    spark_type,
)

# SELECT 1 AS shop_id, 2 AS user_id
SHOPS = [QueryColumn("shop_id", "integer", False), QueryColumn("user_id", "integer", False)]
# Flink's t1 and t3: a BIGINT NOT NULL, b STRING, c INT, d STRING
T1 = [QueryColumn("a", "long", False), QueryColumn("b", "string", True),
      QueryColumn("c", "integer", True), QueryColumn("d", "string", True)]
AS_SHOPS = " FRESHNESS = INTERVAL '30' SECOND AS SELECT 1 as shop_id, 2 as user_id"


def definition(text: str):
    return parse_definition(text, "<statement>")


def columns(text: str, query: list[QueryColumn]) -> list[str]:
    return [str(column) for column in output_columns(definition(text), query)]


def failure(text: str, query: list[QueryColumn]) -> DefinitionError:
    with pytest.raises(DefinitionError) as info:
        output_columns(definition(text), query)
    return info.value


SHOPS_TABLE = "CREATE MATERIALIZED TABLE users_shops "
MTBL1 = "CREATE MATERIALIZED TABLE mtbl1"
case = pytest.param


@pytest.mark.parametrize(("text", "query", "expected"), [
    case(SHOPS_TABLE + "(shop_id, user_id)" + AS_SHOPS, SHOPS,
         ["shop_id INT NOT NULL", "user_id INT NOT NULL"], id="createMaterializedTableSuccessCase-names"),
    case(SHOPS_TABLE + "(user_id, shop_id)" + AS_SHOPS, SHOPS,
         ["user_id INT NOT NULL", "shop_id INT NOT NULL"], id="createMaterializedTableSuccessCase-reorder"),
    case(SHOPS_TABLE + "(user_id INT, shop_id BIGINT)" + AS_SHOPS, SHOPS,
         ["shop_id BIGINT", "user_id INT"], id="createMaterializedTableSuccessCase-typed"),
    case(SHOPS_TABLE + "(user_id INT, shop_id BIGINT, primary key(user_id) not enforced)" + AS_SHOPS, SHOPS,
         ["shop_id BIGINT", "user_id INT NOT NULL"], id="createMaterializedTableSuccessCase-typed-key"),
    case(SHOPS_TABLE + "(primary key(user_id) not enforced)" + AS_SHOPS, SHOPS,
         ["shop_id INT NOT NULL", "user_id INT NOT NULL"], id="createMaterializedTableSuccessCase-key"),
    case(SHOPS_TABLE + "FRESHNESS = INTERVAL '30' SECOND AS SELECT "
         "CAST(1 AS DOUBLE) as shop_id, CAST(2 AS STRING) as user_id",
         [QueryColumn("shop_id", "double", False), QueryColumn("user_id", "string", False)],
         ["shop_id DOUBLE NOT NULL", "user_id STRING NOT NULL"],
         id="createMaterializedTableSuccessCase-casts"),
    # Flink's watermark is refused here (as before); the column from the create part stays.
    case(SHOPS_TABLE + "(ts TIMESTAMP(3)) FRESHNESS = INTERVAL '30' SECOND "
         "AS SELECT current_timestamp() as ts, 1 as shop_id, 2 as user_id",
         [QueryColumn("ts", "timestamp", False), *SHOPS],
         ["ts TIMESTAMP(3)", "shop_id INT NOT NULL", "user_id INT NOT NULL"],
         id="createMaterializedTableWithWatermarkUsingColumnFromCreatePart"),
    case(MTBL1 + " (\n   CONSTRAINT ct1 PRIMARY KEY(a) NOT ENFORCED)\nPARTITIONED BY (a, d)\n"
         "FRESHNESS = INTERVAL '30' SECOND\nREFRESH_MODE = FULL\nAS SELECT * FROM t1",
         T1, ["a BIGINT NOT NULL", "b STRING", "c INT", "d STRING"], id="testCreateMaterializedTable"),
])
def test_flink_success_cases(text: str, query: list[QueryColumn], expected: list[str]) -> None:
    assert columns(text, query) == expected


COUNT = "The number of columns in the column list must match the number of columns in the source schema."
# Flink's newest converter counts positions from 1 (before: 'shop_id' at position 0).
INCOMPATIBLE = ("Incompatible types for sink column 'shop_id' at position 1. The source column has type "
                "'INT NOT NULL', while the target column has type 'STRING'.")
UNUSED = ("Invalid schema. All persisted (physical and metadata) columns in the schema part need to be "
          "present in the query part.\nHowever, physical column `{}` could not be found in the query.")
NULLABLE_HINT = (" Spark reads the columns of Hive tables as nullable (a filter IS NOT NULL does not change "
                 "that): declare the column with its type in the column list (`d STRING NOT NULL`), or give "
                 "it a value where it is null in the query (`coalesce(d, ...) AS d`)")
FORMATTER = ("Materialized table option 'partition.fields.c.date-formatter' only supports referring to char, "
             "varchar and string type partition column. Column `c` type is INT.")


@pytest.mark.parametrize(("text", "query", "message", "place"), [
    case(SHOPS_TABLE + "(shop_id)" + AS_SHOPS, SHOPS, COUNT, (1, 1), id="createWithInvalidSchema-fewer"),
    case(SHOPS_TABLE + "(id, name, address)" + AS_SHOPS, SHOPS, COUNT, (1, 1),
         id="createWithInvalidSchema-more"),
    case(SHOPS_TABLE + "(id, name)" + AS_SHOPS, SHOPS, "Column 'id' not found in the source schema.", (1, 40),
         id="createWithInvalidSchema-unknown"),
    case(SHOPS_TABLE + "(shop_id STRING, user_id STRING)" + AS_SHOPS, SHOPS, INCOMPATIBLE, (1, 40),
         id="createWithInvalidSchema-incompatible"),
    case(SHOPS_TABLE + "(shop_id STRING, name STRING)" + AS_SHOPS, SHOPS, INCOMPATIBLE, (1, 40),
         id="createWithInvalidSchema-incompatible-first"),
    case(SHOPS_TABLE + "(a INT, b INT)" + AS_SHOPS, SHOPS, UNUSED.format("a"), (1, 40),
         id="createWithInvalidSchema-not-in-query"),
    case(SHOPS_TABLE + "(shop_id INT, b INT)" + AS_SHOPS, SHOPS, UNUSED.format("b"), (1, 53),
         id="createWithInvalidSchema-one-not-in-query"),
    case(SHOPS_TABLE + "(shop_id INT, user_id INT, PRIMARY KEY(id) NOT ENFORCED)" + AS_SHOPS, SHOPS,
         "Primary key column 'id' is not defined in the schema at line 1, column 78", (1, 78),
         id="createWithInvalidSchema-key-unknown"),
    case(MTBL1 + " (\n   CONSTRAINT ct1 PRIMARY KEY(e) NOT ENFORCED)\nFRESHNESS = INTERVAL '30' SECOND\n"
         "AS SELECT * FROM t1", T1,
         "Primary key column 'e' is not defined in the schema at line 2, column 31", (2, 31),
         id="createWithInvalidSchema-key-not-in-query"),
    case(MTBL1 + " (\n   CONSTRAINT ct1 PRIMARY KEY(d) NOT ENFORCED)\nFRESHNESS = INTERVAL '30' SECOND\n"
         "AS SELECT * FROM t1", T1, "Invalid primary key 'ct1'. Column 'd' is nullable." + NULLABLE_HINT,
         (2, 31), id="createWithInvalidSchema-key-nullable"),
    case(MTBL1 + " (PRIMARY KEY(d) NOT ENFORCED) AS SELECT * FROM t1", T1,
         "Invalid primary key 'PK_d'. Column 'd' is nullable.", (1, 46),
         id="createWithInvalidSchema-unnamed-key-nullable"),
    case(MTBL1 + "\nPARTITIONED BY (a, e)\nFRESHNESS = INTERVAL '30' SECOND\nREFRESH_MODE = FULL\n"
         "AS SELECT * FROM t1", T1,
         "Partition column 'e' not defined in the query's schema. Available columns: ['a', 'b', 'c', 'd']",
         (2, 20), id="createWithInvalidPartitions-unknown"),
    case(MTBL1 + "\nPARTITIONED BY (b, c)\nWITH (\n 'partition.fields.c.date-formatter' = 'yyyy-MM-dd'\n)\n"
         "FRESHNESS = INTERVAL '30' SECOND\nREFRESH_MODE = FULL\nAS SELECT * FROM t3", T1, FORMATTER, (4, 2),
         id="createWithInvalidPartitions-formatter-type"),
])
def test_flink_failed_cases(text: str, query: list[QueryColumn], message: str,
                            place: tuple[int, int]) -> None:
    err = failure(text, query)
    assert err.message.startswith(message)
    assert (err.line, err.column) == place


@pytest.mark.parametrize("operation", ["CREATE ", "CREATE OR ALTER "])
@pytest.mark.parametrize(("columns_clause", "expected"), [
    ("(shop_id, user_id)", ["shop_id INT NOT NULL", "user_id INT NOT NULL"]),
    ("(user_id, shop_id)", ["user_id INT NOT NULL", "shop_id INT NOT NULL"]),
    ("(user_id INT, shop_id BIGINT)", ["shop_id BIGINT", "user_id INT"]),
    # A declared NOT NULL stays (the query's 1 is NOT NULL too).
    ("(user_id INT, shop_id BIGINT NOT NULL)", ["shop_id BIGINT NOT NULL", "user_id INT"]),
    ("(user_id INT, shop_id BIGINT, PRIMARY KEY(user_id) NOT ENFORCED)",
     ["shop_id BIGINT", "user_id INT NOT NULL"]),
    ("(PRIMARY KEY(user_id) NOT ENFORCED)", ["shop_id INT NOT NULL", "user_id INT NOT NULL"]),
])
def test_flink_create_or_alter_schemas(operation: str, columns_clause: str, expected: list[str]) -> None:
    """SqlMaterializedTableNodeToOperationConverterTest.createMaterializedTableSuccessCase with
    its ``createOrAlter(CREATE_OPERATION)`` and ``createOrAlter(CREATE_OR_ALTER_OPERATION)``
    vectors: both statements derive the same columns (the METADATA ones are refused here)."""
    text = f"{operation}MATERIALIZED TABLE users_shops {columns_clause}{AS_SHOPS}"
    assert columns(text, SHOPS) == expected


def test_flink_create_or_alter_incompatible_type_counts_from_one() -> None:
    """SqlNodeToOperationSqlCreateOrAlterMaterializedTableConverterTest
    .createOrAlterForExistingMaterializedTableFailedCase: 'b' is the second declared column."""
    err = failure("CREATE OR ALTER MATERIALIZED TABLE mt (\n   a BIGINT, b INT, c INT, d INT,    CONSTRAINT "
                  "ct1 PRIMARY KEY(a) NOT ENFORCED)\nAS SELECT * FROM t1", T1)
    assert err.message == ("Incompatible types for sink column 'b' at position 2. The source column has type "
                           "'STRING', while the target column has type 'INT'.")
    assert (err.line, err.column) == (2, 14)


def test_key_of_a_typed_column_is_not_null_and_a_typed_declaration_fixes_a_nullable_key() -> None:
    text = "CREATE MATERIALIZED TABLE m (d STRING NOT NULL, PRIMARY KEY(d) NOT ENFORCED) AS SELECT * FROM t1"
    assert columns(text, T1) == ["a BIGINT NOT NULL", "b STRING", "c INT", "d STRING NOT NULL"]
    text = "CREATE MATERIALIZED TABLE m (d STRING PRIMARY KEY NOT ENFORCED) AS SELECT * FROM t1"
    assert columns(text, T1)[3] == "d STRING NOT NULL"


def test_formatter_on_a_string_column_and_a_list_that_renames_case() -> None:
    text = ("CREATE MATERIALIZED TABLE m PARTITIONED BY (ds) WITH ('partition.fields.ds.date-formatter' = "
            "'yyyy-MM-dd') FRESHNESS = INTERVAL '1' DAY AS SELECT ds, n FROM t")
    query = [QueryColumn("ds", "string", True), QueryColumn("n", "long", False)]
    assert columns(text, query) == ["ds STRING", "n BIGINT NOT NULL"]
    # The query's names are Spark's, in its case; the table's are lower-case (the metastore's).
    query = [QueryColumn("DS", "string", True), QueryColumn("N", "long", True)]
    assert columns("CREATE MATERIALIZED TABLE m (n, ds) AS SELECT DS, N FROM t", query) == [
        "n BIGINT", "ds STRING"]


@pytest.mark.parametrize(("source", "target", "allowed"), [
    ("integer", "BIGINT", True), ("byte", "SMALLINT", True), ("long", "DECIMAL(19, 0)", True),
    ("long", "DECIMAL(18, 0)", False), ("integer", "DECIMAL(12, 2)", True),
    ("decimal(10,2)", "DECIMAL(12, 4)", True), ("decimal(10,2)", "DECIMAL(10, 3)", False),
    ("decimal(10,2)", "DOUBLE", True), ("long", "FLOAT", True), ("float", "DOUBLE", True),
    ("double", "FLOAT", False), ("long", "INT", False), ("integer", "STRING", False),
    ("string", "INT", False), ("string", "VARCHAR(10)", True), ("char(3)", "STRING", True),
    ("date", "TIMESTAMP(3)", True), ("timestamp", "DATE", False), ("timestamp", "TIMESTAMP(3)", True),
    ("timestamp_ntz", "TIMESTAMP_LTZ(3)", True), ("boolean", "BOOLEAN", True), ("boolean", "INT", False),
    ("binary", "BYTES", True), ("void", "DATE", True), ("date", "DATE", True),
])
def test_implicit_casts(source: str, target: str, allowed: bool) -> None:
    kind = declared_type(target)
    assert kind is not None
    assert implicit_cast(spark_type(source), kind) is allowed


@pytest.mark.parametrize(("written", "shown", "spark"), [
    ("INTEGER", "INT", "INT"), ("decimal(10,2)", "DECIMAL(10, 2)", "DECIMAL(10, 2)"),
    ("DEC", "DECIMAL(10, 0)", "DECIMAL(10, 0)"), ("VARCHAR(2147483647)", "STRING", "STRING"),
    ("varchar(5)", "VARCHAR(5)", "STRING"), ("TIMESTAMP", "TIMESTAMP(6)", "TIMESTAMP"),
    ("TIMESTAMP(3) WITHOUT TIME ZONE", "TIMESTAMP(3)", "TIMESTAMP"),
    ("TIMESTAMP(3) WITH LOCAL TIME ZONE", "TIMESTAMP(3) WITH LOCAL TIME ZONE", "TIMESTAMP"),
    ("double  precision", "DOUBLE", "DOUBLE"), ("BYTES", "BYTES", "BINARY"),
])
def test_declared_types(written: str, shown: str, spark: str) -> None:
    kind = declared_type(written)
    assert kind is not None and (str(kind), kind.spark) == (shown, spark)


@pytest.mark.parametrize("written", ["ARRAY<INT>", "MAP<STRING, INT>", "ROW<a INT>", "INT(3)",
                                     "TIMESTAMP WITH TIME ZONE", "INTERVAL DAY", "GEOMETRY"])
def test_types_not_supported_in_the_column_list(written: str) -> None:
    assert declared_type(written) is None
    text = f"CREATE MATERIALIZED TABLE m (c {written}) AS SELECT c FROM t"
    err = failure(text, [QueryColumn("c", "integer", True)])
    assert err.message.startswith(f"type {written} of column 'c' is not supported in the column list")
    assert (err.line, err.column) == (1, 30)


def test_spark_types_in_flink_words() -> None:
    schema = ('{"type":"struct","fields":[{"name":"a","type":"long","nullable":false,"metadata":{}},'
              '{"name":"x","type":{"type":"array","elementType":"integer","containsNull":true},'
              '"nullable":true,"metadata":{}},{"name":"m","type":{"type":"map","keyType":"string",'
              '"valueType":"double","valueContainsNull":false},"nullable":true,"metadata":{}},'
              '{"name":"s","type":{"type":"struct","fields":[{"name":"f","type":"decimal(5,1)",'
              '"nullable":false,"metadata":{}}]},"nullable":true,"metadata":{}}]}')
    found = query_columns(schema)
    assert [(c.name, str(spark_type(c.type)), c.nullable) for c in found] == [
        ("a", "BIGINT", False), ("x", "ARRAY<INT>", True), ("m", "MAP<STRING, DOUBLE NOT NULL>", True),
        ("s", "ROW<`f` DECIMAL(5, 1) NOT NULL>", True),
    ]
    assert spark_type("timestamp") == SqlType("TIMESTAMP_LTZ")


def test_projection_reorders_casts_and_quotes() -> None:
    reorder = definition("CREATE MATERIALIZED TABLE m (user_id, shop_id)" + AS_SHOPS)
    assert projected_query(reorder, SHOPS) == (
        "SELECT `user_id`, `shop_id` FROM (\nSELECT 1 as shop_id, 2 as user_id\n) AS _materialized_columns"
    )
    typed = definition("CREATE MATERIALIZED TABLE m (user_id INT, shop_id BIGINT)" + AS_SHOPS)
    assert projected_query(typed, SHOPS) == (
        "SELECT CAST(`shop_id` AS BIGINT) AS `shop_id`, `user_id` FROM (\n"
        "SELECT 1 as shop_id, 2 as user_id\n) AS _materialized_columns"
    )
    # Another query text with the same columns (a snapshot or streaming rewrite of it).
    assert projected_query(typed, SHOPS, "SELECT * FROM v").endswith("FROM (\nSELECT * FROM v\n) AS "
                                                                     "_materialized_columns")
    upper = [QueryColumn("Shop_Id", "integer", False), QueryColumn("USER_ID", "integer", False)]
    assert projected_query(reorder, upper).startswith("SELECT `user_id`, `shop_id` FROM")


@pytest.mark.parametrize("text", [
    "CREATE MATERIALIZED TABLE m" + AS_SHOPS,
    "CREATE MATERIALIZED TABLE m (shop_id, user_id)" + AS_SHOPS,
    "CREATE MATERIALIZED TABLE m (user_id INT NOT NULL, PRIMARY KEY (shop_id) NOT ENFORCED)" + AS_SHOPS,
])
def test_projection_leaves_a_query_that_already_fits(text: str) -> None:
    assert projected_query(definition(text), SHOPS) == "SELECT 1 as shop_id, 2 as user_id"


def test_projection_needs_named_query_columns() -> None:
    typed = definition("CREATE MATERIALIZED TABLE m (n BIGINT) AS SELECT n, count(1) FROM t GROUP BY n")
    with pytest.raises(DefinitionError, match="name the column in the query with AS"):
        projected_query(typed, [QueryColumn("n", "integer", True), QueryColumn("count(1)", "long", False)])


def test_a_definition_file_error_names_the_file_and_line() -> None:
    text = "CREATE MATERIALIZED TABLE m\nPARTITIONED BY (e)\nAS SELECT 1 AS a FROM t"
    with pytest.raises(DefinitionError) as info:
        output_columns(parse_definition(text, "defs/m.sql"), [QueryColumn("a", "integer", False)])
    assert str(info.value).startswith("defs/m.sql:2: PARTITIONED BY: Partition column 'e' not defined")


class AnalysingSpark:
    """Spark's analysis of any query: the columns of ``SELECT 1 AS shop_id, 2 AS user_id``."""

    def __init__(self) -> None:
        self.analysed: list[str] = []

    def sql(self, text: str) -> Any:
        self.analysed.append(text)
        fields = [{"name": c.name, "type": c.type, "nullable": c.nullable, "metadata": {}} for c in SHOPS]
        schema = SimpleNamespace(json=lambda: json.dumps({"type": "struct", "fields": fields}))
        return SimpleNamespace(schema=schema)


def test_refresh_query_analyses_the_definitions_query_and_projects_the_given_one() -> None:
    spark = AnalysingSpark()
    typed = definition("CREATE MATERIALIZED TABLE m (user_id, shop_id)" + AS_SHOPS)
    assert refresh_query(typed, spark, "SELECT * FROM snapshot") == (
        "SELECT `user_id`, `shop_id` FROM (\nSELECT * FROM snapshot\n) AS _materialized_columns")
    assert spark.analysed == ["SELECT 1 as shop_id, 2 as user_id"]
    failing = definition("CREATE MATERIALIZED TABLE m (id, name)" + AS_SHOPS)
    with pytest.raises(DefinitionError, match="Column 'id' not found in the source schema"):
        refresh_query(failing, spark)


def test_a_refresh_without_a_spark_session_refuses_a_column_list() -> None:
    from airflow_provider_staged.materialized.refresh import table_query

    engine = cast(Any, SimpleNamespace())  # e.g. spark-submit: no session here to analyse with
    plain = definition("CREATE MATERIALIZED TABLE m" + AS_SHOPS)
    assert table_query(plain, engine, plain.query) == plain.query
    with pytest.raises(ValueError, match="needs the embedded or connect engine"):
        table_query(definition("CREATE MATERIALIZED TABLE m (user_id, shop_id)" + AS_SHOPS), engine, "q")


@pytest.mark.parametrize(("text", "query", "message", "place"), [
    # testAlterMaterializedTableAsQueryWithConflictColumnName's query: Flink adds column `a0`.
    ("CREATE OR ALTER MATERIALIZED TABLE base_mtbl\nPARTITIONED BY (a, d)\n"
     "AS SELECT a, b, c, d, c as a FROM t3",
     [*T1, QueryColumn("a", "integer", True)], "the query's columns 1 and 5 are both named 'a'", (3, 4)),
    ("CREATE MATERIALIZED TABLE t AS SELECT x AS A, y AS a FROM s",
     [QueryColumn("A", "integer", True), QueryColumn("a", "integer", True)],
     "the query's columns 1 and 2 are both named 'A' and 'a'", (1, 32)),
    ("CREATE MATERIALIZED TABLE t (a, b) AS SELECT 1 AS a, 2 AS a, 3 AS b",
     [QueryColumn("a", "integer", False), QueryColumn("a", "integer", False),
      QueryColumn("b", "integer", False)],
     "the query's columns 1 and 2 are both named 'a'", (1, 39)),
])
def test_query_columns_of_one_name_are_refused_at_the_query(
    text: str, query: list[QueryColumn], message: str, place: tuple[int, int]
) -> None:
    """Spark's analysis accepts two output columns of one name, its write of the table does not:
    every refresh failed after CREATE (or CREATE OR ALTER) succeeded. Flink's validator renames the
    second (`a0`, SqlMaterializedTableNodeToOperationConverterTest
    .testAlterMaterializedTableAsQueryWithConflictColumnName); a column name nobody chose would
    then appear in the table, so here the query is refused and the user names the column."""
    err = failure(text, query)
    assert err.message.startswith(message + ": a table's columns need distinct names; name one apart with AS")
    assert (err.line, err.column) == place
