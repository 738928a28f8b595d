"""Recognise CTAS / RTAS statements that the client runs atomically through the staged tables.

``CREATE TABLE [IF NOT EXISTS] t``, ``REPLACE TABLE t`` and ``CREATE OR REPLACE TABLE t``
followed by ``[(CONSTRAINT c EXPECT (condition) [ON VIOLATION FAIL UPDATE | DROP ROW], ...)]``
(the expectations of materialized tables: row audits of the build) and ``[USING parquet]
[PARTITIONED BY (cols)] [COMMENT '...'] [OPTIONS (...)] [TBLPROPERTIES (...)] AS query``
(Spark's clauses, in any order) become a :class:`CtasPlan`;
the query keeps its original text (sqlglot only checks the structure, its regenerated SQL is
never run). Other clauses are refused with the list of supported ones. ``TBLPROPERTIES`` and
``COMMENT`` become table parameters set by the commit's one metastore call (data, never SQL);
keys Spark or the staged tables own are refused.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import sqlglot
from sqlglot import expressions as exp
from sqlglot.errors import ParseError
from sqlglot.tokens import Token, TokenType

from airflow_provider_staged.materialized.definition import EXPECT, ExpectConstraint, expectation_problem
from airflow_provider_staged.materialized.grammar import Cursor
from airflow_provider_staged.staging.api import StagingPurpose
from airflow_provider_staged.staging.audits import AuditSuite, RowExpectation
from airflow_provider_staged.staging.identifiers import TableIdentifier, validate_name
from airflow_provider_staged.staging.partition_ttl import TtlError, parse_ttl

SUPPORTED = ("USING parquet, PARTITIONED BY (columns), COMMENT 'text', OPTIONS ('key' = 'value'), "
             "TBLPROPERTIES ('key' = 'value')")
_FALLBACK = "or SET 'table.ctas.atomicity-enabled' = 'false' for Spark's plain (non-atomic) path"
# The table parameter Spark reads a table's comment from (DESCRIBE's "Comment").
COMMENT_KEY = "comment"
# Keys Spark reserves for its own clauses (TableCatalog.TABLE_RESERVED_PROPERTIES) and the
# metastore's statistics, and the prefixes of what Spark (schema, provider), the staged commit
# (version, rows), materialized tables (refresh status) and sinks (batches) write.
RESERVED_KEYS = ("comment", "collation", "location", "owner", "provider", "external", "is_managed_location",
                 "numfiles", "totalsize", "numrows", "rawdatasize", "column_stats_accurate",
                 "transient_lastddltime")
RESERVED_PREFIXES = ("staged.", "spark.sql.", "materialized.", "sink.")
# Metastore limits of TABLE_PARAMS (PARAM_KEY varchar(256), PARAM_VALUE 4000 characters).
_PROPERTY_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,255}")
MAX_VALUE_LENGTH = 4000
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class CtasError(ValueError):
    """A CTAS the staged path cannot run; nothing was changed.

    ``line``/``column`` (1-based, in the statement) locate the clause at fault; the statement's
    start when the error is about the whole statement.
    """

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


@dataclass(frozen=True)
class CtasPlan:
    target: TableIdentifier
    purpose: StagingPurpose
    query: str
    partition_by: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)
    # Table parameters from TBLPROPERTIES, and COMMENT as ``comment``; empty: none given.
    properties: dict[str, str] = field(default_factory=dict)
    # EXPECT constraints, checked on the staged version before its commit, and where each
    # condition starts in the statement (line, column) for errors found once Spark knows the columns.
    expectations: tuple[ExpectConstraint, ...] = ()
    places: dict[str, tuple[int, int]] = field(default_factory=dict)

    def audit_suite(self) -> AuditSuite:
        """The expectations as the build's row audits."""
        return AuditSuite(tuple(RowExpectation(e.name, e.expression, e.mode) for e in self.expectations))

    def check_columns(self, columns: Sequence[str]) -> None:
        """Refuse an expectation naming a column the query does not give, at its place."""
        problem = expectation_problem(self.expectations, self.places, columns)
        if problem is not None:
            raise CtasError(f"EXPECT: {problem[2]}", problem[0], problem[1])


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
    text, expectations, places = _expectations(text, tokens, as_token)
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
    partition_by: tuple[str, ...] | None = None
    options: dict[str, str] = {}
    properties: dict[str, str] = {}
    for prop in (create.args.get("properties") or exp.Properties(expressions=[])).expressions:
        if isinstance(prop, exp.FileFormatProperty) and not prop.args.get("hive_format") \
                and prop.name.lower() == "parquet":
            continue
        if isinstance(prop, exp.PartitionedByProperty) and isinstance(prop.this, exp.Schema) \
                and all(isinstance(column, exp.Identifier) for column in prop.this.expressions):
            partition_by = _partition_columns(prop.this.expressions, partition_by, text, tokens)
            continue
        if isinstance(prop, exp.OptionsProperty):
            options = {_literal(item.this): _literal(item.args["value"]) for item in prop.expressions}
            located = [key for key in options if key.lower() == "path"]
            if located:
                raise CtasError(
                    f"OPTIONS ({located[0]!r} = {options[located[0]]!r}) in an atomic CTAS of {target}: "
                    f"the build writes a new version directory of its own; {_FALLBACK}"
                )
            continue
        if isinstance(prop, exp.SchemaCommentProperty):
            properties[COMMENT_KEY] = _checked_value(COMMENT_KEY, _text(prop.this, "COMMENT"))
            continue
        if type(prop) is exp.Property:  # one TBLPROPERTIES item: sqlglot's generic property
            key, value = _property(prop, target)
            properties[key] = value
            continue
        raise CtasError(f"unsupported clause {prop.sql(dialect='spark')!r} in an atomic CTAS of {target}: "
                        f"supported {SUPPORTED}; {_FALLBACK}")
    partition_by = partition_by or ()
    try:  # partition TTL options (Paimon's names) are table properties too: checked as the operator does
        parse_ttl(properties, partition_by)
    except TtlError as err:
        raise CtasError(f"table properties of {target}: {err}") from None
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
    return CtasPlan(target, purpose, query, partition_by, options, properties, expectations, places)


