"""Parser for ``CREATE MATERIALIZED TABLE`` (Flink's DDL): definition files and SQL statements.

One grammar, two entry points: :func:`parse_definition` (a file, one table; errors name the
file, line and clause) and the SQL client's ``CREATE`` statements
(:mod:`airflow_provider_staged.sql.materialized_statements`). Only the outer DDL is parsed
here; the query after ``AS`` is kept as text (``check_query`` parses it with sqlglot on demand,
which is too slow for the DAG-parsing hot path).

Clauses, in Flink's order, all optional but ``AS``::

    CREATE [OR ALTER] MATERIALIZED TABLE [spark_catalog.][db.]name
      [( column [type [NOT NULL] [PRIMARY KEY NOT ENFORCED] [COMMENT '...']], ...,
         [CONSTRAINT c] PRIMARY KEY (a, ...) NOT ENFORCED,
         CONSTRAINT e EXPECT (condition) [ON VIOLATION {FAIL UPDATE | DROP ROW}], ... )]
      [COMMENT '...'] [PARTITIONED BY (a, ...)] [WITH ('key' = 'value', ...)]
      [FRESHNESS = INTERVAL 'n' SECOND|MINUTE|HOUR|DAY|WEEK | DOWNSTREAM]
      [REFRESH_MODE = FULL|CONTINUOUS]
      AS query

``FRESHNESS = DOWNSTREAM`` (Snowflake's ``TARGET_LAG = DOWNSTREAM``; Flink has no such form): no
schedule of its own, a FULL refresh of each partition its upstream materialized tables commit
(:mod:`airflow_provider_staged.materialized.propagation`).

Flink forms the project cannot honour (``DISTRIBUTED BY``, ``START_MODE``, watermarks,
computed and metadata columns, ``UNIQUE`` and enforced keys, unknown options) are errors that
say so, never silently ignored.

``EXPECT`` is Databricks' expectation: a boolean condition each row of every refresh must meet,
checked on the staged version before its commit (``staging.audits``: FAIL UPDATE keeps the old
data and fails the refresh, DROP ROW leaves the row out, without ON VIOLATION the row is kept
and the violation reported). Its expression is checked when the definition is parsed (sqlglot,
imported only for a definition that has one): one boolean expression per row, of the query's
output columns where the text tells them, naming the constraint and the position.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, NoReturn

from airflow_provider_staged.materialized.failure_streak import (
    DEFAULT_SUSPEND_AFTER,
    SUSPEND_OPTION,
    parse_suspend_after,
)
from airflow_provider_staged.materialized.freshness import (
    DEFAULT_FRESHNESS_THRESHOLD,
    POSITIVE_MESSAGE,
    UNITS_MESSAGE,
    Freshness,
    FreshnessError,
    RefreshMode,
    TimeUnit,
    derive_refresh_mode,
    parse_duration,
)
from airflow_provider_staged.materialized.grammar import Cursor, ErrorFactory, Token
from airflow_provider_staged.staging.date_patterns import PartitionError, java_to_strftime
from airflow_provider_staged.staging.identifiers import TableIdentifier, is_whole_number
from airflow_provider_staged.staging.partition_ttl import TTL_OPTIONS, TtlError, materialized_table_options

if TYPE_CHECKING:
    from airflow_provider_staged.staging.audits import AuditSuite

CREATE = "CREATE MATERIALIZED TABLE"
# FRESHNESS = DOWNSTREAM: follow the inputs' commits (Snowflake's TARGET_LAG = DOWNSTREAM).
DOWNSTREAM = "DOWNSTREAM"

EXPECT = "EXPECT"  # the clause an EXPECT constraint's errors name


class DefinitionError(ValueError):
    """A definition file that cannot be used; names the file, the line and the clause."""

    def __init__(self, path: str, line: int, clause: str, message: str, column: int = 1) -> None:
        super().__init__(f"{path}:{line}: {clause}: {message}")
        self.path = path
        self.line = line
        self.clause = clause
        self.message = message
        self.column = column


# The WITH options the project honours: the one place to add one (and, when it needs a typed
# value, an accessor in ``_Options``). Anything else is rejected with this list.
UPSTREAM_WAIT_OPTION = "upstream.wait-timeout"
UPSTREAM_MISSING_OPTION = "upstream.missing-partition"
DEFAULT_UPSTREAM_WAIT = timedelta(minutes=10)
UPSTREAM_MISSING = ("fail", "skip")
KNOWN_OPTIONS = (
    "format",
    "partition.fields.<col>.date-formatter",
    "refresh-mode.freshness-threshold",
    "schedule.cron",
    "catchup",
    "owner",
    "tags",
    "retries",
    "start-date",
    SUSPEND_OPTION,
    *TTL_OPTIONS,  # partition TTL, Paimon's names: stored with the table by each refresh
    UPSTREAM_WAIT_OPTION,  # a periodic refresh waits this long for its inputs' partition
    UPSTREAM_MISSING_OPTION,  # then fails ('fail') or skips the period ('skip')
    "engine",  # where the refresh's Spark runs: REFRESH_ENGINES
    "connector",  # Flink's table factory: only this product's own kind, CONNECTORS
)
# 'engine': in the task's process, or on a Spark Connect server (the gateway). A CONTINUOUS table's
# stream runs in the task's process whatever it says (the sink commits each micro-batch in the
# driver); its one-time refreshes (staticPartitions) run where it says.
REFRESH_ENGINES = ("embedded", "connect")
# Refreshes write Parquet through the staged commit path; no other format is honoured.
FORMATS = ("parquet",)
# Flink's 'connector' names the table's factory. A materialized table here is always a Hive table
# of the metastore written through the staged commit, the kind of the provider's staged_hive
# connection: a definition may say so, as Flink users write one, and may name no other.
CONNECTORS = ("staged_hive",)
# Optional clauses between the column list and AS, in the only order Flink accepts.
_CLAUSES = ("COMMENT", "DISTRIBUTED", "PARTITIONED", "WITH", "FRESHNESS", "REFRESH_MODE", "START_MODE")
_CLAUSE_ORDER = "COMMENT, PARTITIONED BY, WITH, FRESHNESS, REFRESH_MODE, AS"
# Flink's defaults when FRESHNESS is omitted (materialized-table.default-freshness.continuous
# and .full); without REFRESH_MODE the continuous default applies and the mode is derived.
DEFAULT_FRESHNESS = {
    RefreshMode.CONTINUOUS: Freshness(3, "MINUTE"),
    RefreshMode.FULL: Freshness(1, "HOUR"),
}
_UNITS = {unit.value: unit for unit in TimeUnit}
_UNITS.update({f"{name}S": unit for name, unit in list(_UNITS.items())})  # Flink: MINUTES, DAYS, ...
_INTERVAL_ONLY = ("MATERIALIZED TABLE only supports define interval type FRESHNESS, please refer "
                  "to the materialized table document")  # Flink's wording
_TYPE_END = ("NOT", "NULL", "COMMENT", "PRIMARY", "CONSTRAINT", "METADATA")
FORMATTER_KEY = re.compile(r"^partition\.fields\.(.+)\.date-formatter$")
_START_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")  # \d, strptime: any digit
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
TAG_MAX_LENGTH = 100  # Airflow's limit of a DAG tag: a longer one fails the whole DAG file


@dataclass(frozen=True)
class Column:
    """A column of the optional column list: a name alone, or a name with its type as written."""

    name: str
    data_type: str | None = None
    nullable: bool = True
    comment: str | None = None


# ON VIOLATION as written -> the audit's mode (``staging.audits.Mode``); none: keep and report.
ON_VIOLATION = {"FAIL UPDATE": "fail", "DROP ROW": "drop", None: "warn"}


@dataclass(frozen=True)
class ExpectConstraint:
    """``CONSTRAINT name EXPECT (expression) [ON VIOLATION FAIL UPDATE | DROP ROW]``."""

    name: str
    expression: str  # as written between the parentheses (Spark SQL over the table's columns)
    on_violation: str | None = None  # "FAIL UPDATE", "DROP ROW", or None (warn)

    @property
    def mode(self) -> str:
        """The audit's mode: ``fail``, ``drop`` or ``warn``."""
        return ON_VIOLATION[self.on_violation]

    def __str__(self) -> str:
        name = "`" + self.name.replace("`", "``") + "`"
        action = f" ON VIOLATION {self.on_violation}" if self.on_violation else ""
        return f"CONSTRAINT {name} EXPECT ({self.expression}){action}"


