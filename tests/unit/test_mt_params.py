"""Refresh requests (FLIP-448 refresh call as DAG-run conf): validation and partitions."""

import subprocess
import sys
from datetime import datetime, timezone

import pytest

from airflow_provider_staged.materialized.definition import parse_definition
from airflow_provider_staged.materialized.option_values import EXECUTION_CONFIG_CHECKS
from airflow_provider_staged.materialized.params import (
    EXECUTION_CONFIG_KEYS,
    PARAM_NAMES,
    RefreshRequestError,
    param_schemas,
    parse_refresh_request,
)

PARTITIONED = parse_definition("""
CREATE MATERIALIZED TABLE analytics.orders_daily
PARTITIONED BY (ds, region)
WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')
FRESHNESS = INTERVAL '1' DAY
AS SELECT ds, region, count(*) AS n FROM raw.orders GROUP BY ds, region
""")
UNPARTITIONED = parse_definition(
    "CREATE MATERIALIZED TABLE t FRESHNESS = INTERVAL '1' HOUR AS SELECT 1 AS x"
)
FIRED = datetime(2024, 1, 2, 0, 0, tzinfo=timezone.utc)


def test_pure_modules_do_not_import_airflow_or_spark() -> None:
    modules = ", ".join(
        f"airflow_provider_staged.materialized.{name}"
        for name in ("definition", "freshness", "partitions", "params")
    )
    code = (
        f"import sys, {modules}\n"
        "loaded = [m for m in ('airflow', 'pyspark', 'sqlglot') if m in sys.modules]\n"
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_scheduled_run_refreshes_the_previous_day() -> None:
    request = parse_refresh_request({}, PARTITIONED, FIRED)
    assert request.is_periodic
    assert request.schedule_time_text == "2024-01-02 00:00:00"
    assert dict(request.partition_spec) == {"ds": "2024-01-01"}
    assert dict(request.dynamic_options) == {} == dict(request.execution_config)


def test_form_defaults_behave_like_a_scheduled_run() -> None:
    defaults = {name: s["default"] for name, s in param_schemas(PARTITIONED).items()}
    assert parse_refresh_request(defaults, PARTITIONED, FIRED) == parse_refresh_request(
        None, PARTITIONED, FIRED
    )


def test_explicit_schedule_time_and_zone() -> None:
    request = parse_refresh_request({"scheduleTime": "2024-03-01 00:00:00"}, PARTITIONED, FIRED)
    assert dict(request.partition_spec) == {"ds": "2024-02-29"}
    # Without scheduleTime, the run time is read as wall-clock time in the zone.
    late = datetime(2024, 1, 1, 20, 0, tzinfo=timezone.utc)
    shanghai = parse_refresh_request({}, PARTITIONED, late, zone="Asia/Shanghai")
    assert shanghai.schedule_time_text == "2024-01-02 04:00:00"
    assert dict(shanghai.partition_spec) == {"ds": "2024-01-01"}


def test_one_time_refresh_of_static_partitions() -> None:
    request = parse_refresh_request(
        {
            "isPeriodic": False,
            "staticPartitions": {"ds": "2023-12-24", "REGION": "eu"},
            "dynamicOptions": {"compression": "zstd"},
            "executionConfig": {"spark.sql.shuffle.partitions": 8, "spark.sql.adaptive.enabled": True,
                                "spark.sql.adaptive.skewJoin.skewedPartitionFactor": 2.5},
        },
        PARTITIONED,
        FIRED,
    )
    assert not request.is_periodic
    assert dict(request.partition_spec) == {"ds": "2023-12-24", "region": "eu"}
    assert dict(request.dynamic_options) == {"compression": "zstd"}
    assert dict(request.execution_config) == {
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.adaptive.skewJoin.skewedPartitionFactor": "2.5",
    }


def test_one_time_refresh_without_partitions_is_a_full_refresh() -> None:
    assert dict(parse_refresh_request({"isPeriodic": False}, PARTITIONED, FIRED).partition_spec) == {}
    assert dict(parse_refresh_request({}, UNPARTITIONED, FIRED).partition_spec) == {}


@pytest.mark.parametrize(
    ("conf", "match"),
    [
        ({"isPeriodic": True, "foo": 1}, "unknown refresh parameter.*'foo'"),
        ({"isPeriodic": "false"}, "invalid isPeriodic 'false'"),
        ({"scheduleTime": "2024-01-02"}, "invalid scheduleTime '2024-01-02'"),
        ({"scheduleTime": "2024-01-02T00:00:00"}, "invalid scheduleTime"),
        ({"scheduleTime": 1704153600}, "invalid scheduleTime"),
        ({"isPeriodic": False, "staticPartitions": {"dt": "2024-01-01"}},
         "unknown partition column 'dt'"),
        ({"isPeriodic": False, "staticPartitions": {"ds": "2024-01-01'; DROP TABLE x; --"}},
         "date-formatter"),
        ({"isPeriodic": False, "staticPartitions": {"region": "e\x00u"}}, "without NUL"),
        ({"isPeriodic": False, "staticPartitions": {"ds": "01/02/2024"}}, "date-formatter"),
        ({"isPeriodic": False, "staticPartitions": "ds=2024-01-01"}, "expected an object"),
        ({"isPeriodic": True, "staticPartitions": {"ds": "2024-01-01"}}, "set isPeriodic to false"),
        ({"isPeriodic": True, "ds": "2024-01-01"}, r"partitions \(ds=2024-01-01\) only apply"),
        ({"isPeriodic": "auto"}, "invalid isPeriodic 'auto': expected true, false or null"),
        ({"ds": "2024-01-03", "staticPartitions": {"ds": "2024-01-04"}},
         "partition ds is '2024-01-03' in its field but '2024-01-04' in staticPartitions"),
        ({"ds": "2024-01-03'; DROP"}, "invalid value \"2024-01-03'; DROP\" for partition column 'ds'"),
        ({"ds": "2024-02-30"}, "invalid value '2024-02-30' for partition column 'ds'"),
        ({"region": 7}, "invalid value 7 for partition column 'region'"),
        ({"scheduleTime": "2024-01-02 00:00:00\n"}, "invalid scheduleTime"),
        ({"scheduleTime": "\uff12\uff10\uff12\uff14-01-01 00:00:00"},
         "invalid scheduleTime '\uff12\uff10\uff12\uff14-01-01 00:00:00'"),
        ({"ds": "\uff12\uff10\uff12\uff14-01-03"},
         "invalid value '\uff12\uff10\uff12\uff14-01-03' for partition"),
        ({"dynamicOptions": {"bad key": "x"}}, "dynamicOptions key 'bad key' is not allowed"),
        ({"dynamicOptions": {"path": "/elsewhere"}}, "dynamicOptions key 'path' is not allowed"),
        ({"dynamicOptions": {"compression": {"nested": 1}}},
         "invalid value .* dynamicOptions key 'compression'"),
        ({"executionConfig": {"spark.conf": None}}, "executionConfig key 'spark.conf' is not allowed"),
        ({"executionConfig": {"spark.sql.shuffle.partitions": float("nan")}},
         "invalid value nan for executionConfig key 'spark.sql.shuffle.partitions'"),
        ({"executionConfig": ["a"]}, "invalid executionConfig"),
    ],
)
def test_bad_requests(conf: dict, match: str) -> None:
    with pytest.raises(RefreshRequestError, match=match):
        parse_refresh_request(conf, PARTITIONED, FIRED)


@pytest.mark.parametrize(
    "key",
    [
        "spark.sql.extensions",
        "spark.sql.sources.commitProtocolClass",
        "spark.sql.defaultCatalog",
        "spark.sql.warehouse.dir",
        "spark.sql.catalogImplementation",
        "spark.sql.catalog.x",
        "spark.sql.caseSensitive",
        "spark.sql.hive.filesourcePartitionFileCacheSize",
        "spark.executor.memory",
        "SPARK.SQL.SHUFFLE.PARTITIONS",
    ],
)
def test_execution_config_allowlist_names_the_key_and_the_allowed_ones(key: str) -> None:
    with pytest.raises(RefreshRequestError) as info:
        parse_refresh_request({"executionConfig": {key: "x"}}, PARTITIONED, FIRED)
    message = str(info.value)
    assert f"executionConfig key {key!r} is not allowed" in message
    assert all(allowed in message for allowed in EXECUTION_CONFIG_KEYS)


def test_every_allowed_execution_config_key_is_a_spark_sql_setting() -> None:
    samples = ("1", "true", "snappy", "legacy", "UTC")  # one of them is good for each key
    checks = EXECUTION_CONFIG_CHECKS
    conf = {key: next(v for v in samples if not checks[key] or not checks[key](v)) for key in checks}
    request = parse_refresh_request({"executionConfig": conf}, PARTITIONED, FIRED)
    assert dict(request.execution_config) == conf
    assert all(key.startswith("spark.sql.") for key in EXECUTION_CONFIG_KEYS)


# What a Spark 4.2 session takes (spark.conf.set; a Parquet write for the writer options) and
# refuses, per kind of value; Spark refuses a bad one only once the stored setting is used.
GOOD_AND_BAD_VALUES = [
    ("executionConfig", "spark.sql.shuffle.partitions", ["8", " 8 ", "+8", 8, "2147483647"],
     ["abc", "0", "-1", "8.0", 8.5, "2147483648", "\uff18", "0x10"], "a whole number from 1 to 2147483647"),
    ("executionConfig", "spark.sql.files.maxRecordsPerFile", ["0", "-1", "9223372036854775807"],
     ["9223372036854775808", "1e6"], "a whole number"),
    ("executionConfig", "spark.sql.adaptive.enabled", ["true", " FALSE ", True, False], ["yes", "1", 1],
     "true or false"),
    ("executionConfig", "spark.sql.autoBroadcastJoinThreshold",
     ["-1", "10485760", "10m", "10MB", "1p", "-5m"],
     ["10 mb", "1.5g", "10x", "-", "9223372036854775808", "8192p"], "a size such as 64m"),
    ("executionConfig", "spark.sql.adaptive.advisoryPartitionSizeInBytes", ["64MB", "1"], ["0", "-1"],
     "a size of at least 1 bytes"),
    ("executionConfig", "spark.sql.broadcastTimeout", ["300", "300s", "5min", " 5MIN ", "-1", " -5m"],
     ["5 min", "- 5m", "10MB", "1.5h", "9223372036854775808"], "a duration such as 300"),
    ("executionConfig", "spark.sql.adaptive.skewJoin.skewedPartitionFactor", ["5", "5.5", ".5", "1e3", 2.5],
     ["-0.5", "nan", "Infinity", "five"], "a number >= 0"),
    ("executionConfig", "spark.sql.legacy.timeParserPolicy", ["CORRECTED", "legacy", " Exception"],
     ["lenient"], "one of exception, legacy, corrected"),
    ("executionConfig", "spark.sql.parquet.compression.codec", ["zstd", "SNAPPY", "lz4_raw"],
     ["zip", " zstd"], "one of none, uncompressed, snappy"),
    ("executionConfig", "spark.sql.session.timeZone",
     # Checked against Spark's getZoneId on JDK 17 and 25 (its rewrites of one-digit hours and
     # minutes, then ZoneId.of with the short ids).
     ["UTC", "Z", "+08:00", "-8:00", "+0530", "GMT+01:00", "UTC-05", "America/Los_Angeles", "PST",
      "UTC+8", "+08:5", "GMT+9:30", "+08:00:00", "-18:00", "Etc/GMT+5", "GMT0", "EST", "UT+5"],
     ["UTC'; DROP TABLE t; --", "Mars/Olympus", "+19:00", "utc+1", "Europe/Paris ", "\uff0b08:00",
      "+18:30", "+08:99", "+123", "UTC+", "z", "Factory", "ROC", "localtime", "UTC ", "America/../etc"],
     "a time zone such as UTC"),
    ("dynamicOptions", "compression", ["zstd", "GZIP"], ["zip", "zstd "], "one of none, uncompressed"),
    ("dynamicOptions", "maxRecordsPerFile", ["1000", "+5", "-1"], [" 5", "5.5", "1e3"], "a whole number"),
    ("dynamicOptions", "parquet.block.size", ["134217728", " 0 ", "-1"], ["128m", "0x100000"],
     "a whole number"),
    ("dynamicOptions", "parquet.page.size", ["1048576", "64"], ["63", "0", "1m", "2147483648"],
     "a whole number from 64 to 2147483647"),
    ("dynamicOptions", "parquet.enable.dictionary", ["true", " False "], ["yes", "1"], "true or false"),
]


@pytest.mark.parametrize(("name", "key", "good", "bad", "expected"), GOOD_AND_BAD_VALUES)
def test_option_values_are_checked_as_spark_reads_them(
    name: str, key: str, good: list[object], bad: list[object], expected: str
) -> None:
    """A value Spark would refuse is refused when the request (or a stored default) is made."""
    for value in good:
        parse_refresh_request({name: {key: value}}, PARTITIONED, FIRED)
    for value in bad:
        with pytest.raises(RefreshRequestError) as info:
            parse_refresh_request({name: {key: value}}, PARTITIONED, FIRED)
        message = str(info.value)
        assert message.startswith(f"invalid value {value!r} for {name} key {key!r}: expected {expected}")


@pytest.mark.parametrize("name", ["dynamicOptions", "executionConfig"])
@pytest.mark.parametrize("value", ["", "  ", "8\n", "a\x00b", "\t"])
def test_option_values_are_non_empty_without_control_characters(name: str, value: str) -> None:
    key = "compression" if name == "dynamicOptions" else "spark.sql.shuffle.partitions"
    with pytest.raises(RefreshRequestError) as info:
        parse_refresh_request({name: {key: value}}, PARTITIONED, FIRED)
    assert f"invalid value {value!r} for {name} key {key!r}" in str(info.value)


@pytest.mark.parametrize("text", ["0001-01-01 00:00:00", "9999-12-31 23:59:59", "0999-12-31 00:00:00",
                                  "1000-01-08 23:59:59", "9999-12-31 00:00:00"])
@pytest.mark.parametrize("definition", [PARTITIONED, UNPARTITIONED])
@pytest.mark.parametrize("is_periodic", [True, False])
def test_schedule_time_out_of_range(text: str, definition, is_periodic: bool) -> None:
    with pytest.raises(RefreshRequestError, match=f"scheduleTime '{text}' is out of range"):
        parse_refresh_request({"scheduleTime": text, "isPeriodic": is_periodic}, definition, FIRED)


def test_schedule_time_range_bounds() -> None:
    earliest = parse_refresh_request({"scheduleTime": "1000-01-09 00:00:00"}, PARTITIONED, FIRED)
    assert dict(earliest.partition_spec) == {"ds": "1000-01-08"}
    latest = parse_refresh_request({"scheduleTime": "9999-12-30 23:59:59"}, PARTITIONED, FIRED)
    assert dict(latest.partition_spec) == {"ds": "9999-12-29"}


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Asia/Shanghai"])
@pytest.mark.parametrize(
    "run_time",
    [datetime(1, 1, 1, tzinfo=timezone.utc), datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)],
)
def test_run_time_out_of_range(run_time: datetime, zone: str) -> None:
    with pytest.raises(RefreshRequestError, match=r"run time '.*' is out of range"):
        parse_refresh_request({}, PARTITIONED, run_time, zone)


