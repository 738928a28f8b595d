"""Flink's materialized-table statements (FLIP-435/448), parsed for the SQL client.

``parse_materialized_statement(text)`` returns ``None`` for any other statement (the client
hands it to Spark) and otherwise one of:

======================================================================  =====================================
``CREATE [OR ALTER] MATERIALIZED TABLE ...``                            :class:`CreateMaterializedTable`
``ALTER MATERIALIZED TABLE t SUSPEND [CASCADE]``                        :class:`SuspendMaterializedTable`
``ALTER MATERIALIZED TABLE t RESUME [CASCADE] [WITH (...)]``            :class:`ResumeMaterializedTable`
``ALTER MATERIALIZED TABLE t REFRESH [PARTITION (...)] [CASCADE]``      :class:`RefreshMaterializedTable`
``ALTER MATERIALIZED TABLE t SET ('k' = 'v', ...)``                     :class:`AlterMaterializedTableChange`
``ALTER MATERIALIZED TABLE t RESET ('k', ...)``                         :class:`AlterMaterializedTableChange`
``ALTER MATERIALIZED TABLE t SET FRESHNESS = INTERVAL ...|DOWNSTREAM``  :class:`AlterMaterializedTableChange`
``ALTER MATERIALIZED TABLE t SET REFRESH_MODE = FULL|...``              :class:`AlterMaterializedTableChange`
``ALTER MATERIALIZED TABLE t AS query``                                 :class:`AlterMaterializedTableChange`
``ALTER MATERIALIZED TABLE t ADD (column | PRIMARY KEY ...)``           :class:`AlterMaterializedTableChange`
``DROP MATERIALIZED TABLE [IF EXISTS] t``                               :class:`DropMaterializedTable`
``DESCRIBE MATERIALIZED TABLE t``                                       :class:`DescribeMaterializedTable`
``SHOW MATERIALIZED TABLES [FROM db] [[NOT] LIKE 'p']``                 :class:`ShowMaterializedTables`
``SHOW CREATE [OR ALTER] MATERIALIZED TABLE t``                         :class:`ShowCreateMaterializedTable`
======================================================================  =====================================

A malformed statement raises :class:`MaterializedStatementError` with the 1-based line and
column of the offending token. ``CREATE`` uses the definition files' parser
(:mod:`airflow_provider_staged.materialized.definition`): one grammar, two entry points.
Only an optional ``;`` may follow a statement; partition values and options are decoded string
literals (data, never SQL). The ``SET``/``RESET``/``AS`` forms change the table's definition:
:meth:`AlterMaterializedTableChange.apply` gives the new one, which the client then executes as
``CREATE OR ALTER`` (one path for every change of a definition). ``ADD`` takes Flink
2.x's rules: a key may be added; a physical column must come from the query, which already
gives the table all its columns, so adding one is refused with Flink's message (``AS query``
appends columns). Flink's other ``ALTER`` forms (``MODIFY``, ``DROP``, ``RENAME``) are refused
at their keyword.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import NoReturn

from airflow_provider_staged.materialized.definition import (
    DefinitionError,
    MaterializedTableDefinition,
    parse_create_statement,
    parse_definition,
    read_freshness,
    read_refresh_mode,
    render_definition,
    unknown_option,
)
from airflow_provider_staged.materialized.freshness import (
    DEFAULT_FRESHNESS_THRESHOLD,
    Freshness,
    FreshnessError,
    RefreshMode,
    derive_refresh_mode,
    parse_duration,
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
    # CASCADE (not Flink's): the FRESHNESS = DOWNSTREAM tables that read it follow its commit.
    cascade: bool = False


@dataclass(frozen=True)
class AlterMaterializedTableChange:
    """``ALTER MATERIALIZED TABLE t`` ``SET (...)``, ``RESET (...)``, ``SET FRESHNESS``,
    ``SET REFRESH_MODE`` or ``AS query``: a change of the table's definition (:meth:`apply`)."""

    table: TableIdentifier
    clause: str  # "ALTER MATERIALIZED TABLE SET", ... : what errors are about
    at: tuple[int, int]  # the clause's keyword: where an error without a value of its own points
    options: Mapping[str, str] = field(default_factory=dict, hash=False)  # SET (...)
    reset: tuple[str, ...] = ()  # RESET (...)
    freshness: Freshness | None = None
    follows_inputs: bool = False  # SET FRESHNESS = DOWNSTREAM
    refresh_mode: RefreshMode | None = None
    query: str | None = None  # AS query, as written
    columns: tuple[str, ...] = ()  # ADD: physical columns (the session refuses each, as Flink)
    primary_key: tuple[str, ...] = ()  # ADD [CONSTRAINT c] PRIMARY KEY (...) NOT ENFORCED
    primary_key_name: str | None = None
    # Where each SET/RESET key, ADD column, and the query ("AS"), is written.
    positions: _Positions = field(default_factory=dict, hash=False, compare=False, repr=False)

    def apply(self, old: MaterializedTableDefinition) -> MaterializedTableDefinition:
        """The definition after this change of ``old``, checked as a definition file is (every
        option's value, FULL's freshness limits), with errors at this statement's values.

        The table keeps its refresh mode, as Flink's catalog keeps the mode it resolved at
        creation: a new freshness that would derive the other mode writes the old one. A change
        of mode is refused with Flink's message (its CREATE OR ALTER rule): the data and the
        workflow were made for the old one.
        """
        # FRESHNESS = DOWNSTREAM refreshes in FULL mode: from CONTINUOUS, a change of mode too.
        mode = RefreshMode.FULL if self.follows_inputs else self.refresh_mode
        if mode is not None and mode is not old.refresh_mode:
            wanted = "FRESHNESS = DOWNSTREAM" if self.follows_inputs else f"REFRESH_MODE = {mode.value}"
            raise MaterializedStatementError(*self.at, (
                f"{self.clause}: Changing of REFRESH MODE is unsupported: {self.table} refreshes in "
                f"{old.refresh_mode.value} mode; DROP MATERIALIZED TABLE it, then CREATE it with {wanted}"))
        if self.primary_key and old.primary_key:
            key = ", ".join(f"`{name}`" for name in old.primary_key)
            raise MaterializedStatementError(*self.at, (  # Flink's SchemaAddConverter
                f"{self.clause}: The base table has already defined the primary key constraint [{key}]. "
                "You might want to drop it before adding a new one."))
        options = {key: value for key, value in old.options.items() if key not in self.reset}
        options.update(self.options)
        key = (self.primary_key, self.primary_key_name) if self.primary_key else (
            old.primary_key, old.primary_key_name)
        # SET FRESHNESS = INTERVAL ... gives a DOWNSTREAM table a schedule of its own.
        follows_inputs = self.follows_inputs or (old.follows_inputs and self.freshness is None)
        changed = replace(old, freshness=self.freshness or old.freshness, query=self.query or old.query,
                          primary_key=key[0], primary_key_name=key[1], follows_inputs=follows_inputs)
        try:
            threshold = options.get("refresh-mode.freshness-threshold")
            derived = derive_refresh_mode(changed.freshness, None, parse_duration(threshold) if threshold
                                          else DEFAULT_FRESHNESS_THRESHOLD)
        except FreshnessError:
            derived = None  # the parse below refuses the threshold, at its key
        explicit = ("REFRESH_MODE" in old.lines or self.refresh_mode is not None
                    or derived is not old.refresh_mode)
        return self._parsed(render_definition(changed, options, explicit_mode=explicit))

    def _parsed(self, text: str) -> MaterializedTableDefinition:
        try:
            return parse_definition(text, "<statement>")
        except DefinitionError as err:
            where = self._where(text, err)
            raise MaterializedStatementError(*where, f"{self.clause}: {err.message}") from None

    def _where(self, text: str, err: DefinitionError) -> tuple[int, int]:
        """The statement's place of what ``err`` (in the rendered ``text``) is about: the option
        whose line it names, else the clause's keyword."""
        if err.clause == "WITH":
            line = text.splitlines()[err.line - 1].strip()
            for key in self.options:
                if line.startswith("'" + key.replace("'", "''") + "' ="):
                    return self.positions[key]
        return self.at

    def located(self, definition: MaterializedTableDefinition, line: int, column: int) -> tuple[int, int]:
        """This statement's place of ``(line, column)`` of ``definition`` (from :meth:`apply`):
        inside the query (written verbatim in both) it is the same character; elsewhere the
        clause's keyword."""
        start = definition.position("AS", "query")
        if self.query is None or (line, column) < start:
            return self.at
        query_line, query_column = self.positions["AS"]
        if line == start[0]:
            return query_line, query_column + column - start[1]
        return query_line + line - start[0], column


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
    or ``... ALTER MATERIALIZED TABLE t AS query`` (Flink's testExplainCreate[OrAlter]MaterializedTable,
    testExplainAlterMaterializedTable): Spark's plan of the query the refreshes would run; nothing
    is created or changed."""

    create: CreateMaterializedTable | AlterMaterializedTableChange  # an ALTER's query: AS
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
    | AlterMaterializedTableChange
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
_SUPPORTED_ALTER = ("SUSPEND, RESUME [WITH (...)], REFRESH [PARTITION (...)], SET (...), RESET (...), "
                    "SET FRESHNESS, SET REFRESH_MODE, ADD (...) or AS query")
# Flink's schema and distribution ALTER forms: the definition (file or CREATE OR ALTER) is where
# a column list changes here.
_OTHER_ALTER = ("MODIFY", "DROP", "RENAME")


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
    elif isinstance(statement, AlterMaterializedTableChange):
        _check_option_keys(statement)
    elif isinstance(statement, ResumeMaterializedTable):
        for key, value in statement.options.items():
            try:
                writer_options({key: value})
            except RefreshRequestError as err:
                raise _error(*statement.positions[key], f"{_ALTER} RESUME WITH", str(err)) from None


def _check_option_keys(statement: AlterMaterializedTableChange) -> None:
    """Flink's converter rules of SET and RESET (SqlAlterMaterializedTable{Options,Reset}Converter,
    their messages), and keys a definition cannot have; the values are checked by ``apply``."""
    keys = statement.reset or tuple(statement.options)
    if not statement.clause.endswith(("SET", "RESET")):
        return
    if not keys:
        what = "key" if statement.clause.endswith("RESET") else "options"
        raise MaterializedStatementError(*statement.at, f"{statement.clause} does not support empty {what}.")
    for key in keys:
        if key == "connector" and statement.reset:
            raise MaterializedStatementError(*statement.positions[key],
                                             f"{statement.clause} does not support changing 'connector'.")
        # Flink's RESET of a key the table lacks changes nothing, silently; a mistyped key would
        # then say the option was reset while it still applies: refused here, as SET refuses it.
        unknown = unknown_option(key)
        if unknown:
            raise _error(*statement.positions[key], statement.clause, unknown)


def _explain(text: str, explain: re.Match[str]) -> ExplainMaterializedTable:
    """The statement after EXPLAIN, parsed where it stands: the EXPLAIN part becomes blanks (its
    line breaks kept), so every position is still one of ``text``."""
    blanked = re.sub(r"[^\n]", " ", text[:explain.end()]) + text[explain.end():]
    inner = parse_materialized_statement(blanked)
    if not (isinstance(inner, CreateMaterializedTable)
            or (isinstance(inner, AlterMaterializedTableChange) and inner.query is not None)):
        cursor = Cursor(blanked, _error)
        cursor.fail("EXPLAIN", "only CREATE [OR ALTER] MATERIALIZED TABLE and ALTER MATERIALIZED TABLE ... "
                    f"AS can be explained (their query's plan), found {cursor.describe(cursor.current)}")
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
        if not (isinstance(statement, AlterMaterializedTableChange) and statement.query is not None):
            c.finish(clause)  # AS read the query to the end of the text, its ';' included
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
            return RefreshMaterializedTable(table, MappingProxyType(partition), self.positions(values),
                                            self.cascade())
        if c.at_keyword("SET", "RESET"):
            return self.set_or_reset(table)
        if c.at_keyword("AS"):
            return self.as_query(table)
        if c.at_keyword("ADD"):
            return self.add(table)
        found = c.describe(c.current)
        if c.at_keyword(*_OTHER_ALTER):
            keyword = c.current
            c.fail(_ALTER, f"{keyword.text.upper()} is not supported here: change the definition "
                   "(its file, or CREATE OR ALTER MATERIALIZED TABLE) instead; supported: "
                   f"{_SUPPORTED_ALTER}", keyword)
        self.fail(_ALTER, f"expected {_SUPPORTED_ALTER}, found {found}")

    def set_or_reset(self, table: TableIdentifier) -> AlterMaterializedTableChange:
        """Flink's ``SET ('k' = 'v', ...) | SET FRESHNESS = ... | SET REFRESH_MODE = ...`` and
        ``RESET ('k', ...)``, with Flink's syntax errors at its positions."""
        c = self.c
        keyword = c.advance()
        clause = f"{_ALTER} {keyword.text.upper()}"
        if keyword.text.upper() == "RESET":
            keys: dict[str, Token] = {}

            def key() -> None:
                token = c.expect(clause, "string", "a quoted option key such as 'owner'")
                if token.text in keys:
                    c.fail(clause, f"duplicate option {token.text!r}", token)
                keys[token.text] = token

            c.parenthesized(clause, key, empty=True)
            return AlterMaterializedTableChange(table, clause, self.place(keyword), reset=tuple(keys),
                                                positions=self.positions(keys))
        if c.at_keyword("FRESHNESS", "REFRESH_MODE"):
            word = c.advance()
            at = self.place(word)
            clause = f"{clause} {word.text.upper()}"
            if word.text.upper() == "FRESHNESS":
                freshness = read_freshness(c, downstream=True)
                return AlterMaterializedTableChange(table, clause, at, freshness=freshness,
                                                    follows_inputs=freshness is None)
            return AlterMaterializedTableChange(table, clause, at, refresh_mode=read_refresh_mode(c))
        if not c.at_punct("("):
            self.fail(clause, f"expected FRESHNESS, REFRESH_MODE or '(', found {c.describe(c.current)}")
        options, tokens = c.string_options(clause, empty=True)
        return AlterMaterializedTableChange(table, clause, self.place(keyword), MappingProxyType(options),
                                            positions=self.positions(tokens))

    def as_query(self, table: TableIdentifier) -> AlterMaterializedTableChange:
        """``AS query`` (Flink 2.x): the query is Spark SQL, read from the text to its end."""
        c = self.c
        keyword = c.current
        clause = f"{_ALTER} AS"
        query = c.query(keyword.end, clause)
        start = c.text.index(query, keyword.end)
        return AlterMaterializedTableChange(
            table, clause, self.place(keyword), query=query,
            positions=MappingProxyType({"AS": (c.line_of(start), c.column_of(start))}))

    def add(self, table: TableIdentifier) -> AlterMaterializedTableChange:
        """``ADD item`` or ``ADD (item, ...)`` (Flink 2.x): columns (``name type [NOT NULL]
        [COMMENT '...'] [FIRST | AFTER c]``) and ``[CONSTRAINT c] PRIMARY KEY (...) NOT ENFORCED``;
        watermarks, computed and metadata columns are refused as in a definition."""
        c = self.c
        keyword = c.advance()
        clause = f"{_ALTER} ADD"
        columns: dict[str, Token] = {}
        key: dict[str, Token] = {}
        names: list[str | None] = [None]  # the key's CONSTRAINT name

        def item() -> None:
            start = c.current
            if c.at_keyword("DISTRIBUTION"):
                c.fail(clause, "DISTRIBUTION is not supported: refreshes write Parquet files per partition, "
                       "without buckets")
            if c.at_keyword("WATERMARK"):
                c.fail(clause, "WATERMARK is not supported: refreshes read their sources as batches or "
                       "micro-batches, without event time")
            if c.at_keyword("CONSTRAINT", "PRIMARY", "UNIQUE"):
                if c.at_keyword("CONSTRAINT"):
                    c.advance()
                    names[0] = c.name(clause, "a constraint name").text
                if c.at_keyword("UNIQUE"):
                    c.fail(clause, "UNIQUE constraint is not supported yet (as in Flink): use PRIMARY KEY "
                           "(...) NOT ENFORCED", start)
                c.expect_keyword(clause, "PRIMARY", "KEY")
                if key:
                    c.fail(clause, "duplicate primary key definition", start)
                key.update(c.column_list(clause, "primary key column"))
                if c.negation(clause, "ENFORCED") is not True:  # Flink's rule and words
                    c.fail(clause, "Flink doesn't support ENFORCED mode for PRIMARY KEY constraint. "
                           "ENFORCED/NOT ENFORCED controls if the constraint checks are performed on the "
                           "incoming/outgoing data; the data is not owned here, so the only supported mode "
                           "is NOT ENFORCED", start)
                return
            name, token = c.column(clause, "column")
            if name in columns:
                c.fail(clause, f"duplicate column {token.text!r}", token)
            columns[name] = token
            depth = 0  # the type, its options and position: refused with the column in any case
            while c.current.kind != "end" and (depth or not (c.at_punct(",") or c.at_punct(")"))):
                if (c.at_keyword("AS", "METADATA") and not depth) or c.at_punct("."):
                    c.fail(clause, f"only physical columns can be added here: {token.text!r} is a computed, "
                           "metadata or nested column, which no definition has")
                depth += int(c.at_punct("(") or c.at_punct("<")) - int(c.at_punct(")") or c.at_punct(">"))
                c.advance()

        if c.at_punct("("):
            c.parenthesized(clause, item)
        else:
            item()
        return AlterMaterializedTableChange(
            table, clause, self.place(keyword), columns=tuple(columns), primary_key=tuple(key),
            primary_key_name=names[0], positions=self.positions({**columns, **key}))

    def place(self, token: Token) -> tuple[int, int]:
        return self.c.line_of(token.pos), self.c.column_of(token.pos)

    def positions(self, tokens: Mapping[str, Token]) -> _Positions:
        return MappingProxyType({name: self.place(token) for name, token in tokens.items()})

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