def _expectations(
    text: str, tokens: Sequence[Token], as_token: Token
) -> tuple[str, tuple[ExpectConstraint, ...], dict[str, tuple[int, int]]]:
    """The column list after the table's name, which may hold EXPECT constraints only (Spark
    takes the columns from the query), read by the materialized tables' grammar; the text
    without it (blanked, positions kept) for sqlglot, the constraints checked as row audits
    (the query's columns are checked once Spark analysed it), and where each condition starts."""
    index = next((i for i, t in enumerate(tokens) if t.token_type == TokenType.TABLE), len(tokens)) + 1
    if _words(tokens[index:], 3) == ["IF", "NOT", "EXISTS"]:
        index += 3
    while index + 2 < len(tokens) and tokens[index + 1].token_type == TokenType.DOT:
        index += 2  # db.name, catalog.db.name
    start = tokens[index + 1] if index + 1 < len(tokens) else as_token
    if start.token_type != TokenType.L_PAREN or start.start > as_token.start \
            or _words(tokens[index + 2:], 1) != ["CONSTRAINT"]:
        return text, (), {}  # no list, or one of columns: refused as before (Spark takes the query's)

    def error(line: int, column: int, clause: str, message: str) -> CtasError:
        return CtasError(f"{clause}: {message}", line, column)

    # The cursor reads from the list on: what comes before it is blanked (lines kept for positions).
    cursor = Cursor(re.sub(r"[^\n]", " ", text[:start.start]) + text[start.start:], error)
    found: list[ExpectConstraint] = []
    places: dict[str, tuple[int, int]] = {}

    def item() -> None:
        if not cursor.at_keyword("CONSTRAINT"):
            cursor.fail(EXPECT, "the column list of an atomic CTAS holds EXPECT constraints only "
                        "(CONSTRAINT name EXPECT (condition)): the table's columns are the query's; "
                        f"found {cursor.describe(cursor.current)}; {_FALLBACK}")
        cursor.advance()
        name = cursor.name(EXPECT, "a constraint name")
        first, expression, action = cursor.expectation(EXPECT, name)
        if name.text.lower() in {known.lower() for known in places}:
            cursor.fail(EXPECT, f"duplicate constraint name {name.text!r}", name)
        found.append(ExpectConstraint(name.text, expression, action))
        places[name.text] = (cursor.line_of(first.pos), cursor.column_of(first.pos))

    cursor.parenthesized(EXPECT, item)
    end = cursor.current.pos  # the token after the list's ')'
    problem = expectation_problem(found, places, None)
    if problem is not None:
        raise CtasError(f"EXPECT: {problem[2]}", problem[0], problem[1])
    blanked = text[:start.start] + re.sub(r"[^\n]", " ", text[start.start:end]) + text[end:]
    return blanked, tuple(found), places