def test_static_partitions_on_unpartitioned_table() -> None:
    with pytest.raises(RefreshRequestError, match="not partitioned"):
        parse_refresh_request(
            {"isPeriodic": False, "staticPartitions": {"ds": "x"}}, UNPARTITIONED, FIRED
        )


def test_param_schemas_explain_themselves() -> None:
    schemas = param_schemas(PARTITIONED)
    assert tuple(schemas) == ("ds", "region", *PARAM_NAMES)
    for schema in schemas.values():
        assert schema["title"] and schema["description"] and "default" in schema
    assert '{"ds": "2024-01-02"}' in schemas["staticPartitions"]["description"]
    assert "the partitions (ds, region) given above" in schemas["isPeriodic"]["description"]
    assert "INTERVAL '1' DAY" in schemas["isPeriodic"]["description"]
    assert "not partitioned" in param_schemas(UNPARTITIONED)["staticPartitions"]["description"]


def test_partition_fields_make_a_one_time_refresh_by_default() -> None:
    """The form's own fields: typing a partition value refreshes exactly it, once, now."""
    defaults = {name: s["default"] for name, s in param_schemas(PARTITIONED).items()}
    request = parse_refresh_request({**defaults, "ds": "2024-01-03"}, PARTITIONED, FIRED)
    assert not request.is_periodic
    assert dict(request.partition_spec) == {"ds": "2024-01-03"}
    both = parse_refresh_request(
        {**defaults, "ds": "2024-01-03", "region": "eu", "staticPartitions": {"ds": "2024-01-03"}},
        PARTITIONED, FIRED,
    )
    assert dict(both.partition_spec) == {"ds": "2024-01-03", "region": "eu"}
    # Empty fields (the form sends null, REST callers may send "") do not count.
    assert parse_refresh_request({**defaults, "ds": "", "region": None}, PARTITIONED, FIRED).is_periodic


