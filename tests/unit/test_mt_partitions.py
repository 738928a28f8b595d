"""Partition math: scheduleTime parsing, periodic partitions, static partition checks."""

from datetime import datetime, timezone

import pytest

from airflow_provider_staged.materialized.freshness import Freshness
from airflow_provider_staged.materialized.partitions import (
    PartitionError,
    format_schedule_time,
    local_schedule_time,
    parse_schedule_time,
    periodic_partition,
    validate_static_partitions,
)
from airflow_provider_staged.staging.date_patterns import java_to_strftime

DAY = Freshness(1, "DAY")
HOUR = Freshness(1, "HOUR")
DS = {"ds": "%Y-%m-%d"}


@pytest.mark.parametrize(
    ("pattern", "strftime"),
    [
        ("yyyy-MM-dd", "%Y-%m-%d"),
        ("yyyyMMdd", "%Y%m%d"),
        ("yyyy-MM-dd HH", "%Y-%m-%d %H"),
        ("yyyy/MM/dd HH:mm:ss", "%Y/%m/%d %H:%M:%S"),
        ("yyyy_MM", "%Y_%m"),
        ("HH", "%H"),
    ],
)
def test_java_to_strftime(pattern: str, strftime: str) -> None:
    assert java_to_strftime(pattern) == strftime


@pytest.mark.parametrize(
    "pattern", ["yy-MM-dd", "yyyy-M-d", "EEE", "yyyy-MM-dd'T'HH", "%Y", "yyyy-MM-dd a", "--", ""]
)
def test_unsupported_formatters_are_rejected(pattern: str) -> None:
    with pytest.raises(PartitionError, match="unsupported date-formatter"):
        java_to_strftime(pattern)


def test_parse_schedule_time() -> None:
    assert parse_schedule_time("2024-01-02 00:00:00") == datetime(2024, 1, 2)


@pytest.mark.parametrize(
    "text",
    [
        "2024-01-02",
        "2024-01-02T00:00:00",
        "2024-01-02 00:00:00+00:00",
        "2024-1-2 00:00:00",
        "2024-02-30 00:00:00",
        "2024-01-02 24:00:00",
        " 2024-01-02 00:00:00",
        "2024-01-02 00:00:00\n",
        "\uff12\uff10\uff12\uff14-01-02 00:00:00",  # fullwidth digits: strptime takes them
        "2024-01-02 0\u0661:00:00",  # an Arabic-Indic one
        20240102,
        None,
    ],
)
def test_malformed_schedule_time(text: object) -> None:
    with pytest.raises(PartitionError, match="invalid scheduleTime"):
        parse_schedule_time(text)


@pytest.mark.parametrize(
    ("schedule_time", "freshness", "formatters", "expected"),
    [
        ("2024-01-02 00:00:00", DAY, DS, {"ds": "2024-01-01"}),
        ("2024-03-01 00:00:00", DAY, DS, {"ds": "2024-02-29"}),  # leap year month boundary
        ("2023-03-01 00:00:00", DAY, DS, {"ds": "2023-02-28"}),
        ("2024-01-01 00:00:00", DAY, DS, {"ds": "2023-12-31"}),  # year boundary
        ("2024-01-01 00:00:00", HOUR, {"ds": "%Y%m%d", "hr": "%H"}, {"ds": "20231231", "hr": "23"}),
        ("2024-05-01 00:15:00", Freshness(15, "MINUTE"), {"ts": "%Y-%m-%d %H:%M"},
         {"ts": "2024-05-01 00:00"}),
        ("2024-01-02 00:00:00", DAY, {}, {}),
    ],
)
def test_periodic_partition(
    schedule_time: str, freshness: Freshness, formatters: dict[str, str], expected: dict
) -> None:
    assert periodic_partition(schedule_time, freshness, formatters) == expected


def test_periodic_partition_in_a_time_zone() -> None:
    # 2024-01-01 20:00 UTC is already 2024-01-02 04:00 in Shanghai: a different day partition.
    fired = datetime(2024, 1, 1, 20, 0, tzinfo=timezone.utc)
    assert periodic_partition(fired, DAY, DS) == {"ds": "2023-12-31"}
    assert periodic_partition(fired, DAY, DS, zone="Asia/Shanghai") == {"ds": "2024-01-01"}
    assert periodic_partition(fired, DAY, DS, zone="America/Los_Angeles") == {"ds": "2023-12-31"}


