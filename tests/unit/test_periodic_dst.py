"""Periodic partitions across daylight saving, checked against the DAG's real timetable.

The runs are the ones Airflow's own timetable (built by the DAG factory) creates around
2024-03-10 (02:00 does not exist) and 2024-11-03 (01:00 happens twice) in Los Angeles; each run's
partition comes from the same code path a refresh task uses (``parse_refresh_request`` with the
run's logical date). Every partition must be refreshed exactly once, none invented.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pendulum
import pytest
from airflow.serialization.serialized_objects import DagSerialization
from airflow.timetables.base import DataInterval, TimeRestriction

from airflow_provider_staged.materialized.definition import parse_definition
from airflow_provider_staged.materialized.freshness import Freshness
from airflow_provider_staged.materialized.params import parse_refresh_request
from airflow_provider_staged.materialized.partitions import (
    PartitionNotEndedError,
    periodic_partition,
)
from airflow_provider_staged.materialized.workflow.dag_factory import build_dags

ZONE = "America/Los_Angeles"
HOURLY = """CREATE MATERIALIZED TABLE web.clicks_by_hour
PARTITIONED BY (ds, hr)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd',
      'partition.fields.hr.date-formatter' = 'HH')
FRESHNESS = INTERVAL '1' HOUR
AS SELECT ds, hr, count(*) AS clicks FROM raw.clicks GROUP BY ds, hr
"""
DAILY = """CREATE MATERIALIZED TABLE analytics.orders_daily
PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
FRESHNESS = INTERVAL '1' DAY
AS SELECT ds, count(*) AS orders FROM raw.orders GROUP BY ds
"""

# The factory names each table's asset after the staged connection's metastore.
pytestmark = pytest.mark.usefixtures("staged_default_connection")


def fire_times(text: str, tmp_path: Path, start: datetime, end: datetime) -> list[pendulum.DateTime]:
    """The run times the scheduler makes for the DAG the factory builds for ``text``, from
    ``start`` to ``end`` (catch-up on, so every slot is listed)."""
    (tmp_path / "table.sql").write_text(text)
    (dag,) = build_dags(tmp_path, {}, zone=ZONE).values()
    # What the scheduler runs: the DAG as the DAG processor serialized it.
    timetable = DagSerialization.from_dict(DagSerialization.to_dict(dag)).timetable
    zone = pendulum.timezone(ZONE)
    restriction = TimeRestriction(
        earliest=pendulum.instance(start, tz=zone), latest=pendulum.instance(end, tz=zone), catchup=True
    )
    times, last = [], None
    while (info := timetable.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)):
        times.append(info.logical_date)
        last = DataInterval(info.logical_date, info.logical_date)
    return times


def partitions_refreshed(text: str, tmp_path: Path, day: datetime) -> tuple[Counter[str], list[str]]:
    """Partitions refreshed by the runs of ``day`` +- a few hours; and the runs that skipped."""
    definition = parse_definition(text, "table.sql")
    refreshed: Counter[str] = Counter()
    skipped = []
    for fired in fire_times(text, tmp_path, day - timedelta(hours=3), day + timedelta(days=1, hours=3)):
        try:
            request = parse_refresh_request({}, definition, fired, ZONE)
        except PartitionNotEndedError:
            skipped.append(fired.in_timezone(ZONE).isoformat())
            continue
        refreshed["/".join(request.partition_spec.values())] += 1
    return refreshed, skipped


def test_spring_forward_hourly_refreshes_hour_01_once_and_never_hour_02(tmp_path: Path) -> None:
    refreshed, skipped = partitions_refreshed(HOURLY, tmp_path, datetime(2024, 3, 10))
    day = [key for key in refreshed if key.startswith("2024-03-10/")]
    assert sorted(day) == [f"2024-03-10/{h:02d}" for h in range(24) if h != 2]
    assert set(refreshed.values()) == {1} and skipped == []


def test_fall_back_hourly_refreshes_the_repeated_hour_once_after_it_ended(tmp_path: Path) -> None:
    refreshed, skipped = partitions_refreshed(HOURLY, tmp_path, datetime(2024, 11, 3))
    day = [key for key in refreshed if key.startswith("2024-11-03/")]
    assert sorted(day) == [f"2024-11-03/{h:02d}" for h in range(24)]
    assert set(refreshed.values()) == {1}
    # The run at the second 01:00 (PST) would refresh hour 01 while it is still being written.
    assert skipped == ["2024-11-03T01:00:00-08:00"]


@pytest.mark.parametrize("day", [datetime(2024, 3, 10), datetime(2024, 11, 3)])
def test_daily_table_refreshes_every_day_once_across_both_transitions(tmp_path: Path, day: datetime) -> None:
    refreshed, skipped = partitions_refreshed(DAILY, tmp_path, day)
    previous = (day - timedelta(days=1)).strftime("%Y-%m-%d")
    assert refreshed == Counter({previous: 1, day.strftime("%Y-%m-%d"): 1}) and skipped == []


def test_hourly_table_daily_formatter_covers_each_hour_of_the_day(tmp_path: Path) -> None:
    text = HOURLY.replace("PARTITIONED BY (ds, hr)", "PARTITIONED BY (ds)").replace(
        ",\n      'partition.fields.hr.date-formatter' = 'HH'", "")
    refreshed, _ = partitions_refreshed(text, tmp_path, datetime(2024, 3, 10))
    assert refreshed["2024-03-10"] == 23  # the 23-hour day: one refresh per hour that ended


def test_midnight_transition_zone_daily() -> None:
    # Santiago springs forward at midnight: 2024-09-08 00:00 never happened (Airflow runs 01:00).
    fired = pendulum.datetime(2024, 9, 9, 0, 0, tz="America/Santiago")
    assert periodic_partition(fired, Freshness(1, "DAY"), {"ds": "%Y-%m-%d"}, "America/Santiago",
                              "0 0 * * *") == {"ds": "2024-09-08"}


def test_schedule_time_off_the_schedule_is_aligned_first() -> None:
    formatters = {"ds": "%Y-%m-%d", "hr": "%H"}
    assert periodic_partition("2024-01-02 05:17:00", Freshness(1, "HOUR"), formatters, ZONE,
                              "0 * * * *") == {"ds": "2024-01-02", "hr": "04"}
    assert periodic_partition("2024-01-02 00:00:00", Freshness(1, "DAY"), {"ds": "%Y-%m-%d"}, ZONE,
                              "0 0 * * *") == {"ds": "2024-01-01"}


def test_second_freshness_schedules_every_n_seconds_aligned_to_the_minute(tmp_path: Path) -> None:
    text = "CREATE MATERIALIZED TABLE t\nFRESHNESS = INTERVAL '20' SECOND\nREFRESH_MODE = FULL\nAS SELECT 1"
    times = fire_times(text, tmp_path, datetime(2024, 1, 1, 0, 0, 5), datetime(2024, 1, 1, 0, 1, 30))
    assert [t.in_timezone(ZONE).strftime("%H:%M:%S") for t in times] == [
        "00:00:20", "00:00:40", "00:01:00", "00:01:20"]


# testGetPeriodRefreshPartition (Flink) across the changes, from a typed scheduleTime, with the
# table's cron and without it (a CONTINUOUS table's periodic refresh): Flink's values, checked on
# a JVM with its formatTimestampStringWithOffset (SimpleDateFormat in the zone, minus the freshness
# in milliseconds), except where marked.
@pytest.mark.parametrize("cron", [None, "0 * * * *"])
@pytest.mark.parametrize(("schedule_time", "expected"), [
    ("2024-03-10 03:00:00", ("2024-03-10", "01")),  # 02:00 never existed
    ("2024-03-10 02:30:00", ("2024-03-10", "01")),  # a time that never existed: 03:30 PDT
    ("2024-03-10 04:00:00", ("2024-03-10", "03")),
    ("2024-11-03 02:00:00", ("2024-11-03", "01")),
    # Flink reads a repeated time as its second occurrence and refreshes hour 01 while it is
    # written again; here it is the first, as Airflow's runs are, and hour 00 has ended.
    ("2024-11-03 01:30:00", ("2024-11-03", "00")),
])
def test_get_period_refresh_partition_across_daylight_saving(
    schedule_time: str, expected: tuple[str, str], cron: str | None
) -> None:
    formatters = {"ds": "%Y-%m-%d", "hr": "%H"}
    partition = periodic_partition(schedule_time, Freshness(1, "HOUR"), formatters, ZONE, cron)
    assert partition == dict(zip(formatters, expected, strict=True))


@pytest.mark.parametrize("cron", [None, "0 0 * * *"])
@pytest.mark.parametrize("schedule_time", ["2024-03-11 00:00:00", "2024-11-04 00:00:00"])
def test_get_period_refresh_partition_a_day_after_daylight_saving_is_the_calendar_day(
    schedule_time: str, cron: str | None
) -> None:
    """Flink subtracts 24 hours: 2024-03-11 00:00 gives 2024-03-09 (the 23-hour day is never
    refreshed) and 2024-11-04 00:00 gives 2024-11-03 01:00. The day before is refreshed here."""
    previous = (datetime.fromisoformat(schedule_time) - timedelta(days=1)).strftime("%Y-%m-%d")
    assert periodic_partition(schedule_time, Freshness(1, "DAY"), {"ds": "%Y-%m-%d"}, ZONE,
                              cron) == {"ds": previous}


def test_refresh_request_with_explicit_schedule_time_across_spring_forward() -> None:
    """The issue's case end to end: a periodic refresh call at 03:00 on 2024-03-10 in Los
    Angeles refreshes hour 01, for a FULL table (cron) and a CONTINUOUS one (no cron)."""
    for mode in ("FULL", "CONTINUOUS"):
        definition = parse_definition(HOURLY.replace("AS SELECT", f"REFRESH_MODE = {mode}\nAS SELECT"))
        request = parse_refresh_request({"scheduleTime": "2024-03-10 03:00:00", "isPeriodic": True},
                                        definition, datetime(2024, 3, 10, 11), ZONE)
        assert dict(request.partition_spec) == {"ds": "2024-03-10", "hr": "01"}, mode