def test_flip448_refresh_body_keeps_its_meaning() -> None:
    """The five FLIP-448 keys alone (REST API, `staged mt refresh`): explicit isPeriodic wins."""
    body = {"isPeriodic": False, "scheduleTime": None, "dynamicOptions": {},
            "staticPartitions": {"ds": "2024-01-03"}, "executionConfig": {}}
    assert dict(parse_refresh_request(body, PARTITIONED, FIRED).partition_spec) == {"ds": "2024-01-03"}
    whole = parse_refresh_request({**body, "staticPartitions": {}}, PARTITIONED, FIRED)
    assert (whole.is_periodic, dict(whole.partition_spec)) == (False, {})
    periodic = parse_refresh_request(
        {**body, "isPeriodic": True, "staticPartitions": {}, "scheduleTime": "2024-03-01 00:00:00"},
        PARTITIONED, FIRED,
    )
    assert dict(periodic.partition_spec) == {"ds": "2024-02-29"}


def test_form_order_and_optional_objects() -> None:
    schemas = param_schemas(PARTITIONED)
    assert list(schemas) == ["ds", "region", *PARAM_NAMES]
    for name in ("staticPartitions", "dynamicOptions", "executionConfig"):
        # Airflow's form marks a param required (red asterisk) unless its type allows null.
        assert schemas[name]["type"] == ["null", "object"] and schemas[name]["default"] == {}
        assert schemas[name]["section"]  # folded away: the partition fields come first
    for name in ("ds", "region", "isPeriodic", "scheduleTime"):
        assert "null" in schemas[name]["type"] and schemas[name]["default"] is None
        assert "section" not in schemas[name]
    assert schemas["ds"]["title"] == "Partition ds"
    assert "'2024-01-02' (date-formatter yyyy-MM-dd)" in schemas["ds"]["description"]
    assert schemas["isPeriodic"]["enum"] == [None, True, False]
    assert list(param_schemas(UNPARTITIONED)) == list(PARAM_NAMES)