def test_daylight_saving_uses_wall_clock_days() -> None:
    # New York springs forward on 2024-03-10: the day is 23 hours long, the partition is still
    # the previous calendar day.
    fired = datetime(2024, 3, 11, 4, 0, tzinfo=timezone.utc)  # 2024-03-11 00:00 EDT
    assert local_schedule_time(fired, "America/New_York") == datetime(2024, 3, 11)
    assert periodic_partition(fired, DAY, DS, zone="America/New_York") == {"ds": "2024-03-10"}


def test_naive_datetime_is_wall_clock_and_microseconds_dropped() -> None:
    assert local_schedule_time(datetime(2024, 1, 2, 0, 0, 0, 999), "Asia/Tokyo") == datetime(
        2024, 1, 2
    )


def test_unknown_time_zone() -> None:
    with pytest.raises(PartitionError, match="unknown time zone 'Mars/Base'"):
        periodic_partition(datetime(2024, 1, 1, tzinfo=timezone.utc), DAY, DS, zone="Mars/Base")


def test_static_partitions_are_checked_and_normalized() -> None:
    assert validate_static_partitions({"DS": "2024-01-01", "region": "eu"}, ("ds", "region"), DS) == {
        "ds": "2024-01-01",
        "region": "eu",
    }
    assert validate_static_partitions({}, (), {}) == {}
    assert validate_static_partitions({"region": "é" * 127}, ("ds", "region"), DS) == {"region": "é" * 127}


@pytest.mark.parametrize("value", ["eu'; DROP TABLE x; --", 'e"u', "eu\\", "eu;", "e\nu", "a'b\nc", "\t%/=:"])
def test_static_partition_values_the_data_produces_are_accepted(value: str) -> None:
    """Quotes, backslashes, semicolons and newlines come from the data: such a partition must be
    refreshable on its own (the value is quoted in SQL and escaped in paths, not refused)."""
    assert validate_static_partitions({"region": value}, ("ds", "region"), DS) == {"region": value}


@pytest.mark.parametrize(
    ("partitions", "match"),
    [
        ({"dt": "2024-01-01"}, r"unknown partition column 'dt'.*ds, region"),
        ({"ds": "2024-1-1"}, r"'2024-1-1'.*date-formatter.*'2024-01-02'"),
        ({"ds": "2024-02-30"}, "date-formatter"),
        ({"ds": "2024-01-01' OR '1'='1"}, "date-formatter"),
        ({"region": "e\x00u"}, "without NUL"),
        ({"region": "'" * 255}, "has a name of 772 characters escaped, the metastore stores at most 767"),
        ({"region": ""}, "non-empty"),
        ({"region": "__HIVE_DEFAULT_PARTITION__"}, "partition of null values"),
        ({"region": "e" * 256}, "256 bytes long, the metastore stores at most 255"),
        ({"region": "é" * 128}, "256 bytes long"),  # bytes, not characters
        ({"region": 7}, "7"),
        (["ds"], "expected an object"),
    ],
)
def test_bad_static_partitions(partitions: object, match: str) -> None:
    with pytest.raises(PartitionError, match=match):
        validate_static_partitions(partitions, ("ds", "region"), DS)


def test_static_partitions_on_unpartitioned_table() -> None:
    with pytest.raises(PartitionError, match="not partitioned"):
        validate_static_partitions({"ds": "2024-01-01"}, (), {})


