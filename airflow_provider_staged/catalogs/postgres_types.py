"""Spark → PostgreSQL column types of staged JDBC tables (pure: no Spark, Airflow or database).

It reads Spark's JSON schema (``df.schema.jsonValue()``), so it runs wherever the job runs.

============================================  ==============================================
Spark type                                    PostgreSQL column type
============================================  ==============================================
boolean                                       boolean
byte (tinyint), short (smallint)              smallint (PostgreSQL has no 1-byte integer)
integer                                       integer
long (bigint)                                 bigint
float                                         real
double                                        double precision
decimal(p, s)                                 numeric(p, s)
string, char(n), varchar(n), collated string  text (Spark does not enforce lengths on write)
binary                                        bytea
date                                          date
timestamp (instant, session time zone)        timestamp with time zone
timestamp_ntz (wall-clock time)               timestamp without time zone
array<T>, T one of the scalar types above     T[] (one dimension; ``containsNull`` allowed)
============================================  ==============================================

A non-nullable Spark field becomes ``NOT NULL``. Column names must be plain identifiers
(letters, digits, underscores; at most 63 characters, PostgreSQL's limit) and are lower-cased,
so that readers need no quotes; alias computed columns (``count(*) AS n``).

Unsupported, with an error naming the column and its type: struct, map, nested arrays,
array<binary> (Spark's JDBC writer cannot bind them), intervals, variant, time, and void
(an untyped ``NULL``: cast it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from airflow_provider_staged.staging.identifiers import InvalidIdentifierError, validate_name

POSTGRES_MAX_NAME_LENGTH = 63

_SCALARS = {
    "boolean": "boolean",
    "byte": "smallint",
    "short": "smallint",
    "integer": "integer",
    "long": "bigint",
    "float": "real",
    "double": "double precision",
    "string": "text",
    "binary": "bytea",
    "date": "date",
    "timestamp": "timestamp with time zone",
    "timestamp_ntz": "timestamp without time zone",
}
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
_TEXT = re.compile(r"^(?:(?:var)?char\(\d+\)|string collate \w+)$")


class UnsupportedColumnTypeError(ValueError):
    """A column whose Spark type has no PostgreSQL column type here (the message names both)."""


@dataclass(frozen=True)
class PostgresColumn:
    name: str
    type: str
    nullable: bool = True

    @property
    def definition(self) -> str:
        """The type part of the column definition (trusted text: built from the table above)."""
        return self.type if self.nullable else f"{self.type} NOT NULL"


def _type_text(data_type: Any) -> str:
    """Spark's own spelling of a JSON schema type, for error messages."""
    if isinstance(data_type, str):
        return data_type
    kind = data_type.get("type")
    if kind == "array":
        return f"array<{_type_text(data_type.get('elementType'))}>"
    if kind == "map":
        return f"map<{_type_text(data_type.get('keyType'))},{_type_text(data_type.get('valueType'))}>"
    if kind == "struct":
        inner = ",".join(f"{f.get('name')}:{_type_text(f.get('type'))}" for f in data_type.get("fields", []))
        return f"struct<{inner}>"
    return str(kind)


def scalar_type(data_type: Any) -> str | None:
    """The PostgreSQL type of a scalar Spark type, or None when it has none."""
    if not isinstance(data_type, str):
        return None
    if data_type in _SCALARS:
        return _SCALARS[data_type]
    decimal = _DECIMAL.match(data_type)
    if decimal:
        return f"numeric({int(decimal.group(1))},{int(decimal.group(2))})"
    if _TEXT.match(data_type):
        return "text"
    return None


def postgres_type(data_type: Any, column: str) -> str:
    """The PostgreSQL type of ``column``'s Spark type (JSON schema form); raise naming both."""
    found = scalar_type(data_type)
    if found is None and isinstance(data_type, dict) and data_type.get("type") == "array":
        element = data_type.get("elementType")
        # Spark's JDBC writer binds array elements by type name: it cannot build bytea arrays.
        element_type = None if element == "binary" else scalar_type(element)
        found = f"{element_type}[]" if element_type else None
    if found is None:
        raise UnsupportedColumnTypeError(
            f"column {column!r} has Spark type {_type_text(data_type)}, which has no PostgreSQL "
            "column type here: cast it in the query (supported: boolean, integers, float, double, "
            "decimal, string, binary, date, timestamp, timestamp_ntz and arrays of those but binary)"
        )
    return found


def postgres_name(name: object, kind: str) -> str:
    """``identifiers.validate_name`` (lower-cased) within PostgreSQL's 63-character limit."""
    validated = validate_name(name, kind)
    if len(validated) > POSTGRES_MAX_NAME_LENGTH:
        raise InvalidIdentifierError(
            f"invalid {kind} {name!r}: PostgreSQL names are at most {POSTGRES_MAX_NAME_LENGTH} characters"
        )
    return validated


def column_name(name: object) -> str:
    """A query's column name as the staged table's column name, or raise naming it."""
    try:
        return postgres_name(name, "column name")
    except InvalidIdentifierError as error:
        raise InvalidIdentifierError(f"{error} (alias the column in the query)") from None


def postgres_columns(schema: dict[str, Any]) -> list[PostgresColumn]:
    """The staged table's columns for a Spark schema (``StructType.jsonValue()``)."""
    columns: list[PostgresColumn] = []
    seen: dict[str, str] = {}
    for spark_field in schema.get("fields", []):
        original = spark_field.get("name")
        name = column_name(original)
        if name in seen:
            raise InvalidIdentifierError(
                f"columns {seen[name]!r} and {original!r} are both {name!r} in PostgreSQL: rename one"
            )
        seen[name] = original
        columns.append(
            PostgresColumn(
                name, postgres_type(spark_field.get("type"), name), bool(spark_field.get("nullable", True))
            )
        )
    if not columns:
        raise ValueError("the query produces no columns")
    return columns