@pytest.mark.parametrize(
    ("name", "value", "valid"),
    [
        ("ds", "2024-01-03", True),
        ("ds", None, True),
        ("ds", "2024-1-3", False),
        ("ds", "2024-13-01", False),
        ("ds", "2024-01-32", False),
        ("ds", "2024-01-03\n", False),
        ("ds", "2024-01-033", False),
        ("scheduleTime", "2024-01-02 00:00:00", True),
        ("ds", "2024-01-03'; DROP", False),
        ("ds", "", False),
        ("region", "eu-west", True),
        ("region", "e'u", True),
        ("region", "eu\n", True),
        ("region", "a;b", True),  # values the data produces: quoted, not refused
        ("region", "x' OR 1=1\n", True),
        ("region", "e\x00u", False),
        ("isPeriodic", None, True),
        ("isPeriodic", False, True),
        ("isPeriodic", "false", False),
        ("isPeriodic", 0, False),
        ("scheduleTime", "2024-01-02 00:00:00\n", False),
        ("scheduleTime", "\uff12\uff10\uff12\uff14-01-02 00:00:00", False),  # fullwidth digits
        ("ds", "\uff12\uff10\uff12\uff14-01-03", False),
        ("staticPartitions", {"ds": "2024-01-03", "region": "eu"}, True),
        ("staticPartitions", None, True),
        ("staticPartitions", {"ds": "03/01/2024"}, False),
        ("staticPartitions", {"dt": "2024-01-03"}, False),
        ("staticPartitions", {"region": "x' OR 1=1"}, True),
        ("staticPartitions", {"region": "x\x00"}, False),
        # The time zone's shape, the one free-text setting: the exact ids are the task's check.
        ("executionConfig", {"spark.sql.session.timeZone": "UTC'; DROP TABLE t; --"}, False),
        ("executionConfig", {"spark.sql.session.timeZone": "UTC\n"}, False),
        ("executionConfig", {"spark.sql.session.timeZone": "America/Los_Angeles"}, True),
        ("executionConfig", {"spark.sql.session.timeZone": "GMT+08:00", "spark.sql.ansi.enabled": 1}, True),
    ],
)
def test_schemas_refuse_bad_values_as_airflow_checks_them(name: str, value: object, valid: bool) -> None:
    """What Airflow's trigger (form or REST API) checks before it creates a run: the schema."""
    import jsonschema

    schema = {k: v for k, v in param_schemas(PARTITIONED)[name].items()
              if k not in ("default", "description")}
    checked = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    assert checked.is_valid(value) is valid


