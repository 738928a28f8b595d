"""Partition math of a refresh: which partition a periodic run owns, and checks of static ones."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from airflow_provider_staged.materialized.freshness import Freshness, TimeUnit
from airflow_provider_staged.staging.date_patterns import PartitionError
from airflow_provider_staged.staging.partition_paths import unstorable

SCHEDULE_TIME_PATTERN = "yyyy-MM-dd HH:mm:ss"
# [0-9], not \d: Python's \d and strptime also take fullwidth and other non-ASCII digits.
_SCHEDULE_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}")
_SCHEDULE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
# A periodic run refreshes the partition up to a week (the longest freshness) before its schedule
# time, and zones are less than a day apart: a week and a day's margin keeps that math inside
# datetime's range, and years from 1000 are what strftime zero-pads to four digits (glibc writes
# 999 as '999').
EARLIEST_SCHEDULE_TIME = datetime(1000, 1, 9)
LATEST_SCHEDULE_TIME = datetime(9999, 12, 30, 23, 59, 59)

# The strftime fields of those letters as JSON Schema ``pattern`` pieces: each accepts exactly
# the texts strftime writes for some date (months 01-12, hours 00-23, ...), so the Trigger form
# refuses a typo such as '2024-13-01' before any run exists. Day 31 of a short month passes the
# pattern; the round trip in ``validate_static_partitions`` refuses it before any Spark work.
_FIELD_REGEX = {
    "%Y": "[0-9]{4}",  # not \d: Python's (jsonschema) also matches non-ASCII digits
    "%m": "(0[1-9]|1[0-2])",
    "%d": "(0[1-9]|[12][0-9]|3[01])",
    "%H": "([01][0-9]|2[0-3])",
    "%M": "[0-5][0-9]",
    "%S": "[0-5][0-9]",
}
_REGEX_SPECIAL = frozenset(".^$*+?()[]{}|\\/")
# Any value the data can produce may be refreshed: quotes, backslashes and newlines are quoted
# where a value reaches SQL (refresh.string_literal) and escaped in paths and partition names
# (partition_paths.escape_path_name, as Hive and Spark escape them). Only NUL is refused: neither
# escapes it, so Spark cannot write such a partition in the first place.
_UNSAFE_CHARACTERS = "\\x00"
_UNSAFE_VALUE = re.compile(f"[{_UNSAFE_CHARACTERS}]")
# The end of a JSON Schema pattern: Python's ``$`` (jsonschema) also matches before a final
# newline, the negative look-ahead refuses 'eu\n' too (ECMA-262's ``$`` does not need it).
_END = "$(?!\\n)"
# Hive's and Spark's directory name of the null partition: as a value it would filter the rows
# that are the string while replacing the partition of the null ones (their rows lost).
NULL_PARTITION_NAME = "__HIVE_DEFAULT_PARTITION__"
# JSON Schema pattern of a value without a date-formatter.
SAFE_VALUE_PATTERN = f"^(?!{NULL_PARTITION_NAME}{_END})[^{_UNSAFE_CHARACTERS}]+{_END}"


@lru_cache(maxsize=64)
def formatter_regex(strftime_pattern: str) -> str:
    """JSON Schema ``pattern`` of the values a date-formatter writes.

    ``'%Y-%m-%d'`` gives ``'^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$(?!\\n)'``: Python's
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
    """Wall-clock time of ``moment`` in ``zone`` (naive datetimes are already wall-clock).

    A plain ``datetime`` (not pendulum's) whose ``fold`` tells the two 01:00 of autumn apart.
    """
    what = f"run time '{moment.isoformat(sep=' ')}'"
    if moment.tzinfo is not None:
        try:
            moment = moment.astimezone(time_zone(zone))
        except OverflowError:
            raise PartitionError(f"{what} is out of range in time zone {zone}") from None
    wall = datetime(*moment.timetuple()[:6], fold=moment.fold)
    return _in_range(wall, what)


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


class PartitionNotEndedError(PartitionError):
    """A periodic run whose partition is still being written (the hour repeated when DST ends)."""