# DefaultMaterializedTableExecutorTest.testGetPeriodRefreshPartition (MaterializedTableManagerTest
# before Flink 2.x): the partition a periodic refresh at scheduleTime owns, by freshness and
# date-formatters; with the table's cron (Airflow's previous fire time) and without it. Flink's
# docs (materialized-table/statements.md) say a scheduling time of 2024-01-01 00:00:00 refreshes
# ds = '2024-01-01'; its code and this test refresh '2023-12-31', the day that has ended: the
# docs are wrong, the tests are followed here.
_DAY, _HOUR, _MINUTE = {"day": "yyyy-MM-dd"}, {"hour": "HH"}, {"minute": "mm"}
FLINK_PERIOD_PARTITIONS = [
    # the freshness matches the finest date-formatter
    ("2024-01-01 00:00:00", (1, "DAY"), _DAY, ("2023-12-31",)),
    ("2024-01-02 00:00:00", (1, "DAY"), _DAY, ("2024-01-01",)),
    ("2024-01-02 00:00:00", (1, "HOUR"), _DAY | _HOUR, ("2024-01-01", "23")),
    ("2024-01-02 01:00:00", (1, "HOUR"), _DAY | _HOUR, ("2024-01-02", "00")),
    ("2024-01-01 00:00:00", (2, "HOUR"), _DAY | _HOUR, ("2023-12-31", "22")),
    ("2024-01-01 00:00:00", (4, "HOUR"), _DAY | _HOUR, ("2023-12-31", "20")),
    ("2024-01-01 00:00:00", (8, "HOUR"), _DAY | _HOUR, ("2023-12-31", "16")),
    ("2024-01-01 00:00:00", (12, "HOUR"), _DAY | _HOUR, ("2023-12-31", "12")),
    ("2024-01-01 12:00:00", (12, "HOUR"), _DAY | _HOUR, ("2024-01-01", "00")),
    *(("2024-01-01 00:00:00", (n, "MINUTE"), _DAY | _HOUR | _MINUTE, ("2023-12-31", "23", f"{60 - n:02d}"))
      for n in (1, 2, 4, 5, 6, 10, 12, 15, 30)),
    ("2024-01-01 00:30:00", (30, "MINUTE"), _DAY | _HOUR | _MINUTE, ("2024-01-01", "00", "00")),
    # the freshness is longer than the finest date-formatter
    ("2024-01-01 00:00:00", (1, "DAY"), _DAY | _HOUR, ("2023-12-31", "00")),
    ("2024-01-01 00:00:00", (1, "DAY"), _DAY | _HOUR | _MINUTE, ("2023-12-31", "00", "00")),
    ("2024-01-01 00:00:00", (1, "HOUR"), _DAY | _HOUR | _MINUTE, ("2023-12-31", "23", "00")),
    ("2024-01-01 01:00:00", (1, "HOUR"), _DAY | _HOUR | _MINUTE, ("2024-01-01", "00", "00")),
    # the freshness is shorter than the finest date-formatter
    ("2024-01-01 00:00:00", (1, "HOUR"), _DAY, ("2023-12-31",)),
    ("2024-01-01 01:00:00", (1, "HOUR"), _DAY, ("2024-01-01",)),
    ("2024-01-01 00:00:00", (2, "HOUR"), _DAY, ("2023-12-31",)),
    ("2024-01-01 02:00:00", (2, "HOUR"), _DAY, ("2024-01-01",)),
    ("2024-01-01 00:00:00", (4, "HOUR"), _DAY, ("2023-12-31",)),
    ("2024-01-01 04:00:00", (4, "HOUR"), _DAY, ("2024-01-01",)),
    *(("2024-01-01 00:00:00", (n, "MINUTE"), _DAY | _HOUR, ("2023-12-31", "23")) for n in (1, 2, 4, 15)),
    ("2024-01-01 00:00:00", (1, "MINUTE"), _DAY, ("2023-12-31",)),
    ("2024-01-01 00:01:00", (1, "MINUTE"), _DAY, ("2024-01-01",)),
]


@pytest.mark.parametrize("with_cron", [False, True])
@pytest.mark.parametrize(("schedule_time", "freshness", "patterns", "values"), FLINK_PERIOD_PARTITIONS)
def test_flink_period_refresh_partitions(
    schedule_time: str, freshness: tuple[int, str], patterns: dict[str, str], values: tuple[str, ...],
    with_cron: bool,
) -> None:
    fresh = Freshness(*freshness)
    formatters = {column: java_to_strftime(pattern) for column, pattern in patterns.items()}
    partition = periodic_partition(schedule_time, fresh, formatters,
                                   schedule=fresh.to_cron() if with_cron else None)
    assert partition == dict(zip(patterns, values, strict=True))


@pytest.mark.parametrize("schedule_time", [None, "2024-01-01"])
def test_flink_period_refresh_partition_needs_a_full_schedule_time(schedule_time: object) -> None:
    """testGetPeriodRefreshPartition's invalid cases: Flink says "The scheduler time must not be
    null ..." and "Failed to parse a valid partition value for the field 'day' ... using the
    scheduler time '2024-01-01' based on the date format 'yyyy-MM-dd HH:mm:ss'"; here both name
    the value and the format (None raised an AttributeError before)."""
    with pytest.raises(PartitionError, match=rf"^invalid scheduleTime {schedule_time!r}: expected a string "
                       "'yyyy-MM-dd HH:mm:ss'"):
        periodic_partition(schedule_time, DAY, {"day": "%Y-%m-%d", "hour": "%H"})  # type: ignore[arg-type]


def test_flink_schedule_time_text() -> None:
    """QuartzSchedulerUtilsTest.testConvertDateToString: a fire time as the scheduleTime text
    ('yyyy-MM-dd HH:mm:ss'), which parses back to the same wall-clock time."""
    fired = datetime(2024, 5, 22, 12, 30, 15)
    assert format_schedule_time(fired) == "2024-05-22 12:30:15"
    assert parse_schedule_time(format_schedule_time(fired)) == fired
