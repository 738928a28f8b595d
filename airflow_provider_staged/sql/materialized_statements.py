"""Flink's materialized-table statements (FLIP-435/448), parsed for the SQL client.

``parse_materialized_statement(text)`` returns ``None`` for any other statement (the client
hands it to Spark) and otherwise one of:

=============================================================  ================================
``CREATE [OR ALTER] MATERIALIZED TABLE ...``                   :class:`CreateMaterializedTable`
``ALTER MATERIALIZED TABLE t SUSPEND [CASCADE]``               :class:`SuspendMaterializedTable`
``ALTER MATERIALIZED TABLE t RESUME [CASCADE] [WITH (...)]``   :class:`ResumeMaterializedTable`
``ALTER MATERIALIZED TABLE t REFRESH [PARTITION (k = 'v')]``   :class:`RefreshMaterializedTable`
``DROP MATERIALIZED TABLE [IF EXISTS] t``                      :class:`DropMaterializedTable`
``DESCRIBE MATERIALIZED TABLE t``                              :class:`DescribeMaterializedTable`
``SHOW MATERIALIZED TABLES [FROM db] [[NOT] LIKE 'p']``        :class:`ShowMaterializedTables`
``SHOW CREATE [OR ALTER] MATERIALIZED TABLE t``                :class:`ShowCreateMaterializedTable`
=============================================================  ================================

A malformed statement raises :class:`MaterializedStatementError` with the 1-based line and
column of the offending token. ``CREATE`` uses the definition files' parser
(:mod:`airflow_provider_staged.materialized.definition`): one grammar, two entry points.
Only an optional ``;`` may follow a statement; partition values and options are decoded string
literals (data, never SQL). Flink's other ``ALTER`` forms are refused at their keyword (SET and
RESET after Flink's syntax errors in them): the definition is the one place a table's schema,
options and query change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NoReturn

from airflow_provider_staged.materialized.definition import (
    MaterializedTableDefinition,
    parse_create_statement,
    read_freshness,
    read_refresh_mode,
)
from airflow_provider_staged.materialized.grammar import Cursor, Token
from airflow_provider_staged.materialized.params import RefreshRequestError, writer_options
from airflow_provider_staged.materialized.partitions import PartitionError, check_partition_value
from airflow_provider_staged.staging.identifiers import InvalidIdentifierError, TableIdentifier, validate_name


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
    or_alter: bool = False  # CREATE OR ALTER: replace the definition of an existing table

    @property
    def table(self) -> TableIdentifier:
        return self.definition.identifier


@dataclass(frozen=True)
class SuspendMaterializedTable:
    table: TableIdentifier
    cascade: bool = False  # also every materialized table downstream


# Where each RESUME option's key, or each partition's value, is written: (line, column), for errors
# of the value found after parsing (:func:`check_values`).
_Positions = Mapping[str, tuple[int, int]]


@dataclass(frozen=True)
class ResumeMaterializedTable:
    table: TableIdentifier
    # WITH options of the RESUME (dynamic options for the resumed refreshes), as written.
    options: Mapping[str, str] = field(default_factory=dict, hash=False)
    positions: _Positions = field(default_factory=dict, hash=False, compare=False, repr=False)
    cascade: bool = False  # also every materialized table downstream (the options are this one's)


@dataclass(frozen=True)
class RefreshMaterializedTable:
    table: TableIdentifier
    # Static partition to refresh: validated column name -> decoded string value.
    partition: Mapping[str, str] = field(default_factory=dict, hash=False)
    positions: _Positions = field(default_factory=dict, hash=False, compare=False, repr=False)


@dataclass(frozen=True)
class DropMaterializedTable:
    table: TableIdentifier
    if_exists: bool = False
    cascade: bool = False  # ``DROP ... t CASCADE``: the materialized tables that read it first


@dataclass(frozen=True)
class DescribeMaterializedTable:
    table: TableIdentifier


@dataclass(frozen=True)
class ShowMaterializedTables:
    """``SHOW MATERIALIZED TABLES [FROM|IN db] [[NOT] LIKE 'pattern']`` (Flink 2.2)."""

    database: str | None = None  # None: the session's current database
    like: str | None = None  # SQL LIKE pattern on the table name
    not_like: bool = False


@dataclass(frozen=True)
class ShowCreateMaterializedTable:
    """``SHOW CREATE [OR ALTER] MATERIALIZED TABLE t`` (Flink 2.2): the definition's DDL."""

    table: TableIdentifier
    or_alter: bool = False


