"""A materialized table's columns from its definition and its query's schema (pure).

Flink (``SqlCreateMaterializedTableConverter`` with ``MergeTableAsUtil``) derives the table's
schema from the query and the optional column list of ``CREATE MATERIALIZED TABLE``:

- no list (or only a ``PRIMARY KEY``): the query's columns;
- names alone, ``(b, a)``: the query's columns in the list's order; the list names each of them;
- typed columns, ``(a INT, b BIGINT NOT NULL)``: the query's columns in the query's order, those
  declared with the declared type (the query's value must cast implicitly to it) and
  nullability; every declared column must be one of the query's;
- a key column is NOT NULL: a declared one becomes so, one of the query must be so already.

Then the partition columns must be columns of the table and a ``date-formatter`` may only name a
string partition column. :func:`output_columns` checks all this with Flink's messages and
returns the table's columns; :func:`projected_query` is the query the refreshes run, which
casts and orders the query's columns as the table has them. The query's schema comes from
Spark's analysis (:func:`query_columns` reads it); nothing here imports Spark.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from airflow_provider_staged.materialized.definition import (
    CREATE,
    EXPECT,
    FORMATTER_KEY,
    Column,
    DefinitionError,
    MaterializedTableDefinition,
    constraint_problem,
)
from airflow_provider_staged.staging.identifiers import InvalidIdentifierError, quote_name

# The alias of the definition's query under the projection.
SOURCE_ALIAS = "_materialized_columns"
_INTEGERS = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_DIGITS = {"TINYINT": 3, "SMALLINT": 5, "INT": 10, "BIGINT": 19}  # integer digits of each
_NUMERIC = (*_INTEGERS, "DECIMAL", "FLOAT", "DOUBLE")
_STRINGS = ("CHAR", "VARCHAR", "STRING")
_BINARIES = ("BINARY", "VARBINARY", "BYTES")
_TIMESTAMPS = ("TIMESTAMP", "TIMESTAMP_LTZ")
# Spark's analysis keeps a column nullable under a filter `IS NOT NULL` (checked on Spark 4.2);
# coalesce with a value that is not null makes it NOT NULL.
_NULLABLE_HINT = (
    " Spark reads the columns of Hive tables as nullable (a filter IS NOT NULL does not change that): "
    "declare the column with its type in the column list ({example}), or give it a value where it "
    "is null in the query (`coalesce({name}, ...) AS {name}`)"
)


@dataclass(frozen=True)
class SqlType:
    """A scalar type as Flink names it (``root`` and its parameters) and as Spark casts to it."""

    root: str  # INT, DECIMAL, VARCHAR, TIMESTAMP, ...; NESTED for arrays, maps and structs
    params: tuple[int, ...] = ()
    shown: str | None = None  # the rendering when it is not root(params): nested types

    def __str__(self) -> str:
        if self.shown is not None:
            return self.shown
        if self.root == "TIMESTAMP_LTZ":
            return f"TIMESTAMP({self.params[0]}) WITH LOCAL TIME ZONE" if self.params else "TIMESTAMP_LTZ"
        return f"{self.root}({', '.join(map(str, self.params))})" if self.params else self.root

    @property
    def spark(self) -> str:
        """Spark SQL's name of the type (what a CAST names)."""
        if self.root in _STRINGS:
            return "STRING"  # Spark's CHAR/VARCHAR are strings with a length check on write
        if self.root in _BINARIES:
            return "BINARY"
        if self.root in _TIMESTAMPS:
            return "TIMESTAMP"  # Spark's timestamps have one precision (microseconds)
        return str(self)


class QueryColumn(NamedTuple):
    """An output column of the query as Spark analyses it (type: its schema JSON)."""

    name: str
    type: Any
    nullable: bool


@dataclass(frozen=True)
class OutputColumn:
    """A column of the table: its name, type and nullability, and how the query gives it."""

    name: str
    type: SqlType
    nullable: bool
    source: str  # the query's column
    cast: bool = False  # CAST(source AS type.spark): a declared type the query does not have

    def __str__(self) -> str:
        return f"{self.name} {_shown(self.type, self.nullable)}"


def query_columns(schema_json: str | Mapping[str, Any]) -> list[QueryColumn]:
    """The columns of a Spark schema (``StructType.json()``), with their nullability."""
    schema = json.loads(schema_json) if isinstance(schema_json, str) else schema_json
    return [QueryColumn(field["name"], field["type"], bool(field.get("nullable", True)))
            for field in schema["fields"]]


