"""Flink's materialized-table statements (FLIP-435/448), parsed for the SQL client.

``parse_materialized_statement(text)`` returns ``None`` for any other statement (the client
hands it to Spark) and otherwise one of:

=============================================================  ================================
``CREATE MATERIALIZED TABLE ...``                              :class:`CreateMaterializedTable`
``ALTER MATERIALIZED TABLE t SUSPEND``                         :class:`SuspendMaterializedTable`
``ALTER MATERIALIZED TABLE t RESUME [WITH (...)]``             :class:`ResumeMaterializedTable`
``ALTER MATERIALIZED TABLE t REFRESH [PARTITION (k = 'v')]``   :class:`RefreshMaterializedTable`
``DROP MATERIALIZED TABLE [IF EXISTS] t``                      :class:`DropMaterializedTable`
``DESCRIBE MATERIALIZED TABLE t``                              :class:`DescribeMaterializedTable`
``SHOW MATERIALIZED TABLES``                                   :class:`ShowMaterializedTables`
=============================================================  ================================

A malformed statement raises :class:`MaterializedStatementError` with the 1-based line and
column of the offending token. ``CREATE`` uses the definition files' parser
(:mod:`airflow_provider_staged.materialized.definition`): one grammar, two entry points.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from airflow_provider_staged.identifiers import TableIdentifier
from airflow_provider_staged.materialized.definition import MaterializedTableDefinition


class MaterializedStatementError(ValueError):
    """A malformed materialized-table statement; ``line``/``column`` locate the bad token."""

    def __init__(self, line: int, column: int, message: str) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.line = line
        self.column = column
        self.message = message


@dataclass(frozen=True)
class CreateMaterializedTable:
    definition: MaterializedTableDefinition

    @property
    def table(self) -> TableIdentifier:
        return self.definition.identifier


@dataclass(frozen=True)
class SuspendMaterializedTable:
    table: TableIdentifier


@dataclass(frozen=True)
class ResumeMaterializedTable:
    table: TableIdentifier
    # WITH options of the RESUME (dynamic options for the resumed refreshes), as written.
    options: Mapping[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class RefreshMaterializedTable:
    table: TableIdentifier
    # Static partition to refresh: validated column name -> decoded string value.
    partition: Mapping[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class DropMaterializedTable:
    table: TableIdentifier
    if_exists: bool = False


@dataclass(frozen=True)
class DescribeMaterializedTable:
    table: TableIdentifier


@dataclass(frozen=True)
class ShowMaterializedTables:
    pass


MaterializedTableStatement = (
    CreateMaterializedTable
    | SuspendMaterializedTable
    | ResumeMaterializedTable
    | RefreshMaterializedTable
    | DropMaterializedTable
    | DescribeMaterializedTable
    | ShowMaterializedTables
)


def parse_materialized_statement(text: str) -> MaterializedTableStatement | None:
    """Parse one statement; ``None`` when it is not a materialized-table statement."""
    raise NotImplementedError("materialized-table statements: being implemented")
