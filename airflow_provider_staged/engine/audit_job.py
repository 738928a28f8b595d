"""Audits inside the staged write job (Spark side): counted while the version is written, and
read from the staged version only where that cannot be.

Row expectations are ``observe`` metrics of the written DataFrame: one pass, the write's own.
``drop`` expectations filter their offending rows out after those metrics saw them, and the
dropped rows are counted there too. Table expectations of plain aggregates (COUNT, SUM, MIN, ...)
are observed metrics of what is written, after the drops; the others (COUNT DISTINCT: a
uniqueness) are one aggregation over the staged version's files once written. Sample rows of a
failed row expectation are read from those files only when it failed. Nothing here touches the
catalog.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any

from airflow_provider_staged.staging.audits import (
    SAMPLE_ROWS,
    AuditSuite,
    Expectation,
    Mode,
    row_results,
    sample_row,
    table_results,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation

# Observed metrics are named by position (an audit's name may hold anything): ``r<i>`` for the
# i-th row expectation, ``c<i>``/``m<i>`` for a table one's condition and measure, and the rows
# the drop expectations removed.
_DROPPED = "dropped"


@dataclass(frozen=True)
class Observed:
    """The write's observations: row violations (before the drops), table aggregates (after)."""

    rows: Observation | None
    tables: Observation | None


def _api(df: DataFrame) -> tuple[Any, type[Observation]]:
    """The functions and Observation of ``df``'s kind: a Spark Connect DataFrame needs Connect's
    (pyspark picks by the environment, which says nothing of a Connect session built directly:
    the SQL client's gateway, the connect refresh engine, beside a classic session)."""
    if type(df).__module__.startswith("pyspark.sql.connect."):
        from pyspark.sql.connect import functions
        from pyspark.sql.connect.observation import Observation as ConnectObservation

        return functions, ConnectObservation  # type: ignore[return-value]
    from pyspark.sql import Observation as ClassicObservation
    from pyspark.sql import functions

    return functions, ClassicObservation


def _holds(F: Any, condition: str) -> Column:
    """TRUE where the row satisfies ``condition``; a NULL result is a violation."""
    return F.coalesce(F.expr(condition), F.lit(False))


def _table_columns(F: Any, tables: Sequence[Expectation]) -> list[Column]:
    columns = []
    for index, e in enumerate(tables):
        columns.append(F.expr(e.condition).alias(f"c{index}"))
        columns.append((F.expr(e.measure) if e.measure else F.lit(None)).alias(f"m{index}"))
    return columns


def _table_values(tables: Sequence[Expectation], found: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {e.name: (found[f"c{i}"], _plain(found[f"m{i}"])) for i, e in enumerate(tables)}


def observed_frame(df: DataFrame, suite: AuditSuite) -> tuple[DataFrame, Observed]:
    """``df`` counting each row expectation's violations as it is written, without the rows a
    ``drop`` expectation refuses, and computing the observable table expectations over what
    remains; the observations that hold them after the write.

    The audits' columns are checked against ``df`` first: an unknown one fails before any write,
    naming the audit and the position."""
    suite.check_columns(df.columns)
    F, Observation = _api(df)

    def violations(holds: Column, name: str) -> Column:
        # COUNT_IF: 0 over no rows, and cheaper per row than a SUM of a CASE (~0.1 s per 1M rows).
        return F.count_if(~holds).alias(name)

    # Unnamed observations: unique names, so concurrent builds on one session never mix counts.
    rows = suite.of_kind("row")
    row_observation = Observation() if rows else None
    if row_observation is not None:
        holds = [_holds(F, e.condition) for e in rows]
        metrics = [violations(held, f"r{index}") for index, held in enumerate(holds)]
        drops = [held for held, e in zip(holds, rows, strict=True) if e.mode is Mode.DROP]
        kept = reduce(lambda a, b: a & b, drops) if drops else None
        if kept is not None:
            metrics.append(violations(kept, _DROPPED))
        df = df.observe(row_observation, *metrics)
        if kept is not None:
            df = df.filter(kept)
    observable = [e for e in suite.of_kind("table") if e.observable]
    table_observation = Observation() if observable else None
    if table_observation is not None:
        df = df.observe(table_observation, *_table_columns(F, observable))
    return df, Observed(row_observation, table_observation)


def observe_audits(
    df: DataFrame, declared: list[dict[str, Any]]
) -> tuple[DataFrame, tuple[AuditSuite, Observed]]:
    """``df`` observed for a write spec's ``audits``, and the suite and observations that
    :func:`audit_staged` takes once it was written."""
    suite = AuditSuite.from_list(declared)
    df, observation = observed_frame(df, suite)
    return df, (suite, observation)


def audit_staged(
    df: DataFrame, read_staged: Callable[[], DataFrame], suite: AuditSuite, observed: Observed
) -> tuple[list[dict[str, Any]], int]:
    """The job's audit results (row and table expectations) and the rows dropped, once ``df``
    was written; ``read_staged`` reads the staged data back (for the table expectations that a
    write cannot observe, and the sample rows of a failed row expectation)."""
    counted = dict(observed.rows.get) if observed.rows is not None else {}
    dropped = int(counted.pop(_DROPPED, 0) or 0)
    rows = suite.of_kind("row")
    counts = {e.name: int(counted.get(f"r{index}") or 0) for index, e in enumerate(rows)}
    tables = suite.of_kind("table")
    observable = [e for e in tables if e.observable]
    values = _table_values(observable, observed.tables.get) if observed.tables is not None else {}
    scanned = [e for e in tables if not e.observable]
    failed = [e for e in rows if e.mode is not Mode.DROP and counts[e.name]]
    references = suite.of_kind("reference")
    samples = {}
    F, _ = _api(df)
    if scanned or failed or references:
        staged = read_staged()
        for e in failed:
            samples[e.name] = _samples(staged.where(~_holds(F, e.condition)))
        if scanned:
            values.update(_table_values(scanned, staged.agg(*_table_columns(F, scanned)).first().asDict()))
        for e in references:
            dangling = _dangling(F, staged, e)
            counts[e.name] = dangling.count()
            samples[e.name] = _samples(dangling) if counts[e.name] else []
    results = row_results(rows, counts, samples)
    results += table_results(tables, values)
    results += row_results(references, counts, samples)
    return [result.to_dict() for result in results], dropped


def _samples(rows: DataFrame) -> list[dict[str, Any]]:
    return [sample_row(row.asDict()) for row in rows.limit(SAMPLE_ROWS).collect()]


def _dangling(F: Any, staged: DataFrame, reference: Expectation) -> DataFrame:
    """The staged rows whose non-NULL column is no key of the referenced table (an anti join;
    names checked when the audit was made, so they reach Spark as identifiers)."""
    table, key = reference.referenced
    keys = staged.sparkSession.table(table.name).select(F.col(key).alias("_referenced_key")).distinct()
    column = F.col(reference.condition)
    return staged.where(column.isNotNull()).join(keys, column == keys["_referenced_key"], "left_anti")


def _plain(value: Any) -> Any:
    """A measure as the journal's JSON keeps it (a Decimal or a date as text)."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)
