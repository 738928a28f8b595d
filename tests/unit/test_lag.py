"""A materialized table's lag per Flink's freshness (``materialized.lag.table_lag``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from airflow_provider_staged.materialized.definition import parse_definition
from airflow_provider_staged.materialized.lag import lag_text, table_lag
from airflow_provider_staged.materialized.partitions import partition_due, periodic_partition
from airflow_provider_staged.materialized.workflow.manager import MaterializedTables
from airflow_provider_staged.staging.identifiers import TableIdentifier
from tests.unit.test_mt_cascade import _Workflows

UTC = timezone.utc
LA = ZoneInfo("America/Los_Angeles")


def table(formatter: str | None, freshness: str, partitioned: bool = True):
    options = f"WITH ('partition.fields.ds.date-formatter' = '{formatter}')\n" if formatter else ""
    return parse_definition(
        "CREATE MATERIALIZED TABLE db.t\n"
        + ("PARTITIONED BY (ds)\n" if partitioned else "")
        + options
        + f"FRESHNESS = {freshness}\nAS SELECT ds, count(*) AS n FROM src GROUP BY ds;\n",
        "db__t.sql",
    )


HOURLY = table("yyyy-MM-dd HH", "INTERVAL '1' HOUR")
DAILY = table("yyyy-MM-dd", "INTERVAL '1' DAY")


@pytest.mark.parametrize(
    ("now", "lag"),
    [
        (datetime(2024, 1, 2, 10, 30, tzinfo=UTC), timedelta(minutes=30)),  # hour 09 ended at 10:00
        (datetime(2024, 1, 2, 9, 59, tzinfo=UTC), timedelta(0)),  # hour 09 is still the current one
        (datetime(2024, 1, 2, 11, 5, tzinfo=UTC), timedelta(minutes=65)),  # hour 10 is missing: late
    ],
)
def test_hourly_partition_lag_is_since_the_end_of_its_hour(now: datetime, lag: timedelta) -> None:
    committed = [{"ds": "2024-01-02 08"}, {"ds": "2024-01-02 09"}, {"ds": "2024-01-01 23"}]
    assert table_lag(HOURLY, now, committed, last_commit=now - timedelta(hours=5)) == lag


def test_daily_partition_lag_is_since_midnight_and_the_commit_time_does_not_count() -> None:
    now = datetime(2024, 1, 3, 6, tzinfo=UTC)
    # Partition 2024-01-02 was refreshed again at 05:00 (a backfill): still 6 h behind.
    backfilled = now - timedelta(hours=1)
    assert table_lag(DAILY, now, [{"ds": "2024-01-02"}], last_commit=backfilled) == timedelta(hours=6)
    assert table_lag(DAILY, now, [{"ds": "2024-01-03"}]) == timedelta(0)


def test_daylight_saving_periods_in_the_table_zone() -> None:
    # Spring forward: hour 01 of 2024-03-10 ends at 03:00 PDT (02:00 never existed), 10:00 UTC.
    spring = datetime(2024, 3, 10, 10, 30, tzinfo=UTC)
    assert table_lag(HOURLY, spring, [{"ds": "2024-03-10 01"}], zone=LA) == timedelta(minutes=30)
    # Fall back: hour 01 of 2024-11-03 is both of its occurrences; it ends at 02:00 PST, 10:00 UTC.
    fall = datetime(2024, 11, 3, 10, 30, tzinfo=UTC)
    assert table_lag(HOURLY, fall, [{"ds": "2024-11-03 01"}], zone=LA) == timedelta(minutes=30)
    # The 23-hour day ends at midnight PDT of the next day (07:00 UTC).
    day = datetime(2024, 3, 11, 8, tzinfo=UTC)
    assert table_lag(DAILY, day, [{"ds": "2024-03-10"}], zone="America/Los_Angeles") == timedelta(hours=1)


@pytest.mark.parametrize(
    ("definition", "value", "zone"),
    [
        (HOURLY, "2024-01-02 09", "UTC"),
        (HOURLY, "2024-03-10 01", "America/Los_Angeles"),
        (HOURLY, "2024-11-03 01", "America/Los_Angeles"),
        (DAILY, "2024-03-10", "America/Los_Angeles"),
        (table("yyyy-MM-dd", "INTERVAL '1' HOUR"), "2024-01-02", "UTC"),  # a day refreshed hourly
        (table("yyyy-MM-dd HH", "INTERVAL '1' DAY"), "2024-01-02 00", "UTC"),  # one hour a day
    ],
)
def test_due_is_when_the_last_periodic_run_of_the_partition_fires(definition, value: str, zone: str) -> None:
    pattern = definition.partition_formatters["ds"]
    due = partition_due(value, pattern, definition.freshness, zone, definition.schedule)
    assert due is not None
    formatters, schedule = definition.partition_formatters, definition.schedule
    assert periodic_partition(due, definition.freshness, formatters, zone, schedule) == {"ds": value}


def test_hourly_refreshes_of_a_daily_partition_are_due_at_the_next_midnight() -> None:
    every_hour = table("yyyy-MM-dd", "INTERVAL '1' HOUR")
    now = datetime(2024, 1, 2, 15, tzinfo=UTC)
    assert table_lag(every_hour, now, [{"ds": "2024-01-02"}]) == timedelta(0)
    assert table_lag(every_hour, now, [{"ds": "2024-01-01"}]) == timedelta(hours=15)


def test_unpartitioned_or_without_formatter_is_the_time_since_the_last_commit() -> None:
    now = datetime(2024, 1, 2, 12, tzinfo=UTC)
    whole = table(None, "INTERVAL '1' HOUR", partitioned=False)
    assert table_lag(whole, now, last_commit=now - timedelta(minutes=20)) == timedelta(minutes=20)
    plain = table(None, "INTERVAL '1' HOUR")
    assert table_lag(plain, now, [{"ds": "eu"}], last_commit=now - timedelta(hours=2)) == timedelta(hours=2)
    # A value the formatter does not write (Hive's null partition) falls back to the commit time.
    odd = [{"ds": "__HIVE_DEFAULT_PARTITION__"}]
    assert table_lag(HOURLY, now, odd, last_commit=now - timedelta(hours=3)) == timedelta(hours=3)


def test_without_a_schedule_the_period_ends_at_least_one_freshness_after_its_start() -> None:
    pattern = "%Y-%m-%d %H"
    hourly, daily = HOURLY.freshness, DAILY.freshness
    assert partition_due("2024-01-02 09", pattern, hourly) == datetime(2024, 1, 2, 10, tzinfo=UTC)
    assert partition_due("2024-01-02 00", pattern, daily) == datetime(2024, 1, 3, tzinfo=UTC)
    assert partition_due("2024-1-2 00", pattern, hourly) is None


def test_nothing_committed_is_no_lag() -> None:
    now = datetime(2024, 1, 2, 12, tzinfo=UTC)
    assert table_lag(HOURLY, now) is None
    assert table_lag(table(None, "INTERVAL '1' HOUR", partitioned=False), now) is None


def test_a_whole_table_refresh_of_a_partitioned_table_falls_back_to_its_commit_time() -> None:
    now = datetime(2024, 1, 2, 12, tzinfo=UTC)
    assert table_lag(HOURLY, now, [{}], last_commit=now - timedelta(minutes=5)) == timedelta(minutes=5)


@pytest.mark.parametrize(
    ("lag", "text"),
    [
        (None, "-"),
        (timedelta(0), "0 s"),
        (timedelta(minutes=30, seconds=4), "30 min 4 s"),
        (timedelta(hours=12, minutes=5, seconds=9), "12 h 5 min (late: more than its freshness)"),
        (timedelta(days=2, hours=3), "2 d 3 h (late: more than its freshness)"),
    ],
)
def test_lag_text(lag: timedelta | None, text: str) -> None:
    assert lag_text(lag, timedelta(hours=1)) == text


def test_describe_says_the_lag_of_the_newest_committed_partition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workflows = _Workflows(tmp_path)
    identifier = TableIdentifier.parse("m.h")
    workflows.definition_path_for(identifier).write_text(HOURLY.text.replace("db.t", "m.h"))
    workflows.paused["mt__m__h"] = False
    tables = MaterializedTables(workflows, None)  # type: ignore[arg-type]
    now = datetime.now(UTC)
    newest, older = ((now - timedelta(hours=hours)).strftime("%Y-%m-%d %H") for hours in (3, 9))
    specs = [{"ds": older}, {"ds": newest}]  # committed just now: the commit time does not count
    names = [f"ds={older}", f"ds={newest}"]
    monkeypatch.setattr(tables, "_table_partitions", lambda _: (True, names, specs, now))
    info = tables.describe(identifier)
    ended = datetime.strptime(newest, "%Y-%m-%d %H").replace(tzinfo=UTC) + timedelta(hours=1)
    assert info.lag is not None and abs(info.lag - (now - ended)) < timedelta(minutes=1)
    assert info.lag_text.endswith("(late: more than its freshness)")
