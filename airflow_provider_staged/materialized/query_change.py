"""Which changes ``CREATE OR ALTER MATERIALIZED TABLE`` may make to an existing table (pure).

Flink (FLIP-492, ``MaterializedTableUtils.validateAndExtractNewColumns``): altering the query
keeps the table's data, so the new query may only append columns at the end of the table's
schema; dropping, renaming, reordering or retyping a column is refused with Flink's messages.
Here the table's data also fixes its partition columns and refresh mode, and a CONTINUOUS
table's stream resumes from its checkpoint (it keeps its query). A partitioned table's next
partition refresh takes the appended columns into the table's schema; the partitions it leaves
alone read them as null (``hive_partitions.switched_schema``).

Columns are ``(name, type)`` with the type as Spark's schema JSON writes it (``"long"``, or a
dict for nested types); names compare case-insensitively, as Spark resolves them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_staged.materialized.definition import MaterializedTableDefinition
from airflow_provider_staged.materialized.freshness import RefreshMode
from airflow_provider_staged.materialized.output_schema import query_columns

Column = tuple[str, Any]

# Spark's JSON names of the types whose SQL name differs.
_SQL_NAMES = {"long": "BIGINT", "integer": "INT", "short": "SMALLINT", "byte": "TINYINT"}


class QueryChangeError(ValueError):
    """A change of a materialized table's definition that its existing data does not allow."""


def schema_columns(schema_json: str | Mapping[str, Any]) -> list[Column]:
    """The columns of a Spark schema (``StructType.json()``, e.g. a table's stored schema)."""
    return [(column.name, column.type) for column in query_columns(schema_json)]


def stored_order(columns: Sequence[Column], partition_by: Sequence[str]) -> list[Column]:
    """``columns`` in the order a table stores them: data columns, then partition columns."""
    keys = {key.lower() for key in partition_by}
    return [c for c in columns if c[0].lower() not in keys] + [c for c in columns if c[0].lower() in keys]


def column_text(column: Column) -> str:
    """Flink's rendering of a column: ``\\`name\\` TYPE``."""
    name, kind = column
    if isinstance(kind, Mapping):
        type_name = str(kind.get("type", "struct")).upper()
    else:
        type_name = _SQL_NAMES.get(kind, str(kind).upper())
    return f"`{name}` {type_name}"


def appended_columns(old: Sequence[Column], new: Sequence[Column]) -> list[Column]:
    """The columns ``new`` appends to ``old``; :class:`QueryChangeError` for any other change."""
    if len(old) > len(new):
        kept = {name.lower() for name, _ in new}
        dropped = next((name for name, _ in old if name.lower() not in kept), old[len(new)][0])
        raise QueryChangeError(
            f"Dropping of persisted column `{dropped}` is not supported. Failed to modify query because "
            "drop column is unsupported. When modifying a query, you can only append new columns at the "
            f"end of original schema. The original schema has {len(old)} columns, but the newly "
            f"derived schema from the query has {len(new)} columns."
        )
    for position, (before, after) in enumerate(zip(old, new, strict=False), start=1):
        if before[0].lower() != after[0].lower() or before[1] != after[1]:
            raise QueryChangeError(
                "When modifying the query of a materialized table, currently only support appending "
                "columns at the end of original schema, dropping, renaming, and reordering columns are "
                f"not supported.\nColumn mismatch at position {position}: Original column is "
                f"[{column_text(before)}], but new column is [{column_text(after)}]."
            )
    return list(new[len(old):])


def check_definition_change(
    old: MaterializedTableDefinition, new: MaterializedTableDefinition, stored: Sequence[Column] | None,
    query_columns: Sequence[Column],
) -> list[Column]:
    """Check ``new`` may replace ``old``; return the columns it appends to the table.

    ``stored``: the table's columns in the catalog (None: never refreshed, so no data to keep);
    ``query_columns``: the new query's output columns.
    """
    table = old.identifier
    if tuple(k.lower() for k in new.partition_by) != tuple(k.lower() for k in old.partition_by):
        raise QueryChangeError(
            f"CREATE OR ALTER of {table} cannot change PARTITIONED BY ({', '.join(old.partition_by)}) to "
            f"({', '.join(new.partition_by)}): the table's data is laid out by it; DROP MATERIALIZED "
            "TABLE it, then CREATE it"
        )
    if new.refresh_mode is not old.refresh_mode:
        raise QueryChangeError(
            f"Changing of REFRESH MODE is unsupported: CREATE OR ALTER of {table} cannot change the "
            f"refresh mode {old.refresh_mode.value} to {new.refresh_mode.value}; DROP MATERIALIZED "
            "TABLE it, then CREATE it"
        )
    if new.refresh_mode is RefreshMode.CONTINUOUS and new.query.strip() != old.query.strip():
        raise QueryChangeError(
            f"CREATE OR ALTER of the CONTINUOUS table {table} cannot change its query: the streaming "
            "query resumes from the old query's checkpoint; DROP MATERIALIZED TABLE it, then CREATE it"
        )
    if stored is None:
        return []
    count = len(stored) - len(new.partition_by)  # the data columns come first, partition columns last
    wanted = stored_order(query_columns, new.partition_by)
    appended_columns(stored[count:], wanted[len(wanted) - len(new.partition_by):])
    return appended_columns(stored[:count], wanted[:len(wanted) - len(new.partition_by)])