def spark_type(kind: Any) -> SqlType:
    """A Spark schema JSON type as Flink names it (``"integer"``: INT, ``"string"``: STRING)."""
    if isinstance(kind, Mapping):
        return SqlType("NESTED", shown=_nested(kind))
    name = str(kind).lower()
    simple = {
        "byte": "TINYINT", "short": "SMALLINT", "integer": "INT", "long": "BIGINT", "float": "FLOAT",
        "double": "DOUBLE", "string": "STRING", "boolean": "BOOLEAN", "date": "DATE",
        "binary": "BYTES", "void": "NULL", "timestamp": "TIMESTAMP_LTZ", "timestamp_ntz": "TIMESTAMP",
    }
    if name in simple:
        return SqlType(simple[name])
    match = re.fullmatch(r"(decimal|char|varchar)\((\d+)(?:,\s*(\d+))?\)", name)
    if match:
        params = tuple(int(part) for part in match.groups()[1:] if part is not None)
        return SqlType(match.group(1).upper(), params)
    return SqlType("NESTED", shown=name.upper())


def _nested(kind: Mapping[str, Any]) -> str:
    if kind.get("type") == "array":
        return f"ARRAY<{_shown(spark_type(kind['elementType']), kind.get('containsNull', True))}>"
    if kind.get("type") == "map":
        value = _shown(spark_type(kind["valueType"]), kind.get("valueContainsNull", True))
        return f"MAP<{spark_type(kind['keyType'])}, {value}>"
    fields = ", ".join(f"`{field['name']}` {_shown(spark_type(field['type']), field.get('nullable', True))}"
                       for field in kind.get("fields", ()))
    return f"ROW<{fields}>"


def _shown(kind: SqlType, nullable: bool) -> str:
    return str(kind) if nullable else f"{kind} NOT NULL"


# Flink's scalar types as a column list declares them: name -> (root, default parameters).
_DECLARED = {
    "BOOLEAN": ("BOOLEAN", ()), "TINYINT": ("TINYINT", ()), "SMALLINT": ("SMALLINT", ()),
    "INT": ("INT", ()), "INTEGER": ("INT", ()), "BIGINT": ("BIGINT", ()), "FLOAT": ("FLOAT", ()),
    "REAL": ("FLOAT", ()), "DOUBLE": ("DOUBLE", ()), "DOUBLE PRECISION": ("DOUBLE", ()),
    "DECIMAL": ("DECIMAL", (10, 0)), "DEC": ("DECIMAL", (10, 0)), "NUMERIC": ("DECIMAL", (10, 0)),
    "CHAR": ("CHAR", (1,)), "VARCHAR": ("VARCHAR", (1,)), "STRING": ("STRING", ()),
    "BINARY": ("BINARY", (1,)), "VARBINARY": ("VARBINARY", (1,)), "BYTES": ("BYTES", ()),
    "DATE": ("DATE", ()), "TIMESTAMP": ("TIMESTAMP", (6,)), "TIMESTAMP_LTZ": ("TIMESTAMP_LTZ", (6,)),
}
_DECLARED_TYPE = re.compile(
    r"(?P<name>[A-Z_]+(?: PRECISION)?)\s*(?:\(\s*(?P<p>\d+)\s*(?:,\s*(?P<s>\d+)\s*)?\))?"
    r"(?P<zone>\s+WITH(?:OUT)?\s+(?:LOCAL\s+)?TIME\s+ZONE)?"
)


def declared_type(text: str) -> SqlType | None:
    """A column list's type as written (``DECIMAL(10, 2)``, ``TIMESTAMP(3)``); None for a type
    not supported here (nested, interval, ...)."""
    match = _DECLARED_TYPE.fullmatch(" ".join(text.upper().split()))
    if match is None or match.group("name") not in _DECLARED:
        return None
    root, defaults = _DECLARED[match.group("name")]
    params = tuple(int(part) for part in (match.group("p"), match.group("s")) if part is not None)
    zone = " ".join((match.group("zone") or "").split())
    if zone:
        if root != "TIMESTAMP":
            return None
        root = "TIMESTAMP_LTZ" if zone == "WITH LOCAL TIME ZONE" else root
        if zone == "WITH TIME ZONE":
            return None
    if len(params) > len(defaults):
        return None
    params = params + defaults[len(params):]
    if root in ("VARCHAR", "VARBINARY") and params[0] == 2147483647:
        return SqlType("STRING" if root == "VARCHAR" else "BYTES")
    return SqlType(root, params)


def implicit_cast(source: SqlType, target: SqlType) -> bool:
    """Whether Flink casts ``source`` to ``target`` implicitly (as INSERT INTO does); NOT NULL
    never blocks (the table's NOT NULL is informational)."""
    if source.root == "NULL" or source == target:
        return True
    if source.root in _NUMERIC and target.root in _NUMERIC:
        if target.root == "DECIMAL":
            digits = _DIGITS.get(source.root)
            if source.root == "DECIMAL":
                precision, scale = source.params
                return target.params[1] >= scale and target.params[0] - target.params[1] >= precision - scale
            return digits is not None and target.params[0] - target.params[1] >= digits
        return _NUMERIC.index(target.root) >= _NUMERIC.index(source.root)
    for family in (_STRINGS, _BINARIES, _TIMESTAMPS):
        if source.root in family and target.root in family:
            return True
    return source.root == "DATE" and target.root in _TIMESTAMPS


