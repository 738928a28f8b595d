"""Audits: named expectations checked on a staged version before it is published (pure).

Three kinds, each with a name that every report carries:

- a **row** expectation: a boolean SQL expression per row (``amount >= 0``); a row violates it
  when the expression is not TRUE (NULL violates, as the filter of ``drop`` drops it). Counted
  during the write itself (Spark's ``observe``), no second scan;
- a **table** expectation: a boolean aggregate over the new version (``COUNT(*) > 0``), with an
  optional ``measure`` (an aggregate whose value is reported, e.g. the duplicate keys);
- a **change** expectation (:class:`RowCountChange`): the new version's rows are not below a
  fraction of those the replaced version recorded in its manifest (per touched partition for a
  partition refresh), read from the journal, never re-scanned.

What a violation does is the audit's ``mode``, named after Databricks' ``EXPECT … ON VIOLATION``:
``fail`` (FAIL UPDATE: the version is quarantined, the old one stays), ``drop`` (DROP ROW: the
offending rows are filtered out and counted; row expectations only) or ``warn`` (published,
reported). Expressions are checked with sqlglot's Spark dialect when an audit is made, so a bad one
fails when the DAG file is parsed, naming the audit and the position.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from airflow_provider_staged.staging.errors import StagingError
from airflow_provider_staged.staging.identifiers import TableIdentifier

# Sample rows kept per failed audit, the columns and the characters kept of each value: enough for a person
# to recognise the problem, small enough for a journal record and a task log.
SAMPLE_ROWS = 5
SAMPLE_COLUMNS = 20
SAMPLE_VALUE_CHARS = 120
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


# Kinds judged when the attempt is audited before its commit (the catalog's previous version is
# their baseline); the Spark job evaluates the others on the data it writes.
JUDGED_AT_COMMIT = ("change", "schema")


class AuditError(ValueError):
    """An audit that cannot run: a bad expression, an unknown column, a bad option.

    ``offset`` (0-based, in the expression's text) and ``reason`` are set when the error is at a
    place of the expression, so that a caller that knows where the text is written (a
    definition file's ``EXPECT``) can point there."""

    def __init__(self, message: str, offset: int | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.offset = offset
        self.reason = reason or message


class AuditFailedError(StagingError):
    """A ``fail``-mode audit failed: the staged version is quarantined, the table unchanged."""


class Mode(str, enum.Enum):
    FAIL = "fail"
    DROP = "drop"
    WARN = "warn"

    @classmethod
    def parse(cls, value: object, name: str) -> Mode:
        """``fail`` | ``drop`` | ``warn``, or Databricks' ``FAIL UPDATE`` | ``DROP ROW``."""
        text = " ".join(str(value.value if isinstance(value, Mode) else value).lower().split())
        text = {"fail update": "fail", "drop row": "drop"}.get(text, text)
        try:
            return cls(text)
        except ValueError:
            raise AuditError(f"audit {name!r}: unknown mode {value!r} (fail, drop or warn)") from None


# Aggregates Spark computes as observed metrics while it writes (no DISTINCT, no FILTER).
_OBSERVED_AGGREGATES = (exp.Count, exp.CountIf, exp.Sum, exp.Min, exp.Max, exp.Avg)

# Functions Spark's dialect parses as plain calls that return a boolean.
_BOOLEAN_CALLS = {"isnull", "isnotnull", "isnan", "startswith", "endswith", "contains", "ilike"}


@dataclass(frozen=True)
class Expectation:
    """One named audit; build it with :class:`RowExpectation`, :class:`TableExpectation` or
    :class:`RowCountChange` (checked when made)."""

    name: str
    kind: str
    mode: Mode = Mode.FAIL
    condition: str = ""
    measure: str | None = None
    min_ratio: float | None = None
    # A reference audit's referenced key, ``db.table.column`` (a table of the Spark catalog).
    references: str | None = None

    def __post_init__(self) -> None:
        if not self.name.strip() or len(self.name) > 128 or not self.name.isprintable():
            raise AuditError(f"invalid audit name {self.name!r}: 1 to 128 printable characters")
        object.__setattr__(self, "mode", Mode.parse(self.mode, self.name))
        if self.kind not in ("row", "table", "reference", *JUDGED_AT_COMMIT):
            raise AuditError(f"audit {self.name!r}: unknown kind {self.kind!r}")
        if self.mode is Mode.DROP and self.kind != "row":
            raise AuditError(f"audit {self.name!r}: mode 'drop' is for row expectations only")
        if self.kind == "schema":
            return
        if self.kind == "reference":
            _check_reference(self.name, self.condition, self.references)
            return
        if self.kind == "change":
            ratio = self.min_ratio
            if ratio is None or not (ratio >= 0) or math.isinf(ratio):
                raise AuditError(f"audit {self.name!r}: min_ratio must be a number >= 0, got {ratio!r}")
            return
        check_expression(self.name, self.condition, aggregate=self.kind == "table")
        if self.measure is not None:
            check_expression(self.name, self.measure, aggregate=True, boolean=False)

    @property
    def observable(self) -> bool:
        """A table expectation Spark can count while the version is written (an observed metric
        of plain COUNT, COUNT_IF, SUM, MIN, MAX, AVG, deterministic); others (a uniqueness: COUNT
        DISTINCT) need one aggregation over the staged files."""
        if self.kind != "table":
            return False
        for text in (self.condition, self.measure or ""):
            tree = sqlglot.parse_one(text, read="spark") if text else None
            if tree is None:
                continue
            if tree.find(exp.Distinct, exp.Filter, exp.Rand, exp.Uuid) is not None:
                return False
            if not all(isinstance(node, _OBSERVED_AGGREGATES) for node in tree.find_all(exp.AggFunc)):
                return False
        return True

    def columns(self) -> list[tuple[str, int]]:
        """The columns the audit's SQL names, with their offsets (none for a change audit)."""
        return [*_columns(self.condition), *_columns(self.measure or "")]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["mode"] = self.mode.value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Expectation:
        return cls(**{key: data[key] for key in ("name", "kind", "mode", "condition", "measure", "min_ratio",
                                                 "references") if key in data})

    @property
    def referenced(self) -> tuple[TableIdentifier, str]:
        """A reference audit's referenced table and column."""
        table, _, column = (self.references or "").rpartition(".")
        return TableIdentifier.parse(table), column


def RowExpectation(name: str, condition: str, mode: Mode | str = Mode.FAIL) -> Expectation:
    """Every row makes ``condition`` TRUE (``amount >= 0``)."""
    return Expectation(name, "row", Mode.parse(mode, name), condition)


def TableExpectation(
    name: str, condition: str, mode: Mode | str = Mode.FAIL, measure: str | None = None
) -> Expectation:
    """The aggregate ``condition`` over the new version is TRUE (``COUNT(*) > 0``); ``measure``
    (an aggregate) is reported with the result."""
    return Expectation(name, "table", Mode.parse(mode, name), condition, measure)


def RowCountChange(name: str, min_ratio: float, mode: Mode | str = Mode.FAIL) -> Expectation:
    """The new version has at least ``min_ratio`` times the rows of the version it replaces (per
    touched partition for a partition refresh)."""
    return Expectation(name, "change", Mode.parse(mode, name), min_ratio=float(min_ratio))


def SchemaUnchanged(name: str = "schema_unchanged", mode: Mode | str = Mode.FAIL) -> Expectation:
    """The new version has the columns, with the types, of the version it replaces (names
    compared case-insensitively, order aside): a column added, dropped or retyped is a change
    readers see. Leave it out, or give it ``mode="warn"``, where such a change is allowed."""
    return Expectation(name, "schema", Mode.parse(mode, name))


def references(
    column: str, table: str, key: str, mode: Mode | str = Mode.FAIL, name: str | None = None
) -> Expectation:
    """Every non-NULL ``column`` of the new version is a ``key`` of ``table`` (a foreign key; the
    table is read from the Spark catalog when the version is audited)."""
    return Expectation(name or f"{column}_references_{table.rpartition('.')[2]}", "reference",
                       Mode.parse(mode, name or column), column, references=f"{table}.{key}")


def _check_reference(name: str, column: str, referenced: str | None) -> None:
    """A reference audit names one column of the output and ``db.table.column``."""
    if not _IDENTIFIER.fullmatch(column or ""):
        raise AuditError(f"audit {name!r}: invalid column {column!r}: a column name of the output")
    table, _, key = (referenced or "").rpartition(".")
    if not table or not _IDENTIFIER.fullmatch(key):
        raise AuditError(f"audit {name!r}: invalid reference {referenced!r}: expected db.table.column")
    try:
        TableIdentifier.parse(table)
    except ValueError as err:
        raise AuditError(f"audit {name!r}: invalid reference {referenced!r}: {err}") from None


def unique(column: str, mode: Mode | str = Mode.FAIL, name: str | None = None) -> Expectation:
    """No two rows share a non-NULL ``column`` (the common SQL provider's ``unique_check``)."""
    return TableExpectation(
        name or f"{column}_unique", f"COUNT({column}) = COUNT(DISTINCT {column})", mode,
        measure=f"COUNT({column}) - COUNT(DISTINCT {column})",
    )


# -- checking the SQL ---------------------------------------------------------------------


def _position(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    return f"line {line}, column {offset - (text.rfind(chr(10), 0, offset) + 1) + 1}"


def _refuse(name: str, text: str, offset: int, why: str) -> AuditError:
    return AuditError(f"audit {name!r}: {why} at {_position(text, offset)}: {' '.join(text.split())!r}",
                      offset, why)


def _offset(node: exp.Expression, default: int = 0) -> int:
    """Where ``node`` starts in the text (sqlglot keeps positions on identifiers and tokens)."""
    for found in [node, *node.find_all(exp.Identifier)]:
        if "start" in (found.meta or {}):
            return int(found.meta["start"])
    return default


def _statement_offset(text: str, node: exp.Expression) -> int:
    """Where the first statement keyword (SELECT, WITH, ...) is: a subquery's start."""
    keywords = {TokenType.SELECT, TokenType.WITH, TokenType.VALUES, TokenType.INSERT, TokenType.DELETE,
                TokenType.UPDATE, TokenType.CREATE, TokenType.DROP}
    for token in sqlglot.Dialect.get_or_raise("spark").tokenize(text):
        if token.token_type in keywords:
            return token.start
    return _offset(node)


def _parse(name: str, text: str) -> exp.Expression:
    if not text or not text.strip():
        raise AuditError(f"audit {name!r}: an empty expression", 0, "an empty expression")
    try:
        statements = sqlglot.parse(text, read="spark")
    except (ParseError, TokenError) as error:
        errors = getattr(error, "errors", None) or [{}]
        line, col = errors[0].get("line"), errors[0].get("col")
        where = f"line {line}, column {col}" if line else "its start"
        message = errors[0].get("description") or str(error).splitlines()[0]
        shown = " ".join(text.split())
        offset = None
        if line and col:  # sqlglot's column is the offending token's last character
            start = 0
            for _ in range(int(line) - 1):
                start = text.index("\n", start) + 1
            offset = max(start + int(col) - len(errors[0].get("highlight") or " "), 0)
        raise AuditError(f"audit {name!r}: does not parse at {where} ({message}): {shown!r}", offset,
                         f"does not parse ({message})") from None
    found = [statement for statement in statements if statement is not None]
    if len(found) != 1:
        raise _refuse(name, text, max(text.find(";"), 0), "one expression expected, not several statements")
    return found[0]


def check_expression(name: str, text: str, aggregate: bool, boolean: bool = True) -> exp.Expression:
    """``text`` parsed, or :class:`AuditError` naming ``name``, the position and the reason:
    a parse error, a second statement, a subquery or command, an aggregate in a row expectation
    (none in a table one), an expression that is not boolean (when ``boolean``)."""
    tree = _parse(name, text)
    for node in tree.walk():
        if isinstance(node, (exp.Query, exp.Subquery, exp.DDL, exp.DML, exp.Command)):
            raise _refuse(name, text, _statement_offset(text, node),
                          "a subquery or statement is not allowed in an expectation")
    aggregates = list(tree.find_all(exp.AggFunc))
    windows = list(tree.find_all(exp.Window))
    if windows:
        raise _refuse(name, text, _offset(windows[0]), "a window function is not allowed in an expectation")
    if aggregate and not aggregates:
        raise _refuse(name, text, 0, "a table expectation needs an aggregate (COUNT, SUM, MIN, ...)")
    if not aggregate and aggregates:
        raise _refuse(name, text, _offset(aggregates[0]),
                      "an aggregate is not allowed in a row expectation (make it a table expectation)")
    if boolean and not _is_boolean(tree):
        raise _refuse(name, text, _offset(tree), "not a boolean expression (a comparison, IS NULL, AND, ...)")
    return tree


def _is_boolean(node: exp.Expression) -> bool:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, (exp.Predicate, exp.Connector, exp.Not, exp.Boolean, exp.Column)):
        return True  # a bare column: a boolean column (Spark refuses any other at the write)
    # Conditionals and COALESCE are boolean when every value they may return is.
    if isinstance(node, exp.Case):
        branches = [branch.args.get("true") for branch in node.args.get("ifs") or []]
        return all(_is_boolean(b) for b in [*branches, node.args.get("default")] if b is not None)
    if isinstance(node, exp.If):
        return all(_is_boolean(b) for b in (node.args.get("true"), node.args.get("false")) if b is not None)
    if isinstance(node, exp.Coalesce):
        return all(_is_boolean(b) for b in [node.this, *node.expressions])
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower() in _BOOLEAN_CALLS
    return isinstance(node, exp.Func) and node.sql_name().lower().replace("_", "") in _BOOLEAN_CALLS


def _columns(text: str) -> list[tuple[str, int]]:
    if not text:
        return []
    tree = sqlglot.parse_one(text, read="spark")
    # Lambda parameters (``x -> x > 1``) are no columns of the table.
    bound = {str(p.name).lower() for lam in tree.find_all(exp.Lambda) for p in lam.expressions}
    return [(column.name, _offset(column)) for column in tree.find_all(exp.Column)
            if column.name.lower() not in bound and not column.table]


# -- a set of audits ------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditSuite:
    """The audits of one build, by name (unique)."""

    expectations: tuple[Expectation, ...] = ()

    def __post_init__(self) -> None:
        names = [e.name for e in self.expectations]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise AuditError(f"audit name(s) {twice} are given more than once")

    def __bool__(self) -> bool:
        return bool(self.expectations)

    def of_kind(self, kind: str) -> list[Expectation]:
        return [e for e in self.expectations if e.kind == kind]

    def check_columns(self, columns: Iterable[str]) -> None:
        """Refuse an audit that names a column the output does not have (Spark names are
        case-insensitive), naming the audit, the column and its position."""
        known = {c.lower() for c in columns}
        for expectation in self.expectations:
            for text in (expectation.condition, expectation.measure or ""):
                for column, offset in _columns(text):
                    if column.lower() not in known:
                        raise _refuse(expectation.name, text, offset,
                                      f"unknown column {column!r} (the output has {sorted(known)})")

    def to_list(self) -> list[dict[str, Any]]:
        return [e.to_dict() for e in self.expectations]

    @classmethod
    def from_list(cls, items: Iterable[Mapping[str, Any]]) -> AuditSuite:
        return cls(tuple(Expectation.from_dict(item) for item in items))


# -- the common SQL provider's vocabulary ---------------------------------------------------

# As ``SQLColumnCheckOperator.column_checks`` (apache-airflow-providers-common-sql).
_COLUMN_CHECKS = {
    "null_check": "SUM(CASE WHEN {column} IS NULL THEN 1 ELSE 0 END)",
    "distinct_check": "COUNT(DISTINCT({column}))",
    "unique_check": "COUNT({column}) - COUNT(DISTINCT({column}))",
    "min": "MIN({column})",
    "max": "MAX({column})",
}
_BOUNDS = ("equal_to", "greater_than", "geq_to", "less_than", "leq_to")


def _literal(value: Any, where: str) -> str:
    if isinstance(value, bool) or value is None:
        raise AuditError(f"{where}: a bound must be a number or a string, got {value!r}")
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _bound_condition(measure: str, bounds: Mapping[str, Any], where: str) -> str:
    """``SQLColumnCheckOperator._get_match`` as SQL over ``measure``: the tolerance widens a
    bound outward by ``abs(bound) * tolerance``; without one, bounds compare as they are."""
    unknown = sorted(set(bounds) - {*_BOUNDS, "tolerance"})
    given = [key for key in _BOUNDS if key in bounds]
    if unknown or not given:
        raise AuditError(f"{where}: give one or more of {list(_BOUNDS)} (unknown: {unknown})")
    if "equal_to" in bounds and len(given) > 1:
        raise AuditError(f"{where}: equal_to cannot be passed with a greater or less than bound")
    if {"greater_than", "geq_to"} <= set(bounds) or {"less_than", "leq_to"} <= set(bounds):
        raise AuditError(f"{where}: give one lower and one upper bound at most")
    tolerance = bounds.get("tolerance")
    if tolerance is not None and any(not isinstance(bounds[k], (int, float)) for k in given):
        raise AuditError(f"{where}: a tolerance needs numeric bounds")

    def widened(key: str, sign: int) -> str:
        value = bounds[key]
        if tolerance is None:
            return _literal(value, where)
        return _literal(value + sign * abs(value) * float(tolerance), where)

    parts = []
    if "equal_to" in bounds:
        if tolerance is None:
            parts.append(f"{measure} = {widened('equal_to', 0)}")
        else:
            parts.append(f"{measure} BETWEEN {widened('equal_to', -1)} AND {widened('equal_to', 1)}")
    for key, op, sign in (("geq_to", ">=", -1), ("greater_than", ">", -1), ("leq_to", "<=", 1),
                          ("less_than", "<", 1)):
        if key in bounds:
            parts.append(f"{measure} {op} {widened(key, sign)}")
    return " AND ".join(parts)


def _clause(name: str, *clauses: str | None) -> str | None:
    """The provider's operator-wide and per-check ``partition_clause`` ANDed (None: neither),
    each checked as a row condition."""
    given = [clause for clause in clauses if clause]
    for clause in given:
        check_expression(name, clause, aggregate=False)
    return " AND ".join(f"({clause})" for clause in given) or None


def _filtered(text: str, clause: str | None) -> str:
    """``text`` with every aggregate counting only the rows where ``clause`` holds (``FILTER
    (WHERE ...)``): the provider's WHERE of the checked query, on the staged version."""
    if clause is None:
        return text
    where = sqlglot.parse_one(clause, read="spark")

    def filtered(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.AggFunc) and not isinstance(node.parent, exp.Filter):
            return exp.Filter(this=node.copy(), expression=exp.Where(this=where.copy()))
        return node

    return sqlglot.parse_one(text, read="spark").transform(filtered).sql(dialect="spark")


def from_column_mapping(
    column_mapping: Mapping[str, Mapping[str, Mapping[str, Any]]],
    mode: Mode | str = Mode.FAIL,
    accept_none: bool = True,
    partition_clause: str | None = None,
) -> list[Expectation]:
    """``SQLColumnCheckOperator(column_mapping=..., partition_clause=...)`` as table expectations
    named ``<column>.<check>`` (its result names); ``accept_none`` as there: a NULL result counts
    as 0; a partition clause (the operator's and the check's) filters the rows measured."""
    found = []
    for column, checks in column_mapping.items():
        for check, options in checks.items():
            name = f"{column}.{check}"
            if check not in _COLUMN_CHECKS:
                known = sorted(_COLUMN_CHECKS)
                raise AuditError(f"audit {name!r}: unknown column check {check!r} (known: {known})")
            bounds = {key: value for key, value in options.items() if key != "partition_clause"}
            clause = _clause(name, partition_clause, options.get("partition_clause"))
            measure = _filtered(_COLUMN_CHECKS[check].format(column=column), clause)
            compared = f"COALESCE({measure}, 0)" if accept_none else measure
            found.append(TableExpectation(name, _bound_condition(compared, bounds, f"audit {name!r}"), mode,
                                          measure=measure))
    return found


def from_table_checks(
    checks: Mapping[str, Mapping[str, Any]], mode: Mode | str = Mode.FAIL, partition_clause: str | None = None
) -> list[Expectation]:
    """``SQLTableCheckOperator(checks=..., partition_clause=...)``: a ``check_statement`` with an
    aggregate is a table expectation; one without is checked on every row (a row expectation: the
    provider's ``MIN(CASE WHEN statement THEN 1 ELSE 0 END) = 1``; an empty version passes it
    here). A partition clause limits either to the rows where it holds."""
    found = []
    for name, check in checks.items():
        unknown = sorted(set(check) - {"check_statement", "partition_clause"})
        if unknown or "check_statement" not in check:
            raise AuditError(f"audit {name!r}: a table check is {{'check_statement': ..., "
                             f"'partition_clause': ...}}, got {sorted(check)}")
        statement = str(check["check_statement"])
        clause = _clause(name, partition_clause, check.get("partition_clause"))
        tree = _parse(name, statement)
        if any(True for _ in tree.find_all(exp.AggFunc)):
            found.append(TableExpectation(name, _filtered(statement, clause), mode))
        elif clause is not None:
            found.append(RowExpectation(name, f"CASE WHEN {clause} THEN ({statement}) ELSE TRUE END", mode))
        else:
            found.append(RowExpectation(name, statement, mode))
    return found


def coerce_audits(items: AuditSuite | Iterable[Expectation | Mapping[str, Any]] | None) -> AuditSuite:
    """The audits an operator is given: :class:`Expectation` objects, the common SQL provider's
    ``{"column_mapping": {...}}`` (with optional ``accept_none``) or ``{"checks": {...}}``, each
    with an optional ``partition_clause`` and ``mode``; or an expectation's own dict (``kind``,
    ``name``, ...); or an :class:`AuditSuite` already made."""
    if isinstance(items, AuditSuite):
        return items
    found: list[Expectation] = []
    for item in items or []:
        if isinstance(item, Expectation):
            found.append(item)
            continue
        if not isinstance(item, Mapping):
            raise AuditError(f"an audit is an Expectation or a dict, got {item!r}")
        data = dict(item)
        mode = data.pop("mode", Mode.FAIL)
        if "column_mapping" in data:
            accept_none = bool(data.pop("accept_none", True))
            mapping, clause = data.pop("column_mapping"), data.pop("partition_clause", None)
            _no_rest(data, "column_mapping")
            found += from_column_mapping(mapping, mode, accept_none, clause)
        elif "checks" in data:
            checks, clause = data.pop("checks"), data.pop("partition_clause", None)
            _no_rest(data, "checks")
            found += from_table_checks(checks, mode, clause)
        elif "kind" in data:
            found.append(Expectation.from_dict({**data, "mode": mode}))
        else:
            raise AuditError(f"an audit dict needs 'column_mapping', 'checks' or 'kind', got {sorted(item)}")
    return AuditSuite(tuple(found))


def _no_rest(data: Mapping[str, Any], what: str) -> None:
    if data:
        raise AuditError(f"unknown key(s) {sorted(data)} beside {what!r} (table and conn_id do not "
                         "apply: the audit reads the staged version)")


# -- results ----------------------------------------------------------------------------------


@dataclass
class AuditResult:
    """What one audit found. ``failing``: offending rows (row), dropped rows (drop), or the
    partitions that shrank too much (change); ``value``: a table audit's measure."""

    name: str
    kind: str
    mode: str
    passed: bool
    failing: int | None = None
    value: Any = None
    samples: list[dict[str, Any]] = field(default_factory=list)
    detail: str = ""

    @property
    def blocks(self) -> bool:
        """Whether it keeps the version from being published."""
        return not self.passed and self.mode == Mode.FAIL.value

    def line(self) -> str:
        """One line of the task log: name, outcome, count."""
        if self.mode == Mode.DROP.value:
            outcome = f"dropped {self.failing or 0} row(s)"
        elif self.passed:
            outcome = "passed"
        else:
            outcome = "failed (warn: published)" if self.mode == Mode.WARN.value else "FAILED"
        count = "" if self.failing is None or self.mode == Mode.DROP.value else f", {self.failing} failing"
        value = "" if self.value is None else f", value {self.value}"
        detail = f" ({self.detail})" if self.detail else ""
        return f"audit {self.name} [{self.kind}, {self.mode}]: {outcome}{count}{value}{detail}"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AuditResult:
        return cls(**{key: data[key] for key in cls.__dataclass_fields__ if key in data})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sample_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A sample row as journaled: its first columns, values as short text."""
    kept = list(row.items())[:SAMPLE_COLUMNS]
    return {key: None if value is None else str(value)[:SAMPLE_VALUE_CHARS] for key, value in kept}


def row_results(
    expectations: Sequence[Expectation], violations: Mapping[str, int],
    samples: Mapping[str, list[dict[str, Any]]] | None = None,
) -> list[AuditResult]:
    """Row audits from the observed violation counts (name -> rows not making it TRUE)."""
    return [
        AuditResult(e.name, e.kind, e.mode.value, passed=e.mode is Mode.DROP or not violations.get(e.name, 0),
                    failing=int(violations.get(e.name, 0)), samples=list((samples or {}).get(e.name, [])))
        for e in expectations
    ]


def table_results(
    expectations: Sequence[Expectation], values: Mapping[str, tuple[Any, Any]]
) -> list[AuditResult]:
    """Table audits from (condition, measure) values; a NULL condition fails."""
    return [
        AuditResult(e.name, e.kind, e.mode.value, passed=values[e.name][0] is True, value=values[e.name][1])
        for e in expectations
    ]


def change_results(
    expectations: Sequence[Expectation],
    new_rows: Mapping[str, int],
    previous_rows: Mapping[str, int | None],
) -> list[AuditResult]:
    """Row-count change audits per part ("" for a whole table, a partition path otherwise) of the
    replaced version: a part the new version no longer has counts as 0 rows. A part whose
    previous count was not recorded cannot be judged and is reported as such (passed)."""
    results = []
    for e in expectations:
        assert e.min_ratio is not None
        shrunk, unknown = [], []
        for part, before in sorted(previous_rows.items()):
            after = new_rows.get(part, 0)
            if before is None:
                unknown.append(part or "table")
            elif after < e.min_ratio * before:
                shrunk.append(f"{part or 'table'}: {before} -> {after} rows")
        notes = []
        if shrunk:
            notes.append(f"below {e.min_ratio:g} x previous: {'; '.join(shrunk[:SAMPLE_ROWS])}")
        if unknown:
            notes.append(f"previous rows not recorded for {', '.join(unknown[:SAMPLE_ROWS])}")
        if not previous_rows:
            notes.append("no previous version")
        results.append(AuditResult(e.name, e.kind, e.mode.value, passed=not shrunk, failing=len(shrunk),
                                   detail="; ".join(notes)))
    return results


def schema_results(
    expectations: Sequence[Expectation],
    before: Sequence[tuple[str, str]] | None,
    after: Sequence[tuple[str, str]],
) -> list[AuditResult]:
    """Schema audits: the new version's ``(column, type)`` pairs against the replaced version's
    (None: there is none, nothing to compare)."""
    if before is None:
        return [AuditResult(e.name, e.kind, e.mode.value, passed=True, detail="no previous version")
                for e in expectations]
    old = {name.lower(): kind.lower() for name, kind in before}
    new = {name.lower(): kind.lower() for name, kind in after}
    changes = [f"added {name} {new[name]}" for name in new if name not in old]
    changes += [f"dropped {name} {old[name]}" for name in old if name not in new]
    changes += [f"{name} {old[name]} -> {new[name]}" for name in new
                if name in old and new[name] != old[name]]
    return [AuditResult(e.name, e.kind, e.mode.value, passed=not changes, failing=len(changes),
                        detail="; ".join(changes)) for e in expectations]


def audit_summary(results: Iterable[Mapping[str, Any]] | None) -> str | None:
    """An attempt's audit results in a few words each (``positive: 1 failing``, ``has_region:
    dropped 2``); None without audits. From :class:`AuditResult` dicts."""
    parts = []
    for result in results or ():
        failing = result.get("failing") or 0
        if result.get("mode") == "drop":
            outcome = f"dropped {failing}"
        elif result.get("passed"):
            outcome = "passed"
        else:
            count = f"{failing} failing" if result.get("kind") == "row" else "failed"
            outcome = count + (" (warn)" if result.get("mode") == "warn" else "")
        parts.append(f"{result.get('name')}: {outcome}")
    return "; ".join(parts) or None


def failure_message(target: str, attempt_id: str, results: Sequence[AuditResult]) -> str:
    """The task's error for audits that block: each named with its count and a few rows."""
    blocking = [r for r in results if r.blocks]
    parts = []
    for r in blocking:
        count = f"{r.failing} failing row(s)" if r.kind in ("row", "reference") else (
            f"value {r.value}" if r.value is not None else (r.detail or "condition false"))
        samples = f", e.g. {r.samples[:3]}" if r.samples else ""
        parts.append(f"{r.name} ({count}{samples})")
    return (
        f"audit(s) failed on {target}: {'; '.join(parts)}. {target} is unchanged; the staged version "
        f"is quarantined as attempt {attempt_id} (`staged audits show {attempt_id}`, "
        f"`staged publish {attempt_id}` to publish it anyway)"
    )
