"""Flink's statement sets: several INSERTs that the client commits as one.

Both of Flink's spellings (FlinkSqlParserExecuteTest, the SQL client's statement-set tests):

- ``BEGIN STATEMENT SET; INSERT …; INSERT …; END;`` (the SQL client's form, a script's too);
- ``EXECUTE STATEMENT SET BEGIN INSERT …; INSERT …; END;``.

The splitter keeps either one statement (:mod:`.splitting`). As in Flink, only ``INSERT INTO`` /
``INSERT OVERWRITE`` may stand inside, and a dangling ``END`` is refused; beyond Flink, an empty
set is refused too (Flink's client skips it). Every error names its line and column in the
statement. The INSERTs run as one commit group (``staging.groups``): all targets are published or
none is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import expressions as exp
from sqlglot.errors import ParseError
from sqlglot.tokens import Token, TokenType

from airflow_provider_staged.sql.splitting import (
    EXECUTE_HEAD,
    Statement,
    opens_execute_set,
    position,
    split_statements,
    tokenize,
)
from airflow_provider_staged.staging.identifiers import TableIdentifier

ONLY_INSERT = ("Only INSERT statement is allowed in Statement Set (INSERT INTO or INSERT OVERWRITE); "
               "use END to terminate the Statement Set")


class StatementSetError(ValueError):
    """A statement set that cannot run; nothing ran. ``line``/``column``: 1-based, in the statement."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.message = message
        self.line = line
        self.column = column


@dataclass(frozen=True)
class StatementSet:
    """The INSERTs of a statement set, each located in the statement set's text (1-based)."""

    inserts: tuple[Statement, ...]


@dataclass(frozen=True)
class InsertPlan:
    """One INSERT of a set: its target, whether it replaces the target's rows, and its query."""

    target: TableIdentifier
    overwrite: bool
    query: str


def parse_statement_set(text: str, tokens: Sequence[Token]) -> StatementSet | None:
    """The statement set ``text`` is (None: not one); :class:`StatementSetError` when it is broken."""
    if not tokens:
        return None
    words = [token.text.upper() for token in tokens[:3]]
    if len(tokens) == 1 and tokens[0].token_type == TokenType.END:
        raise StatementSetError("No Statement Set to submit: END ends a statement set begun with "
                                "BEGIN STATEMENT SET", *position(text, tokens[0].start))
    if words == ["BEGIN", "STATEMENT", "SET"]:
        if len(tokens) < 4 or tokens[3].token_type != TokenType.SEMICOLON:
            where = tokens[3].start if len(tokens) > 3 else tokens[2].end + 1
            raise StatementSetError("expected ';' after BEGIN STATEMENT SET", *position(text, where))
        body = tokens[3].end + 1
    elif opens_execute_set(tokens, 0):
        head = EXECUTE_HEAD.match(tokens[1].text)
        assert head is not None
        body = text.index(tokens[1].text, tokens[0].end + 1) + head.end()
    else:
        return None
    parts = [_shifted(text, body, part) for part in split_statements(text[body:])]
    if not parts or not _is_end(parts[-1]):
        raise StatementSetError("the statement set has no END: end it with END;", *position(text, len(text)))
    for part in parts[:-1]:
        if tokenize(part.text)[0].token_type != TokenType.INSERT:
            raise StatementSetError(ONLY_INSERT, part.line, part.column)
    if len(parts) == 1:
        raise StatementSetError("the statement set is empty: write one or more INSERT statements "
                                "before END", parts[-1].line, parts[-1].column)
    return StatementSet(tuple(parts[:-1]))


def _is_end(part: Statement) -> bool:
    tokens = tokenize(part.text)
    if tokens[0].token_type != TokenType.END:
        return False
    if len(tokens) > 1:
        line, column = position(part.text, tokens[1].start)
        at_line = part.line + line - 1
        raise StatementSetError(f"unexpected {tokens[1].text!r} after END",
                                at_line, part.column + column - 1 if line == 1 else column)
    return True


def _shifted(text: str, offset: int, part: Statement) -> Statement:
    """``part`` of ``text[offset:]`` located in ``text``."""
    line, column = position(text, offset)
    if part.line == 1:
        return Statement(part.text, line, column + part.column - 1)
    return Statement(part.text, line + part.line - 1, part.column)


def plan_insert(text: str, current_database: str) -> InsertPlan:
    """The target and query of one INSERT of a set; :class:`StatementSetError` (positions in
    ``text``) for what a set cannot run: a column list, a PARTITION clause, another catalog."""
    tokens = tokenize(text)
    try:
        insert = sqlglot.parse_one(text, read="spark")
    except ParseError as err:
        raise StatementSetError(f"cannot read this INSERT: {str(err).splitlines()[0]}", 1, 1) from None
    if not isinstance(insert, exp.Insert) or not isinstance(insert.this, exp.Table):
        columns = isinstance(getattr(insert, "this", None), exp.Schema)
        unsupported = "a column list" if columns else "this form"
        raise StatementSetError(f"INSERT with {unsupported} in a statement set: write INSERT INTO|OVERWRITE "
                                "[TABLE] name query (columns by position, as Spark)", 1, 1)
    table = insert.this
    if table.args.get("partition") is not None:
        raise StatementSetError("INSERT ... PARTITION (...) in a statement set: write the partition columns "
                                "last in the query instead (dynamic partitions)", 1, 1)
    if table.catalog and table.catalog.lower() != "spark_catalog":
        raise StatementSetError(f"catalog {table.catalog!r}: a statement set writes to the session "
                                "catalog (spark_catalog)", 1, 1)
    # The query starts after INSERT INTO|OVERWRITE [TABLE] name(.name)*.
    index = 3 if tokens[2].token_type == TokenType.TABLE else 2
    while index + 1 < len(tokens) and tokens[index + 1].token_type == TokenType.DOT:
        index += 2
    if index + 1 >= len(tokens):
        raise StatementSetError("INSERT without a query", *position(text, len(text)))
    return InsertPlan(TableIdentifier(table.db or current_database, table.name),
                      bool(insert.args.get("overwrite")), text[tokens[index + 1].start:])