def key_name(definition: MaterializedTableDefinition) -> str:
    """The key's constraint name; unnamed, Flink's ``PK_`` + its columns joined by ``_``."""
    return definition.primary_key_name or "PK_" + "_".join(definition.primary_key)


def output_columns(
    definition: MaterializedTableDefinition, columns: Sequence[QueryColumn]
) -> list[OutputColumn]:
    """The table's columns; :class:`DefinitionError` with Flink's message when the definition
    does not fit the query's ``columns``."""
    _check_distinct(definition, columns)
    by_name = {column.name.lower(): column for column in columns}
    declared = definition.columns
    if declared and all(column.data_type is None for column in declared):
        table = _reordered(definition, declared, columns, by_name)
    else:
        table = _merged(definition, declared, columns, by_name)
    table = _keyed(definition, table)
    _check_partitions(definition, table)
    # The text may not have told the columns (``SELECT *``): the EXPECT conditions meet them here.
    problem = constraint_problem(definition, [c.name for c in table]) if definition.constraints else None
    if problem is not None:
        raise _fail(definition, EXPECT, problem[2], problem[:2])
    return table


def _check_distinct(definition: MaterializedTableDefinition, columns: Sequence[QueryColumn]) -> None:
    """A table's columns need distinct names, as Spark compares them (case-insensitively): Spark's
    analysis accepts ``SELECT a, c AS a``, its write of the table does not, so every refresh would
    fail. Flink's validator renames the second one (``a0``, its converter test
    testAlterMaterializedTableAsQueryWithConflictColumnName); a name nobody chose is refused here."""
    first: dict[str, tuple[int, str]] = {}
    for position, column in enumerate(columns, start=1):
        earlier, name = first.setdefault(column.name.lower(), (position, column.name))
        if earlier != position:
            names = f"'{name}'" if name == column.name else f"'{name}' and '{column.name}'"
            raise _fail(definition, "AS", f"the query's columns {earlier} and {position} are both named "
                        f"{names}: a table's columns need distinct names; name one apart with AS",
                        definition.position("AS", "query"))


def _fail(definition: MaterializedTableDefinition, clause: str, message: str,
          place: tuple[int, int] | None = None) -> DefinitionError:
    line, column = place or (definition.lines.get(CREATE, 1), 1)
    return DefinitionError(definition.source_path, line, clause, message, column)


def _as_is(column: QueryColumn, name: str | None = None) -> OutputColumn:
    return OutputColumn(name or column.name.lower(), spark_type(column.type), column.nullable, column.name)


def _reordered(definition: MaterializedTableDefinition, declared: Sequence[Column],
               columns: Sequence[QueryColumn], by_name: Mapping[str, QueryColumn]) -> list[OutputColumn]:
    """Names alone: Flink's ``reorderSchema``."""
    if len(declared) != len(columns):
        raise _fail(definition, "columns", "The number of columns in the column list must match the "
                    "number of columns in the source schema.")
    table = []
    for column in declared:
        found = by_name.get(column.name)
        if found is None:
            raise _fail(definition, "columns", f"Column '{column.name}' not found in the source schema.",
                        definition.position("columns", column.name))
        table.append(_as_is(found, column.name))
    return table


def _merged(definition: MaterializedTableDefinition, declared: Sequence[Column],
            columns: Sequence[QueryColumn], by_name: Mapping[str, QueryColumn]) -> list[OutputColumn]:
    """Typed columns (or none): Flink's ``mergeSchemas``, the query's order with declared types."""
    types: dict[str, SqlType] = {}
    # 1-based, as Flink's newest converter counts (its CREATE OR ALTER test: 'b' at position 2).
    for position, column in enumerate(declared, start=1):
        assert column.data_type is not None  # a list is names alone or typed (the parser's rule)
        kind = declared_type(column.data_type)
        place = definition.position("columns", column.name)
        if kind is None:
            raise _fail(definition, "columns", f"type {column.data_type} of column '{column.name}' is not "
                        "supported in the column list: declare a scalar type (BOOLEAN, TINYINT ... BIGINT, "
                        "DECIMAL(p, s), FLOAT, DOUBLE, CHAR(n), VARCHAR(n), STRING, BYTES, DATE, "
                        "TIMESTAMP(p)) or leave the column out of the list (it keeps the query's type)",
                        place)
        found = by_name.get(column.name)
        if found is not None and not implicit_cast(spark_type(found.type), kind):
            raise _fail(definition, "columns", f"Incompatible types for sink column '{column.name}' at "
                        f"position {position}. The source column has type "
                        f"'{_shown(spark_type(found.type), found.nullable)}', while the target column "
                        f"has type '{_shown(kind, column.nullable)}'.", place)
        types[column.name] = kind
    for column in declared:
        if column.name not in by_name:
            raise _fail(definition, "columns", "Invalid schema. All persisted (physical and metadata) "
                        "columns in the schema part need to be present in the query part.\nHowever, "
                        f"physical column `{column.name}` could not be found in the query.",
                        definition.position("columns", column.name))
    nullable = {column.name: column.nullable for column in declared}
    table = []
    for column in columns:
        name = column.name.lower()
        if name not in types:
            table.append(_as_is(column))
            continue
        table.append(OutputColumn(name, types[name], nullable[name], column.name,
                                  not _same_in_spark(column.type, types[name])))
    return table


