"""Partition TTL (FLIP-25's time characteristics) as table options with Paimon's names (pure).

- ``partition.expiration-time``: how long a partition lives (a duration: ``30 d``, ``12 h``,
  ``90 min``; a bare number is milliseconds, as Flink's durations). Without it: no TTL.
- ``partition.expiration-check-interval``: how often the maintenance sweep looks (default 1 h).
- ``partition.expiration-strategy``: ``values-time`` (default; event time: the time in the
  partition's value) or ``update-time`` (processing time: the partition's last commit, which
  the commit path records as the partition parameter :data:`UPDATED_AT_KEY`).
- ``partition.timestamp-pattern``: how to build the timestamp text from the values, e.g.
  ``$dt $hour:00:00`` (default: the first partition column's value).
- ``partition.timestamp-formatter``: the Java pattern of that text (default: the pattern
  column's ``date-formatter`` when a materialized table has one, else ``yyyy-MM-dd HH:mm:ss``
  or ``yyyy-MM-dd``).

A partition expires once its time plus the expiration time lies in the past. A values-time
partition whose value does not parse never expires (it is reported, never guessed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from airflow_provider_staged.staging.date_patterns import PartitionError, java_to_strftime

EXPIRATION_TIME = "partition.expiration-time"
CHECK_INTERVAL = "partition.expiration-check-interval"
STRATEGY = "partition.expiration-strategy"
TIMESTAMP_FORMATTER = "partition.timestamp-formatter"
TIMESTAMP_PATTERN = "partition.timestamp-pattern"
TTL_OPTIONS = (EXPIRATION_TIME, CHECK_INTERVAL, STRATEGY, TIMESTAMP_FORMATTER, TIMESTAMP_PATTERN)
VALUES_TIME = "values-time"
UPDATE_TIME = "update-time"
STRATEGIES = (VALUES_TIME, UPDATE_TIME)

# Partition parameter written by every commit that switches the partition (epoch seconds).
UPDATED_AT_KEY = "staged.updated_at"
# Table parameter: no partition can expire before this time (epoch seconds). Lowered by a
# commit that adds an earlier-expiring partition, recomputed by the sweep: a sweep that finds
# it in the future skips the table without reading its partitions.
NEXT_EXPIRY_KEY = "staged.partition.next-expiry"

DEFAULT_CHECK_INTERVAL_SECONDS = 3600.0
_DEFAULT_FORMATTERS = ("yyyy-MM-dd HH:mm:ss", "yyyy-MM-dd")
# ASCII digits only (Python's \d and int() take any digit); 20 of them bound the float below.
_DURATION = re.compile(r"^\s*([0-9]{1,20})\s*([a-zA-Z]*)\s*$")
_MAX_SECONDS = timedelta.max.total_seconds()
_UNITS = {
    **dict.fromkeys(("", "ms", "milli", "millis", "millisecond", "milliseconds"), 0.001),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1.0),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hour", "hours"), 3600.0),
    **dict.fromkeys(("d", "day", "days"), 86400.0),
}
_PLACEHOLDER = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


class TtlError(ValueError):
    """A partition TTL option that cannot be used; the message names the option and value."""


def parse_duration(text: str, option: str) -> float:
    """Seconds of a Flink-style duration such as ``30 d``, ``12h``, ``90 min``."""
    match = _DURATION.match(text) if isinstance(text, str) else None
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise TtlError(
            f"invalid {option} {text!r}: expected a duration such as '30 d', '12 h' or '90 min' "
            "(units ms, s, min, h, d)"
        )
    seconds = int(match.group(1)) * _UNITS[unit]
    if seconds <= 0:
        raise TtlError(f"invalid {option} {text!r}: must be positive")
    if seconds > _MAX_SECONDS:  # a check interval becomes a timedelta (the sweep's schedule)
        raise TtlError(f"invalid {option} {text!r}: longer than {timedelta.max.days} days")
    return seconds


def ttl_options(options: Mapping[str, str]) -> dict[str, str]:
    """The partition TTL options among a table's options (WITH clause or table parameters)."""
    return {key: value for key, value in options.items() if key in TTL_OPTIONS}


@dataclass(frozen=True)
class PartitionTtl:
    """When the partitions of one table expire."""

    expiration_seconds: float
    check_interval_seconds: float
    strategy: str
    pattern: str  # e.g. "$dt $hour:00:00"
    formats: tuple[str, ...]  # strftime formats tried in order (values-time)

    def partition_time(
        self, columns: Sequence[str], values: Sequence[str], updated_at: float | None
    ) -> float | None:
        """The partition's time (epoch seconds, UTC), or None when it has none."""
        if self.strategy == UPDATE_TIME:
            return updated_at
        by_column = dict(zip(columns, values, strict=True))
        text = _PLACEHOLDER.sub(lambda m: by_column.get(m.group(1).lower(), m.group(0)), self.pattern)
        for fmt in self.formats:
            try:
                return datetime.strptime(text, fmt).replace(tzinfo=timezone.utc).timestamp()
            except ValueError:
                continue
        return None

    def expires_at(
        self, columns: Sequence[str], values: Sequence[str], updated_at: float | None
    ) -> float | None:
        moment = self.partition_time(columns, values, updated_at)
        return None if moment is None else moment + self.expiration_seconds

    def is_expired(
        self, columns: Sequence[str], values: Sequence[str], updated_at: float | None, now: float
    ) -> bool:
        expires = self.expires_at(columns, values, updated_at)
        return expires is not None and expires < now


