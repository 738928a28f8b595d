"""A materialized table's lag as Flink's freshness means it: how long ago its newest committed
period became due (pure: no Airflow or Spark)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, tzinfo

from airflow_provider_staged.materialized.definition import MaterializedTableDefinition
from airflow_provider_staged.materialized.partitions import partition_due


def time_column(definition: MaterializedTableDefinition) -> str | None:
    """The first partition column with a date-formatter (Flink's time partition column)."""
    return next((c for c in definition.partition_by if c in definition.partition_formatters), None)


def table_lag(
    definition: MaterializedTableDefinition,
    now: datetime,
    partitions: Iterable[Mapping[str, str]] = (),
    last_commit: datetime | None = None,
    zone: str | tzinfo = "UTC",
) -> timedelta | None:
    """How far the table is behind: ``now`` less the end of its newest committed period, at least 0.

    A table whose time partition column has a date-formatter: of the committed ``partitions``
    (column -> value), the newest value of that column names a period of the formatter's finest
    field ('yyyy-MM-dd HH': an hour, 'yyyy-MM-dd': a calendar day in ``zone``), due when the last
    periodic run that refreshes it fires (:func:`.partitions.partition_due`: the period's end, or
    the next fire time of the table's schedule after it, or one freshness after its start when
    that is later). The current period is not due yet: lag 0 while it is being refreshed, then
    the time since it ended. Any other table (or no parseable value): ``now - last_commit``.
    None: nothing committed. ``now`` and ``last_commit`` are aware.
    """
    column = time_column(definition)
    if column is not None:
        pattern = definition.partition_formatters[column]
        values = {spec[column] for spec in partitions if spec.get(column)}
        starts = {start: value for value in values if (start := _start(value, pattern)) is not None}
        if starts:  # the newest period is due last: one schedule look-up, not one per partition
            newest = starts[max(starts)]
            due = partition_due(newest, pattern, definition.freshness, zone, definition.schedule)
            if due is not None:
                return max(now - due, timedelta(0))
    if last_commit is None:
        return None
    return max(now - last_commit, timedelta(0))


def _start(value: str, pattern: str) -> datetime | None:
    """The wall-clock time ``value`` names, if the formatter writes it exactly so."""
    try:
        start = datetime.strptime(value, pattern)
    except ValueError:
        return None
    return start if start.strftime(pattern) == value else None


def lag_text(lag: timedelta | None, freshness: timedelta) -> str:
    """The lag for a person: ``'12 h 5 min (late: more than its freshness)'``, ``-`` if none."""
    if lag is None:
        return "-"
    seconds = int(lag.total_seconds())
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "min"), (seconds, "s")) if n]
    text = " ".join(parts[:2]) or "0 s"  # the two largest units say enough
    return f"{text} (late: more than its freshness)" if lag > freshness else text