def _partition_columns(
    columns: Sequence[exp.Identifier], earlier: tuple[str, ...] | None, text: str, tokens: Sequence[Token]
) -> tuple[str, ...]:
    """The columns of PARTITIONED BY; refused, at the clause, when there are none or one repeats,
    or when the clause does (the last one would win without a word)."""
    query = _top_level_as(tokens)
    end = query.start if query else len(text)  # a window's PARTITION BY is the same token
    clauses = [t for t in tokens if t.token_type == TokenType.PARTITION_BY and t.start < end] or [tokens[0]]
    clause = clauses[min(len(clauses) - 1, 0 if earlier is None else 1)]
    line = text.count("\n", 0, clause.start) + 1
    column = clause.start - text.rfind("\n", 0, clause.start)
    if earlier is not None:
        raise CtasError("PARTITIONED BY is given twice: list all partition columns in one clause",
                        line, column)
    if not columns:
        raise CtasError("PARTITIONED BY () names no column: list the partition columns, or leave "
                        "the clause out for an unpartitioned table", line, column)
    names = tuple(validate_name(c.name, "partition column") for c in columns)
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise CtasError(f"duplicate partition column {repeated[0]!r} in PARTITIONED BY", line, column)
    return names


def _identifier(table: exp.Table, current_database: str) -> TableIdentifier:
    if table.catalog and table.catalog.lower() != "spark_catalog":
        raise CtasError(f"catalog {table.catalog!r}: atomic CTAS writes to the session catalog "
                        f"(spark_catalog); {_FALLBACK}")
    return TableIdentifier(table.db or current_database, table.name)


def _property(prop: exp.Property, target: TableIdentifier) -> tuple[str, str]:
    """One ``'key' = value`` of TBLPROPERTIES, checked (Spark takes keys as strings or dotted names)."""
    key_node = prop.this
    key = key_node.this if isinstance(key_node, exp.Literal) and key_node.is_string \
        else key_node.sql(dialect="spark")
    return _checked_key(key, target), _checked_value(key, _text(prop.args["value"], key))


def _checked_key(key: str, target: TableIdentifier) -> str:
    """A TBLPROPERTIES key the staged commit may set, or :class:`CtasError` naming it."""
    lowered = key.lower()
    if lowered in RESERVED_KEYS:
        raise CtasError(f"table property {key!r} of {target} is reserved: Spark or the metastore sets it "
                        "(COMMENT, LOCATION, USING, ..., statistics)")
    if lowered.startswith(RESERVED_PREFIXES):
        raise CtasError(f"table property {key!r} of {target} is reserved: keys starting with "
                        f"{', '.join(repr(p) for p in RESERVED_PREFIXES)} are written by Spark, the staged "
                        "commit, materialized tables and sinks")
    if not _PROPERTY_KEY.fullmatch(key):
        raise CtasError(f"invalid table property key {key!r}: use letters, digits and . _ - : "
                        "(at most 256 characters)")
    return key


def _checked_value(key: str, value: str) -> str:
    if len(value) > MAX_VALUE_LENGTH or _CONTROL.search(value):
        raise CtasError(f"invalid value of table property {key!r}: {value[:80]!r}: at most "
                        f"{MAX_VALUE_LENGTH} characters, no control characters")
    return value


def _text(node: exp.Expression, what: str) -> str:
    """A string, number or boolean literal's text (Spark joins adjacent strings: 'a' 'b')."""
    if isinstance(node, exp.Concat) and all(isinstance(part, exp.Literal) and part.is_string
                                            for part in node.expressions):
        return "".join(str(part.this) for part in node.expressions)
    if isinstance(node, exp.Literal):
        return str(node.this)
    if isinstance(node, exp.Boolean):
        return "true" if node.this else "false"
    raise CtasError(f"{what}: expected a literal value, found {node.sql(dialect='spark')!r}")


def _literal(node: exp.Expression) -> str:
    if isinstance(node, exp.Literal):
        return str(node.this)
    return node.sql(dialect="spark")