@dataclass(frozen=True)
class MaterializedTableDefinition:
    """One parsed definition file. ``options`` keeps the WITH clause as written."""

    identifier: TableIdentifier
    freshness: Freshness
    refresh_mode: RefreshMode
    query: str
    source_path: str
    text: str = field(repr=False)
    comment: str | None = None
    partition_by: tuple[str, ...] = ()
    options: Mapping[str, str] = field(default_factory=dict, hash=False)
    # Derived from options: partition column -> strftime pattern.
    partition_formatters: Mapping[str, str] = field(default_factory=dict, hash=False)
    schedule: str | None = None  # cron; None for CONTINUOUS tables (no periodic workflow)
    catchup: bool = False
    owner: str | None = None
    tags: tuple[str, ...] = ()
    retries: int | None = None
    start_date: date | None = None
    # Auto-suspend after this many consecutive failed scheduled refreshes (0: never).
    suspend_after_failures: int = DEFAULT_SUSPEND_AFTER
    # FRESHNESS = DOWNSTREAM: refreshed on its upstream tables' commits, never on a schedule
    # (``schedule`` is None; ``freshness`` is FULL's default, what a periodic call falls back on).
    follows_inputs: bool = False
    # A periodic refresh of a table with a schedule of its own waits this long for the upstream
    # materialized tables' partition, then fails or (skip_missing_upstream) skips the period.
    upstream_wait: timedelta = DEFAULT_UPSTREAM_WAIT
    skip_missing_upstream: bool = False
    # Clause -> line number, for errors found after parsing (e.g. an unsupported mode).
    lines: Mapping[str, int] = field(default_factory=dict, hash=False, repr=False)
    # The optional column list and PRIMARY KEY ... NOT ENFORCED (informational, as in Flink).
    columns: tuple[Column, ...] = ()
    primary_key: tuple[str, ...] = ()
    primary_key_name: str | None = None
    # EXPECT constraints, checked by every refresh before its commit (``staging.audits``).
    constraints: tuple[ExpectConstraint, ...] = ()
    # (clause, name) -> (line, column) of the name as written: the column list's columns
    # ("columns"), the key's ("PRIMARY KEY"), the partition columns, the WITH keys, where each
    # constraint's expression starts ("EXPECT"). For errors
    # found once the query's schema is known (:mod:`.output_schema`).
    positions: Mapping[tuple[str, str], tuple[int, int]] = field(
        default_factory=dict, hash=False, compare=False, repr=False)

    @property
    def freshness_text(self) -> str:
        """The freshness as the DDL writes it: ``INTERVAL '1' DAY`` or ``DOWNSTREAM``."""
        return DOWNSTREAM if self.follows_inputs else str(self.freshness)

    def position(self, clause: str, name: str) -> tuple[int, int]:
        """Where ``name`` of ``clause`` is written; the CREATE's line when it is not."""
        return self.positions.get((clause, name), (self.lines.get(CREATE, 1), 1))

    def __deepcopy__(self, memo: dict[int, object]) -> MaterializedTableDefinition:
        # Immutable (frozen, read-only mappings), so it is its own copy. Airflow deep-copies the
        # operators that hold it (3.0's `dags test` does), and a mappingproxy cannot be copied.
        return self


