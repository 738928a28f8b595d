"""Tokens and a cursor for Flink's materialized-table statements (pure, fast).

Shared by the definition files' parser (:mod:`airflow_provider_staged.materialized.definition`)
and the SQL client's statements (:mod:`airflow_provider_staged.sql.materialized_statements`):
one tokenizer, one way to read names, options and partition specs, one error position rule.
Positions follow Calcite's (Flink's parser): 1-based line and column of the offending token;
at the end of the text, the last character.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import NamedTuple, NoReturn

from airflow_provider_staged.staging.identifiers import InvalidIdentifierError, TableIdentifier, validate_name

# Spark's name for its session catalog: the only catalog a three-part name may name here.
SESSION_CATALOG = "spark_catalog"


class Token(NamedTuple):
    kind: str  # word, string, ident (backticked), number, punct, end
    text: str  # raw text; for strings and idents the unescaped value
    pos: int
    end: int


# line, column, clause, message -> the exception the entry point raises (file or statement).
ErrorFactory = Callable[[int, int, str, str], Exception]

_SPACE = re.compile(r"(?:\s+|--[^\n]*|/\*.*?\*/)*", re.DOTALL)
# Whitespace and comments are consumed as the prefix of every token: half the regex calls.
_TOKEN = re.compile(
    r"""(?:\s+|--[^\n]*|/\*.*?\*/)*
      (?:(?P<string>'(?:[^']|'')*')
      |(?P<ident>`(?:[^`]|``)*`)
      |(?P<word>[A-Za-z_][A-Za-z0-9_]*)
      |(?P<number>[0-9]+(?:\.[0-9]+)?)
      |(?P<punct>[(),=.;<>+*:|%!&^~?\[\]{}-]|/(?!\*))  # operators of expressions Flink accepts
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


class Cursor:
    """Tokens of one text, read lazily (a file's table name costs only its first tokens)."""

    def __init__(self, text: str, error: ErrorFactory, unit: str = "statement") -> None:
        self.text = text
        self.error = error
        self.unit = unit  # "file" or "statement": how the end of the text is named in errors
        self.tokens = self._tokenize()
        self.current = next(self.tokens)

    # -- positions and errors ---------------------------------------------------------------
    def line_of(self, pos: int) -> int:
        return self.text.count("\n", 0, pos) + 1

    def column_of(self, pos: int) -> int:
        return pos - self.text.rfind("\n", 0, pos)

    def fail_at(self, pos: int, clause: str, message: str) -> NoReturn:
        raise self.error(self.line_of(pos), self.column_of(pos), clause, message)

    def fail(self, clause: str, message: str, token: Token | None = None) -> NoReturn:
        self.fail_at((token or self.current).pos, clause, message)

    def describe(self, token: Token) -> str:
        return f"the end of the {self.unit}" if token.kind == "end" else repr(self.text[token.pos:token.end])

    # -- tokens -----------------------------------------------------------------------------
    def _tokenize(self) -> Iterator[Token]:
        text, pos = self.text, 0
        while True:
            match = _TOKEN.match(text, pos)
            if match is None:
                bad = _SPACE.match(text, pos).end()
                self.fail_at(bad, "syntax", self.bad_character(bad))
            kind = match.lastgroup
            if kind == "end":
                break
            value = match.group(kind)
            if kind == "string":
                value = value[1:-1].replace("''", "'")
            elif kind == "ident":
                value = value[1:-1].replace("``", "`")
            yield Token(kind, value, match.start(kind), match.end())
            pos = match.end()
        # Calcite puts the end of input on the last character of the text.
        end = max(len(text) - 1, 0)
        while True:
            yield Token("end", "", end, end)

    def bad_character(self, pos: int) -> str:
        char = self.text[pos]
        if char == "'":
            return "unterminated string literal"
        if char == "`":
            return "unterminated backticked identifier"
        if self.text.startswith("/*", pos):
            return "unterminated /* comment"
        if char == '"':
            return "unexpected '\"': quote names with backticks and strings with single quotes"
        return f"unexpected character {char!r}"

    def advance(self) -> Token:
        token, self.current = self.current, next(self.tokens)
        return token

    def at_keyword(self, *words: str) -> bool:
        return self.current.kind == "word" and self.current.text.upper() in words

    def at_punct(self, text: str) -> bool:
        return self.current.kind == "punct" and self.current.text == text

    def skip(self, stop: Callable[[], bool]) -> None:
        """Pass over tokens, balancing parentheses, until ``stop()`` holds outside them."""
        depth = 0
        while self.current.kind != "end" and (depth or not stop()):
            if self.at_punct("("):
                depth += 1
            elif self.at_punct(")"):
                depth -= 1
            self.advance()

    def expect_keyword(self, clause: str, *words: str) -> Token:
        for word in words:
            if not self.at_keyword(word):
                self.fail(clause, f"expected {word}, found {self.describe(self.current)}")
            token = self.advance()
        return token

    def expect(self, clause: str, kind: str, what: str, text: str | None = None) -> Token:
        token = self.current
        if token.kind != kind or (text is not None and token.text != text):
            self.fail(clause, f"expected {what}, found {self.describe(token)}")
        return self.advance()

    def expect_punct(self, clause: str, text: str) -> Token:
        return self.expect(clause, "punct", repr(text), text)

    def name(self, clause: str, what: str = "a name") -> Token:
        if self.current.kind not in ("word", "ident"):
            self.fail(clause, f"expected {what}, found {self.describe(self.current)}")
        return self.advance()

    def column(self, clause: str, kind: str) -> tuple[str, Token]:
        """A column name, validated and lower-cased as the metastore stores it."""
        token = self.name(clause, f"a {kind} name")
        try:
            return validate_name(token.text, kind), token
        except InvalidIdentifierError as err:
            self.fail(clause, str(err), token)

    def parenthesized(self, clause: str, item: Callable[[], None], empty: bool = False) -> None:
        self.expect_punct(clause, "(")
        if empty and self.at_punct(")"):
            self.advance()
            return
        item()
        while self.at_punct(","):
            self.advance()
            item()
        self.expect(clause, "punct", "',' or ')'", ")")

    def column_list(self, clause: str, kind: str) -> dict[str, Token]:
        """``(a, b, ...)``: validated, distinct column names (in order) and their tokens."""
        columns: dict[str, Token] = {}

        def item() -> None:
            column, token = self.column(clause, kind)
            if column in columns:
                self.fail(clause, f"duplicate {kind} {token.text!r}", token)
            columns[column] = token

        self.parenthesized(clause, item)
        return columns

    # -- shared grammar ---------------------------------------------------------------------
    def expectation(self, clause: str, name: Token) -> tuple[Token, str, str | None]:
        """``EXPECT (condition) [ON VIOLATION FAIL UPDATE | DROP ROW]`` (Databricks'), after
        ``CONSTRAINT name``: the condition's first token, its text as written (parentheses
        balanced; checked by the caller) and the action (None: keep the row, report)."""
        self.expect_keyword(clause, "EXPECT")
        self.expect_punct(clause, "(")
        first, last, depth = self.current, None, 0
        while depth or not self.at_punct(")"):
            if self.current.kind == "end":
                self.fail(clause, f"constraint {name.text!r}: expected ')' closing its EXPECT condition, "
                          f"found {self.describe(self.current)}")
            depth += 1 if self.at_punct("(") else -1 if self.at_punct(")") else 0
            last = self.advance()
        if last is None:
            self.fail(clause, f"constraint {name.text!r}: expected a condition in EXPECT (...)")
        self.advance()  # ')'
        action = None
        if self.at_keyword("ON"):
            self.advance()
            self.expect_keyword(clause, "VIOLATION")
            if self.at_keyword("FAIL", "DROP"):
                verb = self.advance().text.upper()
                action = f"{verb} {'UPDATE' if verb == 'FAIL' else 'ROW'}"
                self.expect_keyword(clause, action.split()[1])
            else:
                self.fail(clause, f"constraint {name.text!r}: expected FAIL UPDATE or DROP ROW after ON "
                          f"VIOLATION, found {self.describe(self.current)}")
        return first, self.text[first.pos:last.end], action

    def qualified_name(self, clause: str, expected: str, shape: str) -> tuple[list[str], Token]:
        """``a[.b...]`` with at most ``shape``'s parts after an optional ``spark_catalog.``."""
        start = self.current
        parts = [self.name(clause, expected)]
        while self.at_punct("."):
            self.advance()
            parts.append(self.name(clause, "a name after '.'"))
        names = [part.text for part in parts]
        size = shape.count(".") + 1
        if len(names) == size + 1 and names[0].lower() == SESSION_CATALOG:
            names = names[1:]
        if len(names) > size:
            # Only Spark's session catalog is backed by the metastore the project commits to.
            self.fail(clause, f"expected {expected} (or {SESSION_CATALOG}.{shape}), found "
                      f"{'.'.join(part.text for part in parts)!r}", start)
        return names, start

    def table_identifier(self, clause: str) -> TableIdentifier:
        """``[spark_catalog.][db.]name`` as a validated identifier (``default`` database)."""
        names, start = self.qualified_name(clause, "[db.]name", "db.name")
        try:
            return TableIdentifier(*(["default", *names][-2:]))
        except InvalidIdentifierError as err:
            self.fail(clause, str(err), start)

    def negation(self, clause: str, word: str) -> bool | None:
        """``NOT word``: True; ``word``: False; neither: None."""
        if self.at_keyword("NOT"):
            self.advance()
            self.expect_keyword(clause, word)
            return True
        if self.at_keyword(word):
            self.advance()
            return False
        return None

    def string_options(self, clause: str, empty: bool = False) -> tuple[dict[str, str], dict[str, Token]]:
        """``('key' = 'value', ...)``: the values as written, and each key's token for errors."""
        options: dict[str, str] = {}
        tokens: dict[str, Token] = {}

        def item() -> None:
            key = self.expect(clause, "string", "a quoted option key such as 'owner'")
            self.expect_punct(clause, "=")
            value = self.expect(clause, "string", f"a quoted value for option {key.text!r}")
            if key.text in options:
                self.fail(clause, f"duplicate option {key.text!r}", key)
            options[key.text] = value.text
            tokens[key.text] = key

        self.parenthesized(clause, item, empty=empty)
        return options, tokens

    def query(self, start: int, clause: str) -> str:
        """The text from ``start`` to an optional trailing ';' (one statement, comments kept)."""
        end = None  # end of the last significant token
        separator = False
        for match in _QUERY_TOKEN.finditer(self.text, start):
            kind = match.lastgroup
            if kind == "skip":
                continue
            if kind == "bad":
                self.fail_at(match.start(), clause, self.bad_character(match.start()))
            if separator:
                self.fail_at(match.start(), clause, "only one statement is allowed, found "
                             f"{self.text[match.start():][:20]!r} after ';'")
            if kind == "semicolon":
                separator = True
            else:
                end = match.end()
        if end is None:
            self.fail_at(start, clause, "missing query after AS")
        return self.text[start:end].strip()

    def finish(self, clause: str) -> None:
        """Only an optional ';' (and comments) may follow a statement: nothing else runs."""
        if self.at_punct(";"):
            self.advance()
            if self.current.kind != "end":
                self.fail(clause, f"only one statement is allowed, found {self.describe(self.current)} "
                          "after ';'")
        if self.current.kind != "end":
            self.fail(clause, f"expected the end of the {self.unit}, found {self.describe(self.current)}")