@dataclass(frozen=True)
class ExplainMaterializedTable:
    """``EXPLAIN [EXTENDED | CODEGEN | COST | FORMATTED | PLAN FOR] CREATE [OR ALTER] MATERIALIZED TABLE``
    (Flink's testExplainCreate[OrAlter]MaterializedTable): Spark's plan of the query the
    refreshes would run; nothing is created."""

    create: CreateMaterializedTable
    mode: str = ""  # Spark's EXPLAIN mode, upper case; "" for the physical plan

    @property
    def table(self) -> TableIdentifier:
        return self.create.table


MaterializedTableStatement = (
    CreateMaterializedTable
    | ExplainMaterializedTable
    | SuspendMaterializedTable
    | ResumeMaterializedTable
    | RefreshMaterializedTable
    | DropMaterializedTable
    | DescribeMaterializedTable
    | ShowMaterializedTables
    | ShowCreateMaterializedTable
)

_GAP = r"(?:\s|--[^\n]*(?:\n|$)|/\*.*?\*/)+"  # whitespace and comments between keywords
# Decided on the text, not on tokens: other statements are Spark SQL and never meet this
# tokenizer. Only statements on MATERIALIZED TABLEs are ours: ``DESCRIBE materialized``
# describes a table of that name, ``CREATE MATERIALIZED VIEW`` is Spark's (its pipelines).
_DETECT = re.compile(
    rf"""(?:{_GAP})?(?:
        (?P<create>CREATE){_GAP}(?:OR{_GAP}(?:ALTER|REPLACE){_GAP}|TEMPORARY{_GAP})?
      | (?:ALTER|SHOW|DESC|DESCRIBE){_GAP}
      | SHOW{_GAP}CREATE{_GAP}(?:OR{_GAP}ALTER{_GAP})?
      | DROP{_GAP}(?:TEMPORARY{_GAP})?
    )MATERIALIZED{_GAP}TABLES?\b""",
    re.IGNORECASE | re.DOTALL | re.VERBOSE,
)
# EXPLAIN with one of Spark's modes, or Flink's PLAN FOR, before a statement of ours: without
# this, Spark would get the text and fail on MATERIALIZED.
_EXPLAIN = re.compile(
    rf"(?:{_GAP})?EXPLAIN(?:{_GAP}(?:(?P<mode>EXTENDED|CODEGEN|COST|FORMATTED)|PLAN{_GAP}FOR))?(?={_GAP})",
    re.IGNORECASE | re.DOTALL,
)
_ALTER = "ALTER MATERIALIZED TABLE"
_SUPPORTED_ALTER = "SUSPEND, RESUME [WITH (...)] or REFRESH [PARTITION (...)]"
# Flink's other ALTER forms: the definition (file or CREATE OR ALTER) is where they belong here.
_OTHER_ALTER = ("SET", "RESET", "AS", "ADD", "MODIFY", "DROP", "RENAME")


def _error(line: int, column: int, clause: str, message: str) -> MaterializedStatementError:
    return MaterializedStatementError(line, column, f"{clause}: {message}")


def parse_materialized_statement(text: str) -> MaterializedTableStatement | None:
    """Parse one statement; ``None`` when it is not a materialized-table statement.

    Raises :class:`MaterializedStatementError` for a malformed one, at the offending token;
    only an optional ``;`` and comments may follow the statement.
    """
    if not isinstance(text, str):
        raise TypeError(f"expected the statement text as str, not {type(text).__name__}")
    explain = _EXPLAIN.match(text)
    if explain is not None and _DETECT.match(text, explain.end()):
        return _explain(text, explain)
    match = _DETECT.match(text)
    if match is None:
        return None
    if match.group("create"):
        return CreateMaterializedTable(*parse_create_statement(text, _error))
    return _Statements(Cursor(text, _error)).parse()