def periodic_partition(
    schedule_time: str | datetime,
    freshness: Freshness,
    formatters: Mapping[str, str],
    zone: str | tzinfo = "UTC",
    schedule: str | None = None,
) -> dict[str, str]:
    """The partition a periodic run refreshes: the one that starts at the schedule's previous
    fire time, per column.

    ``formatters`` maps partition columns to strftime patterns; ``schedule`` is the table's cron
    (None: ``scheduleTime - freshness``, see :func:`_freshness_before`). Previous fire times
    follow Airflow's ``CronTriggerTimetable``, so every partition is refreshed exactly once
    across daylight saving: the run at 03:00 PDT on 2024-03-10 refreshes hour 01 (02:00 never
    existed), and of the two runs at 01:00 on 2024-11-03 the second (01:00 PST) raises
    :class:`PartitionNotEndedError`: hour 01 is still being written, the 02:00 run refreshes it.
    """
    if isinstance(schedule_time, datetime):
        local = local_schedule_time(schedule_time, zone)
    else:  # None or another non-string is refused by name, not an AttributeError
        local = parse_schedule_time(schedule_time)
    zone_info = time_zone(zone)
    if schedule is None:
        start = _freshness_before(local, freshness, zone_info)
    else:
        start = previous_fire_time(schedule, _aware(local, zone_info), zone_info).replace(tzinfo=None)
    if start.replace(fold=0) >= local.replace(fold=0):  # the wall clock went back
        spec = ", ".join(f"{c}={start.strftime(p)}" for c, p in formatters.items())
        raise PartitionNotEndedError(
            f"partition {spec or '(whole table)'} of schedule time {format_schedule_time(local)} "
            f"has not ended: the clock went back at the end of daylight saving in {zone}; the "
            "next run refreshes it"
        )
    return {column: start.strftime(pattern) for column, pattern in formatters.items()}


# The finest field a date-formatter writes, finest first, and the wall-clock step to its next value.
_FORMATTER_STEPS = (("%S", timedelta(seconds=1)), ("%M", timedelta(minutes=1)),
                    ("%H", timedelta(hours=1)), ("%d", timedelta(days=1)), ("%m", None), ("%Y", None))


def _next_value(start: datetime, pattern: str) -> datetime | None:
    """The wall-clock start of the value after ``start``'s: its finest field plus one."""
    for field, step in _FORMATTER_STEPS:
        if field not in pattern:
            continue
        if step is not None:
            return start + step
        if field == "%m":
            return start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
        return start.replace(year=start.year + 1)
    return None


@lru_cache(maxsize=4096)  # pure; the page asks again for every table on every poll (~0.4 ms each)
def partition_due(
    value: str,
    pattern: str,
    freshness: Freshness,
    zone: str | tzinfo = "UTC",
    schedule: str | None = None,
) -> datetime | None:
    """When partition ``value`` of a date-formatted column is complete: the schedule time of the
    last periodic run that refreshes it (:func:`periodic_partition` in reverse), aware in ``zone``.

    The partition covers the formatter's finest field from the wall-clock time it names ('yyyy-MM-dd
    HH': an hour, 'yyyy-MM-dd': a calendar day, 23 or 25 hours across daylight saving; a repeated
    hour is both of its occurrences); it is due at the first fire time of ``schedule`` at or after
    that period's end (an hourly value of a daily table: the next midnight), or for a table without
    a cron at that end or one ``freshness`` after its start, whichever is later. None: ``value`` is
    not one the formatter writes (e.g. Hive's null partition).
    """
    try:
        start = datetime.strptime(value, pattern)
    except ValueError:
        return None
    if start.strftime(pattern) != value:
        return None
    zone_info = time_zone(zone)
    try:
        following = _next_value(start, pattern)
        if following is None:  # a formatter of no date field names no period
            return None
        end = _aware(following, zone_info)
    except (OverflowError, ValueError):  # past year 9999
        return None
    if schedule is None:
        after_start = _aware(start, zone_info).astimezone(timezone.utc) + freshness.as_timedelta()
        if freshness.unit in (TimeUnit.DAY, TimeUnit.WEEK):  # calendar days, as _freshness_before
            after_start = _aware(start + freshness.as_timedelta(), zone_info)
        return max(end, after_start.astimezone(zone_info))
    fire = _cron_step(schedule, end, zone_info, forward=True)
    before = _cron_step(schedule, fire, zone_info, forward=False)
    return before if before >= end else fire