def read_freshness(c: Cursor, downstream: bool = False) -> Freshness | None:
    """``= INTERVAL 'n' unit`` after FRESHNESS, with Flink's errors at its positions; with
    ``downstream``, ``= DOWNSTREAM`` too, read as None."""
    c.expect_punct("FRESHNESS", "=")
    if downstream and c.at_keyword(DOWNSTREAM):
        c.advance()
        return None
    if not c.at_keyword("INTERVAL"):
        c.fail("FRESHNESS", f"{_INTERVAL_ONLY}: found {c.describe(c.current)}, expected "
               f"INTERVAL 'n' SECOND|MINUTE|HOUR|DAY|WEEK{' or DOWNSTREAM' if downstream else ''}")
    c.advance()
    sign = c.advance() if c.at_punct("-") else None
    value = c.current
    if value.kind != "string":
        if value.kind == "number":
            c.advance()  # Flink points at what follows an unquoted number (its unit)
        c.fail("FRESHNESS", f"{_INTERVAL_ONLY}: the interval value must be quoted, as in "
               f"INTERVAL '1' HOUR, found {c.describe(value)}")
    c.advance()
    unit = c.current
    if not c.at_keyword(*_UNITS):
        c.fail("FRESHNESS", f"unsupported freshness unit {c.describe(unit)}: {UNITS_MESSAGE}")
    c.advance()
    if c.at_keyword("TO"):
        c.fail("FRESHNESS", f"unsupported freshness unit {unit.text.upper()} TO ...: {UNITS_MESSAGE}")
    interval = f"INTERVAL {'-' if sign else ''}'{value.text}' {unit.text.upper()}"
    if sign or not is_whole_number(value.text.strip()):
        shown = f"-{value.text}" if sign else value.text
        c.fail("FRESHNESS", f"invalid freshness {interval}: {POSITIVE_MESSAGE}{shown}", sign or value)
    try:
        return Freshness(int(value.text), _UNITS[unit.text.upper()])
    except FreshnessError as err:
        c.fail("FRESHNESS", str(err), value)


def read_refresh_mode(c: Cursor) -> RefreshMode:
    """``= FULL|CONTINUOUS`` after REFRESH_MODE."""
    c.expect_punct("REFRESH_MODE", "=")
    if not c.at_keyword(*RefreshMode.__members__):
        c.fail("REFRESH_MODE", f"expected FULL or CONTINUOUS, found {c.describe(c.current)}")
    return RefreshMode(c.advance().text.upper())


def unknown_option(key: str) -> str | None:
    """Why a definition cannot have option ``key``; None for a known one."""
    if key in KNOWN_OPTIONS or FORMATTER_KEY.match(key):
        return None
    return f"unknown option {key!r}; supported options: {', '.join(KNOWN_OPTIONS)}"