def check_values(statement: MaterializedTableStatement) -> None:
    """Refuse, at the value, a partition value or RESUME option that no table accepts: run before
    Airflow is reached (the parser, like Flink's, reads any; the table's own rules follow once its
    definition is read)."""
    if isinstance(statement, RefreshMaterializedTable):
        for column, value in statement.partition.items():
            try:
                check_partition_value(column, value)
            except PartitionError as err:
                raise _error(*statement.positions[column], f"{_ALTER} REFRESH PARTITION", str(err)) from None
    elif isinstance(statement, ResumeMaterializedTable):
        for key, value in statement.options.items():
            try:
                writer_options({key: value})
            except RefreshRequestError as err:
                raise _error(*statement.positions[key], f"{_ALTER} RESUME WITH", str(err)) from None


def _explain(text: str, explain: re.Match[str]) -> ExplainMaterializedTable:
    """The statement after EXPLAIN, parsed where it stands: the EXPLAIN part becomes blanks (its
    line breaks kept), so every position is still one of ``text``."""
    blanked = re.sub(r"[^\n]", " ", text[:explain.end()]) + text[explain.end():]
    inner = parse_materialized_statement(blanked)
    if not isinstance(inner, CreateMaterializedTable):
        cursor = Cursor(blanked, _error)
        cursor.fail("EXPLAIN", "only CREATE [OR ALTER] MATERIALIZED TABLE can be explained (its query's "
                    f"plan), found {cursor.describe(cursor.current)}")
    return ExplainMaterializedTable(inner, (explain.group("mode") or "").upper())


