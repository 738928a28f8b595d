"""Partition math of a refresh: which partition a periodic run owns, and checks of static ones."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from airflow_provider_staged.materialized.freshness import Freshness

SCHEDULE_TIME_PATTERN = "yyyy-MM-dd HH:mm:ss"
_SCHEDULE_TIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
_SCHEDULE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
# A periodic run refreshes the partition up to a day (the longest freshness) before its schedule
# time, and zones are less than a day apart: a day's margin keeps that math inside datetime's
# range, and years from 1000 are what strftime zero-pads to four digits (glibc writes 999 as '999').
EARLIEST_SCHEDULE_TIME = datetime(1000, 1, 2)
LATEST_SCHEDULE_TIME = datetime(9999, 12, 30, 23, 59, 59)

# Java/Flink date-pattern letters we accept and their strftime equivalents. Anything else
# (e.g. 'E', 'a', single letters, quoted literals) is rejected rather than guessed.
JAVA_TOKENS = {"yyyy": "%Y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}
_JAVA_LITERALS = "-/:_. "
_JAVA_PATTERN = re.compile("|".join([*JAVA_TOKENS, f"[{re.escape(_JAVA_LITERALS)}]"]))
# The strftime fields of those letters as JSON Schema ``pattern`` pieces: each accepts exactly
# the texts strftime writes for some date (months 01-12, hours 00-23, ...), so the Trigger form
# refuses a typo such as '2024-13-01' before any run exists. Day 31 of a short month passes the
# pattern; the round trip in ``validate_static_partitions`` refuses it before any Spark work.
_FIELD_REGEX = {
    "%Y": r"\d{4}",
    "%m": "(0[1-9]|1[0-2])",
    "%d": "(0[1-9]|[12][0-9]|3[01])",
    "%H": "([01][0-9]|2[0-3])",
    "%M": "[0-5][0-9]",
    "%S": "[0-5][0-9]",
}
_REGEX_SPECIAL = frozenset(".^$*+?()[]{}|\\/")
# A partition value ends up inside a partition spec: refuse anything that could break quoting.
_UNSAFE_CHARACTERS = "'\"`\\\\;\\x00-\\x1f\\x7f"
_UNSAFE_VALUE = re.compile(f"[{_UNSAFE_CHARACTERS}]")
# The end of a JSON Schema pattern: Python's ``$`` (jsonschema) also matches before a final
# newline, the negative look-ahead refuses 'eu\n' too (ECMA-262's ``$`` does not need it).
_END = "$(?!\\n)"
# JSON Schema pattern of a value without a date-formatter.
SAFE_VALUE_PATTERN = f"^[^{_UNSAFE_CHARACTERS}]+{_END}"


class PartitionError(ValueError):
    """A schedule time or partition value that cannot be used for a refresh."""


@lru_cache(maxsize=64)  # a handful of distinct patterns across hundreds of definitions
def java_to_strftime(pattern: str) -> str:
    """Translate a date formatter such as ``yyyy-MM-dd`` into ``%Y-%m-%d``."""
    parts: list[str] = []
    pos = 0
    while pos < len(pattern):
        match = _JAVA_PATTERN.match(pattern, pos)
        if match is None:
            raise PartitionError(
                f"unsupported date-formatter {pattern!r} at {pattern[pos:]!r}: use "
                f"{', '.join(JAVA_TOKENS)} and the separators {_JAVA_LITERALS!r}"
            )
        parts.append(JAVA_TOKENS.get(match.group(), match.group()))
        pos = match.end()
    if not any(token in parts for token in JAVA_TOKENS.values()):
        raise PartitionError(f"unsupported date-formatter {pattern!r}: it has no date field")
    return "".join(parts)


@lru_cache(maxsize=64)
def formatter_regex(strftime_pattern: str) -> str:
    """JSON Schema ``pattern`` of the values a date-formatter writes.

    ``'%Y-%m-%d'`` gives ``'^\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$(?!\\n)'``: Python's
    ``$`` (jsonschema) also matches before a final newline, the look-ahead refuses that. Not
    ``maxLength``: Airflow's form would cut a longer value while it is typed, and trigger the cut
    one instead of refusing what the user wrote.
    """
    parts: list[str] = []
    for token in re.findall(r"%.|[^%]", strftime_pattern):
        if token in _FIELD_REGEX:
            parts.append(_FIELD_REGEX[token])
        elif token.startswith("%"):
            raise PartitionError(f"unsupported strftime field {token!r} in {strftime_pattern!r}")
        else:  # escaped only where ECMA-262 (the UI's dialect) allows it too
            parts.append("\\" + token if token in _REGEX_SPECIAL else token)
    return f"^{''.join(parts)}{_END}"


def partition_value_schema(column: str, formatters: Mapping[str, str]) -> dict[str, object]:
    """JSON Schema of one partition value: its date-formatter's shape, else a safe string."""
    pattern = formatter_regex(formatters[column]) if column in formatters else SAFE_VALUE_PATTERN
    return {"type": "string", "pattern": pattern}