class _Parser:
    def __init__(self, text: str, path: str, error: ErrorFactory | None = None, unit: str = "file") -> None:
        self.text = text
        self.path = path
        self.cursor = Cursor(text, error or self._file_error, unit)
        # Forms Flink's parser accepts and its validation rejects (or that we cannot honour):
        # reported after the whole statement parsed, so a syntax error is found first, as in Flink.
        self.deferred: list[tuple[str, str, Token]] = []

    def _file_error(self, line: int, column: int, clause: str, message: str) -> DefinitionError:
        return DefinitionError(self.path, line, clause, message, column)

    def fail(self, clause: str, message: str, token: Token | None = None) -> NoReturn:
        self.cursor.fail(clause, message, token)

    def line_of(self, token: Token) -> int:
        return self.cursor.line_of(token.pos)

    def defer(self, clause: str, message: str, token: Token) -> None:
        self.deferred.append((clause, message, token))

    # -- grammar ----------------------------------------------------------------------------
    def create(self) -> bool:
        """``CREATE [OR ALTER] MATERIALIZED TABLE``; True for OR ALTER. Flink's rejections."""
        c = self.cursor
        c.expect_keyword(CREATE, "CREATE")
        or_alter = False
        if c.at_keyword("OR"):
            c.advance()
            if c.at_keyword("REPLACE"):
                c.advance()
                if c.at_keyword("MATERIALIZED"):
                    self.fail(CREATE, "REPLACE MATERIALIZED TABLE is not supported; "
                              "use CREATE OR ALTER MATERIALIZED TABLE")
            else:
                c.expect_keyword(CREATE, "ALTER")
                or_alter = True
        elif c.at_keyword("TEMPORARY"):
            c.advance()
            if c.at_keyword("MATERIALIZED"):
                self.fail(CREATE, "CREATE TEMPORARY MATERIALIZED TABLE is not supported")
        c.expect_keyword(CREATE, "MATERIALIZED", "TABLE")
        return or_alter

    def identifier(self) -> TableIdentifier:
        self.create()
        return self.cursor.table_identifier(CREATE)

    def definition(self) -> MaterializedTableDefinition:
        return self.statement()[0]

    def statement(self) -> tuple[MaterializedTableDefinition, bool]:
        """The definition and whether it was ``CREATE OR ALTER``."""
        c = self.cursor
        lines = {CREATE: self.line_of(c.current)}
        or_alter = self.create()
        identifier = c.table_identifier(CREATE)
        elements = _Elements(self)
        if c.at_punct("("):
            elements.parse()
        comment = None
        partitions: dict[str, Token] = {}
        options: dict[str, str] = {}
        option_tokens: dict[str, Token] = {}
        freshness_token: Token | None = None
        freshness = explicit_mode = None
        follows_inputs = False
        remaining = _CLAUSES
        while not c.at_keyword("AS"):
            word = c.current.text.upper() if c.current.kind == "word" else None
            if word not in remaining:
                self._misplaced(word, remaining)
            remaining = remaining[remaining.index(word) + 1:]
            token = c.advance()
            lines[word] = self.line_of(token)
            if word == "COMMENT":
                comment = c.expect(word, "string", "a quoted comment").text
            elif word == "PARTITIONED":
                c.expect_keyword("PARTITIONED BY", "BY")
                partitions = c.column_list("PARTITIONED BY", "partition column")
            elif word == "WITH":
                options, option_tokens = c.string_options(word)
            elif word == "FRESHNESS":
                freshness_token, freshness = token, read_freshness(c, downstream=True)
                follows_inputs = freshness is None
            elif word == "REFRESH_MODE":
                explicit_mode = read_refresh_mode(c)
            elif word == "START_MODE":  # Flink's syntax first (its errors and positions), then refused
                self._start_mode()
                self.defer(word, _UNSUPPORTED_CLAUSES[word], token)
            else:  # DISTRIBUTED: a Flink clause with nothing to honour here
                self.defer(word, _UNSUPPORTED_CLAUSES[word], token)
                c.skip(lambda: c.at_keyword(*_CLAUSES, "AS"))
        as_token = c.current
        lines["AS"] = self.line_of(as_token)
        # The query is Spark SQL: read from the text, never through the DDL tokenizer.
        query = c.query(as_token.end, "AS")
        query_start = self.text.index(query, as_token.end)
        lines["query"] = c.line_of(query_start)
        elements.check_names({"PARTITIONED BY": partitions})
        if self.deferred:
            self.fail(*self.deferred[0])
        partition_by = tuple(partitions)
        if follows_inputs:
            # Refreshes follow the inputs' commits: batch refreshes of their partitions.
            if explicit_mode is RefreshMode.CONTINUOUS:
                self.fail("REFRESH_MODE", "FRESHNESS = DOWNSTREAM refreshes on the commits of the tables "
                          "it reads: REFRESH_MODE must be FULL (or left out)", freshness_token)
            explicit_mode = RefreshMode.FULL
            freshness = DEFAULT_FRESHNESS[RefreshMode.FULL]
        elif freshness is None:
            freshness = DEFAULT_FRESHNESS[explicit_mode or RefreshMode.CONTINUOUS]
            lines["FRESHNESS"] = lines[CREATE]  # where the default applies, for later errors

        settings = _Options(self, options, option_tokens, partition_by)
        threshold = settings.threshold()
        refresh_mode = derive_refresh_mode(freshness, explicit_mode, threshold)
        schedule = settings.cron()
        if follows_inputs:
            if schedule is not None:
                settings.fail("schedule.cron", "option 'schedule.cron': FRESHNESS = DOWNSTREAM refreshes on "
                              "the commits of the tables it reads, never on a schedule")
        elif refresh_mode is RefreshMode.FULL:  # Flink's FULL limits hold with a cron override too
            try:
                derived = freshness.to_cron()
            except FreshnessError as err:
                self.fail("FRESHNESS", str(err), freshness_token or as_token)
            schedule = schedule or derived
        definition = MaterializedTableDefinition(
            identifier=identifier,
            freshness=freshness,
            refresh_mode=refresh_mode,
            query=query,
            source_path=self.path,
            text=self.text,
            comment=comment,
            partition_by=partition_by,
            options=MappingProxyType(options),
            partition_formatters=MappingProxyType(settings.formatters()),
            schedule=schedule,
            catchup=settings.catchup(),
            owner=settings.owner(),
            tags=settings.tags(),
            retries=settings.retries(),
            start_date=settings.start_date(),
            suspend_after_failures=settings.suspend_after(),
            follows_inputs=follows_inputs,
            upstream_wait=settings.upstream_wait(),
            skip_missing_upstream=settings.upstream_missing() == "skip",
            lines=MappingProxyType(lines),
            columns=tuple(elements.columns),
            primary_key=tuple(elements.key),
            primary_key_name=elements.key_name,
            constraints=tuple(elements.constraints),
            positions=MappingProxyType({**self.positions({
                "columns": elements.tokens, "PRIMARY KEY": elements.key,
                "PARTITIONED BY": partitions, "WITH": option_tokens, EXPECT: elements.expect_tokens,
            }), ("AS", "query"): (c.line_of(query_start), c.column_of(query_start))}),
        )
        if definition.constraints:
            self.check_constraints(definition)
        return definition, or_alter

    def check_constraints(self, definition: MaterializedTableDefinition) -> None:
        """The EXPECT conditions checked before anything runs, each error at its place."""
        problem = constraint_problem(definition, known_columns(definition))
        if problem is not None:
            line, column, message = problem
            if self.cursor.unit == "file":  # a file's errors name the line only: say the column
                message += f" (line {line}, column {column})"
            raise self.cursor.error(line, column, EXPECT, message)

    def positions(self, named: dict[str, dict[str, Token]]) -> dict[tuple[str, str], tuple[int, int]]:
        c = self.cursor
        return {(clause, name): (c.line_of(token.pos), c.column_of(token.pos))
                for clause, tokens in named.items() for name, token in tokens.items()}

    def _misplaced(self, word: str | None, remaining: tuple[str, ...]) -> NoReturn:
        expected = [*(_CLAUSE_NAMES[clause] for clause in remaining if clause in _CLAUSE_NAMES), "AS"]
        listed = expected[0] if len(expected) == 1 else f"{', '.join(expected[:-1])} or AS"
        found = self.cursor.describe(self.cursor.current)
        clause = _CLAUSE_NAMES.get(word or "", "AS")
        why = f" (clauses go in the order {_CLAUSE_ORDER})" if word in _CLAUSES else ""
        self.fail(clause, f"expected {listed}, found {found}{why}")

    def _start_mode(self) -> None:
        """``START_MODE = kind [(literal)]`` as Flink's parser reads it: an INTERVAL for the NOW
        kinds, a TIMESTAMP [WITH LOCAL TIME ZONE] for the TIMESTAMP kinds, nothing for BEGINNING."""
        c = self.cursor
        clause = "START_MODE"
        c.expect_punct(clause, "=")
        if not c.at_keyword(*_START_MODES):
            self.fail(clause, f"expected one of {', '.join(_START_MODES)}, found {c.describe(c.current)}")
        kind = c.advance().text.upper()
        if kind.endswith("BEGINNING") or not c.at_punct("("):
            return
        c.advance()
        if kind.endswith("TIMESTAMP"):
            c.expect_keyword(clause, "TIMESTAMP")
            if c.at_keyword("WITH"):
                c.expect_keyword(clause, "WITH", "LOCAL", "TIME", "ZONE")
            c.expect(clause, "string", "a quoted timestamp such as '2023-04-22 21:37:58'")
        elif c.at_keyword("INTERVAL"):
            c.advance()
            if c.at_punct("-"):
                c.advance()
            c.expect(clause, "string", "a quoted interval value such as '1'")
            c.expect(clause, "word", "an interval unit such as HOUR")
        else:
            literal = c.current
            if c.at_keyword("TIMESTAMP", "DATE", "TIME"):  # Flink points at the literal's value
                c.advance()
                literal = c.current
            self.fail(clause, "START_MODE literal must be an interval for FROM_NOW and RESUME_OR_FROM_NOW "
                      f"modes, found {c.describe(literal)}", literal)
        c.expect_punct(clause, ")")