class _Statements:
    def __init__(self, cursor: Cursor) -> None:
        self.c = cursor

    def fail(self, clause: str, message: str) -> NoReturn:
        self.c.fail(clause, message)

    def parse(self) -> MaterializedTableStatement:
        c = self.c
        word = c.current.text.upper()
        statement: MaterializedTableStatement
        if word == "ALTER":
            clause, statement = _ALTER, self.alter()
        elif word == "DROP":
            clause, statement = "DROP MATERIALIZED TABLE", self.drop()
        elif word in ("DESCRIBE", "DESC"):
            clause = "DESCRIBE MATERIALIZED TABLE"
            c.advance()
            c.expect_keyword(clause, "MATERIALIZED", "TABLE")
            statement = DescribeMaterializedTable(c.table_identifier(clause))
        else:
            c.expect_keyword("SHOW", "SHOW")
            if c.at_keyword("CREATE"):
                clause, statement = "SHOW CREATE MATERIALIZED TABLE", self.show_create()
            else:
                clause, statement = "SHOW MATERIALIZED TABLES", self.show()
        c.finish(clause)
        return statement

    def alter(self) -> MaterializedTableStatement:
        c = self.c
        c.expect_keyword(_ALTER, "ALTER", "MATERIALIZED", "TABLE")
        table = c.table_identifier(_ALTER)
        if c.at_keyword("SUSPEND"):
            c.advance()
            return SuspendMaterializedTable(table, self.cascade())
        if c.at_keyword("RESUME"):
            c.advance()
            cascade = self.cascade()
            options: dict[str, str] = {}
            keys: dict[str, Token] = {}
            if c.at_keyword("WITH"):
                c.advance()
                options, keys = c.string_options(f"{_ALTER} RESUME WITH")
            return ResumeMaterializedTable(table, MappingProxyType(options), self.positions(keys), cascade)
        if c.at_keyword("REFRESH"):
            c.advance()
            partition: dict[str, str] = {}
            values: dict[str, Token] = {}
            if c.at_keyword("PARTITION"):
                c.advance()
                partition, values = self.partition_spec()
            return RefreshMaterializedTable(table, MappingProxyType(partition), self.positions(values))
        found = c.describe(c.current)
        if c.at_keyword(*_OTHER_ALTER):
            keyword = c.current
            if c.at_keyword("SET", "RESET"):
                self.set_or_reset()  # Flink's syntax errors first, at its positions
            c.fail(_ALTER, f"{keyword.text.upper()} is not supported here: change the definition "
                   "(its file, or CREATE OR ALTER MATERIALIZED TABLE) instead; supported: "
                   f"{_SUPPORTED_ALTER}", keyword)
        self.fail(_ALTER, f"expected {_SUPPORTED_ALTER}, found {found}")

    def set_or_reset(self) -> None:
        """Flink's ``SET ('k' = 'v', ...) | SET FRESHNESS = ... | SET REFRESH_MODE = ...`` and
        ``RESET ('k', ...)``, read only to report their syntax errors where Flink does."""
        c = self.c
        clause = f"{_ALTER} {c.current.text.upper()}"

        def key() -> None:
            c.expect(clause, "string", "a quoted option key such as 'owner'")

        def option() -> None:
            key()
            c.expect_punct(clause, "=")
            c.expect(clause, "string", "a quoted option value")

        if c.advance().text.upper() == "RESET":
            c.parenthesized(clause, key, empty=True)
        elif c.at_keyword("FRESHNESS"):
            c.advance()
            read_freshness(c)
        elif c.at_keyword("REFRESH_MODE"):
            c.advance()
            read_refresh_mode(c)
        elif c.at_punct("("):
            c.parenthesized(clause, option, empty=True)
        else:
            self.fail(clause, f"expected FRESHNESS, REFRESH_MODE or '(', found {c.describe(c.current)}")

    def positions(self, tokens: Mapping[str, Token]) -> _Positions:
        return MappingProxyType({name: (self.c.line_of(token.pos), self.c.column_of(token.pos))
                                 for name, token in tokens.items()})

    def partition_spec(self) -> tuple[dict[str, str], dict[str, Token]]:
        """``(k = 'v', ...)``: validated keys, values decoded to plain strings (never SQL), and
        each value's token."""
        c = self.c
        clause = f"{_ALTER} REFRESH PARTITION"
        spec: dict[str, str] = {}
        tokens: dict[str, Token] = {}

        def item() -> None:
            key, token = c.column(clause, "partition column")
            if key in spec:
                c.fail(clause, f"duplicate partition column {token.text!r}", token)
            c.expect_punct(clause, "=")
            value = c.current
            # Flink's parser also takes numbers (``part1 = 2023``); the value is their text.
            if value.kind not in ("string", "number"):
                self.fail(clause, f"expected a quoted value for partition column {token.text!r}, "
                          f"found {c.describe(value)}")
            tokens[key] = value
            spec[key] = c.advance().text

        c.parenthesized(clause, item)
        return spec, tokens

    def drop(self) -> DropMaterializedTable:
        c = self.c
        clause = "DROP MATERIALIZED TABLE"
        c.expect_keyword(clause, "DROP")
        if c.at_keyword("TEMPORARY"):
            c.advance()
            self.fail(clause, "DROP TEMPORARY MATERIALIZED TABLE is not supported")
        c.expect_keyword(clause, "MATERIALIZED", "TABLE")
        if_exists = False
        if c.at_keyword("IF"):
            c.advance()
            c.expect_keyword(clause, "EXISTS")
            if_exists = True
        return DropMaterializedTable(c.table_identifier(clause), if_exists, self.cascade())

    def cascade(self) -> bool:
        """An optional ``CASCADE``: the operation also reaches the tables downstream."""
        found = self.c.at_keyword("CASCADE")
        if found:
            self.c.advance()
        return found

    def show_create(self) -> ShowCreateMaterializedTable:
        c = self.c
        clause = "SHOW CREATE MATERIALIZED TABLE"
        c.expect_keyword(clause, "CREATE")
        or_alter = c.at_keyword("OR")
        if or_alter:
            c.advance()
            c.expect_keyword(clause, "ALTER")
        c.expect_keyword(clause, "MATERIALIZED", "TABLE")
        return ShowCreateMaterializedTable(c.table_identifier(clause), or_alter)

    def show(self) -> ShowMaterializedTables:
        c = self.c
        clause = "SHOW MATERIALIZED TABLES"
        c.expect_keyword(clause, "MATERIALIZED", "TABLES")
        database = None
        if c.at_keyword("FROM", "IN"):
            c.advance()
            database = self.database(clause)
        not_like = c.at_keyword("NOT")
        if not_like:
            c.advance()
            if not c.at_keyword("LIKE"):
                self.fail(clause, f"expected LIKE, found {c.describe(c.current)}")
        like = None
        if c.at_keyword("LIKE"):
            c.advance()
            like = c.expect(clause, "string", "a quoted LIKE pattern").text
        return ShowMaterializedTables(database, like, not_like)

    def database(self, clause: str) -> str:
        """``[spark_catalog.]db``, validated, as the metastore stores it."""
        names, start = self.c.qualified_name(clause, "a database name", "db")
        try:
            return validate_name(names[0], "database name")
        except InvalidIdentifierError as err:
            self.c.fail(clause, str(err), start)