def _freshness_before(local: datetime, freshness: Freshness, zone: tzinfo) -> datetime:
    """Wall-clock ``local`` minus ``freshness`` in ``zone``, as Flink's getPeriodRefreshPartition
    does for seconds, minutes and hours: in absolute time, so 03:00 PDT on 2024-03-10 minus an
    hour is 01:00 PST (02:00 never existed). Days and weeks are calendar days here: Flink also
    subtracts 24 hours for them, which on the day after a change lands on the wrong day
    (2024-03-11 00:00 minus a day gives 2024-03-09 23:00, and partition 2024-03-10 is never
    refreshed). A typed time the clock shows twice is its first (daylight) occurrence, as on the
    cron path; Flink's SimpleDateFormat reads the second, so 01:30 on 2024-11-03 less an hour
    would refresh hour 01 while it is being written again."""
    if freshness.unit in (TimeUnit.DAY, TimeUnit.WEEK):
        return local - freshness.as_timedelta()
    aware = _aware(local, zone).astimezone(timezone.utc) - freshness.as_timedelta()
    return aware.astimezone(zone).replace(tzinfo=None)  # keeps fold: which of a repeated hour


def previous_fire_time(cron: str, fired: datetime, zone: tzinfo) -> datetime:
    """The fire time of ``cron`` before ``fired`` (aware), in ``zone``, as Airflow computes it.

    A ``fired`` off the schedule (a scheduleTime typed by hand) is first moved back onto it,
    as Airflow's ``_align_to_prev`` does, so the partition is always one that has ended.
    """
    last = _cron_step(cron, fired, zone, forward=False)
    if _cron_step(cron, last, zone, forward=True) != fired:
        last = _cron_step(cron, last, zone, forward=False)
    return last


def _cron_step(cron: str, current: datetime, zone: tzinfo, forward: bool) -> datetime:
    """Airflow's ``CronMixin._get_next`` / ``_get_prev``: a cron that fires every hour steps by
    the wall-clock distance in absolute time (the repeated hour of autumn gets its own run);
    any other cron's wall-clock time is localized (the later of two repeated times, a skipped
    one moved forward)."""
    from croniter import croniter  # deferred: only periodic refreshes pay for it

    naive = current.astimezone(zone).replace(tzinfo=None, fold=0)
    cron_iter = croniter(cron, start_time=naive)
    scheduled = cron_iter.get_next(datetime) if forward else cron_iter.get_prev(datetime)
    if cron_iter.expanded[1] == ["*"]:  # Airflow's _covers_every_hour
        return (current.astimezone(timezone.utc) + (scheduled - naive)).astimezone(zone)
    return _aware(scheduled.replace(fold=1), zone)


def _aware(local: datetime, zone: tzinfo) -> datetime:
    """Wall-clock ``local`` in ``zone``; its ``fold`` picks a repeated time, a skipped one
    moves forward by the gap (what pendulum does for Airflow's ``make_aware``)."""
    aware = local.replace(tzinfo=zone)
    if aware.astimezone(timezone.utc).astimezone(zone).replace(tzinfo=None) == local.replace(fold=0):
        return aware
    return local.replace(fold=0, tzinfo=zone).astimezone(timezone.utc).astimezone(zone)


def check_partition_value(key: object, value: object) -> None:
    """Refuse a partition value no table can have, whatever its definition: where a value enters
    without the definition at hand (a statement's PARTITION clause), and for each static one."""
    if not isinstance(value, str) or not value or _UNSAFE_VALUE.search(value):
        raise PartitionError(
            f"invalid value {value!r} for partition column {key!r}: expected a non-empty "
            "string without NUL characters"
        )
    why = unstorable([str(key)], [value])
    if why:
        raise PartitionError(f"invalid partition: {why}")
    if value == NULL_PARTITION_NAME:
        raise PartitionError(
            f"invalid value {value!r} for partition column {key!r}: it names the partition of "
            "null values, which a refresh of the whole table replaces"
        )


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
        check_partition_value(key, value)
        if column in formatters and not _matches(value, formatters[column]):
            example = formatter_example(column, formatters)
            raise PartitionError(
                f"invalid value {value!r} for partition column {key!r}: not a date or time as the "
                f"column's date-formatter writes one (e.g. {example!r})"
            )
        checked[column] = value
    why = unstorable(list(checked), list(checked.values()))
    if why:
        raise PartitionError(f"invalid partition: {why}")
    return checked


def _matches(value: str, pattern: str) -> bool:
    # strptime accepts '2024-1-2' for %m/%d: the round trip insists on the exact rendering.
    try:
        return datetime.strptime(value, pattern).strftime(pattern) == value
    except ValueError:
        return False