_START_MODES = ("FROM_BEGINNING", "FROM_NOW", "FROM_TIMESTAMP",
                "RESUME_OR_FROM_BEGINNING", "RESUME_OR_FROM_NOW", "RESUME_OR_FROM_TIMESTAMP")
_CLAUSE_NAMES = {
    "COMMENT": "COMMENT",
    "PARTITIONED": "PARTITIONED BY",
    "WITH": "WITH",
    "FRESHNESS": "FRESHNESS",
    "REFRESH_MODE": "REFRESH_MODE",
}
_UNSUPPORTED_CLAUSES = {
    "DISTRIBUTED": "DISTRIBUTED BY/INTO is not supported: refreshes write Parquet files per "
                   "partition, without buckets; remove the clause",
    "START_MODE": "START_MODE is not supported: a CONTINUOUS table starts from the current "
                  "content of its sources and resumes from its checkpoint; remove the clause",
}


class _Elements:
    """The column list: columns (names alone or typed) and PRIMARY KEY ... NOT ENFORCED."""

    clause = "columns"

    def __init__(self, parser: _Parser) -> None:
        self.parser = parser
        self.cursor = parser.cursor
        self.columns: list[Column] = []
        self.names_only: bool | None = None  # decided by the first column, as Flink's parser
        self.key: dict[str, Token] = {}
        self.key_name: str | None = None
        self.tokens: dict[str, Token] = {}  # column -> its name as written
        self.constraints: list[ExpectConstraint] = []
        self.expect_tokens: dict[str, Token] = {}  # constraint name, lower case -> its condition's start

    def parse(self) -> None:
        self.cursor.parenthesized(self.clause, self.element)

    def check_names(self, chosen: dict[str, dict[str, Token]]) -> None:
        """A list of names alone names every column (Flink: as many as the query has), so the
        key and the partition columns must be among them; typed columns may be a subset."""
        if not self.names_only:
            return
        declared = [column.name for column in self.columns]
        for clause, names in {self.clause: self.key, **chosen}.items():
            for name, token in names.items():
                if name not in declared:
                    self.parser.defer(clause, f"column {token.text!r} is not in the column list "
                                      f"({', '.join(declared)})", token)

    def element(self) -> None:
        c = self.cursor
        if c.at_keyword("CONSTRAINT", "PRIMARY", "UNIQUE"):
            self.constraint(None)
        elif c.at_keyword("WATERMARK"):
            self.unsupported("WATERMARK is not supported: refreshes read their sources as batches "
                             "or micro-batches, without event time", c.current)
        else:
            self.column()

    def column(self) -> None:
        c = self.cursor
        name, token = c.column(self.clause, "column")
        if name in (column.name for column in self.columns):
            self.parser.fail(self.clause, f"duplicate column {token.text!r}", token)
        self.tokens[name] = token
        if c.at_keyword("AS"):
            self.unsupported(f"computed column {token.text!r} is not supported: compute it in the "
                             "query after AS", c.current)
            return
        bare = c.at_punct(",") or c.at_punct(")")
        if self.names_only is None:
            self.names_only = bare
        if self.names_only or bare:
            if not bare:  # a type in a list of names: Flink's parser fails at the type too
                c.expect(self.clause, "punct", "',' or ')'", ")")
            if not self.names_only:
                self.parser.fail(self.clause, f"expected a type for column {token.text!r}, found "
                                 f"{c.describe(c.current)}")
            self.columns.append(Column(name))
            return
        data_type = self.data_type(token)
        nullable = c.negation(self.clause, "NULL") is not True
        if c.at_keyword("METADATA"):
            self.unsupported(f"metadata column {token.text!r} is not supported: select the value "
                             "in the query after AS", c.current)
            return
        if c.at_keyword("CONSTRAINT", "PRIMARY", "UNIQUE"):
            self.constraint(name)
        comment = None
        if c.at_keyword("COMMENT"):
            c.advance()
            comment = c.expect(self.clause, "string", "a quoted column comment").text
        self.columns.append(Column(name, data_type, nullable, comment))

    def unsupported(self, message: str, token: Token) -> None:
        """Defer the error and skip the rest of the element (Flink parses it; we cannot honour it)."""
        self.parser.defer(self.clause, message, token)
        self.cursor.skip(lambda: self.cursor.at_punct(",") or self.cursor.at_punct(")"))

    def data_type(self, column: Token) -> str:
        """The type as written (``DECIMAL(10, 2)``, ``ARRAY<ROW(a INT)>``): Spark checks it."""
        c = self.cursor
        first = c.current
        if first.kind != "word":
            self.parser.fail(self.clause, f"expected a type for column {column.text!r}, found "
                             f"{c.describe(first)}")
        depth, last = 0, first
        while c.current.kind != "end":
            token = c.current
            if depth == 0 and ((token.kind == "punct" and token.text in ",)") or c.at_keyword(*_TYPE_END)):
                break
            if token.kind == "punct" and token.text in "(<":
                depth += 1
            elif token.kind == "punct" and token.text in ")>":
                depth -= 1
            last = c.advance()
        return self.parser.text[first.pos:last.end]

    def constraint(self, column: str | None) -> None:
        """``[CONSTRAINT c] PRIMARY KEY [(a, ...)] NOT ENFORCED`` or ``CONSTRAINT c EXPECT (...)``;
        UNIQUE and ENFORCED rejected."""
        c = self.cursor
        start = c.current
        name = None
        if c.at_keyword("CONSTRAINT"):
            c.advance()
            token = c.name(self.clause, "a constraint name")
            name = token.text
            if c.at_keyword("EXPECT"):
                if column is not None:
                    self.parser.fail(EXPECT, f"constraint {name!r}: an EXPECT constraint is an element of "
                                     f"the column list of its own (after a ','), not part of column "
                                     f"{column!r}", c.current)
                self.expectation(token)
                return
        if c.at_keyword("UNIQUE"):
            self.unsupported("UNIQUE constraint is not supported yet (as in Flink): use PRIMARY KEY "
                             "(...) NOT ENFORCED", start)
            return
        c.expect_keyword(self.clause, "PRIMARY", "KEY")
        columns = {column: start} if column else c.column_list(self.clause, "primary key column")
        if c.negation(self.clause, "ENFORCED") is not True:  # ENFORCED, or nothing said
            # Flink's rule and reason: the table's data is written by refreshes, not checked.
            self.parser.defer(self.clause, "PRIMARY KEY must be NOT ENFORCED: ENFORCED/NOT ENFORCED "
                              "controls if the constraint checks are performed on the incoming/"
                              "outgoing data; the data is not owned here, so the only supported "
                              "mode is NOT ENFORCED", start)
        if self.key:
            self.parser.fail(self.clause, "duplicate primary key definition", start)
        self.key, self.key_name = columns, name


    def expectation(self, name: Token) -> None:
        """``EXPECT (condition) [ON VIOLATION ...]`` after ``CONSTRAINT name``: the condition is
        kept as written (checked once the whole statement parsed)."""
        first, expression, on_violation = self.cursor.expectation(EXPECT, name)
        # Spark's names are case-insensitive: `Valid` and `valid` would be one audit in every report.
        if name.text.lower() in self.expect_tokens:
            self.parser.fail(EXPECT, f"duplicate constraint name {name.text!r}", name)
        self.expect_tokens[name.text.lower()] = first
        self.constraints.append(ExpectConstraint(name.text, expression, on_violation))


