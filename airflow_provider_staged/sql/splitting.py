"""Split SQL text into statements with sqlglot's Spark tokenizer (no regex).

A ``;`` ends a statement only outside strings, backticks, comments, ``BEGIN … END``
compound blocks (Spark SQL scripting) and Flink's statement sets (``BEGIN STATEMENT SET; … END``,
``EXECUTE STATEMENT SET BEGIN … END``: :mod:`.statement_set`); ``CASE … END`` inside a block
is told apart from the block's own ``END``, and ``END IF`` / ``END WHILE`` / … close no block.
Each statement keeps the line and column where it starts, so errors can name ``file:line:column``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot.dialects.spark import Spark
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

# Words after END that close a scripting construct other than a block (``END IF``).
_END_OF_CONSTRUCT = {"IF", "WHILE", "LOOP", "REPEAT", "FOR"}
# ``BEGIN`` followed by these is a transaction statement, not a compound block.
_TRANSACTION_WORDS = {"TRANSACTION", "WORK"}
# What the Spark tokenizer leaves of ``EXECUTE STATEMENT SET BEGIN …`` after EXECUTE: one string
# up to the first ``;``.
EXECUTE_HEAD = re.compile(r"STATEMENT\s+SET\s+BEGIN\b", re.IGNORECASE)


class SplitError(ValueError):
    """Text that cannot be tokenized (e.g. an unterminated string), with its position."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.line = line
        self.column = column


@dataclass(frozen=True)
class Statement:
    """One statement's text (without its ``;``) and where it starts (1-based)."""

    text: str
    line: int
    column: int

    def tokens(self) -> list[Token]:
        return tokenize(self.text)


def tokenize(text: str) -> list[Token]:
    """Spark SQL tokens of ``text``; a tokenizer error becomes a :class:`SplitError`."""
    dialect = Spark()
    tokenizer = dialect.tokenizer_class(dialect=dialect)
    try:
        return tokenizer.tokenize(text)
    except TokenError:
        # The tokenizer's core keeps the offset of the token it could not finish (sqlglot 30).
        start = getattr(getattr(tokenizer, "_core", None), "_start", len(text))
        line, column = position(text, start)
        raise SplitError(f"unterminated {_what_starts(text[start:])}", line, column) from None


def position(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of ``offset`` in ``text``."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def split_statements(text: str) -> list[Statement]:
    """The statements of ``text``; empty statements (``;;``, only comments) are dropped."""
    statements = []
    for first, last in _statement_spans(tokenize(text)):
        line, column = position(text, first.start)
        statements.append(Statement(text[first.start:last.end + 1], line, column))
    return statements


def is_complete(text: str) -> bool:
    """Whether interactive input ends a statement: its last token is a ``;`` at top level.

    Unterminated strings or comments and open ``BEGIN`` blocks are incomplete: more lines come.
    """
    try:
        tokens = tokenize(text)
    except SplitError:
        return False
    if not tokens or tokens[-1].token_type != TokenType.SEMICOLON:
        return False
    depth = _BlockDepth()
    for index in range(len(tokens) - 1):
        depth.feed(tokens, index)
    return depth.top_level


def opens_execute_set(tokens: Sequence[Token], index: int) -> bool:
    """Whether ``tokens[index]`` is the EXECUTE of ``EXECUTE STATEMENT SET BEGIN`` (it opens a block)."""
    following = tokens[index + 1] if index + 1 < len(tokens) else None
    return tokens[index].token_type == TokenType.EXECUTE and following is not None \
        and following.token_type == TokenType.STRING and EXECUTE_HEAD.match(following.text) is not None


class _BlockDepth:
    """Tracks open ``BEGIN`` blocks and ``CASE`` expressions while tokens are fed in order."""

    def __init__(self) -> None:
        self.open: list[TokenType] = []

    @property
    def top_level(self) -> bool:
        return TokenType.BEGIN not in self.open

    def feed(self, tokens: Sequence[Token], index: int) -> None:
        token = tokens[index]
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        word = following.text.upper() if following is not None else ""
        if opens_execute_set(tokens, index):
            self.open.append(TokenType.BEGIN)
        elif token.token_type == TokenType.BEGIN:
            if following is not None and following.token_type != TokenType.SEMICOLON \
                    and word not in _TRANSACTION_WORDS:
                self.open.append(TokenType.BEGIN)
        elif token.token_type == TokenType.CASE:
            # ``END CASE`` closes a CASE statement: its CASE was already counted.
            previous = tokens[index - 1] if index else None
            if previous is None or previous.token_type != TokenType.END:
                self.open.append(TokenType.CASE)
        elif token.token_type == TokenType.END and self.open and word not in _END_OF_CONSTRUCT:
            self.open.pop()


def _statement_spans(tokens: Sequence[Token]) -> list[tuple[Token, Token]]:
    spans: list[tuple[Token, Token]] = []
    depth = _BlockDepth()
    first: Token | None = None
    last: Token | None = None
    for index, token in enumerate(tokens):
        if token.token_type == TokenType.SEMICOLON and depth.top_level:
            if first is not None and last is not None:
                spans.append((first, last))
            first = last = None
            continue
        depth.feed(tokens, index)
        first = first or token
        last = token
    if first is not None and last is not None:
        spans.append((first, last))
    return spans


def _what_starts(rest: str) -> str:
    if rest.startswith("/*"):
        return "comment /* ... */"
    if rest[:1] == "`":
        return "quoted identifier `...`"
    return f"string {rest[:1]}...{rest[:1]}" if rest[:1] in "'\"" else f"token {rest[:20]!r}"
