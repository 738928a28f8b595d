"""Parser for ``CREATE MATERIALIZED TABLE`` definition files (Flink's DDL, one table per file).

Only the outer DDL is parsed here, by a small tokenizer and a fixed-order grammar; the query
after ``AS`` is kept as text (``check_query`` parses it with sqlglot on demand, which is too
slow for the DAG-parsing hot path).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple, NoReturn

from airflow_provider_staged.identifiers import (
    InvalidIdentifierError,
    TableIdentifier,
    validate_name,
)
from airflow_provider_staged.materialized.failure_streak import (
    DEFAULT_SUSPEND_AFTER,
    SUSPEND_OPTION,
    parse_suspend_after,
)
from airflow_provider_staged.materialized.freshness import (
    DEFAULT_FRESHNESS_THRESHOLD,
    Freshness,
    FreshnessError,
    RefreshMode,
    derive_refresh_mode,
    parse_duration,
)
from airflow_provider_staged.materialized.partitions import PartitionError, java_to_strftime
from airflow_provider_staged.partition_ttl import TTL_OPTIONS, TtlError, materialized_table_options


class DefinitionError(ValueError):
    """A definition file that cannot be used; names the file, the line and the clause."""

    def __init__(self, path: str, line: int, clause: str, message: str) -> None:
        super().__init__(f"{path}:{line}: {clause}: {message}")
        self.path = path
        self.line = line
        self.clause = clause
        self.message = message


class _Token(NamedTuple):
    kind: str  # word, string, ident (backticked), number, punct, end
    text: str  # raw text; for strings and idents the unescaped value
    pos: int


_SPACE = re.compile(r"(?:\s+|--[^\n]*|/\*.*?\*/)*", re.DOTALL)
# Whitespace and comments are consumed as the prefix of every token: half the regex calls.
_HEADER_TOKEN = re.compile(
    r"""(?:\s+|--[^\n]*|/\*.*?\*/)*
      (?:(?P<string>'(?:[^']|'')*')
      |(?P<ident>`(?:[^`]|``)*`)
      |(?P<word>[A-Za-z_][A-Za-z0-9_]*)
      |(?P<number>[0-9]+)
      |(?P<punct>[(),=.;])
      |(?P<end>\Z))""",
    re.DOTALL | re.VERBOSE,
)
# The query is Spark SQL: strings may use either quote and backslash escapes. We only need to
# find statement separators and the end of the last statement, so everything else is "other".
_QUERY_TOKEN = re.compile(
    r"""(?P<skip>\s+|--[^\n]*|/\*.*?\*/)
      |(?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`(?:[^`]|``)*`)
      |(?P<semicolon>;)
      |(?P<other>[^\s'"`;/-]+|[/-])
      |(?P<bad>.)""",
    re.DOTALL | re.VERBOSE,
)

KNOWN_OPTIONS = (
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
)
_CLAUSE_ORDER = "COMMENT, PARTITIONED BY, WITH, FRESHNESS, REFRESH_MODE, AS"
_FORMATTER_KEY = re.compile(r"^partition\.fields\.(.+)\.date-formatter$")
_START_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


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
    # Clause -> line number, for errors found after parsing (e.g. an unsupported mode).
    lines: Mapping[str, int] = field(default_factory=dict, hash=False, repr=False)


class _Parser:
    def __init__(self, text: str, path: str) -> None:
        self.text = text
        self.path = path
        self.tokens = self._tokenize()
        self.current = next(self.tokens)

    # -- tokens -----------------------------------------------------------------------------
    def _tokenize(self) -> Iterator[_Token]:
        text, pos = self.text, 0
        while True:
            match = _HEADER_TOKEN.match(text, pos)
            if match is None:
                bad = _SPACE.match(text, pos).end()
                self._fail_at(bad, "syntax", self._bad_character(bad))
            kind = match.lastgroup
            if kind == "end":
                break
            value = match.group(kind)
            if kind == "string":
                value = value[1:-1].replace("''", "'")
            elif kind == "ident":
                value = value[1:-1].replace("``", "`")
            yield _Token(kind, value, match.start(kind))
            pos = match.end()
        while True:
            yield _Token("end", "", len(text))

    def _bad_character(self, pos: int) -> str:
        char = self.text[pos]
        if char in "'\"":
            return "unterminated string literal"
        if char == "`":
            return "unterminated backticked identifier"
        if self.text.startswith("/*", pos):
            return "unterminated /* comment"
        return f"unexpected character {char!r}"

    def line_of(self, pos: int) -> int:
        return self.text.count("\n", 0, pos) + 1

    def _fail_at(self, pos: int, clause: str, message: str) -> NoReturn:
        raise DefinitionError(self.path, self.line_of(pos), clause, message)

    def fail(self, clause: str, message: str, token: _Token | None = None) -> NoReturn:
        self._fail_at((token or self.current).pos, clause, message)

    def advance(self) -> _Token:
        token, self.current = self.current, next(self.tokens)
        return token

    def at_keyword(self, *words: str) -> bool:
        return self.current.kind == "word" and self.current.text.upper() in words

    def describe(self, token: _Token) -> str:
        return "the end of the file" if token.kind == "end" else repr(self.text[token.pos:][:20])

    def expect_keyword(self, clause: str, *words: str) -> _Token:
        if not self.at_keyword(words[0]):
            self.fail(clause, f"expected {' '.join(words)}, found {self.describe(self.current)}")
        for word in words:
            if not self.at_keyword(word):
                self.fail(clause, f"expected {word}, found {self.describe(self.current)}")
            token = self.advance()
        return token

    def expect(self, clause: str, kind: str, what: str, text: str | None = None) -> _Token:
        token = self.current
        if token.kind != kind or (text is not None and token.text != text):
            self.fail(clause, f"expected {what}, found {self.describe(token)}")
        return self.advance()

    def name(self, clause: str) -> _Token:
        if self.current.kind not in ("word", "ident"):
            self.fail(clause, f"expected a name, found {self.describe(self.current)}")
        return self.advance()

    def parenthesized(self, clause: str, item: Callable[[], None]) -> None:
        self.expect(clause, "punct", "'('", "(")
        item()
        while self.current.text == "," and self.current.kind == "punct":
            self.advance()
            item()
        self.expect(clause, "punct", "',' or ')'", ")")

    # -- grammar ----------------------------------------------------------------------------
    def identifier(self) -> TableIdentifier:
        clause = "CREATE MATERIALIZED TABLE"
        self.expect_keyword(clause, "CREATE", "MATERIALIZED", "TABLE")
        start = self.current
        parts = [self.name(clause).text]
        while self.current.kind == "punct" and self.current.text == ".":
            self.advance()
            parts.append(self.name(clause).text)
        if len(parts) > 2:
            self.fail(clause, f"expected [db.]name, found {'.'.join(parts)!r}", start)
        try:
            if len(parts) == 1:
                return TableIdentifier("default", parts[0])
            return TableIdentifier(parts[0], parts[1])
        except InvalidIdentifierError as err:
            self.fail(clause, str(err), start)

    def definition(self) -> MaterializedTableDefinition:
        lines = {"CREATE MATERIALIZED TABLE": self.line_of(self.current.pos)}
        identifier = self.identifier()
        comment = None
        if self.at_keyword("COMMENT"):
            self.advance()
            comment = self.expect("COMMENT", "string", "a quoted comment").text
        partition_by: list[str] = []
        if self.at_keyword("PARTITIONED"):
            self.expect_keyword("PARTITIONED BY", "PARTITIONED", "BY")
            self.parenthesized("PARTITIONED BY", lambda: self._partition_column(partition_by))
        options: dict[str, str] = {}
        option_lines: dict[str, _Token] = {}
        if self.at_keyword("WITH"):
            self.advance()
            self.parenthesized("WITH", lambda: self._option(options, option_lines))
        if not self.at_keyword("FRESHNESS"):
            self.fail("FRESHNESS", f"expected FRESHNESS, found {self.describe(self.current)} "
                      f"(clauses go in the order {_CLAUSE_ORDER})")
        freshness_token = self.advance()
        lines["FRESHNESS"] = self.line_of(freshness_token.pos)
        freshness = self._freshness()
        explicit_mode = None
        if self.at_keyword("REFRESH_MODE"):
            lines["REFRESH_MODE"] = self.line_of(self.advance().pos)
            self.expect("REFRESH_MODE", "punct", "'='", "=")
            mode_token = self.current
            if not self.at_keyword(*RefreshMode.__members__):
                self.fail("REFRESH_MODE", f"expected FULL or CONTINUOUS, found "
                          f"{self.describe(mode_token)}")
            explicit_mode = RefreshMode(self.advance().text.upper())
        as_token = self.current
        if not self.at_keyword("AS"):
            expected = "AS" if explicit_mode else "REFRESH_MODE or AS"
            self.fail("AS", f"expected {expected}, found {self.describe(as_token)}")
        lines["AS"] = self.line_of(as_token.pos)
        query = self._query(as_token.pos + 2)
        lines["query"] = self.line_of(self.text.index(query, as_token.pos + 2))

        settings = _Options(self, options, option_lines, partition_by)
        threshold = settings.threshold()
        refresh_mode = derive_refresh_mode(freshness, explicit_mode, threshold)
        schedule = settings.cron()
        if refresh_mode is RefreshMode.FULL:  # Flink's FULL limits hold with a cron override too
            try:
                derived = freshness.to_cron()
            except FreshnessError as err:
                self.fail("FRESHNESS", str(err), freshness_token)
            schedule = schedule or derived
        return MaterializedTableDefinition(
            identifier=identifier,
            freshness=freshness,
            refresh_mode=refresh_mode,
            query=query,
            source_path=self.path,
            text=self.text,
            comment=comment,
            partition_by=tuple(partition_by),
            options=MappingProxyType(options),
            partition_formatters=MappingProxyType(settings.formatters()),
            schedule=schedule,
            catchup=settings.catchup(),
            owner=settings.get("owner"),
            tags=settings.tags(),
            retries=settings.retries(),
            start_date=settings.start_date(),
            suspend_after_failures=settings.suspend_after(),
            lines=MappingProxyType(lines),
        )

    def _partition_column(self, columns: list[str]) -> None:
        token = self.name("PARTITIONED BY")
        try:
            column = validate_name(token.text, "partition column")
        except InvalidIdentifierError as err:
            self.fail("PARTITIONED BY", str(err), token)
        if column in columns:
            self.fail("PARTITIONED BY", f"duplicate partition column {token.text!r}", token)
        columns.append(column)

    def _option(self, options: dict[str, str], lines: dict[str, _Token]) -> None:
        key = self.expect("WITH", "string", "a quoted option key such as 'owner'")
        self.expect("WITH", "punct", "'='", "=")
        value = self.expect("WITH", "string", f"a quoted value for option {key.text!r}")
        if key.text in options:
            self.fail("WITH", f"duplicate option {key.text!r}", key)
        options[key.text] = value.text
        lines[key.text] = key

    def _freshness(self) -> Freshness:
        self.expect("FRESHNESS", "punct", "'='", "=")
        self.expect_keyword("FRESHNESS", "INTERVAL")
        value = self.expect("FRESHNESS", "string", "a quoted interval value such as '1'")
        unit = self.current
        if not self.at_keyword("SECOND", "MINUTE", "HOUR", "DAY"):
            self.fail("FRESHNESS", f"expected SECOND, MINUTE, HOUR or DAY, found "
                      f"{self.describe(unit)}")
        self.advance()
        interval = f"INTERVAL '{value.text}' {unit.text.upper()}"
        if not value.text.strip().isdigit():
            self.fail("FRESHNESS", f"invalid freshness {interval}: the value must be a "
                      "positive integer", value)
        try:
            return Freshness(int(value.text), unit.text.upper())
        except FreshnessError as err:
            self.fail("FRESHNESS", str(err), value)

    def _query(self, start: int) -> str:
        """The text after AS up to an optional trailing ';' (comments kept, one statement)."""
        end = None  # end of the last significant token
        separator = False
        for match in _QUERY_TOKEN.finditer(self.text, start):
            kind = match.lastgroup
            if kind == "skip":
                continue
            if kind == "bad":
                self._fail_at(match.start(), "AS", self._bad_character(match.start()))
            if separator:
                self._fail_at(match.start(), "AS", "only one statement per definition file")
            if kind == "semicolon":
                separator = True
            else:
                end = match.end()
        if end is None:
            self._fail_at(start, "AS", "missing query after AS")
        return self.text[start:end].strip()


class _Options:
    """Typed access to the WITH clause; every key must be known."""

    def __init__(
        self,
        parser: _Parser,
        options: dict[str, str],
        tokens: dict[str, _Token],
        partition_by: list[str],
    ) -> None:
        self.parser = parser
        self.options = options
        self.tokens = tokens
        self.partition_by = partition_by
        for key in options:
            if not (key in KNOWN_OPTIONS or _FORMATTER_KEY.match(key)):
                self.fail(key, f"unknown option {key!r}; known options: {', '.join(KNOWN_OPTIONS)}")
        try:
            materialized_table_options(options, partition_by)
        except TtlError as err:
            named = [key for key in TTL_OPTIONS if key in options and key in str(err)]
            self.fail((named or [key for key in TTL_OPTIONS if key in options])[0], str(err))

    def fail(self, key: str, message: str) -> NoReturn:
        self.parser.fail("WITH", message, self.tokens[key])

    def get(self, key: str) -> str | None:
        value = self.options.get(key)
        if value is not None and not value.strip():
            self.fail(key, f"option {key!r} must not be empty")
        return value

    def formatters(self) -> dict[str, str]:
        formatters = {}
        for key, pattern in self.options.items():
            match = _FORMATTER_KEY.match(key)
            if match is None:
                continue
            column = match.group(1).lower()
            if column not in self.partition_by:
                self.fail(key, f"option {key!r} names column {match.group(1)!r}, which is not "
                          f"in PARTITIONED BY ({', '.join(self.partition_by)})")
            try:
                formatters[column] = java_to_strftime(pattern)
            except PartitionError as err:
                self.fail(key, f"option {key!r}: {err}")
        return formatters

    def threshold(self) -> timedelta:
        key = "refresh-mode.freshness-threshold"
        value = self.get(key)
        if value is None:
            return DEFAULT_FRESHNESS_THRESHOLD
        try:
            return parse_duration(value)
        except FreshnessError as err:
            self.fail(key, f"option {key!r}: {err}")

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
        return tuple(tag.strip() for tag in value.split(",") if tag.strip()) if value else ()

    def retries(self) -> int | None:
        value = self.get("retries")
        if value is None:
            return None
        if not value.isdigit() or int(value) > 100:
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


    def suspend_after(self) -> int:
        try:
            return parse_suspend_after(self.get(SUSPEND_OPTION))
        except ValueError as err:
            self.fail(SUSPEND_OPTION, str(err))


def parse_definition(text: str, path: str | Path = "<string>") -> MaterializedTableDefinition:
    """Parse one definition; raises :class:`DefinitionError` naming the file, line and clause."""
    return _Parser(text, str(path)).definition()


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