def _same_in_spark(kind: Any, target: SqlType) -> bool:
    """Whether Spark's ``kind`` is already the type a cast to ``target`` gives."""
    return (not isinstance(kind, Mapping) and str(kind).lower() != "timestamp_ntz"
            and spark_type(kind).spark == target.spark)


def _keyed(definition: MaterializedTableDefinition, table: list[OutputColumn]) -> list[OutputColumn]:
    """The key's columns exist and are NOT NULL (a declared type makes its column so)."""
    typed = {column.name for column in definition.columns if column.data_type is not None}
    by_name = {column.name: column for column in table}
    for name in definition.primary_key:
        line, column = definition.position("PRIMARY KEY", name)
        if name not in by_name:
            raise _fail(definition, "columns", f"Primary key column '{name}' is not defined in the schema "
                        f"at line {line}, column {column}", (line, column))
        if by_name[name].nullable and name not in typed:
            example = f"`{name} {by_name[name].type} NOT NULL`"
            raise _fail(definition, "columns", f"Invalid primary key '{key_name(definition)}'. Column "
                        f"'{name}' is nullable." + _NULLABLE_HINT.format(example=example, name=name),
                        (line, column))
    key = set(definition.primary_key)
    return [OutputColumn(c.name, c.type, False, c.source, c.cast) if c.name in key else c for c in table]


def _check_partitions(definition: MaterializedTableDefinition, table: Sequence[OutputColumn]) -> None:
    by_name = {column.name: column for column in table}
    for name in definition.partition_by:
        if name not in by_name:
            available = ", ".join(f"'{column.name}'" for column in table)
            raise _fail(definition, "PARTITIONED BY", f"Partition column '{name}' not defined in the query's "
                        f"schema. Available columns: [{available}].",
                        definition.position("PARTITIONED BY", name))
    for key in definition.options:
        match = FORMATTER_KEY.match(key)
        column = by_name.get(match.group(1).lower()) if match else None
        if column is not None and column.type.root not in _STRINGS:
            raise _fail(definition, "WITH", f"Materialized table option '{key}' only supports referring to "
                        f"char, varchar and string type partition column. Column `{column.name}` type is "
                        f"{column.type}.", definition.position("WITH", key))


def projected_query(definition: MaterializedTableDefinition, columns: Sequence[QueryColumn],
                    query: str | None = None) -> str:
    """The query a refresh runs: ``query`` (the definition's by default, whose output columns
    are ``columns``) cast and ordered as the table's columns; unchanged when they already are."""
    query = definition.query if query is None else query
    table = output_columns(definition, columns)
    if [(c.source, c.cast) for c in table] == [(c.name, False) for c in columns]:
        return query
    try:
        items = [_select_item(column) for column in table]
    except InvalidIdentifierError as err:
        raise _fail(definition, "columns", f"a column list needs the query's columns to be names: {err}; "
                    "name the column in the query with AS") from None
    return f"SELECT {', '.join(items)} FROM (\n{query}\n) AS {SOURCE_ALIAS}"


def _select_item(column: OutputColumn) -> str:
    source, name = quote_name(column.source), quote_name(column.name)
    if column.cast:
        return f"CAST({source} AS {column.type.spark}) AS {name}"
    return source if source == name else f"{source} AS {name}"


def refresh_query(definition: MaterializedTableDefinition, spark: Any, query: str | None = None) -> str:
    """:func:`projected_query` with the query's columns as ``spark`` (a Spark session, in-process
    or Connect) analyses the definition's query: what a refresh runs. ``query``: another text of
    the same columns (a snapshot or streaming rewrite of the definition's query)."""
    return projected_query(definition, query_columns(spark.sql(definition.query).schema.json()), query)