def test_date_formatter_patterns() -> None:
    from airflow_provider_staged.materialized.partitions import formatter_regex
    from airflow_provider_staged.staging.date_patterns import java_to_strftime

    assert formatter_regex(java_to_strftime("yyyy-MM-dd")) == (
        r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$(?!\n)"
    )
    pattern = formatter_regex(java_to_strftime("yyyy/MM/dd HH.mm:ss"))
    assert pattern.startswith(r"^[0-9]{4}\/") and r"\.[0-5][0-9]:[0-5][0-9]$" in pattern
    # Every value strftime writes for the formatter matches its pattern; one more character does not.
    import re

    for java in ("yyyy-MM-dd", "yyyyMMdd", "yyyy-MM-dd HH:mm:ss", "HH", "yyyy_MM", "dd.MM.yyyy"):
        directive = java_to_strftime(java)
        pattern = formatter_regex(directive)
        for moment in (datetime(1000, 1, 1), datetime(2024, 2, 29, 23, 59, 59), datetime(9999, 12, 31, 9, 5)):
            text = moment.strftime(directive)
            assert re.search(pattern, text), (java, text)
            assert not re.search(pattern, text + "\n") and not re.search(pattern, text + "0"), (java, text)


@pytest.mark.parametrize("digits", [400, 5000])
@pytest.mark.parametrize("conf_key", ["executionConfig", "dynamicOptions"])
def test_a_whole_number_beyond_a_float_is_refused_by_name(conf_key: str, digits: int) -> None:
    """A JSON conf's integer of 400 digits raised OverflowError (math.isfinite), one past
    Python's int-to-text limit ValueError: neither named the option."""
    key = "spark.sql.shuffle.partitions" if conf_key == "executionConfig" else "maxRecordsPerFile"
    with pytest.raises(RefreshRequestError) as info:
        parse_refresh_request({conf_key: {key: 10**digits}}, PARTITIONED, FIRED)
    assert f"for {conf_key} key {key!r}" in str(info.value) and f"{digits + 1} digits" in str(info.value)


