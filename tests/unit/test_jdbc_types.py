"""Spark → PostgreSQL type mapping, JDBC target parsing and names (pure: no server, no Spark)."""

from __future__ import annotations

import pytest

from airflow_provider_staged.catalogs.postgres_connections import PostgresConnection
from airflow_provider_staged.catalogs.postgres_types import (
    PostgresColumn,
    UnsupportedColumnTypeError,
    postgres_columns,
    postgres_type,
)
from airflow_provider_staged.staging.identifiers import InvalidIdentifierError
from airflow_provider_staged.staging.kinds.jdbc_table import (
    JdbcTarget,
    JdbcWriteOptions,
    password_env_var,
)


def _array(element: object) -> dict[str, object]:
    return {"type": "array", "elementType": element, "containsNull": True}


@pytest.mark.parametrize(
    ("spark_type", "expected"),
    [
        ("boolean", "boolean"),
        ("byte", "smallint"),
        ("short", "smallint"),
        ("integer", "integer"),
        ("long", "bigint"),
        ("float", "real"),
        ("double", "double precision"),
        ("decimal(38,18)", "numeric(38,18)"),
        ("decimal(10, 0)", "numeric(10,0)"),
        ("string", "text"),
        ("varchar(20)", "text"),
        ("char(3)", "text"),
        ("string collate UTF8_LCASE", "text"),
        ("binary", "bytea"),
        ("date", "date"),
        ("timestamp", "timestamp with time zone"),
        ("timestamp_ntz", "timestamp without time zone"),
        (_array("long"), "bigint[]"),
        (_array("string"), "text[]"),
        (_array("decimal(5,2)"), "numeric(5,2)[]"),
        (_array("timestamp"), "timestamp with time zone[]"),
    ],
)
def test_supported_types(spark_type: object, expected: str) -> None:
    assert postgres_type(spark_type, "c") == expected


@pytest.mark.parametrize(
    ("spark_type", "shown"),
    [
        (
            {"type": "map", "keyType": "string", "valueType": "integer", "valueContainsNull": True},
            "map<string,integer>",
        ),
        ({"type": "struct", "fields": [{"name": "a", "type": "long"}]}, "struct<a:long>"),
        (_array(_array("long")), "array<array<long>>"),
        (_array("binary"), "array<binary>"),
        ("interval day to second", "interval day to second"),
        ("void", "void"),
        ("variant", "variant"),
    ],
)
def test_unsupported_types_name_column_and_type(spark_type: object, shown: str) -> None:
    with pytest.raises(UnsupportedColumnTypeError, match=rf"column 'payload' has Spark type {shown}"):
        postgres_type(spark_type, "payload")


def test_columns_lower_cased_with_not_null() -> None:
    schema = {
        "type": "struct",
        "fields": [
            {"name": "Id", "type": "long", "nullable": False},
            {"name": "amount", "type": "decimal(12,2)", "nullable": True},
        ],
    }
    assert postgres_columns(schema) == [
        PostgresColumn("id", "bigint", nullable=False),
        PostgresColumn("amount", "numeric(12,2)", nullable=True),
    ]
    assert postgres_columns(schema)[0].definition == "bigint NOT NULL"


@pytest.mark.parametrize("name", ['a"; drop table x; --', "count(1)", "tablé", "x" * 64, "1st", ""])
def test_bad_column_names_rejected(name: str) -> None:
    with pytest.raises(InvalidIdentifierError, match="column name"):
        postgres_columns({"fields": [{"name": name, "type": "long"}]})


def test_columns_equal_after_lower_casing_rejected() -> None:
    with pytest.raises(InvalidIdentifierError, match="'ID' are both 'id'"):
        postgres_columns({"fields": [{"name": "id", "type": "long"}, {"name": "ID", "type": "long"}]})


def test_target_parsing() -> None:
    target = JdbcTarget.parse("jdbc://reporting_db/Public.Daily_Orders")
    assert (target.conn_id, target.schema, target.table) == ("reporting_db", "public", "daily_orders")
    assert target.uri == "jdbc://reporting_db/public.daily_orders"
    assert JdbcTarget.parse("jdbc://db/orders").schema == "public"


@pytest.mark.parametrize(
    "text",
    [
        "public.orders",
        "jdbc://db",
        "jdbc:///public.orders",
        "jdbc://db/public.x; drop table y",
        'jdbc://db/public."x"',
        "jdbc://db/public.`x`",
        "jdbc://db/public.tablé",
        "jdbc://db/pub'lic.x",
        "jdbc://d;b/public.x",
        "jdbc://db/a.b.c",
        "jdbc://db/public." + "t" * 64,
        None,
    ],
)
def test_bad_targets_rejected_naming_the_value(text: object) -> None:
    with pytest.raises(ValueError, match=r"invalid JDBC target") as error:
        JdbcTarget.parse(text)
    assert repr(text) in str(error.value)


def test_per_attempt_names_fit_postgres() -> None:
    target = JdbcTarget.parse("jdbc://db/public." + "t" * 63)
    staged = target.sibling("stg", "20261121T000000-abcdef01")
    assert len(staged) == 63 and staged.startswith("t" * 47) and "__stg_" in staged
    assert staged != target.sibling("stg", "20261121T000000-abcdef02")


def test_secrets_stay_out_of_repr_and_endpoint() -> None:
    connection = PostgresConnection("h", 5432, "db", "user", "s3cret-pass")
    assert "s3cret-pass" not in repr(connection)
    assert "s3cret-pass" not in str(connection.endpoint()) + connection.jdbc_url()
    assert password_env_var("reporting-db.eu") == "STAGED_JDBC_PASSWORD_REPORTING_DB_EU"


@pytest.mark.parametrize("field", ["batch_size", "lock_timeout_ms", "commit_attempts", "num_partitions"])
def test_options_validated(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        JdbcWriteOptions(**{field: 0})


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"batchsize": 500}, "'batchsize'"),
        ({"batch_size": True}, "batch_size True"),
        ({"batch_size": "500"}, "batch_size '500'"),
        ({"count_rows": "yes"}, "count_rows 'yes'"),
    ],
)
def test_options_from_a_mapping_name_the_bad_one(options: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        JdbcWriteOptions.from_mapping(options)


def test_options_from_a_mapping() -> None:
    options = JdbcWriteOptions.from_mapping({"batch_size": 500, "count_rows": True})
    assert (options.batch_size, options.count_rows, options.num_partitions) == (500, True, None)
    assert JdbcWriteOptions.from_mapping(None) == JdbcWriteOptions()


def test_sibling_prefix_starts_every_sibling_name() -> None:
    for table in ("orders", "t" * 63):
        target = JdbcTarget.parse(f"jdbc://db/public.{table}")
        assert target.sibling("old", "20261121T000000-abcdef01").startswith(target.sibling_prefix("old"))


def test_operator_rejects_bad_jdbc_options_when_the_dag_is_parsed() -> None:
    from airflow_provider_staged.airflow.operators.staged_table import StagedCreateTableAsOperator

    with pytest.raises(ValueError, match="'batchsize'"):
        StagedCreateTableAsOperator(
            task_id="t", target="jdbc://db/public.t", sql="SELECT 1", jdbc_options={"batchsize": 1}
        )
    with pytest.raises(ValueError, match=r"not 'db\.t'"):
        StagedCreateTableAsOperator(
            task_id="t", target="db.t", sql="SELECT 1", jdbc_options={"batch_size": 1}
        )
