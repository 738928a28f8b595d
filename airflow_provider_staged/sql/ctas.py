"""Recognise CTAS / RTAS statements that the client runs atomically through the staged tables.

``CREATE TABLE [IF NOT EXISTS] t``, ``REPLACE TABLE t`` and ``CREATE OR REPLACE TABLE t``
followed by ``[USING parquet] [PARTITIONED BY (cols)] [OPTIONS (...)] AS query`` become a
:class:`CtasPlan`; the query keeps its original text (sqlglot only checks the structure, its
regenerated SQL is never run). Other clauses are refused with the list of supported ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import sqlglot
from sqlglot import expressions as exp
from sqlglot.errors import ParseError
from sqlglot.tokens import Token, TokenType

from airflow_provider_staged.identifiers import TableIdentifier, validate_name
from airflow_provider_staged.staging.api import StagingPurpose

SUPPORTED = "USING parquet, PARTITIONED BY (columns), OPTIONS ('key' = 'value')"
_FALLBACK = "or SET 'table.ctas.atomicity-enabled' = 'false' for Spark's plain (non-atomic) path"


class CtasError(ValueError):
    """A CTAS the staged path cannot run; nothing was changed."""


@dataclass(frozen=True)
class CtasPlan:
    target: TableIdentifier
    purpose: StagingPurpose
    query: str
    partition_by: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)


def _words(tokens: Sequence[Token], count: int) -> list[str]:
    return [token.text.upper() for token in tokens[:count]]


def _top_level_as(tokens: Sequence[Token]) -> Token | None:
    """The ``AS`` that starts the query: the first one outside parentheses."""
    depth = 0
    for token in tokens:
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        elif token.token_type == TokenType.ALIAS and depth == 0:
            return token
    return None


def is_ctas(tokens: Sequence[Token]) -> bool:
    """One of the CTAS/RTAS forms: ``CREATE [OR REPLACE] TABLE … AS``, ``REPLACE TABLE … AS``."""
    words = _words(tokens, 4)
    starts = words[:2] == ["CREATE", "TABLE"] or words[:2] == ["REPLACE", "TABLE"] \
        or words == ["CREATE", "OR", "REPLACE", "TABLE"]
    return starts and _top_level_as(tokens) is not None


def plan_ctas(text: str, tokens: Sequence[Token], current_database: str) -> CtasPlan:
    """The staged build of a statement :func:`is_ctas` accepted, or :class:`CtasError` naming why not."""
    as_token = _top_level_as(tokens)
    assert as_token is not None
    query = text[as_token.end + 1:].strip()
    replace_only = _words(tokens, 1) == ["REPLACE"]
    # sqlglot's Spark dialect has no bare REPLACE TABLE: check its structure as CREATE OR REPLACE.
    checked = f"CREATE OR {text[tokens[0].start:]}" if replace_only else text[tokens[0].start:]
    try:
        create = sqlglot.parse_one(checked, read="spark")
    except ParseError as err:
        raise CtasError(f"cannot run this CTAS atomically: {str(err).splitlines()[0]}; {_FALLBACK}") from None
    if not isinstance(create, exp.Create) or not isinstance(create.this, exp.Table):
        raise CtasError(f"cannot run this CTAS atomically: a column list or unknown form; {_FALLBACK}")
    target = _identifier(create.this, current_database)
    partition_by: tuple[str, ...] = ()
    options: dict[str, str] = {}
    for prop in (create.args.get("properties") or exp.Properties(expressions=[])).expressions:
        if isinstance(prop, exp.FileFormatProperty) and not prop.args.get("hive_format") \
                and prop.name.lower() == "parquet":
            continue
        if isinstance(prop, exp.PartitionedByProperty) and isinstance(prop.this, exp.Schema) \
                and all(isinstance(column, exp.Identifier) for column in prop.this.expressions):
            columns = prop.this.expressions
            partition_by = tuple(validate_name(column.name, "partition column") for column in columns)
            continue
        if isinstance(prop, exp.OptionsProperty):
            options = {_literal(item.this): _literal(item.args["value"]) for item in prop.expressions}
            continue
        raise CtasError(f"unsupported clause {prop.sql(dialect='spark')!r} in an atomic CTAS of {target}: "
                        f"supported {SUPPORTED}; {_FALLBACK}")
    if create.args.get("replace") and create.args.get("exists"):
        raise CtasError("CREATE OR REPLACE TABLE IF NOT EXISTS is not a valid statement")
    if replace_only:
        purpose = StagingPurpose.REPLACE_TABLE_AS
    elif create.args.get("replace"):
        purpose = StagingPurpose.CREATE_OR_REPLACE_TABLE_AS
    elif create.args.get("exists"):
        purpose = StagingPurpose.CREATE_TABLE_AS_IF_NOT_EXISTS
    else:
        purpose = StagingPurpose.CREATE_TABLE_AS
    return CtasPlan(target, purpose, query, partition_by, options)


def _identifier(table: exp.Table, current_database: str) -> TableIdentifier:
    if table.catalog and table.catalog.lower() != "spark_catalog":
        raise CtasError(f"catalog {table.catalog!r}: atomic CTAS writes to the session catalog "
                        f"(spark_catalog); {_FALLBACK}")
    return TableIdentifier(table.db or current_database, table.name)


def _literal(node: exp.Expression) -> str:
    if isinstance(node, exp.Literal):
        return str(node.this)
    return node.sql(dialect="spark")
