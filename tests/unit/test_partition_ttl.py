"""Partition TTL options (Paimon's names) and expiry decisions: pure logic."""

from __future__ import annotations

import calendar
import re
import time

import pytest

from airflow_provider_staged.materialized.definition import DefinitionError, parse_definition
from airflow_provider_staged.staging.expiry import plan_expiry
from airflow_provider_staged.staging.partition_ttl import (
    NEXT_EXPIRY_KEY,
    TtlError,
    check_interval,
    earliest_expiry,
    materialized_table_options,
    parse_duration,
    parse_ttl,
    with_ttl_options,
)

DAY = 86400.0


def at(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M:%S")))


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30 d", 30 * DAY), ("12h", 43200), ("90 min", 5400), ("1 day", DAY), ("45 s", 45), ("1500", 1.5)],
)
def test_durations_as_flink_writes_them(text, seconds):
    assert parse_duration(text, "x") == seconds


@pytest.mark.parametrize("text", [
    "", "d", "-1 d", "0 h", "3 weeks", "1.5 d",
    "\uff15 d", "\u00b2 d",  # non-ASCII digits: fullwidth, superscript
    "99999999999 d", "9" * 400 + " d",  # beyond a timedelta (the sweep's schedule), beyond a float
])
def test_bad_durations_name_the_option_and_value(text):
    with pytest.raises(TtlError, match=re.escape(f"invalid partition.expiration-time {text!r}")):
        parse_ttl({"partition.expiration-time": text}, ["ds"])


def test_values_time_defaults_and_boundary():
    ttl = parse_ttl({"partition.expiration-time": "2 d"}, ["ds"])
    assert ttl.strategy == "values-time" and ttl.check_interval_seconds == 3600
    # Default formatters: 'yyyy-MM-dd HH:mm:ss' and 'yyyy-MM-dd'.
    assert ttl.partition_time(["ds"], ["2024-01-01"], None) == at("2024-01-01 00:00:00")
    assert ttl.partition_time(["ds"], ["2024-01-01 06:00:00"], None) == at("2024-01-01 06:00:00")
    assert not ttl.is_expired(["ds"], ["2024-01-01"], None, at("2024-01-03 00:00:00"))
    assert ttl.is_expired(["ds"], ["2024-01-01"], None, at("2024-01-03 00:00:01"))
    assert ttl.partition_time(["ds"], ["not-a-date"], None) is None  # never expires


def test_pattern_over_several_columns_and_formatter():
    options = {
        "partition.expiration-time": "1 h",
        "partition.timestamp-pattern": "$dt $hour:00:00",
        "partition.timestamp-formatter": "yyyyMMdd HH:mm:ss",
    }
    ttl = parse_ttl(options, ["dt", "hour"])
    assert ttl.partition_time(["dt", "hour"], ["20240101", "05"], None) == at("2024-01-01 05:00:00")
    with pytest.raises(TtlError, match=r"invalid partition.timestamp-pattern '\$day'"):
        parse_ttl({**options, "partition.timestamp-pattern": "$day"}, ["dt", "hour"])
    with pytest.raises(TtlError, match=r"invalid partition\.timestamp-formatter 'yyyy-QQ'"):
        parse_ttl({**options, "partition.timestamp-formatter": "yyyy-QQ"}, ["dt", "hour"])


def test_update_time_uses_the_commit_time_only():
    ttl = parse_ttl(
        {"partition.expiration-time": "1 d", "partition.expiration-strategy": "update-time"}, ["ds"]
    )
    assert ttl.expires_at(["ds"], ["2000-01-01"], 1000.0) == 1000.0 + DAY
    assert ttl.expires_at(["ds"], ["2000-01-01"], None) is None
    assert earliest_expiry(ttl, ["ds"], [(["a"], 50.0), (["b"], 10.0), (["c"], None)]) == 10.0 + DAY


def test_bad_strategy_options_without_ttl_and_unpartitioned():
    with pytest.raises(TtlError, match=r"invalid partition\.expiration-strategy 'event-time'"):
        parse_ttl({"partition.expiration-time": "1 d", "partition.expiration-strategy": "event-time"}, ["ds"])
    with pytest.raises(TtlError, match=r"need .partition\.expiration-time."):
        parse_ttl({"partition.expiration-strategy": "update-time"}, ["ds"])
    with pytest.raises(TtlError, match="needs a partitioned table"):
        parse_ttl({"partition.expiration-time": "1 d"}, [])
    assert parse_ttl({"owner": "x"}, ["ds"]) is None
    assert check_interval({}) is None
    assert (
        check_interval({"partition.expiration-time": "1 d", "partition.expiration-check-interval": "10 min"})
        == 600
    )


def test_materialized_options_write_out_the_date_formatter():
    options = {
        "partition.fields.ds.date-formatter": "yyyyMMdd",
        "partition.expiration-time": "3 d",
        "owner": "me",
    }
    stored = materialized_table_options(options, ["ds"])
    assert stored == {"partition.expiration-time": "3 d", "partition.timestamp-formatter": "yyyyMMdd"}
    assert parse_ttl(stored, ["ds"]).partition_time(["ds"], ["20240102"], None) == at("2024-01-02 00:00:00")


def test_table_parameters_carry_exactly_the_given_options():
    params = {"a": "1", "partition.expiration-time": "1 d", NEXT_EXPIRY_KEY: "5"}
    assert with_ttl_options(params, {"partition.expiration-time": "1 d"}) == params
    # A changed TTL invalidates the recorded next expiry; a removed TTL removes its options.
    assert with_ttl_options(params, {"partition.expiration-time": "2 d"}) == {
        "a": "1",
        "partition.expiration-time": "2 d",
    }
    assert with_ttl_options(params, {}) == {"a": "1"}
    # Other options (a CTAS's TBLPROPERTIES) are set; parameters not named stay.
    assert with_ttl_options(params, {"a": "2", "tier": "gold"}) == {"a": "2", "tier": "gold"}


def test_definition_with_ttl_and_a_bad_one():
    text = """CREATE MATERIALIZED TABLE a.b PARTITIONED BY (ds)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd',
      'partition.expiration-time' = '30 d',
      'partition.expiration-check-interval' = '1 h')
FRESHNESS = INTERVAL '1' DAY AS SELECT 1 AS x, '2024-01-01' AS ds"""
    assert parse_definition(text).options["partition.expiration-time"] == "30 d"
    with pytest.raises(
        DefinitionError, match=r"x.sql:4: WITH: invalid partition.expiration-check-interval 'often'"
    ):
        parse_definition(text.replace("'1 h'", "'often'"), "x.sql")


def test_plan_expiry_decides_per_partition():
    from hmsclient.genthrift.hive_metastore import ttypes

    table = ttypes.Table(
        dbName="d", tableName="t", partitionKeys=[ttypes.FieldSchema(name="ds", type="string")]
    )

    def part(ds):
        return ttypes.Partition(
            values=[ds],
            sd=ttypes.StorageDescriptor(location=f"file:/w/_v=1/ds={ds}"),
            parameters={},
            createTime=0,
        )

    ttl = parse_ttl({"partition.expiration-time": "1 d"}, ["ds"])
    plan = plan_expiry(
        table, [part("2024-01-01"), part("2024-01-03"), part("junk")], ttl, at("2024-01-03 12:00:00")
    )
    assert plan.expired == {"ds=2024-01-01": "file:/w/_v=1/ds=2024-01-01"}
    assert plan.unparseable == ["ds=junk"]
    assert plan.next_expiry == at("2024-01-04 00:00:00")