def formatter_example(column: str, formatters: Mapping[str, str]) -> str | None:
    """A value of ``column`` as its date-formatter writes it (2024-01-02 03:04:05), if it has one."""
    if column not in formatters:
        return None
    return datetime(2024, 1, 2, 3, 4, 5).strftime(formatters[column])


def time_zone(zone: str | tzinfo) -> tzinfo:
    if isinstance(zone, tzinfo):
        return zone
    try:
        return ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise PartitionError(f"unknown time zone {zone!r}") from None


def parse_schedule_time(text: object) -> datetime:
    """Parse ``yyyy-MM-dd HH:mm:ss`` strictly into a naive (wall-clock) datetime."""
    if not isinstance(text, str) or not _SCHEDULE_TIME.fullmatch(text):
        raise PartitionError(
            f"invalid scheduleTime {text!r}: expected a string {SCHEDULE_TIME_PATTERN!r}, "
            "e.g. '2024-01-02 00:00:00'"
        )
    try:
        moment = datetime.strptime(text, _SCHEDULE_TIME_FORMAT)
    except ValueError as err:
        raise PartitionError(f"invalid scheduleTime {text!r}: {err}") from None
    return _in_range(moment, f"scheduleTime {text!r}")


def local_schedule_time(moment: datetime, zone: str | tzinfo = "UTC") -> datetime:
    """Wall-clock time of ``moment`` in ``zone`` (naive datetimes are already wall-clock)."""
    what = f"run time '{moment.isoformat(sep=' ')}'"
    if moment.tzinfo is not None:
        try:
            moment = moment.astimezone(time_zone(zone)).replace(tzinfo=None)
        except OverflowError:
            raise PartitionError(f"{what} is out of range in time zone {zone}") from None
    return _in_range(moment.replace(microsecond=0), what)


def _in_range(moment: datetime, what: str) -> datetime:
    if not EARLIEST_SCHEDULE_TIME <= moment <= LATEST_SCHEDULE_TIME:
        raise PartitionError(
            f"{what} is out of range: a schedule time must lie between "
            f"'{format_schedule_time(EARLIEST_SCHEDULE_TIME)}' and "
            f"'{format_schedule_time(LATEST_SCHEDULE_TIME)}'"
        )
    return moment


def format_schedule_time(moment: datetime) -> str:
    return moment.strftime(_SCHEDULE_TIME_FORMAT)


def periodic_partition(
    schedule_time: str | datetime,
    freshness: Freshness,
    formatters: Mapping[str, str],
    zone: str | tzinfo = "UTC",
) -> dict[str, str]:
    """The partition a periodic run refreshes: ``format(scheduleTime - freshness)`` per column.

    ``formatters`` maps partition columns to strftime patterns. As in Flink, the arithmetic is
    on the wall-clock time in ``zone`` (a run fired 2024-01-02 00:00:00 with a 1-day freshness
    owns ds='2024-01-01' whatever daylight saving does in between).
    """
    if isinstance(schedule_time, str):
        local = parse_schedule_time(schedule_time)
    else:
        local = local_schedule_time(schedule_time, zone)
    start = local - freshness.as_timedelta()
    return {column: start.strftime(pattern) for column, pattern in formatters.items()}


def validate_static_partitions(
    partitions: object, partition_by: Iterable[str], formatters: Mapping[str, str]
) -> dict[str, str]:
    """Check ``staticPartitions`` against the table; returns them with lower-cased columns."""
    if not isinstance(partitions, Mapping):
        raise PartitionError(
            f"invalid staticPartitions {partitions!r}: expected an object of column -> value"
        )
    columns = tuple(partition_by)
    checked: dict[str, str] = {}
    for key, value in partitions.items():
        column = key.lower() if isinstance(key, str) else key
        if column not in columns:
            allowed = ", ".join(columns) or "none: the table is not partitioned"
            raise PartitionError(
                f"unknown partition column {key!r} in staticPartitions (partition columns: "
                f"{allowed})"
            )
        if not isinstance(value, str) or not value or _UNSAFE_VALUE.search(value):
            raise PartitionError(
                f"invalid value {value!r} for partition column {key!r}: expected a non-empty "
                "string without quotes, backslashes, semicolons or control characters"
            )
        if column in formatters and not _matches(value, formatters[column]):
            example = formatter_example(column, formatters)
            raise PartitionError(
                f"invalid value {value!r} for partition column {key!r}: it does not match the "
                f"column's date-formatter (e.g. {example!r})"
            )
        checked[column] = value
    return checked


def _matches(value: str, pattern: str) -> bool:
    # strptime accepts '2024-1-2' for %m/%d: the round trip insists on the exact rendering.
    try:
        return datetime.strptime(value, pattern).strftime(pattern) == value
    except ValueError:
        return False