# Flink's MaterializedTableStatementITCase refresh vectors (gateway refreshMaterializedTable and
# ALTER ... REFRESH PARTITION), on a table like its users_shops.
USERS_SHOPS = "CREATE MATERIALIZED TABLE users_shops\nPARTITIONED BY ({partitions})\n{options}" \
    "FRESHNESS = INTERVAL '1' DAY\nAS SELECT user_id, shop_id, {partitions}, count(*) AS n FROM my_source " \
    "GROUP BY user_id, shop_id, {partitions}"
FORMATTED = parse_definition(USERS_SHOPS.format(
    partitions="ds", options="WITH ('partition.fields.ds.date-formatter' = 'yyyy-MM-dd')\n"))
NOT_FORMATTED = parse_definition(USERS_SHOPS.format(partitions="ds", options=""))
TWO_KEYS = parse_definition(USERS_SHOPS.format(partitions="ds1, ds2", options=""))


def test_flink_periodic_refresh_with_and_without_partition_options() -> None:
    """testPeriodicRefreshMaterializedTable{With,Without}PartitionOptions: a periodic refresh at
    2024-01-03 00:00:00 replaces partition ds=2024-01-02 of a table whose ds has a date-formatter,
    and the whole table of one without."""
    conf = {"isPeriodic": True, "scheduleTime": "2024-01-03 00:00:00"}
    assert dict(parse_refresh_request(conf, FORMATTED, FIRED).partition_spec) == {"ds": "2024-01-02"}
    conf = {"isPeriodic": True, "scheduleTime": "2024-01-02 00:00:00"}
    assert dict(parse_refresh_request(conf, NOT_FORMATTED, FIRED).partition_spec) == {}