class _Options:
    """Typed access to the WITH clause; every key must be known."""

    def __init__(
        self,
        parser: _Parser,
        options: dict[str, str],
        tokens: dict[str, Token],
        partition_by: tuple[str, ...],
    ) -> None:
        self.parser = parser
        self.options = options
        self.tokens = tokens
        self.partition_by = partition_by
        for key in options:
            unknown = unknown_option(key)
            if unknown:
                self.fail(key, unknown)
        # The connector first: the kind of table decides what its other options mean (Flink's too).
        self.choice("connector", CONNECTORS, "a materialized table is a Hive table of the metastore "
                    "written through the staged commit; name that kind or leave the option out",
                    fold_case=True)
        self.choice("engine", REFRESH_ENGINES, "a refresh's Spark runs in its task or on the gateway")
        self.choice("format", FORMATS, "refreshes write parquet", fold_case=True)
        try:
            materialized_table_options(options, partition_by)
        except TtlError as err:
            named = [key for key in TTL_OPTIONS if key in options and key in str(err)]
            self.fail((named or [key for key in TTL_OPTIONS if key in options])[0], str(err))

    def fail(self, key: str, message: str) -> NoReturn:
        self.parser.fail("WITH", message, self.tokens[key])

    def choice(self, key: str, accepted: tuple[str, ...], why: str, fold_case: bool = False) -> None:
        """Refuse a value of ``key`` outside ``accepted``, saying ``why`` and what is accepted."""
        value = self.get(key)
        if value is not None and (value.lower() if fold_case else value) not in accepted:
            self.fail(key, f"option {key!r} = {value!r} is not supported: {why} (supported: "
                      f"{', '.join(map(repr, accepted))})")

    def get(self, key: str) -> str | None:
        value = self.options.get(key)
        if value is not None and not value.strip():
            self.fail(key, f"option {key!r} must not be empty")
        return value

    def formatters(self) -> dict[str, str]:
        formatters = {}
        for key, pattern in self.options.items():
            match = FORMATTER_KEY.match(key)
            if match is None:
                continue
            column = match.group(1).lower()
            if column not in self.partition_by:
                # Flink's wording (SqlCreateMaterializedTableConverter).
                self.fail(key, f"Column {match.group(1)!r} referenced by materialized table option "
                          f"{key!r} isn't a partition column. Available partition columns: "
                          f"{list(self.partition_by)}.")
            try:
                formatters[column] = java_to_strftime(pattern)
            except PartitionError as err:
                self.fail(key, f"option {key!r}: {err}")
        return formatters

    def duration(self, key: str, default: timedelta) -> timedelta:
        """A duration option (``'30 min'``), or ``default`` when it is not set."""
        value = self.get(key)
        if value is None:
            return default
        try:
            return parse_duration(value)
        except FreshnessError as err:
            self.fail(key, f"option {key!r}: {err}")

    def threshold(self) -> timedelta:
        return self.duration("refresh-mode.freshness-threshold", DEFAULT_FRESHNESS_THRESHOLD)

    def cron(self) -> str | None:
        key = "schedule.cron"
        value = self.get(key)
        if value is not None:
            from croniter import croniter  # deferred: only definitions with an override pay

            if len(value.split()) != 5 or not croniter.is_valid(value):
                self.fail(key, f"option {key!r}: invalid cron expression {value!r} "
                          "(expected five fields, e.g. '0 3 * * *')")
        return value

    def catchup(self) -> bool:
        value = self.get("catchup")
        if value is None:
            return False
        if value.lower() not in ("true", "false"):
            self.fail("catchup", f"option 'catchup' must be 'true' or 'false', not {value!r}")
        if value.lower() == "true" and "start-date" not in self.options:
            self.fail("catchup", "option 'catchup' = 'true' needs a 'start-date' to backfill from")
        return value.lower() == "true"

    def tags(self) -> tuple[str, ...]:
        value = self.get("tags")
        tags = tuple(tag.strip() for tag in value.split(",") if tag.strip()) if value else ()
        for tag in tags:
            if len(tag) > TAG_MAX_LENGTH or _CONTROL.search(tag):
                self.fail("tags", f"option 'tags': tag {tag!r} must be at most {TAG_MAX_LENGTH} "
                          "characters without control characters (Airflow refuses it)")
        return tags

    def owner(self) -> str | None:
        value = self.get("owner")
        if value is not None and _CONTROL.search(value):
            self.fail("owner", f"option 'owner' must not contain control characters: {value!r}")
        return value

    def retries(self) -> int | None:
        value = self.get("retries")
        if value is None:
            return None
        if not is_whole_number(value) or int(value) > 100:
            self.fail("retries", f"option 'retries' must be an integer 0..100, not {value!r}")
        return int(value)

    def start_date(self) -> date | None:
        value = self.get("start-date")
        if value is None:
            return None
        try:
            if not _START_DATE.match(value):
                raise ValueError(value)
            return datetime.strptime(value, "%Y-%m-%d").date()
        except ValueError:
            self.fail("start-date", f"option 'start-date' must be a date yyyy-MM-dd, not {value!r}")


    def upstream_wait(self) -> timedelta:
        return self.duration(UPSTREAM_WAIT_OPTION, DEFAULT_UPSTREAM_WAIT)

    def upstream_missing(self) -> str:
        value = self.get(UPSTREAM_MISSING_OPTION)
        if value is None:
            return UPSTREAM_MISSING[0]
        if value.lower() not in UPSTREAM_MISSING:
            self.fail(UPSTREAM_MISSING_OPTION,
                      f"option {UPSTREAM_MISSING_OPTION!r} must be 'fail' or 'skip', not {value!r}")
        return value.lower()

    def suspend_after(self) -> int:
        try:
            return parse_suspend_after(self.get(SUSPEND_OPTION))
        except ValueError as err:
            self.fail(SUSPEND_OPTION, str(err))