def parse_ttl(
    options: Mapping[str, str],
    partition_columns: Sequence[str],
    date_formatters: Mapping[str, str] | None = None,
) -> PartitionTtl | None:
    """The TTL that ``options`` define, or None; raises :class:`TtlError` naming the bad value.

    ``date_formatters`` (column -> Java pattern) are a materialized table's
    ``partition.fields.<col>.date-formatter``; the pattern column's one is the default formatter.
    """
    options = ttl_options(options)
    if EXPIRATION_TIME not in options:
        extra = sorted(options)
        if extra:
            raise TtlError(f"option(s) {extra} need '{EXPIRATION_TIME}' (the TTL itself)")
        return None
    columns = [column.lower() for column in partition_columns]
    if not columns:
        raise TtlError(f"'{EXPIRATION_TIME}' needs a partitioned table (PARTITIONED BY / partition_by)")
    expiration = parse_duration(options[EXPIRATION_TIME], EXPIRATION_TIME)
    interval = (
        parse_duration(options[CHECK_INTERVAL], CHECK_INTERVAL)
        if CHECK_INTERVAL in options
        else DEFAULT_CHECK_INTERVAL_SECONDS
    )
    strategy = options.get(STRATEGY, VALUES_TIME)
    if strategy not in STRATEGIES:
        raise TtlError(f"invalid {STRATEGY} {strategy!r}: expected one of {', '.join(STRATEGIES)}")
    pattern = options.get(TIMESTAMP_PATTERN, f"${columns[0]}")
    referenced = [name.lower() for name in _PLACEHOLDER.findall(pattern)]
    unknown = [name for name in referenced if name not in columns]
    if unknown or not referenced:
        raise TtlError(
            f"invalid {TIMESTAMP_PATTERN} {pattern!r}: it must reference partition columns as "
            f"$column (partition columns: {', '.join(columns)})"
        )
    formatter = options.get(TIMESTAMP_FORMATTER)
    if formatter is None and len(referenced) == 1 and pattern == f"${referenced[0]}":
        formatter = {k.lower(): v for k, v in (date_formatters or {}).items()}.get(referenced[0])
    try:
        formats = tuple(java_to_strftime(f) for f in ((formatter,) if formatter else _DEFAULT_FORMATTERS))
    except PartitionError as err:
        raise TtlError(f"invalid {TIMESTAMP_FORMATTER} {formatter!r}: {err}") from None
    return PartitionTtl(expiration, interval, strategy, pattern, formats)


def check_interval(options: Mapping[str, str]) -> float | None:
    """The check interval of a table with a TTL, else None (no expiry to check)."""
    if EXPIRATION_TIME not in options:
        return None
    if CHECK_INTERVAL not in options:
        return DEFAULT_CHECK_INTERVAL_SECONDS
    return parse_duration(options[CHECK_INTERVAL], CHECK_INTERVAL)


def with_ttl_options(parameters: Mapping[str, str] | None, options: Mapping[str, str]) -> dict[str, str]:
    """Table ``parameters`` carrying exactly the TTL options of ``options`` (a removed option is
    removed) and its other keys (e.g. a CTAS's TBLPROPERTIES) set, the rest kept."""
    kept = {k: v for k, v in (parameters or {}).items() if k not in TTL_OPTIONS and k != NEXT_EXPIRY_KEY}
    if NEXT_EXPIRY_KEY in (parameters or {}) and ttl_options(parameters or {}) == ttl_options(options):
        kept[NEXT_EXPIRY_KEY] = parameters[NEXT_EXPIRY_KEY]  # still valid for the same TTL
    return {**kept, **options}


def resolved_options(
    options: Mapping[str, str], partition_columns: Sequence[str], date_formatters: Mapping[str, str]
) -> dict[str, str]:
    """The TTL options to store with a table: a default formatter taken from the pattern column's
    ``date-formatter`` is written out, so the sweep needs nothing but the table's parameters."""
    ttl = ttl_options(options)
    if EXPIRATION_TIME not in ttl or TIMESTAMP_FORMATTER in ttl or not partition_columns:
        return ttl
    pattern = ttl.get(TIMESTAMP_PATTERN, f"${partition_columns[0]}")
    formatter = {k.lower(): v for k, v in date_formatters.items()}.get(pattern[1:].lower())
    return {**ttl, TIMESTAMP_FORMATTER: formatter} if pattern.startswith("$") and formatter else ttl


def earliest_expiry(
    ttl: PartitionTtl, columns: Sequence[str], partitions: Sequence[tuple[Sequence[str], float | None]]
) -> float | None:
    """The earliest expiry among ``partitions`` ((values, updated_at) pairs), None if none expires."""
    times = [ttl.expires_at(columns, values, updated) for values, updated in partitions]
    return min((t for t in times if t is not None), default=None)


_DATE_FORMATTER = re.compile(r"^partition\.fields\.(.+)\.date-formatter$")


def materialized_table_options(
    options: Mapping[str, str], partition_columns: Sequence[str]
) -> dict[str, str]:
    """The TTL options a materialized table's WITH clause stores with the table (checked; the
    ``partition.fields.<col>.date-formatter`` of the pattern column is the default formatter)."""
    formatters = {m.group(1): v for k, v in options.items() if (m := _DATE_FORMATTER.match(k))}
    parse_ttl(options, partition_columns, formatters)
    return resolved_options(options, partition_columns, formatters)