def test_flink_refresh_with_a_static_partition() -> None:
    """testRefreshMaterializedTableWithStaticPartitionInContinuousMode (and the REST API's
    testStaticPartitionRefreshMaterializedTableViaRestAPI): isPeriodic false, one partition."""
    conf = {"isPeriodic": False, "staticPartitions": {"ds": "2024-01-02"}}
    request = parse_refresh_request(conf, FORMATTED, FIRED)
    assert not request.is_periodic and dict(request.partition_spec) == {"ds": "2024-01-02"}


@pytest.mark.parametrize(("definition", "conf", "match"), [
    # testRefreshMaterializedTableWithInvalidParameterInContinuousMode: Flink says "Failed to parse
    # a valid partition value for the field 'ds' ... using the scheduler time '20240103
    # 00:00:00.000' based on the date format 'yyyy-MM-dd HH:mm:ss'."
    (FORMATTED, {"isPeriodic": True, "scheduleTime": "20240103 00:00:00.000"},
     r"^invalid scheduleTime '20240103 00:00:00.000': expected a string 'yyyy-MM-dd HH:mm:ss'"),
    # testAlterMaterializedTableRefreshWithInvalidPartitionSpec: "The partition spec contains
    # unknown partition keys: ds3 ... All known partition keys are: ds2 ds1".
    (TWO_KEYS, {"isPeriodic": False, "staticPartitions": {"ds3": "2024-01-01"}},
     r"^unknown partition column 'ds3' in staticPartitions \(partition columns: ds1, ds2\)"),
    # ...and "refreshing materialized table only supports referring to char, varchar and string
    # type partition keys ... ds2": a value must be a string (Hive's partition values are).
    (TWO_KEYS, {"isPeriodic": False, "staticPartitions": {"ds2": 5}},
     r"^invalid value 5 for partition column 'ds2': expected a non-empty string"),
])
def test_flink_invalid_refresh_parameters(definition, conf: dict, match: str) -> None:
    with pytest.raises(RefreshRequestError, match=match):
        parse_refresh_request(conf, definition, FIRED)


def test_flink_periodic_refresh_without_schedule_time_uses_the_run_time() -> None:
    """testRefreshMaterializedTableWithInvalidParameterInContinuousMode refuses a periodic refresh
    without scheduleTime ("The scheduler time must not be null ..."). Here every run has a time:
    Airflow's logical date, the time the schedule fired, so the request stays valid and refreshes
    the partition that time ends (as a scheduled run does); a deliberate difference."""
    request = parse_refresh_request({"isPeriodic": True, "scheduleTime": None}, FORMATTED, FIRED)
    assert request.schedule_time_text == "2024-01-02 00:00:00"
    assert dict(request.partition_spec) == {"ds": "2024-01-01"}


def test_flink_dynamic_options_are_the_writers_own() -> None:
    """DefaultMaterializedTableExecutorTest.testGetRefreshStatementWithDynamicOptions renders any
    'option1' = 'value1' as an OPTIONS hint on the sink. Here dynamicOptions are the Parquet
    writer's options: an unknown key is refused before any run, naming it and the allowed ones
    (a hint Spark does not know would be ignored silently), and a known one reaches the writer."""
    flinks = {"dynamicOptions": {"option1": "value1", "option2": "value2"}}
    with pytest.raises(RefreshRequestError, match=r"^dynamicOptions key 'option1' is not allowed; "
                       r"allowed keys: compression, maxRecordsPerFile, "):
        parse_refresh_request(flinks, PARTITIONED, FIRED)
    request = parse_refresh_request({"dynamicOptions": {"compression": "zstd"}}, PARTITIONED, FIRED)
    assert dict(request.dynamic_options) == {"compression": "zstd"}