def render_definition(
    definition: MaterializedTableDefinition, options: Mapping[str, str], enriched: bool = False,
    explicit_mode: bool | None = None,
) -> str:
    """The definition's DDL with ``options`` as its WITH clause (query text kept verbatim).

    ``enriched``: as Flink's ``SHOW CREATE MATERIALIZED TABLE`` shows it, with the refresh mode
    even when it was derived and no ';'; otherwise a definition file's text (a derived mode
    stays derived); ``explicit_mode`` overrides whether a file writes its mode.
    """

    def quote(text: str) -> str:
        return "'" + text.replace("'", "''") + "'"

    def name(text: str) -> str:
        return "`" + text.replace("`", "``") + "`"

    lines = [f"CREATE MATERIALIZED TABLE {name(definition.identifier.database)}."
             f"{name(definition.identifier.table)}"]
    elements = [
        " ".join(filter(None, (
            name(column.name), column.data_type, "" if column.nullable else "NOT NULL",
            f"COMMENT {quote(column.comment)}" if column.comment is not None else "",
        )))
        for column in definition.columns
    ]
    if definition.primary_key:
        constraint = f"CONSTRAINT {name(definition.primary_key_name)} " if definition.primary_key_name else ""
        key = ", ".join(map(name, definition.primary_key))
        elements.append(f"{constraint}PRIMARY KEY ({key}) NOT ENFORCED")
    elements += [str(expectation) for expectation in definition.constraints]
    if elements:
        lines.append("(\n" + ",\n".join(f"  {element}" for element in elements) + "\n)")
    if definition.comment is not None:
        lines.append(f"COMMENT {quote(definition.comment)}")
    if definition.partition_by:
        lines.append("PARTITIONED BY (" + ", ".join(map(name, definition.partition_by)) + ")")
    if options:
        lines.append("WITH (\n" + ",\n".join(f"  {quote(k)} = {quote(v)}" for k, v in options.items())
                     + "\n)")
    freshness = definition.freshness
    lines.append(f"FRESHNESS = {DOWNSTREAM}" if definition.follows_inputs
                 else f"FRESHNESS = INTERVAL '{freshness.value}' {freshness.unit.value}")
    if explicit_mode is None:
        explicit_mode = "REFRESH_MODE" in definition.lines  # a file keeps a derived mode derived
    if enriched or explicit_mode:
        lines.append(f"REFRESH_MODE = {definition.refresh_mode.value}")
    lines.append(f"AS {definition.query}" if enriched else f"AS {definition.query};\n")
    return "\n".join(lines)


