"""Audits inside the staged write job (Spark side): row expectations counted during the write,
table expectations read from the staged version only.

Row expectations are ``observe`` metrics of the written DataFrame: one pass, the write's own.
``drop`` expectations filter their offending rows out after the metrics saw them, and the
dropped rows are counted there too. Table expectations are one aggregation over the staged
version's files once written; sample rows of a failed row expectation are read from them only
when it failed. Nothing here touches the catalog.
"""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING, Any

from airflow_provider_staged.staging.audits import (
    SAMPLE_ROWS,
    AuditSuite,
    Mode,
    row_results,
    sample_row,
    table_results,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation
    from pyspark.sql.types import StructType

# Observed metrics are named by position (an audit's name may hold anything): ``r<i>`` for the
# i-th row expectation, and the rows the drop expectations removed.
_DROPPED = "dropped"


def _holds(condition: str) -> Column:
    """TRUE where the row satisfies ``condition``; a NULL result is a violation."""
    from pyspark.sql import functions as F

    return F.coalesce(F.expr(condition), F.lit(False))


def observed_frame(df: DataFrame, suite: AuditSuite) -> tuple[DataFrame, Observation | None]:
    """``df`` counting each row expectation's violations as it is written, without the rows a
    ``drop`` expectation refuses; the observation that holds the counts after the write.

    The audits' columns are checked against ``df`` first: an unknown one fails before any write,
    naming the audit and the position."""
    suite.check_columns(df.columns)
    rows = suite.of_kind("row")
    if not rows:
        return df, None
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    def violations(holds: Column, name: str) -> Column:
        return F.coalesce(F.sum(F.when(holds, 0).otherwise(1)), F.lit(0)).alias(name)

    holds = [_holds(e.condition) for e in rows]
    drops = [held for held, e in zip(holds, rows, strict=True) if e.mode is Mode.DROP]
    metrics = [violations(held, f"r{index}") for index, held in enumerate(holds)]
    kept = reduce(lambda a, b: a & b, drops) if drops else None
    if kept is not None:
        metrics.append(violations(kept, _DROPPED))
    # Unnamed: a unique name, so that concurrent builds on one session never read each other's.
    observation = Observation()
    observed = df.observe(observation, *metrics)
    return (observed if kept is None else observed.filter(kept)), observation


def audit_staged(
    df: DataFrame, schema: StructType, location: str, suite: AuditSuite, observation: Observation | None
) -> tuple[list[dict[str, Any]], int]:
    """The job's audit results (row and table expectations) and the rows dropped, once ``df``
    was written at ``location`` with ``schema``."""
    observed = dict(observation.get) if observation is not None else {}
    dropped = int(observed.pop(_DROPPED, 0) or 0)
    rows = suite.of_kind("row")
    counts = {e.name: int(observed.get(f"r{index}") or 0) for index, e in enumerate(rows)}
    tables = suite.of_kind("table")
    staged = None
    if tables or any(counts.get(e.name) for e in rows if e.mode is not Mode.DROP):
        staged = df.sparkSession.read.schema(schema).parquet(location)
    samples = {}
    for e in rows:
        if e.mode is not Mode.DROP and counts.get(e.name) and staged is not None:
            found = staged.where(~_holds(e.condition)).limit(SAMPLE_ROWS).collect()
            samples[e.name] = [sample_row(row.asDict()) for row in found]
    values: dict[str, tuple[Any, Any]] = {}
    if tables and staged is not None:
        from pyspark.sql import functions as F

        columns = []
        for index, e in enumerate(tables):
            columns.append(F.expr(e.condition).alias(f"c{index}"))
            columns.append((F.expr(e.measure) if e.measure else F.lit(None)).alias(f"m{index}"))
        row = staged.agg(*columns).first()
        values = {e.name: (row[f"c{i}"], _plain(row[f"m{i}"])) for i, e in enumerate(tables)}
    results = row_results(rows, counts, samples)
    results += table_results(tables, values)
    return [result.to_dict() for result in results], dropped


def _plain(value: Any) -> Any:
    """A measure as the journal's JSON keeps it (a Decimal or a date as text)."""
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)