def parse_definition(text: str, path: str | Path = "<string>") -> MaterializedTableDefinition:
    """Parse one definition; raises :class:`DefinitionError` naming the file, line and clause."""
    return _Parser(text, str(path)).definition()


def parse_create_statement(text: str, error: ErrorFactory) -> tuple[MaterializedTableDefinition, bool]:
    """The SQL client's entry point: one ``CREATE [OR ALTER] MATERIALIZED TABLE`` statement
    (the definition, and whether it is OR ALTER); ``error`` builds the exception to raise."""
    return _Parser(text, "<statement>", error, "statement").statement()


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DefinitionError(str(path), 1, "file", f"cannot read the definition: {err}") from None


def load_definition(path: str | Path) -> MaterializedTableDefinition:
    path = Path(path)
    return parse_definition(_read(path), path)


def read_identifier(path: str | Path) -> TableIdentifier:
    """Only the table name of a definition file: cheap, for finding one file among many."""
    path = Path(path)
    return _Parser(_read(path), str(path)).identifier()


def known_columns(definition: MaterializedTableDefinition) -> list[str] | None:
    """The table's columns as far as the text tells them without Spark: a column list of names
    alone, else the names of the query's outermost SELECT (None when one is ``*`` or an
    unnamed expression: Spark's analysis decides, :func:`constraint_problem` again)."""
    if definition.columns and all(column.data_type is None for column in definition.columns):
        return [column.name for column in definition.columns]
    import sqlglot  # deferred: only a definition with constraints pays the import
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError

    try:
        tree = sqlglot.parse_one(definition.query, read="spark")
    except (ParseError, TokenError):
        return None  # check_query says why, at the query's line
    while isinstance(tree, exp.SetOperation):  # UNION ...: the first query names the columns
        tree = tree.left
    if not isinstance(tree, exp.Select):
        return None
    names = []
    for item in tree.expressions:
        if not isinstance(item, (exp.Alias, exp.Column)) or isinstance(item.this, exp.Star):
            return None
        names.append(item.alias_or_name)
    return names


def constraint_problem(
    definition: MaterializedTableDefinition, columns: Sequence[str] | None
) -> tuple[int, int, str] | None:
    """The first EXPECT constraint of ``definition`` that cannot run as a row audit
    (:func:`expectation_problem`), placed in the definition."""
    return expectation_problem(definition.constraints, {
        c.name: definition.position(EXPECT, c.name.lower()) for c in definition.constraints}, columns)


def expectation_problem(
    constraints: Sequence[ExpectConstraint],
    places: Mapping[str, tuple[int, int]],
    columns: Sequence[str] | None,
) -> tuple[int, int, str] | None:
    """The first constraint that cannot run as a row audit (not one boolean row expression, or
    naming a column outside ``columns`` when they are known): its line and column (its condition
    starts at ``places[name]``) and the message naming it; None when all can. The audit's own
    checks (``staging.audits.check_expression``)."""
    from airflow_provider_staged.staging.audits import AuditError, AuditSuite, RowExpectation

    for constraint in constraints:
        try:
            suite = AuditSuite((RowExpectation(constraint.name, constraint.expression, constraint.mode),))
            if columns is not None:
                suite.check_columns(columns)
        except AuditError as err:
            line, column = places[constraint.name]
            before = constraint.expression[:err.offset or 0]
            if "\n" in before:
                line, column = line + before.count("\n"), len(before) - before.rfind("\n")
            else:
                column += len(before)
            # The DDL has row expectations only: the audit's hint to make it a table one does not apply.
            reason = err.reason.replace(" (make it a table expectation)", "")
            return line, column, f"constraint {constraint.name!r}: {reason}"
    return None


def check_query(definition: MaterializedTableDefinition) -> None:
    """Check that the text after AS is one Spark SQL query (sqlglot); else a DefinitionError."""
    import sqlglot  # deferred: ~0.25 s to import and ~0.7 ms per query, kept off DAG parsing
    from sqlglot.errors import ParseError, TokenError

    try:
        statements = sqlglot.parse(definition.query, read="spark")
    except (ParseError, TokenError) as err:
        line = definition.lines["query"]
        if isinstance(err, ParseError) and err.errors and err.errors[0].get("line"):
            line += err.errors[0]["line"] - 1  # sqlglot counts lines from the query's start
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DefinitionError(definition.source_path, line, "AS", f"invalid query: {detail}") from None
    if not isinstance(statements[0], sqlglot.exp.Query):
        kind = type(statements[0]).__name__.upper()
        raise DefinitionError(
            definition.source_path, definition.lines["query"], "AS",
            f"expected a query (SELECT ...) after AS, found a {kind} statement",
        )


def definition_audits(definition: MaterializedTableDefinition) -> AuditSuite:
    """The EXPECT constraints as the row expectations every refresh checks (checked at parse);
    imported here, not at the top: the DAG factory parses definitions without sqlglot."""
    from airflow_provider_staged.staging.audits import AuditSuite, RowExpectation

    return AuditSuite(tuple(RowExpectation(c.name, c.expression, c.mode) for c in definition.constraints))
